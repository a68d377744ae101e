// SPDX-License-Identifier: Apache-2.0
/// @file rms_norm.hpp
/// Root-mean-square layer normalisation with a hand-written backward pass.
///
/// Per row (token) x of width d, with a learned gain w of shape [1, d]:
///   y = x * rsqrt(mean(x^2) + eps) * w
/// (Zhang and Sennrich, "Root Mean Square Layer Normalization", NeurIPS 2019, sec. 3; eps
/// inside the root as in Hugging Face `LlamaRMSNorm`). No bias, no mean-centering.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/model/tensor.hpp>

#include <cmath>
#include <string>

namespace disagmoe::model {

/// What `rms_norm_forward` keeps for the two backward passes.
template <class T>
struct RmsNormSaved {
  Matrix<T> x;        ///< the input, [rows, d]
  Matrix<T> inv_rms;  ///< rsqrt(mean(x_r^2) + eps) per row, [rows, 1]
};

namespace detail {
template <class T>
void check_rms_weight(const Matrix<T>& w, Eigen::Index d) {
  expect(w.rows() == 1, "rms_norm w.rows", w.rows(), "1 (the gain is a 1 x d matrix)");
  if (w.cols() != d) fail("rms_norm w.cols", w.cols(), "== x.cols (" + std::to_string(d) + ")");
}
}  // namespace detail

/// y = x * rsqrt(mean(x^2) + eps) * w per row; y is resized to x's shape and `saved`
/// receives x and the per-row inverse RMS. x: [rows, d] with d >= 1; w: [1, d];
/// eps finite and > 0. Throws ConfigError naming the field otherwise.
/// Complexity O(rows * d).
template <class T>
void rms_norm_forward(const Matrix<T>& w, T eps, const Matrix<T>& x, Matrix<T>& y,
                      RmsNormSaved<T>& saved) {
  const Eigen::Index d = x.cols();
  expect(d >= 1, "rms_norm x.cols", d, ">= 1");
  detail::check_rms_weight(w, d);
  expect(std::isfinite(eps) && eps > T(0), "rms_norm eps", eps, "finite and > 0");
  // Read from the copy so that y may be the same object as x.
  saved.x = x;
  saved.inv_rms.resize(x.rows(), 1);
  y.resize(x.rows(), d);
  for (Eigen::Index r = 0; r < saved.x.rows(); ++r) {
    const T inv = T(1) / std::sqrt(saved.x.row(r).squaredNorm() / T(d) + eps);
    saved.inv_rms(r, 0) = inv;
    // Normalise first, then apply the gain: the order LlamaRMSNorm uses.
    y.row(r) = ((saved.x.row(r).array() * inv) * w.row(0).array()).matrix();
  }
}

/// dx = dL/dx given dy = dL/dy; dx is resized to [rows, d]. With g = dy * w and
/// s = inv_rms, differentiating y = x s w (s depends on x through mean(x^2)) gives
///   dx = s g - s^3 x (g . x) / d
/// (chain rule, using ds/dx_k = -s^3 x_k / d).
/// Preconditions: `saved` from `rms_norm_forward` with this w; dy shaped like saved.x.
/// dx may be the same object as dy. Complexity O(rows * d).
template <class T>
void rms_norm_backward_input(const Matrix<T>& w, const RmsNormSaved<T>& saved,
                             const Matrix<T>& dy, Matrix<T>& dx) {
  const Matrix<T>& x = saved.x;
  const Eigen::Index d = x.cols();
  detail::check_rms_weight(w, d);
  if (saved.inv_rms.rows() != x.rows() || saved.inv_rms.cols() != 1)
    fail("rms_norm saved.inv_rms.rows", saved.inv_rms.rows(),
         "== saved.x.rows (" + std::to_string(x.rows()) + "): run rms_norm_forward first");
  if (dy.rows() != x.rows()) fail("rms_norm dy.rows", dy.rows(), "== x.rows (" + std::to_string(x.rows()) + ")");
  if (dy.cols() != d) fail("rms_norm dy.cols", dy.cols(), "== x.cols (" + std::to_string(d) + ")");
  dx.resize(x.rows(), d);
  for (Eigen::Index r = 0; r < x.rows(); ++r) {
    const T s = saved.inv_rms(r, 0);
    const T gx = (dy.row(r).array() * w.row(0).array() * x.row(r).array()).sum() / T(d);
    // Element-wise in dy's row, so writing dx's row in place is safe when dx is dy.
    dx.row(r) = (s * (dy.row(r).array() * w.row(0).array()) - (s * s * s * gx) * x.row(r).array())
                    .matrix();
  }
}

/// dw += sum_r dy_r * x_r * inv_rms_r (the gain's gradient), accumulated row by row in
/// order. dw must already be [1, d]. Complexity O(rows * d).
template <class T>
void rms_norm_backward_weight(const RmsNormSaved<T>& saved, const Matrix<T>& dy, Matrix<T>& dw) {
  const Matrix<T>& x = saved.x;
  const Eigen::Index d = x.cols();
  expect(dw.rows() == 1, "rms_norm dw.rows", dw.rows(), "1");
  if (dw.cols() != d) fail("rms_norm dw.cols", dw.cols(), "== x.cols (" + std::to_string(d) + ")");
  if (saved.inv_rms.rows() != x.rows() || saved.inv_rms.cols() != 1)
    fail("rms_norm saved.inv_rms.rows", saved.inv_rms.rows(),
         "== saved.x.rows (" + std::to_string(x.rows()) + "): run rms_norm_forward first");
  if (dy.rows() != x.rows()) fail("rms_norm dy.rows", dy.rows(), "== x.rows (" + std::to_string(x.rows()) + ")");
  if (dy.cols() != d) fail("rms_norm dy.cols", dy.cols(), "== x.cols (" + std::to_string(d) + ")");
  for (Eigen::Index r = 0; r < x.rows(); ++r)
    dw.row(0).array() += dy.row(r).array() * x.row(r).array() * saved.inv_rms(r, 0);
}

}  // namespace disagmoe::model
