// SPDX-License-Identifier: Apache-2.0
// Fuzz target for disagmoe-sim's argument parsing (its main() compiled in, renamed;
// harness in fuzz_cli.hpp). --trace and --svg write to /dev/null; the work budget is
// 4096 simulated ops per timeline and --max-ops/--max-memory may only lower it, so that
// the AF-Pipe layout search (~300 timelines) stays short. @D@/plan.json is a plan.
#include "fuzz_cli.hpp"

// Library headers first: "main" is renamed only in the program's own file.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#define main sim_main
#include "../../examples/sim/main.cpp"
#undef main

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace fz = disagmoe::fuzz_cli;
  static const fz::Rules rules{
      .writes = {"--trace", "--svg"},
      .caps = {{"--max-ops", -1e300, 4096}, {"--max-memory", -1e300, 64 << 20}},
      .prefix = {}};
  static const std::string& dir = fz::fixture_dir([](const std::filesystem::path& d) {
    fz::write_file(d / "plan.json",
                   R"({"model": "olmoe-1b-7b", "cluster": "h100:2", "seq_len": 4096, "global_batch": 16, )"
                   R"("allocation": {"groups": 1, "attention_gpus_per_node": 3, "ffn_gpus_per_node": 5, )"
                   R"("attention_nics_per_node": 3, "ffn_nics_per_node": 5, "recompute": false}})");
  });
  return fz::fuzz_one(data, size, sim_main, "disagmoe-sim", rules, dir);
}
