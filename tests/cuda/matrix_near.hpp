// SPDX-License-Identifier: Apache-2.0
// The tolerance the GPU compute tests compare host matrices with.
#pragma once

#include <disagmoe/model/tensor.hpp>

namespace disagmoe::test {

/// Same shape and max |a - b| <= tol * (1 + max |b|): relative to the reference's scale,
/// so rows of small values do not demand more than fp32 (or bf16) gives the large ones.
inline bool near(const model::Matrix<float>& a, const model::Matrix<float>& b, float tol) {
  if (a.rows() != b.rows() || a.cols() != b.cols()) return false;
  if (a.size() == 0) return true;
  return (a - b).cwiseAbs().maxCoeff() <= tol * (1 + b.cwiseAbs().maxCoeff());
}

}  // namespace disagmoe::test
