// SPDX-License-Identifier: Apache-2.0
/// @file ratio_test.hpp
/// The dual simplex ratio test: which nonbasic variable enters when the leaving row's
/// tableau row alpha_r is known. Harris' two-pass test with tolerances (Harris, "Pivot
/// selection methods of the Devex LP code", Math. Programming 5, 1973; the dual form as
/// in Koberstein 2005, Alg. 3): pass 1 bounds the dual step by the relaxed ratios
/// (|d_k| + tol) / |alpha_k|, pass 2 takes, among the ratios within that bound, the
/// candidate with the largest |alpha_k| (the most stable pivot).
#pragma once

#include <disagmoe/milp/lp_status.hpp>
#include <disagmoe/milp/problem.hpp>

#include <algorithm>
#include <cmath>
#include <span>

namespace disagmoe::milp::detail {

/// Whether a nonbasic variable in state s may move with tableau coefficient a (signed
/// for the direction of the leaving variable) without breaking dual feasibility.
inline bool ratio_eligible(BasisStatus s, double a, double tol) {
  if (s == BasisStatus::kAtLower) return a > tol;
  if (s == BasisStatus::kAtUpper) return a < -tol;
  return std::abs(a) > tol;  // free
}

/// Returns the entering variable, or -1 when none is eligible (dual unbounded ray: the
/// primal is infeasible). `sign` is -1 when the leaving variable goes to its lower bound,
/// +1 to its upper. Fixed and basic variables never enter. O(n + m).
inline int harris_ratio_test(std::span<const BasisStatus> status, std::span<const double> lb,
                             std::span<const double> ub, std::span<const double> d,
                             std::span<const double> row, double sign, double dual_tol) {
  constexpr double kPivTol = 1e-9;
  const std::size_t total = status.size();
  double theta_max = kInf;
  for (std::size_t k = 0; k < total; ++k) {
    const BasisStatus s = status[k];
    if (s == BasisStatus::kBasic || lb[k] == ub[k]) continue;
    const double a = sign * row[k];
    if (!ratio_eligible(s, a, kPivTol)) continue;
    theta_max = std::min(theta_max, (std::abs(d[k]) + dual_tol) / std::abs(a));
  }
  if (theta_max == kInf) return -1;
  int q = -1;
  double best_a = 0;
  for (std::size_t k = 0; k < total; ++k) {
    const BasisStatus s = status[k];
    if (s == BasisStatus::kBasic || lb[k] == ub[k]) continue;
    const double a = sign * row[k];
    if (!ratio_eligible(s, a, kPivTol)) continue;
    // Compare the ratio itself, as pass 1 computed it: |d| <= theta_max |a| can fail
    // for every candidate by one rounding (|d| >~ 1e8 absorbs dual_tol), leaving q = -1;
    // |d|/|a| <= (|d| + tol)/|a| holds exactly in floating point.
    if (std::abs(d[k]) / std::abs(a) <= theta_max && std::abs(a) > best_a) {
      best_a = std::abs(a);
      q = static_cast<int>(k);
    }
  }
  return q;
}

}  // namespace disagmoe::milp::detail
