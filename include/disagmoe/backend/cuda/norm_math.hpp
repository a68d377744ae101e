// SPDX-License-Identifier: Apache-2.0
/// @file norm_math.hpp
/// The per-row arithmetic of the CUDA RMSNorm and the per-pair arithmetic of rotary
/// embeddings as `DISAGMOE_HOST_DEVICE` functions, so the host compiles and tests the
/// very code the device runs (tests/cuda/test_compute_math.cpp checks them against
/// model/rms_norm.hpp and model/rotary.hpp).
///
/// Formulas are the reference's term for term: RMSNorm y = x rsqrt(mean(x^2) + eps) w
/// (Zhang and Sennrich 2019, eps inside the root as HF LlamaRMSNorm), its input gradient
/// dx = s (dy w) - s^3 x (dy w . x) / d, its gain gradient sum_r dy x s; RoPE's
/// rotate-half pair rotation (Su et al. 2021; HF apply_rotary_pos_emb). Products and
/// sums round once each (row_math.hpp mul_rn / add_rn: no FMA on the device), so given
/// the same inverse RMS the outputs equal the host's bit for bit; the inverse RMS itself
/// sums x^2 in column order where Eigen's vectorised squaredNorm regroups (a few ulps).
/// Host code (a host compiler alone can include it); needs the CUDA include path.
#pragma once

#include <disagmoe/backend/cuda/row_math.hpp>
#include <disagmoe/config.hpp>

#include <cmath>

namespace disagmoe::cuda {

/// 1 / sqrt(sum_c x[c]^2 / d + eps), the sum in column order. O(d).
DISAGMOE_HOST_DEVICE inline float rms_inverse(const float* x, int d, float eps) {
  float acc = 0.0f;
  for (int c = 0; c < d; ++c) acc = add_rn(acc, mul_rn(x[c], x[c]));
  return 1.0f / ::sqrtf(add_rn(acc / static_cast<float>(d), eps));
}

/// y[c] = (x[c] inv) w[c] (normalise, then the gain: LlamaRMSNorm's order). O(d).
DISAGMOE_HOST_DEVICE inline void rms_norm_row(const float* x, const float* w, float inv, int d, float* y) {
  for (int c = 0; c < d; ++c) y[c] = mul_rn(mul_rn(x[c], inv), w[c]);
}

/// dx[c] = s (dy[c] w[c]) - (s^3 gx) x[c] with gx = sum_c (dy w x)[c] / d, plus add[c]
/// when `add` is not null (the residual branch's gradient). dx may alias dy or add.
/// O(d).
DISAGMOE_HOST_DEVICE inline void rms_norm_backward_row(const float* x, const float* w, float s, const float* dy,
                                                       const float* add, int d, float* dx) {
  float gx = 0.0f;
  for (int c = 0; c < d; ++c) gx = add_rn(gx, mul_rn(mul_rn(dy[c], w[c]), x[c]));
  gx = gx / static_cast<float>(d);
  const float k = mul_rn(mul_rn(mul_rn(s, s), s), gx);
  for (int c = 0; c < d; ++c) {
    const float v = add_rn(mul_rn(s, mul_rn(dy[c], w[c])), -mul_rn(k, x[c]));
    dx[c] = add != nullptr ? add_rn(v, add[c]) : v;
  }
}

/// Column c of the gain gradient: dw[c] + sum over rows r ascending of (dy x)[r][c] s[r]
/// (rms_norm_backward_weight's order). Rows are `d` wide. O(rows).
DISAGMOE_HOST_DEVICE inline float rms_norm_weight_column(const float* x, const float* inv, const float* dy, long rows,
                                                         int d, int c, float dw) {
  for (long r = 0; r < rows; ++r) {
    const long i = r * d + c;
    dw = add_rn(dw, mul_rn(mul_rn(dy[i], x[i]), inv[r]));
  }
  return dw;
}

/// One rotary pair (a = x_i, b = x_{i + D/2}) turned by the angle of cos c and sin s:
/// a' = a c - b s, b' = b c + a s. The inverse (and transpose) passes -s. O(1).
DISAGMOE_HOST_DEVICE inline void rotate_pair(float& a, float& b, float c, float s) {
  const float lo = a;
  a = add_rn(mul_rn(lo, c), -mul_rn(b, s));
  b = add_rn(mul_rn(b, c), mul_rn(lo, s));
}

}  // namespace disagmoe::cuda
