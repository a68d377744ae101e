// SPDX-License-Identifier: Apache-2.0
// The benchmarks' command lines: `--help` prints the usage and exits 0; a value that is
// not what an option expects, or an argument a benchmark does not take, is one line on
// stderr naming it and exit status 2, as for the programs (examples/common/cli_main.hpp).
#pragma once

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

namespace bench {

/// The program's name for its messages: argv[0] without its directories.
inline const char* program_name(const char* argv0) {
  const char* slash = std::strrchr(argv0, '/');
  return slash ? slash + 1 : argv0;
}

/// Handles `--help`/`-h` as the first argument (usage on stdout, exit 0) and more than
/// `max_positional` arguments (one line naming the first extra one, exit 2). Returns
/// only when the command line may go on.
inline void expect_usage(int argc, char** argv, int max_positional, const char* usage) {
  if (argc > 1 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::fputs(usage, stdout);
    std::exit(0);
  }
  if (argc - 1 <= max_positional) return;
  std::fprintf(stderr, "%s: error: argument %d = \"%s\": expected at most %d argument%s (see --help)\n",
               program_name(argv[0]), max_positional + 1, argv[max_positional + 1], max_positional,
               max_positional == 1 ? "" : "s");
  std::exit(2);
}

/// Ends the program after one line on stderr: `name = "text": expected ...`, exit 2.
[[noreturn]] inline void bad_argument(const char* program, std::string_view name, std::string_view text,
                                      const std::string& expected) {
  std::fprintf(stderr, "%s: error: %.*s = \"%.*s\": expected %s (see --help)\n", program_name(program),
               int(name.size()), name.data(), int(text.size()), text.data(), expected.c_str());
  std::exit(2);
}

/// `text`, the value of `name`, as an integer in [lo, hi]; anything else ends the
/// program (bad_argument).
inline long integer_value(const char* program, std::string_view name, std::string_view text, long lo,
                          long hi) {
  long v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc{} || end != text.data() + text.size() || v < lo || v > hi)
    bad_argument(program, name, text,
                 "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v;
}

/// `text`, the value of `name`, as a finite number in [lo, hi]; anything else ends the
/// program (bad_argument).
inline double real_value(const char* program, std::string_view name, std::string_view text, double lo,
                         double hi) {
  const std::string s(text);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  const bool plain = !s.empty() && s.find_first_of(" \t\n") == std::string::npos &&
                     s.find_first_of("xX") == std::string::npos;
  if (!plain || end != s.c_str() + s.size() || !std::isfinite(v) || v < lo || v > hi) {
    char range[96];
    std::snprintf(range, sizeof range, "a number in [%g, %g]", lo, hi);
    bad_argument(program, name, text, range);
  }
  return v;
}

/// The argument after option argv[i] (i moves to it); ends the program naming the
/// option when there is none.
inline const char* option_value(int argc, char** argv, int& i) {
  if (i + 1 >= argc) {
    std::fprintf(stderr, "%s: error: %s: expected a value after it (see --help)\n", program_name(argv[0]),
                 argv[i]);
    std::exit(2);
  }
  return argv[++i];
}

/// Positional argument `index` (1-based) as an integer in [lo, hi], or `fallback` when
/// absent.
inline long positional(int argc, char** argv, int index, const char* name, long lo, long hi, long fallback) {
  return index < argc ? integer_value(argv[0], name, argv[index], lo, hi) : fallback;
}

}  // namespace bench
