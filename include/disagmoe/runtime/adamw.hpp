// SPDX-License-Identifier: Apache-2.0
/// @file adamw.hpp
/// AdamW (Loshchilov and Hutter, "Decoupled Weight Decay Regularization", ICLR 2019,
/// Algorithm 2), in the form of PyTorch's `torch.optim.AdamW`: decay multiplies the
/// parameter by (1 - lr * weight_decay) before the bias-corrected Adam step.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/model/tensor.hpp>

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

/// One AdamW step on one tensor, elementwise with g = grad_scale * grad:
///   m = b1 m + (1 - b1) g,   v = b2 v + (1 - b2) g^2,
///   p = p (1 - lr wd [decay]) - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps).
/// The moments and arithmetic are in T; the bias corrections in double. O(size).
template <class T>
void adamw_update(const AdamWOptions& o, double lr, double grad_scale, std::int64_t step, bool decay,
                  model::Matrix<T>& p, const model::Matrix<T>& grad, model::Matrix<T>& m,
                  model::Matrix<T>& v) {
  const auto t = static_cast<double>(step);
  const T b1 = static_cast<T>(o.beta1), b2 = static_cast<T>(o.beta2);
  const T c1 = static_cast<T>(1.0 / (1.0 - std::pow(o.beta1, t)));
  const T c2 = static_cast<T>(1.0 / (1.0 - std::pow(o.beta2, t)));
  const T shrink = static_cast<T>(decay ? 1.0 - lr * o.weight_decay : 1.0);
  const T rate = static_cast<T>(lr), eps = static_cast<T>(o.eps), gs = static_cast<T>(grad_scale);
  T* pp = p.data();
  T* mp = m.data();
  T* vp = v.data();
  const T* gp = grad.data();
  for (Eigen::Index i = 0; i < p.size(); ++i) {
    const T g = gs * gp[i];
    mp[i] = b1 * mp[i] + (T{1} - b1) * g;
    vp[i] = b2 * vp[i] + (T{1} - b2) * g * g;
    pp[i] = pp[i] * shrink - rate * (mp[i] * c1) / (std::sqrt(vp[i] * c2) + eps);
  }
}

}  // namespace disagmoe::runtime
