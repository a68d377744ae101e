// SPDX-License-Identifier: Apache-2.0
/// @file expert_math.hpp
/// The element-wise arithmetic of the CUDA gated-SiLU experts (cuda/experts.hpp) as
/// `DISAGMOE_HOST_DEVICE` functions, so the host compiles and tests the very code the
/// device runs (tests/cuda/test_expert_math.cpp checks it against model/gated_ffn.hpp).
/// The formulas are gated_ffn.hpp's, term for term: silu(a) = a * sigmoid(a) (Elfwing,
/// Uchibe and Doya 2018), silu'(a) = s (1 + a (1 - s)) with s = sigmoid(a).
/// Host code (a host compiler alone can include it).
#pragma once

#include <disagmoe/config.hpp>

#include <cmath>

namespace disagmoe::cuda {

/// sigmoid(a) = 1 / (1 + exp(-a)); exp(-a) -> inf gives 0, never NaN.
DISAGMOE_HOST_DEVICE inline float sigmoid(float a) { return 1.0f / (1.0f + ::expf(-a)); }

/// The input of w2: silu(h1) * h3 (gated_ffn_forward's `act`).
DISAGMOE_HOST_DEVICE inline float silu_gate(float h1, float h3) { return h1 / (1.0f + ::expf(-h1)) * h3; }

/// Given g = dL/dact, the gradients of h1 and h3 (gated_ffn_backward_input's element-wise
/// pass): dh3 = g silu(h1), dh1 = g h3 silu'(h1).
DISAGMOE_HOST_DEVICE inline void silu_gate_backward(float g, float h1, float h3, float& dh1, float& dh3) {
  const float s = sigmoid(h1);
  dh3 = g * (h1 * s);
  dh1 = g * h3 * (s * (1.0f + h1 * (1.0f - s)));
}

}  // namespace disagmoe::cuda
