// SPDX-License-Identifier: Apache-2.0
// Fuzz target for disagmoe-place's argument parsing (its main() compiled in, renamed;
// harness in fuzz_cli.hpp). --generate and --out write to /dev/null (at most 1 MiB: the
// output budget); sizes and work are capped; @D@/fit.npy is an 8-expert trace of 256
// tokens x 2 layers x top-2.
#include "fuzz_cli.hpp"

// Library headers first: "main" is renamed only in the program's own file.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#define main place_main
#include "../../examples/place/main.cpp"
#undef main

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace fz = disagmoe::fuzz_cli;
  static const fz::Rules rules{
      .writes = {"--generate", "--out"},
      .caps = {{"--max-memory", -1e300, 64 << 20}, {"--max-output", -1e300, 1 << 20}, {"--experts", -1e300, 64},
               {"--gpus", -1e300, 64}, {"--starts", -1e300, 4}, {"--time-limit", -1e300, 1}},
      .prefix = {}};
  static const std::string& dir = fz::fixture_dir([](const std::filesystem::path& d) {
    SyntheticTraceSpec s;
    s.num_experts = 8;
    s.top_k = 2;
    s.layers = 2;
    s.tokens = 256;
    std::ofstream out(d / "fit.npy", std::ios::binary);
    const std::int64_t shape[3] = {s.tokens, s.layers, s.top_k};
    write_npy_header<ExpertId>(out, shape);
    write_npy_data<ExpertId>(out, SyntheticTraceGenerator(s).generate(0, s.tokens).ids());
  });
  return fz::fuzz_one(data, size, place_main, "disagmoe-place", rules, dir);
}
