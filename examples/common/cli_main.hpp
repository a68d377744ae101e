// SPDX-License-Identifier: Apache-2.0
// Shared entry point for the command-line programs: CLI11 parsing with --help, and
// the one rule for failure — a single clear line on stderr and a non-zero exit:
// 2 for every input or configuration error, 3 only for a bug in the program.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/limits.hpp>

#include <CLI/CLI.hpp>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <new>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>

namespace disagmoe::cli {

/// How an error names the batch when --global-batch was not given (plan::default_global_batch).
inline constexpr const char* kDefaultGlobalBatch =
    "global batch (default: 4Mi tokens / seq_len; --global-batch)";

/// Exit codes shared by every program.
inline constexpr int kExitOk = 0;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitInternal = 3;

namespace detail {
inline void add_budget(CLI::App& app, const char* name, std::int64_t Limits::*member, double lo, const char* what,
                       const char* type) {
  app.add_option_function<double>(
         name,
         [name, member, lo](double v) {
           expect_finite_in(name, v, lo, 0x1p62);
           limits().*member = static_cast<std::int64_t>(v);
         },
         what)
      ->type_name(type);
}
}  // namespace detail

/// `--max-memory BYTES`: the host-memory budget (limits.hpp) that inputs are costed
/// against before allocating; for programs whose inputs size their data structures.
inline void add_max_memory(CLI::App& app) {
  detail::add_budget(app, "--max-memory", &Limits::max_memory_bytes, double(1 << 20),
                     "host memory budget in bytes for the data structures an input sizes (default 16 GiB)", "BYTES");
}

/// `--optimizer-bytes BYTES`: optimizer state per parameter (plan::MemoryOptions::
/// optimizer_bytes) for the memory model of every schedule, into `bytes`.
inline void add_optimizer_bytes(CLI::App& app, double& bytes) {
  app.add_option("--optimizer-bytes", bytes,
                 "bytes of optimizer state per parameter: 12 = fp32 master weights and fp32 Adam moments "
                 "(ZeRO's K), 8 = fp32 master weights and bf16 moments (DeepSeek-V3's AdamW moments)")
      ->capture_default_str()
      ->type_name("BYTES");
}

/// Validates optimizer bytes per parameter named `field`: 0 (plain SGD keeps none) to 64.
inline void expect_optimizer_bytes(double bytes, std::string_view field = "--optimizer-bytes") {
  expect_finite_in(field, bytes, 0, 64);
}

/// `--max-output BYTES`: the largest file (limits.hpp) a program may be asked to write.
inline void add_max_output(CLI::App& app) {
  detail::add_budget(app, "--max-output", &Limits::max_output_bytes, double(1 << 20),
                     "largest file in bytes the program may write (default 64 GiB)", "BYTES");
}

/// `--max-ops N`: the work budget (limits.hpp), in simulated ops of one timeline.
inline void add_max_ops(CLI::App& app) {
  detail::add_budget(app, "--max-ops", &Limits::max_ops, 1, "work budget: simulated ops per timeline (default 4194304)",
                     "OPS");
}

/// Validator for options that name a file: an empty value is a mistake (an unset shell
/// variable), never "no file".
inline const CLI::Validator kPath(
    [](std::string& v) { return v.empty() ? std::string("expected a path, got \"\"") : std::string(); }, "PATH");

/// A library's name of a field (or phrase) in its errors, and this program's option.
using OptionName = std::pair<std::string_view, std::string_view>;

/// Runs `f`; a ConfigError it throws names the program's options where the library
/// named its own fields: with {"DisaggregatedOptions.pairs", "--pairs"},
/// "DisaggregatedOptions.pairs = 2: ..." (a --pairs derived from the world) reads
/// "--pairs = 2: ...". Whole words outside quoted values only; `names` longest first. The library's checks
/// stay the one source of truth, and a library user still sees its fields.
template <std::size_t N, class F>
decltype(auto) in_option_terms(const OptionName (&names)[N], F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (const ConfigError& e) {
    const auto word = [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
    };
    const std::string_view text = e.what();
    std::string out;
    bool quoted = false;  // inside a "value": the user's text, never renamed
    for (std::size_t i = 0; i < text.size();) {
      const OptionName* hit = nullptr;
      if (text[i] == '"') quoted = !quoted;
      if (!quoted && (i == 0 || !word(text[i - 1])))
        for (const OptionName& n : names)
          if (text.substr(i).starts_with(n.first) &&
              (i + n.first.size() == text.size() || !word(text[i + n.first.size()]))) {
            hit = &n;
            break;
          }
      if (hit == nullptr) {
        out += text[i++];
      } else {
        out += hit->second;
        i += hit->first.size();
      }
    }
    throw ConfigError(out);
  }
}

/// ConfigError naming `option` when it was given though it does not apply to the
/// chosen mode (`applies` false): a silently ignored option hides a typo or a wrong mode.
inline void expect_applies(const CLI::App& app, const char* option, bool applies, const std::string& expected) {
  if (app.count(option) > 0) expect(applies, option, app[option]->as<std::string>(), expected);
}

namespace detail {
// CLI11 converts "nan" and "inf" into doubles, and its range checks let NaN through:
// every floating-point option must be finite, whatever else it checks.
inline void expect_finite_options(const CLI::App& app) {
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->count() == 0 || opt->get_type_name().find("FLOAT") == std::string::npos) continue;
    for (const std::string& s : opt->results()) {
      const double v = std::strtod(s.c_str(), nullptr);
      expect(std::isfinite(v), opt->get_name(), Verbatim{s}, "a finite number");
    }
  }
}

// CLI11 converts an integer beyond 64 bits to the nearest bound (strtoll saturates), so
// a range check afterwards would name 9223372036854775807 rather than what was typed:
// every integer option must fit 64 bits as written. An unsigned one must not be
// negative: strtoull reads "-1" as 2^64 - 1.
inline void expect_representable_integers(const CLI::App& app) {
  for (const CLI::Option* opt : app.get_options()) {
    const std::string type = opt->get_type_name();
    if (opt->count() == 0 || type.find("INT") == std::string::npos) continue;
    const bool is_unsigned = type.find("UINT") != std::string::npos;
    for (const std::string& s : opt->results()) {
      const auto sign = s.find_first_not_of(" \t");
      expect(!is_unsigned || sign == std::string::npos || s[sign] != '-', opt->get_name(), Verbatim{s},
             "a non-negative integer");
      errno = 0;
      if (is_unsigned)
        (void)std::strtoull(s.c_str(), nullptr, 0);
      else
        (void)std::strtoll(s.c_str(), nullptr, 0);
      expect(errno != ERANGE, opt->get_name(), Verbatim{s}, "an integer that fits 64 bits");
    }
  }
}

// A program whose output could not be written (a full disk, a closed pipe) must not
// report success: flushes stdout and names the failure. `cout_was_good`: std::cout's
// state before the program ran (a caller that silenced it on purpose is not a failure).
inline void expect_output_written(bool cout_was_good) {
  std::cout.flush();
  const bool ok =
      (!cout_was_good || std::cout.good()) && std::fflush(stdout) == 0 && std::ferror(stdout) == 0;
  expect<IoError>(ok, "stdout", "write failed", "a writable standard output (a full disk or a closed pipe?)");
}

// Writes `line` (ending in a newline) to stderr in one write: the ranks of an MPI job
// share stderr, and std::cerr (unbuffered) writes each << apart, so piecewise lines
// interleaved mid-way. Control bytes (a path or a model name with a newline or an escape
// sequence in it) are written as \xNN: one line, and nothing for the terminal to run.
inline void write_error_line(const std::string& line) {
  std::ostringstream os;
  disagmoe::detail::write_text(os, std::string_view(line).substr(0, line.size() - 1));
  std::cerr << os.str() + "\n" << std::flush;
}

// CLI11's "Could not convert: --seq-len = 1e30" names no type: the house form instead,
// with what the option's type takes. Other messages pass through unchanged.
inline std::string parse_error_text(const CLI::App& app, const CLI::ParseError& e) {
  const std::string m = e.what(), prefix = "Could not convert: ";
  const auto eq = m.find(" = ");
  if (dynamic_cast<const CLI::ConversionError*>(&e) == nullptr || m.rfind(prefix, 0) != 0 ||
      eq == std::string::npos)
    return m;
  const std::string name = m.substr(prefix.size(), eq - prefix.size()), value = m.substr(eq + 3);
  const CLI::Option* opt = app.get_option_no_throw(name);
  const std::string type = opt != nullptr ? opt->get_type_name() : "";
  const std::string expected = type == "INT"     ? "an integer in the option's range"
                               : type == "UINT"  ? "a non-negative integer in the option's range"
                               : type == "FLOAT" ? "a number"
                               : type.empty()    ? "a value the option can take"
                                                 : "a value of type " + type;
  return describe(name, value, expected);
}
}  // namespace detail

/// Call inside a catch block: prints the exception being handled as one line on
/// stderr, prefixed by the program's `name`, and returns the exit code (2 for bad
/// input, 3 for a bug). Shared by run_main and by programs that must act on an
/// error before returning (disagmoe-train under MPI ends the job).
inline int report_exception(const std::string& name) {
  const auto& say = detail::write_error_line;
  const std::string bug = " (a bug: please report it with the command line)\n";
  try {
    throw;
  } catch (const SolverError& e) {  // the solver broke its own contract (a debug solution cut off): a bug
    say(name + ": internal error: " + e.what() + bug);
    return kExitInternal;
  } catch (const Error& e) {
    // Every other library error names a bad input or configuration, or an environment
    // that failed the run (a peer stopped or died: TimeoutError, MpiError; a device or
    // driver that refused: CudaError, NcclError), never a bug.
    say(name + ": error: " + e.what() + "\n");
    return kExitBadInput;
  } catch (const std::bad_alloc&) {
    // Inputs are costed before allocation (limits.hpp); this is the machine having
    // less memory than the budget assumes.
    say(name +
        ": error: memory = exhausted: expected an input that fits this machine's memory "
        "(lower the sizes, or --max-memory where the program has it)\n");
    return kExitBadInput;
  } catch (const std::exception& e) {
    say(name + ": internal error: " + e.what() + bug);
    return kExitInternal;
  } catch (...) {
    say(name + ": internal error: unknown exception" + bug);
    return kExitInternal;
  }
}

/// Parses `argv` into `app`, then runs `body()`; maps exceptions to one stderr line.
/// `body` returns the exit code.
template <class Body>
int run_main(CLI::App& app, int argc, char** argv, Body&& body) {
  try {
    // An empty argument (an unset shell variable) sent CLI11 2.1 into an endless loop in
    // disagmoe-train (found by fuzz_cli_train): refuse it before parsing.
    for (int i = 1; i < argc; ++i)
      if (argv[i] == nullptr || argv[i][0] == '\0') {
        std::cerr << app.get_name() << ": error: argument " << i << " = \"\": expected a non-empty argument (see --help)\n";
        return kExitBadInput;
      }
    const bool cout_was_good = std::cout.good();
    // --help and --version print on stdout: a failed write is an error there too.
    const auto printed = [&](const CLI::Error& e) {
      const int rc = app.exit(e);
      detail::expect_output_written(cout_was_good);
      return rc;
    };
    try {
      app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
      return printed(e);
    } catch (const CLI::CallForAllHelp& e) {
      return printed(e);
    } catch (const CLI::CallForVersion& e) {
      return printed(e);
    } catch (const CLI::ParseError& e) {  // one line, as for every other bad input
      detail::write_error_line(app.get_name() + ": error: " + detail::parse_error_text(app, e) + " (see --help)\n");
      return kExitBadInput;
    }
    detail::expect_finite_options(app);
    detail::expect_representable_integers(app);
    const int rc = body();
    detail::expect_output_written(cout_was_good);
    return rc;
  } catch (...) {
    return report_exception(app.get_name());
  }
}

}  // namespace disagmoe::cli
