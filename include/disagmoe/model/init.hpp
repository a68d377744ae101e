// SPDX-License-Identifier: Apache-2.0
/// @file init.hpp
/// Parameter initialisation shared by the reference computes.
#pragma once

#include <disagmoe/model/random.hpp>
#include <disagmoe/model/tensor.hpp>

namespace disagmoe::model {

/// A [rows, cols] matrix of N(0, std^2) entries drawn in row-major order from `rng`.
template <class T>
Matrix<T> normal_matrix(Eigen::Index rows, Eigen::Index cols, double std, Rng& rng) {
  Matrix<T> m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = static_cast<T>(std * rng.normal());
  return m;
}

/// A norm gain of width d, all ones (HF LlamaRMSNorm's init).
template <class T>
Matrix<T> ones_row(Eigen::Index d) {
  return Matrix<T>::Ones(1, d);
}

}  // namespace disagmoe::model
