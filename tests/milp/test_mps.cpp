// SPDX-License-Identifier: Apache-2.0
// MPS reader/writer: every section and bound type, fixed and free form, malformed input
// (one IoError naming the line), and writer -> reader round trips of random problems.
#include "random_problem.hpp"

#include <disagmoe/milp/branch_and_bound.hpp>
#include <disagmoe/milp/mps.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

using namespace disagmoe::milp;
using disagmoe::IoError;

namespace {

// Every section: OBJSENSE section form, RANGES on E/L/G rows (both signs), RHS on the
// objective, a second N row, MARKER blocks, all nine bound types.
constexpr const char* kAll = R"(* comment line
NAME          ALLTYPES
OBJSENSE
    MAX
ROWS
 N  COST
 L  LIM1
 G  LIM2
 E  MYEQN
 E  EQN2
 N  FREEROW
 G  RNGG
COLUMNS
    X1        COST         1.0   LIM1         1.0
    X1        LIM2         1.0
    MARKER    'MARKER'     'INTORG'
    X2        COST         2.0   LIM1         1.0
    X2        MYEQN       -1.0   FREEROW      7.0
    MARKER    'MARKER'     'INTEND'
    X3        COST        -1.0   MYEQN        1.0
    X3        EQN2         1.0   RNGG         1.0
    X4        COST         1.0   LIM1         1.0
    X5        LIM2         1.0
    X6        COST         1.0
    X7        COST         1.0
    X8        COST         1.0
    X9        COST         1.0
    X10       COST         1.0
RHS
    RHS       COST        -2.5
    RHS       LIM1         4.0   LIM2         1.0
    RHS       MYEQN        7.0   EQN2         3.0
    RHS       RNGG         1.0
RANGES
    RNG       LIM1         2.5   LIM2         3.0
    RNG       MYEQN        2.0   EQN2        -1.5
    RNG       RNGG        -4.0
BOUNDS
 UP BND       X1           4.0
 LO BND       X2          -1.0
 UP BND       X2           1.0
 FX BND       X3           2.5
 FR BND       X4
 MI BND       X5
 PL BND       X6
 BV BND       X7
 LI BND       X8           2
 UI BND       X9           5
 UP BND       X10         -3.0
ENDATA
IMPORTANCES after ENDATA are ignored
)";

}  // namespace

TEST_CASE("milp mps: every section and bound type") {
  const Problem p = read_mps_string(kAll);
  CHECK(p.name() == "ALLTYPES");
  CHECK(p.sense() == Sense::kMaximize);
  CHECK(p.objective_offset() == 2.5);
  REQUIRE(p.num_vars() == 10);
  REQUIRE(p.num_rows() == 5);  // FREEROW dropped
  CHECK(p.row_name(0) == "LIM1");
  // L with range: [rhs - |R|, rhs]; G: [rhs, rhs + |R|]; E with R>0: [rhs, rhs+R];
  // E with R<0: [rhs+R, rhs]; G with negative R: [rhs, rhs + |R|].
  CHECK(p.row_lo(0) == 1.5);
  CHECK(p.row_hi(0) == 4.0);
  CHECK(p.row_lo(1) == 1.0);
  CHECK(p.row_hi(1) == 4.0);
  CHECK(p.row_lo(2) == 7.0);
  CHECK(p.row_hi(2) == 9.0);
  CHECK(p.row_lo(3) == 1.5);
  CHECK(p.row_hi(3) == 3.0);
  CHECK(p.row_lo(4) == 1.0);
  CHECK(p.row_hi(4) == 5.0);
  CHECK(p.obj(0) == 1.0);
  CHECK(p.obj(1) == 2.0);
  CHECK(!p.is_integer(0));
  CHECK(p.is_integer(1));
  CHECK(!p.is_integer(2));
  CHECK(p.ub(0) == 4.0);
  CHECK(p.lb(0) == 0.0);
  CHECK(p.lb(1) == -1.0);
  CHECK(p.ub(1) == 1.0);
  CHECK(p.lb(2) == 2.5);
  CHECK(p.ub(2) == 2.5);
  CHECK(p.lb(3) == -kInf);
  CHECK(p.ub(3) == kInf);
  CHECK(p.lb(4) == -kInf);
  CHECK(p.ub(4) == kInf);
  CHECK(p.lb(5) == 0.0);
  CHECK(p.ub(5) == kInf);
  CHECK((p.lb(6) == 0.0 && p.ub(6) == 1.0 && p.is_integer(6)));
  CHECK((p.lb(7) == 2.0 && p.ub(7) == kInf && p.is_integer(7)));
  CHECK((p.lb(8) == 0.0 && p.ub(8) == 5.0 && p.is_integer(8)));
  CHECK((p.lb(9) == -kInf && p.ub(9) == -3.0));  // negative UP on a default lower bound
  // Row MYEQN: X2 -1, X3 +1.
  const RowView r = p.row(2);
  REQUIRE(r.index.size() == 2);
  CHECK(r.index[0] == 1);
  CHECK(r.value[0] == -1.0);
}

TEST_CASE("milp mps: inf and infinity are free bounds and ranges, in any case and sign") {
  const Problem p = read_mps_string(
      "ROWS\n N obj\n L c\nCOLUMNS\n x obj 1 c 1\n y obj 1\n nan obj 1\nRHS\n RHS c 4\nRANGES\n RNG c "
      "Infinity\n"
      "BOUNDS\n UP BND x inf\n LO BND x -INF\n MI BND y\n UP BND y +infinity\n BV BND nan\nENDATA\n");
  CHECK(p.lb(0) == -kInf);
  CHECK(p.ub(0) == kInf);
  CHECK(p.ub(1) == kInf);
  CHECK(p.row_lo(0) == -kInf);                 // an L row's range of infinity reaches down without end
  CHECK((p.is_integer(2) && p.ub(2) == 1.0));  // "BV BND nan": a column named nan, no value
}

TEST_CASE("milp mps: every decimal form reads as strtod reads it") {
  const char* forms[] = {"1.", ".5", "-1E+02", "+3e-1", "007", "-0.0", "2.5e0", "1e29"};
  std::string text = "ROWS\n N obj\nCOLUMNS\n";
  for (std::size_t i = 0; i < std::size(forms); ++i)
    text += " x" + std::to_string(i) + " obj " + forms[i] + "\n";
  const Problem p = read_mps_string(text + "ENDATA\n");
  for (std::size_t i = 0; i < std::size(forms); ++i)
    CHECK(p.obj(static_cast<int>(i)) == std::strtod(forms[i], nullptr));
}

TEST_CASE("milp mps: free form without set names, OBJSENSE MAX on one line, OBJNAME") {
  const Problem p = read_mps_string(
      "NAME\nOBJSENSE MAX\nOBJNAME\n  obj2\nROWS\n N obj\n N obj2\n L c1\nCOLUMNS\n x obj 5 obj2 1\n x c1 2\n"
      " y obj2 3 c1 1\nRHS\n c1 10\nRANGES\n c1 4\nBOUNDS\n UP x 3\n BV y\n UP BND x 2\nENDATA\n");
  CHECK(p.sense() == Sense::kMaximize);
  CHECK(p.obj(0) == 1.0);  // objective is obj2
  CHECK(p.obj(1) == 3.0);
  CHECK(p.ub(0) == 2.0);   // a later bound overrides
  CHECK(p.row_lo(0) == 6.0);
  CHECK(p.is_integer(1));
}

TEST_CASE("milp mps: fixed form with blanks inside names") {
  // Fields at columns 2-3, 5-12, 15-22, 25-36, 40-47, 50-61.
  auto line = [](const char* f1, const char* f2, const char* f3, const char* f4, const char* f5 = "",
                 const char* f6 = "") {
    std::string l(61, ' ');
    const char* f[] = {f1, f2, f3, f4, f5, f6};
    const int at[] = {1, 4, 14, 24, 39, 49};
    for (int k = 0; k < 6; ++k) l.replace(at[k], std::string(f[k]).size(), f[k]);
    return l + "\n";
  };
  const std::string text = "NAME          FIXED\nROWS\n N  OBJ ROW\n L  MY ROW\nCOLUMNS\n" +
                           line("", "COL A", "OBJ ROW", "1.5", "MY ROW", "2.0") + "RHS\n" +
                           line("", "RHS", "MY ROW", "8.0") + "BOUNDS\n" +
                           line("UP", "BND", "COL A", "3.0") + "ENDATA\n";
  const Problem p = read_mps_string(text, MpsFormat::kFixed);
  REQUIRE(p.num_vars() == 1);
  CHECK(p.var_name(0) == "COL A");
  CHECK(p.row_name(0) == "MY ROW");
  CHECK(p.obj(0) == 1.5);
  CHECK(p.row_hi(0) == 8.0);
  CHECK(p.ub(0) == 3.0);
  CHECK_THROWS_AS(read_mps_string(text, MpsFormat::kFree), IoError);  // 'COL A' splits
}

TEST_CASE("milp mps: malformed input names the line and what was expected") {
  struct Case {
    const char* text;
    const char* needle;
  };
  const Case cases[] = {
      {"ROWS\n N obj\n Q r\nENDATA\n", "MPS line 3: row type = \"Q\": expected one of N L G E"},
      {"ROWS\n N obj\nCOLUMNS\n x nosuch 1\nENDATA\n", "MPS line 4: row name = \"nosuch\""},
      {"ROWS\n N obj\nCOLUMNS\n x obj abc\nENDATA\n",
       "MPS line 4: coefficient of x = \"abc\": expected a number"},
      {"ROWS\n N obj\nCOLUMNS\n x obj 1\nBOUNDS\n XX BND x 1\nENDATA\n", "MPS line 6: bound type = \"XX\""},
      {"ROWS\n N obj\nCOLUMNS\n x obj 1\nBOUNDS\n UP BND y 1\nENDATA\n", "MPS line 6: bound column = \"y\""},
      {"ROWS\n N obj\nCOLUMNS\n x obj 1\n", "end of file"},
      {"ROWS\n N obj\nCOLUMNS\n x obj 1\nFOO\nENDATA\n", "MPS line 5: section = \"FOO\""},
      {"COLUMNS\n x obj 1\nENDATA\n", "MPS line 1: section = \"COLUMNS\": expected ROWS before it"},
      {" x obj 1\nENDATA\n", "MPS line 1: data line"},
      {"ROWS\n N obj\nCOLUMNS\n x obj 1\n MARKER 'MARKER' 'FOO'\nENDATA\n", "MPS line 5: MARKER"},
      {"ROWS\n N obj\n L c\nCOLUMNS\n x c 1\nRANGES\n R obj 2\nENDATA\n", "RANGES row = \"obj\""},
      {"ROWS\n N obj\nCOLUMNS\n x obj nan\nENDATA\n", "expected a number"},
      {"ROWS\n N obj\nCOLUMNS\n x obj 1e400\nENDATA\n", "expected a finite number"},
      // Finite, but at or beyond MPS's infinity: the message states the cap.
      {"ROWS\n N obj\n L c\nCOLUMNS\n x c 1\nRHS\n RHS c 1e308\nENDATA\n",
       "RHS of c = \"1e308\": expected a finite number of magnitude below 1e30"},
      {"ROWS\n N obj\nCOLUMNS\n x obj -1e300\nENDATA\n", "expected a finite number of magnitude below 1e30"},
      // strtod's other readings (hexadecimal, inf, nan) are no MPS numbers.
      {"ROWS\n N obj\nCOLUMNS\n x obj 0x10\nENDATA\n", "coefficient of x = \"0x10\": expected a number"},
      {"ROWS\n N obj\n L c\nCOLUMNS\n x c 1\nRHS\n RHS c infinity\nENDATA\n",
       "RHS of c = \"infinity\": expected a number"},
      {"ROWS\n N obj\nCOLUMNS\n x obj 1.e\nENDATA\n", "expected a number"},
      {"ROWS\n N obj\nCOLUMNS\n x obj .\nENDATA\n", "expected a number"},
      // Integer markers pair up, and a value is given once per row.
      {"ROWS\n N obj\nCOLUMNS\n M 'MARKER' 'INTORG'\n x obj 1\nRHS\nENDATA\n",
       "MARKER = \"'INTORG'\": expected an 'INTEND' marker before RHS"},
      {"ROWS\n N obj\nCOLUMNS\n M 'MARKER' 'INTORG'\n x obj 1\nENDATA\n", "an 'INTEND' marker before ENDATA"},
      {"ROWS\n N obj\nCOLUMNS\n M 'MARKER' 'INTORG'\n M 'MARKER' 'INTORG'\nENDATA\n", "markers do not nest"},
      {"ROWS\n N obj\nCOLUMNS\n M 'MARKER' 'INTEND'\nENDATA\n",
       "MARKER = \"'INTEND'\": expected 'INTORG' before it"},
      {"ROWS\n N obj\n L c\nCOLUMNS\n x c 1\nRHS\n RHS c 1 c 2\nENDATA\n",
       "RHS row = \"c\": expected one right-hand side per row"},
      {"ROWS\n N obj\n L c\nCOLUMNS\n x c 1\nRHS\n RHS obj 1\n RHS obj 2\nENDATA\n",
       "RHS row = \"obj\": expected one"},
      {"ROWS\n N obj\n L c\nCOLUMNS\n x c 1\nRANGES\n R c 1\n R c 2\nENDATA\n",
       "RANGES row = \"c\": expected one range per row"},
      {"ROWS\n N obj\n L c\n L d\nCOLUMNS\n x c 1\nRHS\n RHS1 c 5\n RHS2 d 7\nENDATA\n",
       "RHS set = \"RHS2\": expected the file's one RHS set (\"RHS1\" came first"},
      {"ROWS\n N obj\n L c\nCOLUMNS\n x c 1\nBOUNDS\n UP BND x nan\nENDATA\n",
       "UP bound of x = \"nan\": expected a number"},
      {"OBJSENSE\n  UP\nROWS\nENDATA\n", "MPS line 2: OBJSENSE = \"UP\""},
      {"ROWS\n N obj\n L obj\nENDATA\n", "MPS line 3: row name = \"obj\": expected a name not used before"},
      {"ROWS\n N obj\nCOLUMNS\n x obj 1\nBOUNDS\n BV BND x 3\nENDATA\n", "MPS line 6: BV bound of x"},
      {"ROWS\n N obj\nCOLUMNS\n x obj 1\nBOUNDS\n LO BND x 5\n UP BND x 1\nENDATA\n", "lower <= upper"},
      {"", "end of file"},
  };
  for (const Case& c : cases) {
    INFO(c.text);
    try {
      (void)read_mps_string(c.text);
      FAIL("no error");
    } catch (const IoError& e) {
      CHECK(std::string(e.what()).find(c.needle) != std::string::npos);
      INFO(e.what());
    }
  }
}

TEST_CASE("milp mps: writer -> reader round trip of random problems") {
  for (std::uint64_t seed = 1; seed <= 200; ++seed) {
    test::RandomSpec spec;
    spec.max_vars = 8, spec.max_rows = 6, spec.max_ints = 4;
    Problem p = test::random_problem(seed, spec);
    if (seed % 3 == 0) p.set_bounds(0, -kInf, kInf);
    if (seed % 5 == 0) p.set_bounds(0, -kInf, 2.0);
    if (seed % 7 == 0) p.set_objective_offset(-1.25);
    std::ostringstream os;
    write_mps(os, p);
    INFO("seed = " << seed << "\n" << os.str());
    const Problem q = read_mps_string(os.str());
    REQUIRE(q.num_vars() == p.num_vars());
    REQUIRE(q.num_rows() == p.num_rows());
    CHECK(q.sense() == p.sense());
    CHECK(q.objective_offset() == p.objective_offset());
    for (int j = 0; j < p.num_vars(); ++j) {
      CHECK(q.lb(j) == p.lb(j));
      CHECK(q.ub(j) == p.ub(j));
      CHECK(q.obj(j) == p.obj(j));
      CHECK(q.is_integer(j) == p.is_integer(j));
    }
    for (int i = 0; i < p.num_rows(); ++i) {
      CHECK(q.row_lo(i) == p.row_lo(i));
      CHECK(q.row_hi(i) == p.row_hi(i));
      const RowView a = p.row(i), b = q.row(i);
      REQUIRE(a.index.size() == b.index.size());
      for (std::size_t k = 0; k < a.index.size(); ++k) {
        CHECK(a.index[k] == b.index[k]);
        CHECK(a.value[k] == b.value[k]);
      }
    }
  }
}

namespace {
// CBC's output for `text` as an MPS file, or nothing where cbc is not installed.
std::optional<std::string> cbc_on(const std::string& text, std::uint64_t seed) {
  if (std::system("command -v cbc >/dev/null 2>&1") != 0) return std::nullopt;
  const auto path = std::filesystem::temp_directory_path() / ("disagmoe_cbc_" + std::to_string(seed) + ".mps");
  std::ofstream(path) << text;
  std::string out;
  if (FILE* f = popen(("cbc " + path.string() + " -solve -quit 2>&1").c_str(), "r")) {
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
    pclose(f);
  }
  std::filesystem::remove(path);
  return out;
}
}  // namespace

TEST_CASE("milp mps: what the writer writes, CBC (COIN-OR's MPS reader) reads without errors, to the same optimum") {
  int compared = 0;
  for (std::uint64_t seed = 1; seed <= 24; ++seed) {
    test::RandomSpec spec;
    spec.max_vars = 6, spec.max_rows = 5, spec.max_ints = seed % 2 == 0 ? 3 : 0;  // odd: a continuous first column
    Problem p = test::random_problem(seed, spec);
    p.set_sense(Sense::kMinimize);
    std::ostringstream os;
    write_mps(os, p);
    const auto out = cbc_on(os.str(), seed);
    if (!out) {
      MESSAGE("cbc is not installed: skipped");
      return;
    }
    INFO("seed = " << seed << "\n" << os.str() << "\n" << *out);
    CHECK(out->find("read with 0 errors") != std::string::npos);
    const Result r = solve(p);
    if (r.status != Status::kOptimal) continue;
    // CBC reports a MIP's optimum as "Objective value: X", an LP's as "Optimal objective X".
    std::size_t at = out->find("Objective value:"), skip = 16;
    if (at == std::string::npos) at = out->find("Optimal objective "), skip = 18;
    REQUIRE(at != std::string::npos);
    CHECK(std::stod(out->substr(at + skip)) == doctest::Approx(r.objective).epsilon(1e-6));
    ++compared;
  }
  CHECK(compared > 5);
}

TEST_CASE("milp problem: builder validates its input") {
  Problem p;
  CHECK_THROWS_AS(p.add_var(1, 0), disagmoe::ConfigError);
  CHECK_THROWS_AS(p.add_var(std::nan(""), 0), disagmoe::ConfigError);
  CHECK_THROWS_AS(p.add_var(kInf, kInf), disagmoe::ConfigError);
  const int x = p.add_var(-3, 7, 1, VarType::kBinary, "b");
  CHECK(p.lb(x) == 0.0);
  CHECK(p.ub(x) == 1.0);
  CHECK_THROWS_AS(p.add_row({{1, 1.0}}, 0, 1), disagmoe::ConfigError);
  CHECK_THROWS_AS(p.add_row({{0, 1.0}, {0, 2.0}}, 0, 1), disagmoe::ConfigError);
  CHECK_THROWS_AS(p.add_row({{0, 1.0}}, 2, 1), disagmoe::ConfigError);
  try {
    p.add_row({{0, std::nan("")}}, 0, 1);
  } catch (const disagmoe::ConfigError& e) {
    CHECK(std::string(e.what()) == "row coefficient[0] = nan: expected a finite value");
  }
  CHECK(p.add_row({{0, 0.0}}, 0, 1) == 0);  // zero dropped
  CHECK(p.row(0).index.empty());
}
