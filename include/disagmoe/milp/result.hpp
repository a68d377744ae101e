// SPDX-License-Identifier: Apache-2.0
/// @file result.hpp
/// Options and result of the MILP solver: plain values, no solver code.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/milp/problem.hpp>

#include <cmath>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

namespace disagmoe::milp {

/// How a solve ended. Infeasible and unbounded are results, not errors.
enum class Status : std::uint8_t { kOptimal, kInfeasible, kUnbounded, kTimeLimit, kNodeLimit };

/// "optimal", "infeasible", "unbounded", "time_limit", "node_limit".
inline std::string_view to_string(Status s) {
  switch (s) {
    case Status::kOptimal: return "optimal";
    case Status::kInfeasible: return "infeasible";
    case Status::kUnbounded: return "unbounded";
    case Status::kTimeLimit: return "time_limit";
    case Status::kNodeLimit: return "node_limit";
  }
  return "unknown";
}

/// A new best solution, passed to `Options::on_incumbent`.
struct Incumbent {
  double objective;                 ///< in the problem's sense, with its offset
  std::span<const double> solution; ///< one value per variable
  long nodes;                       ///< nodes processed so far
  double seconds;                   ///< wall time since the solve started
};

/// Solver settings. Defaults suit both tiny allocation problems and MIPLIB-sized ones.
struct Options {
  double time_limit = kInf;     ///< wall-clock seconds; result kTimeLimit when reached
  long node_limit = -1;         ///< branch-and-bound nodes; -1 = none; result kNodeLimit
  double rel_gap = 1e-6;        ///< stop when |obj - bound| <= rel_gap * |obj|
  double abs_gap = 1e-6;        ///< or when |obj - bound| <= abs_gap
  double integrality_tol = 1e-6;///< |x - round(x)| below this counts as integral
  /// Accepted violation of a solution: absolute for bounds and integer-only rows, rows
  /// with continuous terms relative to the error those can carry
  /// (Problem::max_scaled_violation). Integers of a reported solution are exact.
  double feasibility_tol = 1e-6;
  bool presolve = true;         ///< presolve.hpp before branch and bound
  int cut_rounds = 20;          ///< rounds of root cuts, all families (0 = off)
  /// Lifted flow cover cuts (flow_cover_cuts.hpp) among the root cuts. Off by default:
  /// on MIPLIB 3 they lowered the root bound after cuts on fiber, p0033, p0548 and vpm1
  /// (the pool takes them in place of stronger cuts); on fixed-charge network design
  /// they raise it (bench/RESULTS.md, MILP, session 10).
  bool flow_cover_cuts = false;
  bool heuristics = true;       ///< rounding and diving primal heuristics
  bool verbose = false;         ///< progress lines on stderr
  /// Called with every improving solution (from the solving thread; keep it cheap).
  std::function<void(const Incumbent&)> on_incumbent;
  /// Debugging aid (SCIP's "debug solution", debug_solution.hpp): a known feasible point,
  /// one value per column. While it is better than the incumbent, every cut, bound
  /// change and pruned node is checked against it, and the first reduction that would
  /// remove it makes `solve` throw SolverError "milp debug solution: <origin> ..." (cut
  /// family, round, source row and violation; or node id, bound and objective). Off
  /// (nullptr) by default, and then costs one pointer test per reduction. Must outlive
  /// the solve; `solve` throws ConfigError when it is not feasible (within 10 feasibility_tol).
  const std::vector<double>* debug_solution = nullptr;

  /// Throws ConfigError naming the first invalid field.
  void validate() const {
    expect(!std::isnan(time_limit) && time_limit >= 0, "Options.time_limit", time_limit, ">= 0 seconds");
    expect(node_limit >= -1, "Options.node_limit", node_limit, "-1 (none) or >= 0");
    expect(rel_gap >= 0 && std::isfinite(rel_gap), "Options.rel_gap", rel_gap, "a finite value >= 0");
    expect(abs_gap >= 0 && std::isfinite(abs_gap), "Options.abs_gap", abs_gap, "a finite value >= 0");
    expect(integrality_tol > 0 && integrality_tol < 0.5, "Options.integrality_tol", integrality_tol,
           "0 < tol < 0.5");
    expect(feasibility_tol > 0 && feasibility_tol < 1, "Options.feasibility_tol", feasibility_tol,
           "0 < tol < 1");
    expect(cut_rounds >= 0, "Options.cut_rounds", cut_rounds, ">= 0");
  }
};

/// Counts of what presolve did (reported by `--verbose` and in Result).
struct PresolveStats {
  int rows_removed = 0;     ///< all rows dropped (the next four kinds, and rows left with fixed columns only)
  int empty_rows = 0;       ///< rows without columns
  int singleton_rows = 0;   ///< rows of one column, turned into its bounds
  int redundant_rows = 0;   ///< rows no point within the bounds can violate
  int parallel_rows = 0;    ///< rows proportional to another, merged into it (duplicates, dominated sides)
  int dominated_sides = 0;  ///< row sides implied by a row of the same columns, dropped (rows left without sides go)
  int cols_removed = 0;     ///< fixed and substituted columns
  int substituted_cols = 0; ///< implied free continuous singleton columns substituted out
  int bounds_tightened = 0; ///< column bounds changed (singleton rows, activities)
  int coefs_tightened = 0;  ///< coefficients of binaries reduced
  bool infeasible = false;  ///< a row or a column's bounds cannot be met
};

/// Root cuts that entered the LP, per family (reported by `--verbose` and in Result).
struct CutCounts {
  int gmi = 0;         ///< Gomory mixed-integer cuts from tableau rows
  int cover = 0;       ///< extended knapsack covers
  int mir = 0;         ///< complemented mixed-integer rounding cuts
  int flow_cover = 0;  ///< lifted flow covers
};

/// Outcome of `solve`. `objective` is NaN and `solution` empty when no solution was
/// found (a problem without columns has an empty solution and a finite objective); `bound` is the proven
/// bound on the optimum (lower for minimisation, upper for maximisation); gap = |objective - bound| /
/// max(|objective|, 1e-10), +inf without a solution (the CPLEX definition).
struct Result {
  Status status = Status::kInfeasible;
  double objective = std::nan("");
  double bound = std::nan("");
  double gap = kInf;
  std::vector<double> solution;
  long nodes = 0;
  long lp_iterations = 0;
  double seconds = 0;
  PresolveStats presolve;  ///< what presolve removed (zero when off)
  /// Root LP bound before and after the cuts (problem's sense; NaN when not reached).
  double root_bound = std::nan(""), root_bound_cuts = std::nan("");
  CutCounts cuts;  ///< root cuts added (also those later dropped as slack)
  bool has_solution() const { return !std::isnan(objective); }
};

}  // namespace disagmoe::milp
