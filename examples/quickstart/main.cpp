// SPDX-License-Identifier: Apache-2.0
// disagmoe-quickstart: the README's C++ example, built and run by ctest so it stays true.
// Plans Qwen3-30B-A3B at 16K tokens on 16 nodes of 8 H800, simulates AF-Pipe on a
// fixed split, and solves a two-variable MILP.
#include <disagmoe/disagmoe.hpp>
#include <disagmoe/io/spec_json.hpp>
#include <disagmoe/plan/plan_json.hpp>

#include "../common/cli_main.hpp"

#include <iostream>

int main(int argc, char** argv) {
  CLI::App app{"The README's C++ example: plan, simulate, solve.", "disagmoe-quickstart"};
  return disagmoe::cli::run_main(app, argc, argv, [] {
    namespace dm = disagmoe;
    auto model = dm::model_preset("qwen3-30b-a3b");
    model.seq_len = 16384;
    auto cluster = dm::io::load_cluster("h800x128");  // or "h100:4", or a JSON file
    dm::plan::Plan plan = dm::plan::AdaptiveAllocator(model, cluster).plan();
    std::cout << dm::plan::to_json(plan).dump(2) << '\n' << plan.explanation() << '\n';

    auto problem = dm::schedule::af_problem(model, cluster, {16, 4, 4, 4, 4});  // p, A/F GPUs and NICs per node
    auto timeline = dm::schedule::simulate(dm::schedule::AFPipe{}.build(problem));
    std::cout << timeline.step_seconds << " s per step\n";

    namespace milp = dm::milp;
    milp::Problem p;
    int a = p.add_var(0, 1, 3.0, milp::VarType::kBinary, "a");
    int b = p.add_var(0, 1, 2.0, milp::VarType::kBinary, "b");
    p.add_row({{a, 1.0}, {b, 1.0}}, 1.0, milp::kInf);      // a + b >= 1
    milp::Result r = milp::solve(p, {.time_limit = 1.0});  // optimal, objective 2
    std::cout << "milp: " << milp::to_string(r.status) << " " << r.objective << '\n';
    return r.status == milp::Status::kOptimal && r.objective == 2.0 ? dm::cli::kExitOk : dm::cli::kExitInternal;
  });
}
