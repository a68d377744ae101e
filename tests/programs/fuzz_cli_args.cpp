// SPDX-License-Identifier: Apache-2.0
// Fuzz target for the programs' argument parsing (CLI11 + cli_main.hpp + the spec
// readers): the input's first byte picks disagmoe-presets or disagmoe-plan, the rest
// is split at newlines into arguments. Whatever they are, the program must return 0
// or 2 (never 3, an internal error) and must not crash, hang or trip a sanitizer.
// The programs' own main() is compiled in, renamed.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#define main presets_main
#include "../../examples/presets/main.cpp"
#undef main
#define main plan_main
#include "../../examples/plan/main.cpp"
#undef main

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool quiet = [] {  // the programs print tables: keep the fuzzer's output readable
    std::cout.setstate(std::ios::badbit);
    std::cerr.setstate(std::ios::badbit);
    return std::freopen("/dev/null", "w", stdout) != nullptr;
  }();
  (void)quiet;
  if (size == 0) return 0;
  const bool plan = data[0] % 2 == 1;
  std::vector<std::string> args{plan ? "disagmoe-plan" : "disagmoe-presets"};
  std::string cur;
  for (std::size_t i = 1; i < size && args.size() < 16; ++i) {
    const char c = static_cast<char>(data[i]);
    if (c == '\n') {
      args.push_back(cur);
      cur.clear();
    } else if (c != '\0') {
      cur += c;
    }
  }
  if (!cur.empty() && args.size() < 16) args.push_back(cur);
  for (const auto& a : args)  // --svg writes a file: only into /dev/null
    if (a.starts_with("--svg")) return 0;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int rc = plan ? plan_main(static_cast<int>(args.size()), argv.data())
                      : presets_main(static_cast<int>(args.size()), argv.data());
  if (rc != 0 && rc != 2) std::abort();
  return 0;
}
