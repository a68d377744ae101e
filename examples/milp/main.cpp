// SPDX-License-Identifier: Apache-2.0
// disagmoe-milp: solve an MPS file (optionally gzipped) with the library's branch and
// bound. With --json prints exactly one JSON object:
//   {"status": "optimal", "objective": 3089, "bound": 3089, "gap": 0, "nodes": 12,
//    "lp_iterations": 345, "seconds": 0.01}
// objective is null without a solution. Exit 0 for every solver outcome (optimal,
// infeasible, unbounded, limits); 2 for bad input, 3 for internal errors.
//  --write-solution SOL   writes the solution found as `name value` lines
//  --check-solution SOL   only checks the point in SOL: objective, feasibility (the
//                         solver's rule: rows relative to their continuous terms, 1e-6) and the
//                         worst absolute violation named; exit 0 feasible, 1 not
//  --debug-solution SOL   solves with Options::debug_solution = SOL: the first cut,
//                         bound change or pruned node that removes it is reported as
//                         "internal error: milp debug solution: ..." (exit 3)
//  --no-presolve          solves without presolve (presolve.hpp); --verbose reports
//                         what presolve removed and the root bound before/after cuts
//  --flow-cover           also separates lifted flow cover cuts (flow_cover_cuts.hpp)
#include "../common/cli_main.hpp"

#include <disagmoe/milp/milp.hpp>

#include <cmath>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

namespace {

// Exact (17 digits) for values, short for timings.
std::string json_number(double v, int digits = 17) {
  if (!std::isfinite(v)) return "null";  // JSON has no inf/nan
  std::ostringstream os;
  os.precision(digits);
  os << v;
  return os.str();
}

// A bound or gap for the table: "none" where there is none yet (no incumbent, or an
// infeasible problem), never "inf".
std::string text_number(double v) { return std::isfinite(v) ? json_number(v, 6) : "none"; }

// A JSON string body: names come from the MPS file.
std::string json_escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  namespace milp = disagmoe::milp;
  CLI::App app{"Solve a mixed-integer linear program given as (free or fixed) MPS, .mps or .mps.gz",
               "disagmoe-milp"};
  std::string file;
  milp::Options opt;
  bool json = false, fixed = false;
  std::string write_sol, check_sol, debug_sol;
  double gap = opt.rel_gap;
  app.add_option("file", file, "MPS file (.mps or .mps.gz)")->required();
  app.add_option("--time-limit", opt.time_limit, "wall-clock limit in seconds (default: none)");
  app.add_option("--node-limit", opt.node_limit, "branch-and-bound node limit (-1: none)")
      ->check(CLI::Range(-1L, std::numeric_limits<long>::max()));
  app.add_option("--gap", gap, "relative gap at which to stop");
  app.add_option("--cut-rounds", opt.cut_rounds, "rounds of root Gomory cuts (0: none)")
      ->check(CLI::Range(0, std::numeric_limits<int>::max()));  // NonNegativeNumber prints DBL_MAX in full
  using disagmoe::cli::kPath;
  app.add_option("--write-solution", write_sol, "write the solution found (`name value` lines)")->check(kPath);
  app.add_option("--check-solution", check_sol,
                 "check the point in this file (feasibility, objective, worst violation) instead of solving")
      ->check(kPath);
  app.add_option("--debug-solution", debug_sol,
                 "a known feasible point: report the first reduction that cuts it off (exit 3)")
      ->check(kPath);
  app.add_flag("--json", json, "print one JSON object");
  app.add_flag("--fixed", fixed, "read fixed-column MPS (names may contain blanks)");
  app.add_flag("--verbose", opt.verbose, "progress on stderr (presolve removals, root bounds, incumbents)");
  bool no_presolve = false;
  app.add_flag("--no-presolve", no_presolve, "solve without presolve");
  app.add_flag("--flow-cover", opt.flow_cover_cuts,
               "also separate lifted flow cover cuts at the root (off by default: on MIPLIB 3 they lower the root bound)");
  return disagmoe::cli::run_main(app, argc, argv, [&] {
    // --check-solution only evaluates a point: the solver's options would be ignored.
    for (const char* o : {"--write-solution", "--debug-solution", "--time-limit", "--node-limit", "--gap",
                          "--cut-rounds", "--no-presolve", "--flow-cover", "--verbose"})
      disagmoe::cli::expect_applies(app, o, check_sol.empty(), "not given with --check-solution (it solves nothing)");
    if (app.count("--time-limit")) disagmoe::expect_finite_in("--time-limit", opt.time_limit, 0, 1e9);
    disagmoe::expect_finite_in("--gap", gap, 0, 1e300);
    opt.rel_gap = gap;
    opt.presolve = !no_presolve;
    const milp::Problem p =
        milp::read_mps_file(file, fixed ? milp::MpsFormat::kFixed : milp::MpsFormat::kFree);
    if (!check_sol.empty()) {
      const std::vector<double> x = milp::read_solution_file(p, check_sol);
      const milp::SolutionCheck c = milp::check_solution(p, x, opt.feasibility_tol);
      if (json) {
        std::cout << "{\"feasible\": " << (c.feasible ? "true" : "false") << ", \"objective\": "
                  << json_number(c.objective) << ", \"max_violation\": " << json_number(c.max_violation)
                  << ", \"max_scaled_violation\": " << json_number(c.max_scaled_violation)
                  << ", \"worst\": \"" << json_escape(c.worst) << "\"}\n";
      } else {
        std::cout << "feasible    " << (c.feasible ? "yes" : "no") << "\n"
                  << "objective   " << json_number(c.objective) << "\n"
                  << "violation   " << c.max_violation << (c.worst.empty() ? "" : " at " + c.worst) << "\n"
                  << "scaled      " << c.max_scaled_violation << " (rows relative to their continuous terms; tolerance "
                  << opt.feasibility_tol << ")\n";
      }
      return c.feasible ? disagmoe::cli::kExitOk : 1;
    }
    std::vector<double> debug_x;
    if (!debug_sol.empty()) {
      debug_x = milp::read_solution_file(p, debug_sol);
      opt.debug_solution = &debug_x;
    }
    std::ofstream sol_out;
    if (!write_sol.empty()) {  // open before solving: a bad path fails fast
      sol_out.open(write_sol);
      if (!sol_out) disagmoe::fail<disagmoe::IoError>("--write-solution", write_sol, "a writable file");
    }
    const milp::Result r = milp::solve(p, opt);
    if (!write_sol.empty() && r.has_solution()) {
      milp::write_solution(sol_out, p, r.solution);
      sol_out.close();
      if (!sol_out) disagmoe::fail<disagmoe::IoError>("--write-solution", write_sol, "a writable file");
    }
    if (json) {
      std::cout << "{\"status\": \"" << milp::to_string(r.status) << "\", \"objective\": "
                << (r.has_solution() ? json_number(r.objective) : "null")
                << ", \"bound\": " << json_number(r.bound) << ", \"gap\": " << json_number(r.gap)
                << ", \"nodes\": " << r.nodes << ", \"lp_iterations\": " << r.lp_iterations
                << ", \"seconds\": " << json_number(r.seconds, 6) << "}\n";
    } else {
      std::cout << "problem     " << (p.name().empty() ? file : p.name()) << " (" << p.num_rows()
                << " rows, " << p.num_vars() << " columns, " << p.num_nonzeros() << " nonzeros)\n"
                << "status      " << milp::to_string(r.status) << "\n"
                << "objective   " << (r.has_solution() ? json_number(r.objective) : "none") << "\n"
                << "bound       " << text_number(r.bound) << "\n"
                << "gap         " << text_number(r.gap) << "\n"
                << "nodes       " << r.nodes << "\n"
                << "presolve    " << r.presolve.rows_removed << " rows (" << r.presolve.parallel_rows
                << " parallel), " << r.presolve.cols_removed << " columns (" << r.presolve.substituted_cols
                << " substituted) removed, " << r.presolve.bounds_tightened << " bounds, "
                << r.presolve.coefs_tightened << " coefficients tightened\n"
                << "lp iters    " << r.lp_iterations << "\n"
                << "seconds     " << r.seconds << "\n";
    }
    return disagmoe::cli::kExitOk;
  });
}
