// SPDX-License-Identifier: Apache-2.0
/// @file simplex.hpp
/// The LP solver's public entry point: `solve_lp` solves the LP relaxation of a Problem
/// with the bounded dual simplex of dual_simplex.hpp (which this header includes, with
/// LpStatus, BasisStatus and detail::DualSimplex) and returns primal values, duals,
/// reduced costs and the basis in the problem's own units and sense.
#pragma once

#include <disagmoe/milp/dual_simplex.hpp>
#include <disagmoe/milp/problem.hpp>

#include <chrono>
#include <cmath>
#include <vector>

namespace disagmoe::milp {

/// Result of `solve_lp`: everything in the problem's own units and sense.
struct LpResult {
  LpStatus status = LpStatus::kInfeasible;
  double objective = std::nan("");     ///< c·x + offset (NaN unless optimal)
  std::vector<double> x;               ///< column values
  std::vector<double> row_activity;    ///< a_i·x
  std::vector<double> duals;           ///< row duals y (d = c - A^T y)
  std::vector<double> reduced_costs;   ///< d_j
  std::vector<BasisStatus> basis;      ///< n columns then m row logicals
  long iterations = 0;
};

/// Solves the LP relaxation of `p` (integrality ignored) from the logical basis.
/// Duals and reduced costs follow the problem's sense: for a minimisation, y_i >= 0 on
/// a binding lower row bound and d_j >= 0 at a lower column bound.
inline LpResult solve_lp(const Problem& p, double time_limit_s = kInf) {
  detail::DualSimplex lp(p);
  const auto deadline = std::isfinite(time_limit_s)
      ? detail::DualSimplex::Clock::now() +
            std::chrono::duration_cast<detail::DualSimplex::Clock::duration>(
                std::chrono::duration<double>(time_limit_s))
      : detail::DualSimplex::Clock::time_point::max();
  LpResult res;
  res.status = lp.solve(kInf, deadline);
  res.iterations = lp.iterations();
  const double sign = p.sense() == Sense::kMaximize ? -1.0 : 1.0;
  for (int j = 0; j < p.num_vars(); ++j) {
    res.x.push_back(lp.value(j));
    res.reduced_costs.push_back(sign * lp.reduced_cost(j));
  }
  for (int i = 0; i < p.num_rows(); ++i) {
    res.row_activity.push_back(lp.row_activity(i));
    res.duals.push_back(sign * lp.row_dual(i));
  }
  res.basis = lp.basis();
  if (res.status == LpStatus::kOptimal) res.objective = p.evaluate(res.x);
  return res;
}

}  // namespace disagmoe::milp
