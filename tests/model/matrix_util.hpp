// SPDX-License-Identifier: Apache-2.0
// Random matrices and error norms shared by the model tests.
#pragma once

#include <disagmoe/model/random.hpp>
#include <disagmoe/model/tensor.hpp>

#include <limits>

namespace disagmoe::test {

/// Entries drawn i.i.d. from N(0, scale^2), row by row.
inline model::Matrix<double> random_matrix(model::Rng& rng, Eigen::Index rows, Eigen::Index cols,
                                           double scale = 1.0) {
  model::Matrix<double> m(rows, cols);
  for (Eigen::Index i = 0; i < rows; ++i)
    for (Eigen::Index j = 0; j < cols; ++j) m(i, j) = scale * rng.normal();
  return m;
}

/// max |m_ij|, 0 for an empty matrix.
inline double max_abs(const model::Matrix<double>& m) {
  return m.size() == 0 ? 0.0 : m.cwiseAbs().maxCoeff();
}

/// ||got - want||_inf / ||want||_inf (absolute when want is zero); shapes must agree.
inline double rel_err(const model::Matrix<double>& got, const model::Matrix<double>& want) {
  if (got.rows() != want.rows() || got.cols() != want.cols()) return std::numeric_limits<double>::infinity();
  const double num = got.size() == 0 ? 0.0 : max_abs(got - want);
  const double den = max_abs(want);
  return den > 0 ? num / den : num;
}

}  // namespace disagmoe::test
