// SPDX-License-Identifier: Apache-2.0
/// @file router_math.hpp
/// The per-token arithmetic of the CUDA router as `DISAGMOE_HOST_DEVICE` functions, so
/// the host compiles and tests the very code the device runs (tests/cuda/
/// test_compute_math.cpp checks them against model/router.hpp).
///
/// Forward (Mixtral; HF MixtralSparseMoeBlock): stable softmax over the experts' logits,
/// top-k by insertion into a sorted list (an expert displaces a slot only when strictly
/// more probable, so ties keep the lower id and NaN cannot break it), gates renormalised
/// by the selected sum. Backward: the quotient rule through the renormalisation, the
/// load-balancing row E f_i / T (Switch eq. 4-6, f constant as in Megatron-Core) and the
/// z-loss term (ST-MoE eq. 5) folded into one softmax-Jacobian product, as
/// router_backward_input does. Agrees with the host to a few ulps (exp/log; the
/// reference's sums are vectorised). Host code; needs the CUDA include path.
#pragma once

#include <disagmoe/backend/cuda/row_math.hpp>
#include <disagmoe/config.hpp>

#include <cmath>

namespace disagmoe::cuda {

/// One token: row (the logits on entry, [experts]) becomes the softmax; ids/gates [k]
/// receive the top-k experts and their renormalised gates; returns the selected sum,
/// and `lse` receives the logits' log-sum-exp. k <= experts. O(experts k).
DISAGMOE_HOST_DEVICE inline float router_row(float* row, int experts, int k, int* ids, float* gates, float& lse) {
  float m = row[0];
  for (int i = 1; i < experts; ++i) m = row[i] > m ? row[i] : m;
  float s = 0.0f;
  for (int i = 0; i < experts; ++i) {
    row[i] = ::expf(add_rn(row[i], -m));
    s = add_rn(s, row[i]);
  }
  for (int i = 0; i < experts; ++i) row[i] = row[i] / s;
  lse = add_rn(m, ::logf(s));
  int filled = 0;
  for (int i = 0; i < experts; ++i) {
    const float p = row[i];
    int pos = filled;
    while (pos > 0 && p > gates[pos - 1]) --pos;  // gates hold the chosen probabilities for now
    if (pos >= k) continue;
    for (int j = filled < k ? filled : k - 1; j > pos; --j) {
      gates[j] = gates[j - 1];
      ids[j] = ids[j - 1];
    }
    gates[pos] = p;
    ids[pos] = i;
    if (filled < k) ++filled;
  }
  float sel = 0.0f;
  for (int j = 0; j < k; ++j) sel = add_rn(sel, gates[j]);
  for (int j = 0; j < k; ++j) gates[j] = gates[j] / sel;
  return sel;
}

/// One token's dL/dlogits [experts] from dL/dgates (dg [k]), its probabilities, ids,
/// gates, selected sum and lse; `aux_row` [experts] is scale * aux_coef * E f_i / T and
/// z_scale = scale * z_coef * 2 / T (router_backward_input's constants). O(experts + k).
DISAGMOE_HOST_DEVICE inline void router_backward_row(const float* probs, const int* ids, const float* gates,
                                                     const float* dg, float selected_sum, float lse,
                                                     const float* aux_row, float z_scale, int experts, int k,
                                                     float* dlogits) {
  for (int i = 0; i < experts; ++i) dlogits[i] = aux_row[i];
  float dot_g = 0.0f;
  for (int j = 0; j < k; ++j) dot_g = add_rn(dot_g, mul_rn(dg[j], gates[j]));
  const float inv_s = 1.0f / selected_sum;
  for (int j = 0; j < k; ++j) dlogits[ids[j]] = add_rn(dlogits[ids[j]], mul_rn(add_rn(dg[j], -dot_g), inv_s));
  float dot_p = 0.0f;
  for (int i = 0; i < experts; ++i) dot_p = add_rn(dot_p, mul_rn(dlogits[i], probs[i]));
  const float shift = add_rn(dot_p, -mul_rn(z_scale, lse));
  for (int i = 0; i < experts; ++i) dlogits[i] = mul_rn(probs[i], add_rn(dlogits[i], -shift));
}

}  // namespace disagmoe::cuda
