// SPDX-License-Identifier: Apache-2.0
/// @file adamw_math.hpp
/// One element of AdamW (Loshchilov and Hutter 2019, Alg. 2, in torch.optim.AdamW's
/// form) as a `DISAGMOE_HOST_DEVICE` function over runtime/adamw_coefficients.hpp, so
/// the host compiles and tests the very code the device runs: every product and sum
/// rounds once (row_math.hpp), division and sqrt are IEEE on both sides, so the device
/// update equals runtime::adamw_update bit for bit (tests/cuda/test_compute_math.cpp).
/// Host code; needs the CUDA include path.
#pragma once

#include <disagmoe/backend/cuda/row_math.hpp>
#include <disagmoe/config.hpp>
#include <disagmoe/runtime/adamw_coefficients.hpp>

#include <cmath>

namespace disagmoe::cuda {

/// m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2, p = p shrink - rate (m c1) /
/// (sqrt(v c2) + eps), with g = grad_scale grad. O(1).
DISAGMOE_HOST_DEVICE inline void adamw_element(const runtime::AdamWCoefficients<float>& k, float grad, float& p,
                                               float& m, float& v) {
  const float g = mul_rn(k.grad_scale, grad);
  m = add_rn(mul_rn(k.b1, m), mul_rn(add_rn(1.0f, -k.b1), g));
  v = add_rn(mul_rn(k.b2, v), mul_rn(mul_rn(add_rn(1.0f, -k.b2), g), g));
  p = add_rn(mul_rn(p, k.shrink), -(mul_rn(k.rate, mul_rn(m, k.c1)) / add_rn(::sqrtf(mul_rn(v, k.c2)), k.eps)));
}

}  // namespace disagmoe::cuda
