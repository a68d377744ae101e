// SPDX-License-Identifier: Apache-2.0
// Fuzz target for disagmoe-milp's argument parsing (its main() compiled in, renamed;
// harness in fuzz_cli.hpp). --write-solution writes to /dev/null; @D@/p.mps is Chvatal's
// small maximisation (optimum 13), @D@/opt.sol its optimum and @D@/bad.sol an
// infeasible point. Exit 1 is allowed with --check-solution (the point is infeasible)
// and exit 3 with --debug-solution (the solver cut the given point off: reported as
// an internal error by design).
#include "fuzz_cli.hpp"

// Library headers first: "main" is renamed only in the program's own file.
#include <CLI/CLI.hpp>

#define main milp_main
#include "../../examples/milp/main.cpp"
#undef main

#include <algorithm>

namespace {
bool allowed(int rc, const std::vector<std::string>& args) {
  auto given = [&](std::string_view o) {
    return std::any_of(args.begin(), args.end(), [&](const std::string& a) { return a.starts_with(o); });
  };
  return rc == 0 || rc == 2 || (rc == 1 && given("--check-solution")) || (rc == 3 && given("--debug-solution"));
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace fz = disagmoe::fuzz_cli;
  static const fz::Rules rules{.writes = {"--write-solution"}, .caps = {{"--time-limit", -1e300, 1}}, .prefix = {}};
  static const std::string& dir = fz::fixture_dir([](const std::filesystem::path& d) {
    fz::write_file(d / "p.mps",
                   "NAME CHVATAL\nOBJSENSE\n    MAX\nROWS\n N PROFIT\n L C1\n L C2\n L C3\nCOLUMNS\n"
                   " MARKER 'MARKER' 'INTORG'\n A PROFIT 5 C1 2\n A C2 4 C3 3\n B PROFIT 4 C1 3\n B C2 1 C3 4\n"
                   " C PROFIT 3 C1 1\n C C2 2 C3 2\n MARKER 'MARKER' 'INTEND'\nRHS\n RHS C1 5 C2 11\n RHS C3 8\n"
                   "BOUNDS\n UP BND A 5\n UP BND B 5\n UP BND C 5\nENDATA\n");
    fz::write_file(d / "opt.sol", "A 2\nB 0\nC 1\n");
    fz::write_file(d / "bad.sol", "A 3\nB 1\nC 0\n");
  });
  return fz::fuzz_one(data, size, milp_main, "disagmoe-milp", rules, dir, allowed);
}
