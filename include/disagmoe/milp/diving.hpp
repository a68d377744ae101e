// SPDX-License-Identifier: Apache-2.0
/// @file diving.hpp
/// LP-based diving primal heuristics (Achterberg, "Constraint integer programming", PhD
/// thesis, TU Berlin 2007, §9.1.3; Berthold, "Primal heuristics for mixed integer
/// programs", Diploma thesis, TU Berlin 2006, §3.1): starting from an LP optimum,
/// repeatedly bound one fractional integer column to a rounded value and re-solve the
/// LP (warm dual simplex), until the LP solution is integral (a candidate incumbent),
/// the LP is infeasible after one backtrack, or the iteration budget is spent.
///  * fractional diving: the column closest to an integer, rounded to it;
///  * coefficient diving: the column with the fewest locks in some rounding direction
///    (rows that the move could violate), rounded that way; ties by fractionality.
/// The caller restores the LP's bounds and basis afterwards.
#pragma once

#include <disagmoe/milp/dual_simplex.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

namespace disagmoe::milp::detail {

enum class DiveRule : std::uint8_t { kFractional, kCoefficient };

/// What a dive needs to know about the problem.
struct DiveContext {
  const std::vector<int>* ints;        ///< integer columns
  const std::vector<int>* down_locks;  ///< rows that decreasing x_j can violate
  const std::vector<int>* up_locks;    ///< rows that increasing x_j can violate
  double integrality_tol = 1e-6;
  double cutoff = kInf;                ///< internal minimisation units
  long iteration_budget = 1000;        ///< simplex iterations for the whole dive
  DualSimplex::Clock::time_point deadline = DualSimplex::Clock::time_point::max();
};

/// Dives from the LP's current (optimal) state within the column bounds [lb, ub] (the
/// bounds the LP holds now). Calls `found(x)` with each integral LP point (the caller
/// checks it exactly). Leaves the LP with changed bounds and basis. Returns the
/// simplex iterations spent. Cost: at most one LP re-solve per integer column.
template <class Found>
long dive(DualSimplex& lp, const DiveContext& ctx, DiveRule rule, std::vector<double> lb,
          std::vector<double> ub, Found&& found) {
  const long start = lp.iterations();
  const long saved_limit = lp.iteration_limit;
  const int n = lp.num_cols();
  std::vector<double> x(n);
  int last = -1;
  double last_lb = 0, last_ub = 0;  // bounds of `last` before its fixing
  bool last_up = false, backtracked = false;
  const std::size_t max_depth = 2 * ctx.ints->size() + 10;
  for (std::size_t depth = 0; depth < max_depth; ++depth) {
    const long left = ctx.iteration_budget - (lp.iterations() - start);
    if (left <= 0) break;
    lp.iteration_limit = left;
    const LpStatus s = lp.solve(ctx.cutoff, ctx.deadline);
    if (s == LpStatus::kInfeasible || s == LpStatus::kCutoff) {
      if (last < 0 || backtracked) break;
      // One backtrack: the other side of the last rounding.
      backtracked = true;
      if (last_up) {
        ub[last] = lb[last] - 1;
        lb[last] = last_lb;
      } else {
        lb[last] = ub[last] + 1;
        ub[last] = last_ub;
      }
      if (lb[last] > ub[last]) break;
      lp.set_col_bounds(last, lb[last], ub[last]);
      continue;
    }
    if (s != LpStatus::kOptimal) break;
    backtracked = false;
    for (int j = 0; j < n; ++j) x[j] = lp.value(j);
    int best = -1;
    bool best_up = false;
    double best_score = kInf, best_frac = kInf;
    for (int j : *ctx.ints) {
      const double f = x[j] - std::floor(x[j]);
      if (f <= ctx.integrality_tol || f >= 1 - ctx.integrality_tol) continue;
      bool up;
      double score, frac;
      if (rule == DiveRule::kFractional) {
        up = f >= 0.5;
        frac = up ? 1 - f : f;
        score = frac;
      } else {
        const int dl = (*ctx.down_locks)[j], ul = (*ctx.up_locks)[j];
        up = ul < dl || (ul == dl && f >= 0.5);
        frac = up ? 1 - f : f;
        score = up ? ul : dl;
      }
      if (score < best_score || (score == best_score && frac < best_frac)) {
        best = j, best_up = up, best_score = score, best_frac = frac;
      }
    }
    if (best < 0) {
      found(x);
      break;
    }
    last = best, last_up = best_up, last_lb = lb[best], last_ub = ub[best];
    if (best_up) lb[best] = std::ceil(x[best]);
    else ub[best] = std::floor(x[best]);
    lp.set_col_bounds(best, lb[best], ub[best]);
  }
  lp.iteration_limit = saved_limit;
  return lp.iterations() - start;
}

}  // namespace disagmoe::milp::detail
