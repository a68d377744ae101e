// SPDX-License-Identifier: Apache-2.0
/// @file tensor.hpp
/// Dense host tensors of the reference compute: row-major Eigen matrices whose rows are
/// tokens. Every parameter, including a norm's weight vector (a 1 x d matrix), is a
/// `Matrix<T>`, so optimizers, checkpoints and all-reduces visit one type.
///
/// Linear layers follow PyTorch's `nn.Linear` and Hugging Face checkpoints: a weight is
/// stored as [out_features, in_features] and applied as y = x W^T.
#pragma once

#include <Eigen/Core>

#include <cstdint>
#include <vector>

namespace disagmoe::model {

/// Row-major dynamic matrix; rows are tokens (or output features for weights).
template <class T>
using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// Row-major integer matrix (expert ids per token and slot).
using IndexMatrix = Eigen::Matrix<int, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// y = x W^T for x [n, in] and W [out, in]; y is resized to [n, out].
template <class T>
void linear_forward(const Matrix<T>& x, const Matrix<T>& w, Matrix<T>& y) {
  y.noalias() = x * w.transpose();
}

/// dx = dy W for dy [n, out] and W [out, in]: the input gradient of `linear_forward`.
template <class T>
void linear_backward_input(const Matrix<T>& dy, const Matrix<T>& w, Matrix<T>& dx) {
  dx.noalias() = dy * w;
}

/// dW += dy^T x: the weight gradient of `linear_forward`, accumulated.
template <class T>
void linear_backward_weight(const Matrix<T>& dy, const Matrix<T>& x, Matrix<T>& dw) {
  dw.noalias() += dy.transpose() * x;
}

}  // namespace disagmoe::model
