// SPDX-License-Identifier: Apache-2.0
/// @file debug_solution.hpp
/// The debug-solution checker (the idea of SCIP's debug solution: Achterberg,
/// "Constraint integer programming", PhD thesis, TU Berlin 2007, §14.4, and SCIP's
/// `debug.c`): a known feasible point x* is carried through the solve, and every
/// reduction that could remove it is checked against it: each cut added (x* must
/// satisfy it), each global or node-local bound change (x* must stay in the box of a
/// node that contained it), each node pruned by infeasibility or by its bound (a node
/// that contains x* has an LP bound <= c·x*), and the final claim of optimality. The
/// first failure throws SolverError naming the reduction, its origin and the amount.
///
/// Reductions that only keep solutions better than the incumbent (reduced-cost fixing,
/// cutoff pruning) may legitimately remove x* once the incumbent is as good as x*; from
/// then on nothing is checked (`active` turns false for good, as the incumbent only
/// improves). Used through `Options::debug_solution`; off by default.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/milp/problem.hpp>
#include <disagmoe/milp/solution_io.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace disagmoe::milp::detail {

/// A feasible point and the checks against it. Objective values are in the solver's
/// internal units: minimisation, without the offset.
class DebugSolution {
 public:
  /// Throws ConfigError (field Options.debug_solution) unless x has one value per
  /// variable and is feasible for p within 10 `feas_tol` (bounds, integrality; rows
  /// relative to the error of their continuous terms: Problem::max_scaled_violation), 10x
  /// the solver's test for its incumbents, as a point written with few digits is not exact.
  DebugSolution(const Problem& p, const std::vector<double>& x, double feas_tol)
      : p_(p), x_(x) {
    expect(static_cast<int>(x.size()) == p.num_vars(), "Options.debug_solution size", x.size(),
           "one value per variable (" + std::to_string(p.num_vars()) + ")");
    // The solver's own acceptance rule for LP points (10 feasibility_tol, rows relative).
    const SolutionCheck c = check_solution(p, x, 10 * feas_tol);
    expect(c.feasible, "Options.debug_solution max violation", c.max_scaled_violation,
           "a feasible point (<= 10 feasibility_tol, rows relative to what their continuous columns absorb); worst: " + c.worst);
    const double sign = p.sense() == Sense::kMaximize ? -1.0 : 1.0;
    obj_ = sign * (p.evaluate(x) - p.objective_offset());
    obj_tol_ = 1e-6 * std::max(1.0, std::abs(obj_));
  }

  double value(int j) const { return x_[j]; }
  /// c·x* in internal units.
  double objective() const { return obj_; }
  /// Whether reductions relative to an incumbent-derived `cutoff` must keep x*: x* is
  /// clearly better than the cutoff.
  bool better_than(double cutoff) const { return obj_ < cutoff - obj_tol_; }

  /// Whether x*_j lies in [lb, ub] (with a tolerance of 1e-6, the default integrality
  /// and feasibility tolerance).
  bool in_bounds(int j, double lb, double ub) const {
    const double tol = 1e-6 * std::max(1.0, std::abs(x_[j]));
    return x_[j] >= lb - tol && x_[j] <= ub + tol;
  }

  /// Throws unless x* satisfies lo <= sum terms <= hi (tolerance 1e-6 relative to the
  /// largest |a_j x*_j|, the right-hand side and 1). `origin()` names the cut.
  template <class Origin>
  void check_cut(const std::vector<std::pair<int, double>>& terms, double lo, double hi, Origin&& origin) const {
    double act = 0, scale = 1;
    for (const auto& [j, a] : terms) {
      act += a * x_[j];
      scale = std::max(scale, std::abs(a * x_[j]));
    }
    if (std::isfinite(lo)) scale = std::max(scale, std::abs(lo));
    if (std::isfinite(hi)) scale = std::max(scale, std::abs(hi));
    const double viol = std::max(lo - act, act - hi);
    if (viol > 1e-6 * scale) {
      std::string side = std::isfinite(lo) ? (std::isfinite(hi) ? num(lo) + " <= a·x <= " + num(hi)
                                                                : "a·x >= " + num(lo))
                                           : "a·x <= " + num(hi);
      fail(origin() + " (" + std::to_string(terms.size()) + " terms, " + side + ") cuts off the debug solution: a·x* = " +
           num(act) + ", violated by " + num(viol));
    }
  }

  /// Throws unless x*_j lies in [lb, ub]. `origin()` names the bound change.
  template <class Origin>
  void check_bounds(int j, double lb, double ub, Origin&& origin) const {
    if (!in_bounds(j, lb, ub))
      fail(origin() + " sets " + p_.var_name(j) + " to [" + num(lb) + ", " + num(ub) +
           "], excluding its debug value " + num(x_[j]));
  }

  /// Throws when a proven lower bound of a region that contains x* exceeds c·x*.
  template <class Origin>
  void check_lower_bound(double bound, Origin&& origin) const {
    if (bound > obj_ + obj_tol_)
      fail(origin() + " has bound " + num(bound) + " > debug objective " + num(obj_) + " (internal minimisation units)");
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw SolverError("milp debug solution: " + what);
  }

  static std::string num(double v) {
    std::ostringstream os;
    os.precision(12);
    os << v;
    return os.str();
  }

 private:
  const Problem& p_;
  const std::vector<double>& x_;
  double obj_ = 0, obj_tol_ = 0;
};

}  // namespace disagmoe::milp::detail
