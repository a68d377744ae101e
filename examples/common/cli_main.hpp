// SPDX-License-Identifier: Apache-2.0
// Shared entry point for the command-line programs: CLI11 parsing with --help, and
// the one rule for failure — a single clear line on stderr and a non-zero exit.
#pragma once

#include <disagmoe/error.hpp>

#include <CLI/CLI.hpp>

#include <exception>
#include <iostream>

namespace disagmoe::cli {

/// Exit codes shared by every program.
inline constexpr int kExitOk = 0;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitInternal = 3;

/// Parses `argv` into `app`, then runs `body()`; maps exceptions to one stderr line.
/// `body` returns the exit code.
template <class Body>
int run_main(CLI::App& app, int argc, char** argv, Body&& body) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {  // one line, as for every other bad input
    std::cerr << app.get_name() << ": error: " << e.what() << " (see --help)\n";
    return kExitBadInput;
  }
  try {
    return body();
  } catch (const ConfigError& e) {
    std::cerr << app.get_name() << ": error: " << e.what() << '\n';
    return kExitBadInput;
  } catch (const IoError& e) {
    std::cerr << app.get_name() << ": error: " << e.what() << '\n';
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::cerr << app.get_name() << ": internal error: " << e.what() << '\n';
    return kExitInternal;
  }
}

}  // namespace disagmoe::cli
