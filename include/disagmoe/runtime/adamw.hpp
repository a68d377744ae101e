// SPDX-License-Identifier: Apache-2.0
/// @file adamw.hpp
/// AdamW (Loshchilov and Hutter, "Decoupled Weight Decay Regularization", ICLR 2019,
/// Algorithm 2), in the form of PyTorch's `torch.optim.AdamW`: decay multiplies the
/// parameter by (1 - lr * weight_decay) before the bias-corrected Adam step.
#pragma once

#include <disagmoe/model/tensor.hpp>
#include <disagmoe/runtime/adamw_coefficients.hpp>

#include <cmath>
#include <cstdint>

namespace disagmoe::runtime {

/// One AdamW step on one tensor, elementwise with g = grad_scale * grad:
///   m = b1 m + (1 - b1) g,   v = b2 v + (1 - b2) g^2,
///   p = p (1 - lr wd [decay]) - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps).
/// The moments and arithmetic are in T; the bias corrections in double. O(size).
template <class T>
void adamw_update(const AdamWOptions& o, double lr, double grad_scale, std::int64_t step, bool decay,
                  model::Matrix<T>& p, const model::Matrix<T>& grad, model::Matrix<T>& m,
                  model::Matrix<T>& v) {
  const AdamWCoefficients<T> k = adamw_coefficients<T>(o, lr, grad_scale, step, decay);
  T* pp = p.data();
  T* mp = m.data();
  T* vp = v.data();
  const T* gp = grad.data();
  for (Eigen::Index i = 0; i < p.size(); ++i) {
    const T g = k.grad_scale * gp[i];
    mp[i] = k.b1 * mp[i] + (T{1} - k.b1) * g;
    vp[i] = k.b2 * vp[i] + (T{1} - k.b2) * g * g;
    pp[i] = pp[i] * k.shrink - k.rate * (mp[i] * k.c1) / (std::sqrt(vp[i] * k.c2) + k.eps);
  }
}

}  // namespace disagmoe::runtime
