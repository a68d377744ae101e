// SPDX-License-Identifier: Apache-2.0
/// @file softmax_math.hpp
/// The per-row arithmetic of the CUDA attention softmax and of the cross-entropy head as
/// `DISAGMOE_HOST_DEVICE` functions, so the host compiles and tests the very code the
/// device runs (tests/cuda/test_compute_math.cpp checks them against model/attention.hpp's
/// softmax_tile and model/cross_entropy.hpp).
///
/// Attention (FlashAttention, Dao et al. 2022, Alg. 4; HF Mistral's sliding-window
/// mask): a row holds the scores of query i against every key of its sequence; keys
/// outside first_key(i) <= j <= i become exactly 0, so the following GEMMs may use the
/// whole row. The forward subtracts the row max and keeps lse = max + log(sum); the
/// backward recomputes P = exp(scale S - lse) and forms dS = P (dP - rowsum(dP P)) scale.
/// Cross-entropy (PyTorch F.cross_entropy, mean): term_r = lse_r - l_r[target_r],
/// dlogits = c (softmax - onehot).
/// Sums run left to right and round once per operation (row_math.hpp); exp and log are
/// the CUDA/libm ones (within 2 ulp of each other), so results agree with the host to a
/// few ulps, not bits. Host code; needs the CUDA include path.
#pragma once

#include <disagmoe/backend/cuda/row_math.hpp>
#include <disagmoe/config.hpp>

#include <cmath>

namespace disagmoe::cuda {

/// The first key query position i may see (model/attention.hpp detail::first_key).
DISAGMOE_HOST_DEVICE inline int attention_first_key(int i, int window) {
  return window > 0 && i - window + 1 > 0 ? i - window + 1 : 0;
}

/// Forward row of query position i: row[j] for j < len holds q . k_j on entry and P_ij
/// on return (0 outside [attention_first_key(i, window), i]); returns the row's
/// log-sum-exp of the scaled, masked scores. O(len).
DISAGMOE_HOST_DEVICE inline float attention_softmax_row(float* row, int len, int i, int window, float scale) {
  const int a = attention_first_key(i, window);
  float mx = row[a];
  for (int j = a + 1; j <= i; ++j) mx = row[j] > mx ? row[j] : mx;
  mx = mul_rn(scale, mx);  // scale > 0: max(scale s) = scale max(s)
  float sum = 0.0f;
  for (int j = 0; j < len; ++j) {
    if (j < a || j > i) {
      row[j] = 0.0f;
      continue;
    }
    row[j] = ::expf(add_rn(mul_rn(scale, row[j]), -mx));
    sum = add_rn(sum, row[j]);
  }
  for (int j = a; j <= i; ++j) row[j] = row[j] / sum;
  return add_rn(mx, ::logf(sum));
}

/// Backward recompute of a forward row from its saved log-sum-exp: row[j] = exp(scale
/// row[j] - lse) inside the mask, 0 outside. O(len).
DISAGMOE_HOST_DEVICE inline void attention_probs_row(float* row, int len, int i, int window, float scale, float lse) {
  const int a = attention_first_key(i, window);
  for (int j = 0; j < len; ++j) row[j] = j < a || j > i ? 0.0f : ::expf(add_rn(mul_rn(scale, row[j]), -lse));
}

/// Softmax backward of one row: dp[j] (dL/dP on entry) becomes dL/d(q . k_j) =
/// (p[j] (dp[j] - sum_j' p[j'] dp[j'])) scale. Masked entries (p = 0) give 0. O(len).
DISAGMOE_HOST_DEVICE inline void attention_softmax_backward_row(const float* p, float* dp, int len, float scale) {
  float dot = 0.0f;
  for (int j = 0; j < len; ++j) dot = add_rn(dot, mul_rn(p[j], dp[j]));
  for (int j = 0; j < len; ++j) dp[j] = mul_rn(mul_rn(p[j], add_rn(dp[j], -dot)), scale);
}

/// Cross-entropy row: returns lse(logits) - logits[target] and, when `to_probs`,
/// overwrites the row with its softmax exp(l - lse). O(vocab).
DISAGMOE_HOST_DEVICE inline float cross_entropy_row(float* logits, int vocab, int target, bool to_probs) {
  float m = logits[0];
  for (int j = 1; j < vocab; ++j) m = logits[j] > m ? logits[j] : m;
  float sum = 0.0f;
  for (int j = 0; j < vocab; ++j) sum = add_rn(sum, ::expf(add_rn(logits[j], -m)));
  const float lse = add_rn(m, ::logf(sum));
  const float term = add_rn(lse, -logits[target]);
  if (to_probs)
    for (int j = 0; j < vocab; ++j) logits[j] = ::expf(add_rn(logits[j], -lse));
  return term;
}

/// dlogits = c probs, minus c at the target (lm_head_backward_input with c = scale / rows).
/// dlogits may alias probs. O(vocab).
DISAGMOE_HOST_DEVICE inline void cross_entropy_backward_row(const float* probs, int vocab, int target, float c,
                                                            float* dlogits) {
  for (int j = 0; j < vocab; ++j) dlogits[j] = mul_rn(probs[j], c);
  dlogits[target] = add_rn(dlogits[target], -c);
}

}  // namespace disagmoe::cuda
