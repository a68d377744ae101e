// SPDX-License-Identifier: Apache-2.0
/// @file mps_writer.hpp
/// Free MPS writer for `milp::Problem` (the inverse of the reader in mps.hpp, which
/// includes this header): names kept when they are valid and distinct, integer blocks
/// between MARKER lines, ranges for two-sided rows, the objective constant as the
/// negated RHS of the objective row (CPLEX/HiGHS convention, see mps.hpp). Fields start
/// at the fixed-format columns (5, 15, 25) where names fit in 8 characters: readers that
/// guess the format from the first lines (COIN-OR's CoinMpsIO, in CBC) reject short
/// names written two blanks apart.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/milp/problem.hpp>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <ostream>
#include <sstream>
#include <string>
#include <unordered_set>
#include <vector>

namespace disagmoe::milp {

namespace detail {
inline bool mps_name_ok(const std::string& s) {
  if (s.empty() || s[0] == '*' || s.size() > 255) return false;
  for (char c : s)
    if (std::isspace(static_cast<unsigned char>(c)) || !std::isprint(static_cast<unsigned char>(c))) return false;
  return true;
}
// Names as given when all are valid free-MPS names and distinct, else generated ones.
inline std::vector<std::string> mps_names(int n, auto&& given, const char* prefix) {
  std::vector<std::string> out;
  std::unordered_set<std::string> seen;
  bool ok = true;
  for (int k = 0; k < n && ok; ++k) {
    out.push_back(given(k));
    ok = mps_name_ok(out.back()) && seen.insert(out.back()).second;
  }
  if (!ok) {
    out.clear();
    for (int k = 0; k < n; ++k) out.push_back(prefix + std::to_string(k));
  }
  return out;
}
// An entry line: its fields at the fixed-format columns while names fit in 8 characters
// (kind: the code of columns 2-3, or blank).
inline std::string mps_line(const char* kind, const std::string& a, const std::string& b = {}) {
  std::string line = kind;
  line.resize(4, ' ');
  line += a;
  if (!b.empty()) {
    line.resize(std::max(line.size() + 2, std::size_t{14}), ' ');
    line += b;
  }
  return line;
}
}  // namespace detail

/// Writes `p` as free MPS that read_mps_string reads back to the same problem (values
/// printed with 17 significant digits). Rows with both sides infinite are written as N
/// rows and so are dropped on reading. Names with blanks are replaced by C<j>/R<i>.
inline void write_mps(std::ostream& out, const Problem& p) {
  const auto cols = detail::mps_names(p.num_vars(), [&](int j) { return p.var_name(j); }, "C");
  auto rows = detail::mps_names(p.num_rows(), [&](int i) { return p.row_name(i); }, "R");
  std::string obj = "OBJ";
  for (int k = 0; std::find(rows.begin(), rows.end(), obj) != rows.end(); ++k) obj = "OBJ" + std::to_string(k);
  std::ostringstream os;
  os.precision(17);
  // An entry line and its number in the third field (column 25 where names are short).
  auto value = [&os](std::string line, double v) {
    line.resize(std::max(line.size() + 2, std::size_t{24}), ' ');
    os << line << v << "\n";
  };
  os << "NAME " << (detail::mps_name_ok(p.name()) ? p.name() : "") << "\n";
  if (p.sense() == Sense::kMaximize) os << "OBJSENSE\n    MAX\n";
  os << "ROWS\n" << detail::mps_line(" N", obj) << "\n";
  for (int i = 0; i < p.num_rows(); ++i) {
    const double lo = p.row_lo(i), hi = p.row_hi(i);
    const char t = lo == hi ? 'E' : lo == -kInf ? (hi == kInf ? 'N' : 'L') : hi == kInf ? 'G' : 'L';
    os << detail::mps_line(std::string{' ', t}.c_str(), rows[i]) << "\n";
  }
  // Column-wise entries.
  std::vector<std::vector<std::pair<int, double>>> col(p.num_vars());
  for (int i = 0; i < p.num_rows(); ++i) {
    const RowView r = p.row(i);
    for (std::size_t k = 0; k < r.index.size(); ++k) col[r.index[k]].emplace_back(i, r.value[k]);
  }
  os << "COLUMNS\n";
  bool in_int = false;
  int marker = 0;
  for (int j = 0; j < p.num_vars(); ++j) {
    if (p.is_integer(j) != in_int) {
      in_int = p.is_integer(j);
      os << detail::mps_line("", "M" + std::to_string(marker++), "'MARKER'") << "  " << (in_int ? "'INTORG'" : "'INTEND'")
         << "\n";
    }
    if (p.obj(j) != 0.0 || col[j].empty()) value(detail::mps_line("", cols[j], obj), p.obj(j));
    for (const auto& [i, v] : col[j]) value(detail::mps_line("", cols[j], rows[i]), v);
  }
  if (in_int) os << detail::mps_line("", "M" + std::to_string(marker), "'MARKER'") << "  'INTEND'\n";
  os << "RHS\n";
  if (p.objective_offset() != 0.0) value(detail::mps_line("", "RHS", obj), -p.objective_offset());
  for (int i = 0; i < p.num_rows(); ++i) {
    const double lo = p.row_lo(i), hi = p.row_hi(i);
    const double rhs = hi < kInf ? hi : lo > -kInf ? lo : 0.0;
    if (rhs != 0.0) value(detail::mps_line("", "RHS", rows[i]), rhs);
  }
  bool ranges = false;
  for (int i = 0; i < p.num_rows(); ++i) {
    const double lo = p.row_lo(i), hi = p.row_hi(i);
    if (lo > -kInf && hi < kInf && lo != hi) {
      if (!ranges) os << "RANGES\n";
      ranges = true;
      value(detail::mps_line("", "RNG", rows[i]), hi - lo);
    }
  }
  os << "BOUNDS\n";
  for (int j = 0; j < p.num_vars(); ++j) {
    const double lb = p.lb(j), ub = p.ub(j);
    const std::string& c = cols[j];
    if (p.is_integer(j) && lb == 0 && ub == 1) {
      os << detail::mps_line(" BV", "BND", c) << "\n";
    } else if (lb == -kInf && ub == kInf) {
      os << detail::mps_line(" FR", "BND", c) << "\n";
    } else if (lb == ub) {
      value(detail::mps_line(" FX", "BND", c), lb);
    } else {
      if (lb == -kInf) os << detail::mps_line(" MI", "BND", c) << "\n";
      else if (lb != 0.0) value(detail::mps_line(" LO", "BND", c), lb);
      if (ub != kInf) value(detail::mps_line(" UP", "BND", c), ub);
    }
  }
  os << "ENDATA\n";
  out << os.str();
}

/// Writes `p` as free MPS to a file. Throws IoError when the file cannot be written.
inline void write_mps_file(const std::string& path, const Problem& p) {
  std::ofstream out(path);
  if (!out) fail<IoError>("file", path, "a writable path");
  write_mps(out, p);
  if (!out) fail<IoError>("file", path, "a completed write");
}

}  // namespace disagmoe::milp
