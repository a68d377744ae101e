// SPDX-License-Identifier: Apache-2.0
/// @file lp_scaling.hpp
/// Geometric-mean scaling of a constraint matrix (Curtis and Reid, "On the automatic
/// scaling of matrices for Gaussian elimination", J. Inst. Maths Applics 10, 1972; the
/// alternating row/column passes as in Koberstein 2005, §6.2), rounded to powers of two
/// so that scaling and unscaling are exact in floating point.
#pragma once

#include <disagmoe/milp/problem.hpp>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace disagmoe::milp::detail {

/// Computes column factors `col_scale` (size n, updated in place) and row factors
/// `row_scale` (one per row) such that row_scale[i] * |a_ij| * col_scale[j] is near 1.
/// Four passes; O(passes * nnz).
inline void geometric_scale(const std::vector<std::vector<std::pair<int, double>>>& rows,
                            std::vector<double>& col_scale, std::vector<double>& row_scale) {
  const std::size_t n = col_scale.size();
  for (int pass = 0; pass < 4; ++pass) {
    for (std::size_t i = 0; i < rows.size(); ++i) {
      double lo = kInf, hi = 0;
      for (const auto& [j, v] : rows[i]) {
        const double a = std::abs(v) * col_scale[j];
        lo = std::min(lo, a), hi = std::max(hi, a);
      }
      row_scale[i] = hi > 0 ? 1.0 / std::sqrt(lo * hi) : 1.0;
    }
    std::vector<double> lo(n, kInf), hi(n, 0.0);
    for (std::size_t i = 0; i < rows.size(); ++i)
      for (const auto& [j, v] : rows[i]) {
        const double a = std::abs(v) * row_scale[i];
        lo[j] = std::min(lo[j], a), hi[j] = std::max(hi[j], a);
      }
    for (std::size_t j = 0; j < n; ++j) col_scale[j] = hi[j] > 0 ? 1.0 / std::sqrt(lo[j] * hi[j]) : 1.0;
  }
  for (double& s : col_scale) s = std::exp2(std::round(std::log2(s)));
  for (double& s : row_scale) s = std::exp2(std::round(std::log2(s)));
}

}  // namespace disagmoe::milp::detail
