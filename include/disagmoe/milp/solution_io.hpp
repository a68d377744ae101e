// SPDX-License-Identifier: Apache-2.0
/// @file solution_io.hpp
/// Solution files and solution checking: a point as text, one `name value` pair per line
/// (the format of SCIP's `write solution` without its header; `#` starts a comment line,
/// variables not listed are 0, as in SCIP and CBC solution files), and the exact
/// feasibility report of a point against a Problem (worst violated bound, row or
/// integrality named), used by `disagmoe-milp --check-solution` and to validate
/// `Options::debug_solution`.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/limits.hpp>
#include <disagmoe/milp/problem.hpp>

#include <cmath>
#include <fstream>
#include <ostream>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

namespace disagmoe::milp {

/// The worst violation of a point and where it is.
struct SolutionCheck {
  double objective = 0;      ///< c·x + offset in the problem's sense
  double max_violation = 0;  ///< absolute, over bounds, rows and integrality
  /// "" when nothing is violated, else e.g. "row c12 (activity 3.5, bounds [-inf, 3])",
  /// "bound of x7 (value -1, bounds [0, 4])", "integrality of x3 (value 0.5)".
  std::string worst;
  /// Problem::max_scaled_violation: rows relative to the error their continuous
  /// terms can carry (integer-only rows absolute), the solver's rule.
  double max_scaled_violation = 0;
  /// Whether max_scaled_violation <= tol (the tolerance given to check_solution), the
  /// test the solver applies to its incumbents.
  bool feasible = true;
};

/// Checks `x` (one value per variable) against every bound, row and integrality of `p`.
/// Throws ConfigError when x has the wrong size or a non-finite value. O(nnz).
inline SolutionCheck check_solution(const Problem& p, const std::vector<double>& x, double tol = 1e-6) {
  expect(static_cast<int>(x.size()) == p.num_vars(), "solution size", x.size(),
         "one value per variable (" + std::to_string(p.num_vars()) + ")");
  for (int j = 0; j < p.num_vars(); ++j)
    expect(std::isfinite(x[j]), "solution value of " + p.var_name(j), x[j], "a finite value");
  SolutionCheck c;
  c.objective = p.evaluate(x);
  auto num = [](double v) {
    std::ostringstream os;
    os.precision(17);
    os << v;
    return os.str();
  };
  auto note = [&](double v, auto&& where) {
    if (v > c.max_violation) {
      c.max_violation = v;
      c.worst = where();
    }
  };
  for (int j = 0; j < p.num_vars(); ++j) {
    const auto bounds = [&] {
      return "bound of " + p.var_name(j) + " (value " + num(x[j]) + ", bounds [" + num(p.lb(j)) + ", " +
             num(p.ub(j)) + "])";
    };
    note(p.lb(j) - x[j], bounds);
    note(x[j] - p.ub(j), bounds);
    if (p.is_integer(j))
      note(std::abs(x[j] - std::round(x[j])),
           [&] { return "integrality of " + p.var_name(j) + " (value " + num(x[j]) + ")"; });
  }
  for (int i = 0; i < p.num_rows(); ++i) {
    const RowView r = p.row(i);
    double a = 0;
    for (std::size_t k = 0; k < r.index.size(); ++k) a += r.value[k] * x[r.index[k]];
    const auto row = [&] {
      return "row " + p.row_name(i) + " (activity " + num(a) + ", bounds [" + num(p.row_lo(i)) + ", " +
             num(p.row_hi(i)) + "])";
    };
    note(p.row_lo(i) - a, row);
    note(a - p.row_hi(i), row);
  }
  c.max_scaled_violation = p.max_scaled_violation(x, tol);
  c.feasible = c.max_scaled_violation <= tol;
  return c;
}

/// Parses a solution: lines `name value` (blank lines and lines starting with `#` are
/// skipped; a leading line `objective value ...` or `=obj= ...`, as SCIP writes, too).
/// Variables not named are 0. Throws IoError naming `source`, the line and the problem
/// (unknown or repeated name, missing or non-finite value, extra fields). O(size).
inline std::vector<double> parse_solution(const Problem& p, const std::string& text,
                                          const std::string& source = "solution") {
  std::unordered_map<std::string, int> index;
  for (int j = 0; j < p.num_vars(); ++j) index.emplace(p.var_name(j), j);
  std::vector<double> x(p.num_vars(), 0.0);
  std::vector<char> seen(p.num_vars(), 0);
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    std::istringstream ls(line);
    std::string name, value, extra;
    if (!(ls >> name) || name[0] == '#') continue;
    const std::string where = source + " line " + std::to_string(line_no);
    if (name == "=obj=" || name == "objective") continue;
    const auto it = index.find(name);
    if (it == index.end()) fail<IoError>(where + ": variable", name, "a column name of the problem");
    if (!(ls >> value)) fail<IoError>(where + ": value of " + name, "", "a number");
    if (ls >> extra && extra[0] != '#') fail<IoError>(where + ": field after the value of " + name, extra,
                                                      "nothing (one `name value` pair per line)");
    std::size_t used = 0;
    double v = 0;
    try {
      v = std::stod(value, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != value.size() || !std::isfinite(v))
      fail<IoError>(where + ": value of " + name, value, "a finite number");
    if (seen[it->second]) fail<IoError>(where + ": variable", name, "each variable at most once");
    seen[it->second] = 1;
    x[it->second] = v;
  }
  return x;
}

/// Reads a solution file (see parse_solution). Throws IoError when it is not a regular
/// file or cannot be read.
inline std::vector<double> read_solution_file(const Problem& p, const std::string& path) {
  expect_regular_file("solution file", path);
  std::ifstream f(path);
  if (!f) fail<IoError>("solution file", path, "a readable file");
  std::ostringstream ss;
  ss << f.rdbuf();
  return parse_solution(p, ss.str(), path);
}

/// Writes `x` as `name value` lines (17 significant digits: the values read back
/// exactly), preceded by a `# objective` comment. Every variable is written.
inline void write_solution(std::ostream& os, const Problem& p, const std::vector<double>& x) {
  expect(static_cast<int>(x.size()) == p.num_vars(), "solution size", x.size(),
         "one value per variable (" + std::to_string(p.num_vars()) + ")");
  os.precision(17);
  os << "# objective " << p.evaluate(x) << "\n";
  for (int j = 0; j < p.num_vars(); ++j) os << p.var_name(j) << ' ' << (x[j] == 0.0 ? 0.0 : x[j]) << '\n';  // no -0
}

}  // namespace disagmoe::milp
