// SPDX-License-Identifier: Apache-2.0
// Fuzz target for disagmoe-train's argument parsing (its main() compiled in, renamed;
// harness in fuzz_cli.hpp). The fuzzed arguments follow a one-layer model of width 16
// trained for one step on @D@/corpus.txt (the program takes the last of a repeated
// option, so they override it); options that size the model or the work are capped so
// that a run takes milliseconds, the memory budget is 64 MiB, and --save and --trace
// write to /dev/null. No MPI here: --transport mpi must be rejected.
#include "fuzz_cli.hpp"

// Library headers first: "main" is renamed only in the program's own file.
#include <CLI/CLI.hpp>
#include <Eigen/Core>
#include <nlohmann/json.hpp>

#define main train_main
#include "../../examples/train/main.cpp"
#undef main

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace fz = disagmoe::fuzz_cli;
  static const std::string& dir = fz::fixture_dir([](const std::filesystem::path& d) {
    std::string text;
    for (int i = 0; i < 200; ++i) text += "the quick brown fox jumps over the lazy dog " + std::to_string(i) + ". ";
    fz::write_file(d / "corpus.txt", text);
  });
  static const fz::Rules rules{
      .writes = {"--save", "--trace"},
      .caps = {{"--steps", -1e300, 2},         {"--sample", -1e300, 16},        {"--val-windows", -1e300, 4},
               {"--placement-batches", -1e300, 2}, {"--batch", -1e300, 16},     {"--micro-batch", -1e300, 16},
               {"--threads", -1e300, 2},       {"--pairs", -1e300, 4},          {"--attention-ranks", -1e300, 2},
               {"--ffn-ranks", -1e300, 2},     {"--timeout", -1e300, 5000},     {"--net-latency", -1e300, 1e-3},
               {"--net-bandwidth", 1e8, 1e300}, {"--layers", -1e300, 4},        {"--hidden", -1e300, 64},
               {"--heads", -1e300, 8},         {"--kv-heads", -1e300, 8},       {"--experts", -1e300, 16},
               {"--expert-ffn", -1e300, 64},   {"--shared-experts", -1e300, 2}, {"--shared-expert-ffn", -1e300, 64},
               {"--dense-ffn", -1e300, 64},    {"--seq-len", -1e300, 64},       {"--virtual-stages", -1e300, 4},
               {"--group-size", -1e300, 16},   {"--max-in-flight", -1e300, 16}, {"--max-memory", -1e300, 64 << 20}},
      .prefix = {"--steps", "1", "--val-windows", "2", "--val-every", "1", "--corpus", dir + "/corpus.txt",
                 "--layers", "1", "--hidden", "16", "--heads", "2", "--kv-heads", "1", "--experts", "4", "--top-k",
                 "2", "--expert-ffn", "16", "--seq-len", "16", "--micro-batch", "2", "--batch", "4", "--timeout",
                 "5000", "--placement-batches", "1"}};
  return fz::fuzz_one(data, size, train_main, "disagmoe-train", rules, dir);
}
