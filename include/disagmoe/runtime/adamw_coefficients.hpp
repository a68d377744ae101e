// SPDX-License-Identifier: Apache-2.0
/// @file adamw_coefficients.hpp
/// AdamW's hyper-parameters and the scalars of one step (Loshchilov and Hutter,
/// "Decoupled Weight Decay Regularization", ICLR 2019, Algorithm 2, in the form of
/// PyTorch's `torch.optim.AdamW`), without tensors: the host update (adamw.hpp) and the
/// CUDA one (backend/cuda/adamw_math.hpp) start from these same bits.
#pragma once

#include <disagmoe/error.hpp>

#include <cmath>
#include <cstdint>

namespace disagmoe::runtime {

/// AdamW hyper-parameters (PyTorch's defaults except weight decay, as in nanoGPT).
struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
};

/// Throws ConfigError naming the first invalid field.
inline void validate(const AdamWOptions& o) {
  expect(o.beta1 >= 0 && o.beta1 < 1, "AdamWOptions.beta1", o.beta1, "a value in [0, 1)");
  expect(o.beta2 >= 0 && o.beta2 < 1, "AdamWOptions.beta2", o.beta2, "a value in [0, 1)");
  expect(o.eps > 0 && std::isfinite(o.eps), "AdamWOptions.eps", o.eps, "a positive finite value");
  expect(o.weight_decay >= 0 && std::isfinite(o.weight_decay), "AdamWOptions.weight_decay",
         o.weight_decay, "a finite value >= 0");
}

/// The scalars of one AdamW step on one tensor, in T: the moment decays, the bias
/// corrections (computed in double, then rounded), the decoupled decay factor, the
/// learning rate, eps and the gradient scale. Shared by the host update below and the
/// CUDA one (backend/cuda/adamw_math.hpp), so both start from the same bits.
template <class T>
struct AdamWCoefficients {
  T b1, b2, c1, c2, shrink, rate, eps, grad_scale;
};

/// The coefficients of step `step` (counting from 1) at learning rate `lr`; `decay`
/// applies the weight decay. O(1).
template <class T>
AdamWCoefficients<T> adamw_coefficients(const AdamWOptions& o, double lr, double grad_scale, std::int64_t step,
                                        bool decay) {
  const auto t = static_cast<double>(step);
  return {static_cast<T>(o.beta1),
          static_cast<T>(o.beta2),
          static_cast<T>(1.0 / (1.0 - std::pow(o.beta1, t))),
          static_cast<T>(1.0 / (1.0 - std::pow(o.beta2, t))),
          static_cast<T>(decay ? 1.0 - lr * o.weight_decay : 1.0),
          static_cast<T>(lr),
          static_cast<T>(o.eps),
          static_cast<T>(grad_scale)};
}

}  // namespace disagmoe::runtime
