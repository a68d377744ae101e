// SPDX-License-Identifier: Apache-2.0
// Fuzz target for the argument parsing of disagmoe-presets and disagmoe-plan (their main()
// compiled in, renamed; harness in fuzz_cli.hpp): the input's first byte picks the
// program, the rest are its arguments. Exit 0 or 2, nothing written (--svg: /dev/null).
#include "fuzz_cli.hpp"

// Library headers first: "main" is renamed only in the program's own file.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#define main presets_main
#include "../../examples/presets/main.cpp"
#undef main
#define main plan_main
#include "../../examples/plan/main.cpp"
#undef main

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace fz = disagmoe::fuzz_cli;
  static const fz::Rules rules{.writes = {"--svg"}, .caps = {}, .prefix = {}};
  // Half of the plan runs skip the recommendation: it simulates every schedule, which the
  // fuzzer's small work budget refuses on all but tiny configurations.
  static const fz::Rules plan_only{.writes = {"--svg"}, .caps = {}, .prefix = {"--no-recommend"}};
  static const std::string& dir = fz::fixture_dir([](const std::filesystem::path&) {});
  if (size == 0) return 0;
  if (data[0] % 4 == 1) return fz::fuzz_one(data + 1, size - 1, plan_main, "disagmoe-plan", rules, dir);
  if (data[0] % 4 == 3) return fz::fuzz_one(data + 1, size - 1, plan_main, "disagmoe-plan", plan_only, dir);
  return fz::fuzz_one(data + 1, size - 1, presets_main, "disagmoe-presets", rules, dir);
}
