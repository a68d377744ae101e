// SPDX-License-Identifier: Apache-2.0
// The harness of the fuzz targets for the programs' argument parsing (fuzz_cli_*.cpp,
// each with one or two programs' main() compiled in, renamed). A fuzz input is split at
// newlines into arguments; "@D@" in them names a scratch directory of small fixtures.
// Options that write files get /dev/null instead (nothing is written); options that set
// work or size are skipped above a cap (the process-wide budgets of limits.hpp are
// capped the same way and reset before every run), so every run is short. Whatever the
// arguments, the program must return one of the allowed exit codes (0 or 2: never 3, an
// internal error) and must not crash, hang or trip a sanitizer.
#pragma once

#include <disagmoe/limits.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace disagmoe::fuzz_cli {

/// An option whose numeric value must lie in [lo, hi] for the input to be run (NaN and
/// text are run: the program must reject them).
struct Cap {
  std::string_view option;
  double lo, hi;
};

/// What a program's fuzz target may run.
struct Rules {
  std::vector<std::string_view> writes;  ///< options naming a file or directory to write
  std::vector<Cap> caps;
  std::vector<std::string> prefix;       ///< arguments before the fuzzed ones (defaults they may override)
  Limits limits = small_limits();

  static Limits small_limits() {
    Limits l;
    l.max_memory_bytes = std::int64_t{64} << 20;
    l.max_output_bytes = std::int64_t{1} << 20;
    l.max_ops = 4096;
    return l;
  }
};

/// The scratch directory of fixtures, made once per process; `make` writes them into it.
template <class Make>
const std::string& fixture_dir(Make&& make) {
  static const std::string dir = [&] {
    std::string d = (std::filesystem::temp_directory_path() / "disagmoe_fuzz_cli_XXXXXX").string();
    if (mkdtemp(d.data()) == nullptr) std::abort();
    make(std::filesystem::path(d));
    return d;
  }();
  return dir;
}

inline void write_file(const std::filesystem::path& p, std::string_view text) {
  std::ofstream(p, std::ios::binary) << text;
}

/// Splits `data` at newlines into at most `max_args` arguments (NUL bytes dropped: argv
/// cannot hold them).
inline std::vector<std::string> split_args(const std::uint8_t* data, std::size_t size, std::size_t max_args = 32) {
  std::vector<std::string> args;
  std::string cur;
  for (std::size_t i = 0; i < size && args.size() < max_args; ++i) {
    const char c = static_cast<char>(data[i]);
    if (c == '\n') {
      args.push_back(cur);
      cur.clear();
    } else if (c != '\0') {
      cur += c;
    }
  }
  if (!cur.empty() && args.size() < max_args) args.push_back(cur);
  return args;
}

/// Applies `rules` to the fuzzed `args`: "@D@" becomes `dir`, a written file's value
/// /dev/null; std::nullopt when a capped option is out of its range (input skipped).
inline std::optional<std::vector<std::string>> apply(const Rules& rules, std::vector<std::string> args,
                                                     const std::string& dir) {
  for (auto& a : args)
    for (std::size_t p; (p = a.find("@D@")) != std::string::npos;) a.replace(p, 3, dir);
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const std::size_t eq = a.find('=');
    const std::string_view name = std::string_view(a).substr(0, eq);
    const bool inline_value = eq != std::string::npos;
    std::string* value = inline_value ? nullptr : (i + 1 < args.size() ? &args[i + 1] : nullptr);
    for (std::string_view w : rules.writes) {
      if (name != w) continue;
      if (inline_value) args[i] = std::string(name) + "=/dev/null";
      else if (value) *value = "/dev/null";
    }
    for (const Cap& c : rules.caps) {
      if (name != c.option) continue;
      const std::string v = inline_value ? a.substr(eq + 1) : value ? *value : std::string();
      const double x = std::strtod(v.c_str(), nullptr);
      if (x < c.lo || x > c.hi) return std::nullopt;
    }
  }
  return args;
}

/// Runs `main_fn` (a program's main) on `program` + rules.prefix + `args` under
/// rules.limits; returns its exit code. Standard output and std::cerr are silenced once
/// (C stderr stays: libFuzzer and the sanitizers report there).
template <class Main>
int run(Main&& main_fn, std::string_view program, const Rules& rules, const std::vector<std::string>& args) {
  static const bool quiet = [] {  // the programs print tables: keep the fuzzer's output readable
    std::cout.setstate(std::ios::badbit);
    std::cerr.setstate(std::ios::badbit);
    return std::freopen("/dev/null", "w", stdout) != nullptr;
  }();
  (void)quiet;
  std::vector<std::string> all{std::string(program)};
  all.insert(all.end(), rules.prefix.begin(), rules.prefix.end());
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  limits() = rules.limits;  // a --max-* option of the previous run must not carry over
  return main_fn(static_cast<int>(all.size()), argv.data());
}

/// True for the exit codes every program may return on any arguments: 0 and 2.
inline bool ok_or_bad_input(int rc, const std::vector<std::string>&) { return rc == 0 || rc == 2; }

/// The whole target: split, apply, run; aborts (the fuzzer's crash) unless
/// `allowed(rc, args)`, after naming the exit code and the arguments.
template <class Main, class Allowed = decltype(&ok_or_bad_input)>
int fuzz_one(const std::uint8_t* data, std::size_t size, Main&& main_fn, std::string_view program, const Rules& rules,
             const std::string& dir, Allowed&& allowed = &ok_or_bad_input) {
  const auto args = apply(rules, split_args(data, size), dir);
  if (!args) return 0;
  const int rc = run(main_fn, program, rules, *args);
  if (allowed(rc, *args)) return 0;
  std::string shown;
  for (const auto& a : *args) shown += " '" + a + "'";
  std::fprintf(stderr, "%.*s%s returned %d\n", static_cast<int>(program.size()), program.data(), shown.c_str(), rc);
  std::abort();
}

}  // namespace disagmoe::fuzz_cli
