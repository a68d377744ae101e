// SPDX-License-Identifier: Apache-2.0
// disagmoe-milp: solve an MPS file (optionally gzipped) with the library's branch and
// bound. With --json prints exactly one JSON object:
//   {"status": "optimal", "objective": 3089, "bound": 3089, "gap": 0, "nodes": 12,
//    "lp_iterations": 345, "seconds": 0.01}
// objective is null without a solution. Exit 0 for every solver outcome (optimal,
// infeasible, unbounded, limits); 2 for bad input, 3 for internal errors.
#include "../common/cli_main.hpp"

#include <disagmoe/milp/milp.hpp>

#include <cmath>
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

}  // namespace

int main(int argc, char** argv) {
  namespace milp = disagmoe::milp;
  CLI::App app{"Solve a mixed-integer linear program given as (free or fixed) MPS, .mps or .mps.gz",
               "disagmoe-milp"};
  std::string file;
  milp::Options opt;
  bool json = false, fixed = false;
  double gap = opt.rel_gap;
  app.add_option("file", file, "MPS file (.mps or .mps.gz)")->required();
  app.add_option("--time-limit", opt.time_limit, "wall-clock limit in seconds")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--node-limit", opt.node_limit, "branch-and-bound node limit (-1: none)")
      ->check(CLI::Range(-1L, std::numeric_limits<long>::max()));
  app.add_option("--gap", gap, "relative gap at which to stop")->check(CLI::NonNegativeNumber);
  app.add_option("--cut-rounds", opt.cut_rounds, "rounds of root Gomory cuts (0: none)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--json", json, "print one JSON object");
  app.add_flag("--fixed", fixed, "read fixed-column MPS (names may contain blanks)");
  app.add_flag("--verbose", opt.verbose, "progress on stderr");
  return disagmoe::cli::run_main(app, argc, argv, [&] {
    opt.rel_gap = gap;
    const milp::Problem p =
        milp::read_mps_file(file, fixed ? milp::MpsFormat::kFixed : milp::MpsFormat::kFree);
    const milp::Result r = milp::solve(p, opt);
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
                << "bound       " << r.bound << "\n"
                << "gap         " << r.gap << "\n"
                << "nodes       " << r.nodes << "\n"
                << "lp iters    " << r.lp_iterations << "\n"
                << "seconds     " << r.seconds << "\n";
    }
    return disagmoe::cli::kExitOk;
  });
}
