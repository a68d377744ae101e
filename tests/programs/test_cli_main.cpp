// SPDX-License-Identifier: Apache-2.0
// The programs' one failure rule (examples/common/cli_main.hpp): every library error
// that names a bad input or a failing environment exits 2, a solver that broke its own
// contract or any other exception is a bug and exits 3; each prints one line.
#include "common/cli_main.hpp"

#include <doctest/doctest.h>

#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// Exit code and stderr of report_exception() for `ex` thrown.
template <class E>
std::pair<int, std::string> report(const E& ex) {
  std::ostringstream err;
  auto* old = std::cerr.rdbuf(err.rdbuf());
  int code = -1;
  try {
    throw ex;
  } catch (...) {
    code = disagmoe::cli::report_exception("prog");
  }
  std::cerr.rdbuf(old);
  return {code, err.str()};
}

}  // namespace

TEST_CASE("report_exception: input and environment errors exit 2, bugs exit 3, one line each") {
  using namespace disagmoe;
  const std::pair<int, std::string> cases[] = {
      report(ConfigError("--x = 1: expected 2")), report(IoError("file: unreadable")),
      report(TimeoutError("peer 3 silent")),     report(MpiError("MPI_Recv = truncated")),
      report(CudaError("cudaMalloc = out of memory")), report(NcclError("ncclSend = remote error")),
      report(std::bad_alloc())};
  for (const auto& [code, text] : cases) {
    CAPTURE(text);
    CHECK(code == 2);
    CHECK(text.rfind("prog: error: ", 0) == 0);
    CHECK(text.find('\n') == text.size() - 1);
  }
  for (const auto& [code, text] : {report(SolverError("milp debug solution: cut off")), report(std::logic_error("x"))}) {
    CAPTURE(text);
    CHECK(code == 3);
    CHECK(text.rfind("prog: internal error: ", 0) == 0);
    CHECK(text.find("a bug: please report it") != std::string::npos);
  }
}

namespace {

// What run_main did with `args` (after the program name): its exit code, its stderr and
// whether it ran the body.
struct Outcome {
  int code = -1;
  std::string err;
  bool ran = false;
};
Outcome run(CLI::App& app, std::vector<std::string> args) {
  args.insert(args.begin(), "prog");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::ostringstream err;
  auto* old = std::cerr.rdbuf(err.rdbuf());
  Outcome o;
  o.code = disagmoe::cli::run_main(app, static_cast<int>(args.size()), argv.data(), [&] {
    o.ran = true;
    return 0;
  });
  std::cerr.rdbuf(old);
  o.err = err.str();
  return o;
}

}  // namespace

TEST_CASE("run_main: an empty argument is one error line and exit 2, before parsing") {
  CLI::App app{"test", "prog"};
  std::string path;
  app.add_option("--path", path);
  const Outcome o = run(app, {"--path", "x", ""});
  CHECK(o.code == 2);
  CHECK_FALSE(o.ran);
  CHECK(o.err == "prog: error: argument 3 = \"\": expected a non-empty argument (see --help)\n");
}

TEST_CASE("run_main: an integer beyond 64 bits is named as typed, not as CLI11's saturated value") {
  for (const std::string value : {"99999999999999999999", "-99999999999999999999", "0x1ffffffffffffffff"}) {
    CLI::App app{"test", "prog"};
    long n = 0;
    app.add_option("--n", n);
    const Outcome o = run(app, {"--n", value});
    CAPTURE(value);
    CHECK(o.code == 2);
    CHECK_FALSE(o.ran);
    CHECK(o.err == "prog: error: --n = " + value + ": expected an integer that fits 64 bits\n");
  }
  // The largest 64-bit value is accepted as it is.
  CLI::App app{"test", "prog"};
  long n = 0;
  app.add_option("--n", n);
  const Outcome o = run(app, {"--n", "9223372036854775807"});
  CHECK(o.code == 0);
  CHECK(o.ran);
  CHECK(n == 9223372036854775807L);
}
