// SPDX-License-Identifier: Apache-2.0
/// @file mps.hpp
/// MPS reader (and, through mps_writer.hpp, writer) for `milp::Problem`: fixed and free MPS, optionally gzipped
/// (with zlib), `MARKER INTORG/INTEND`, bound types UP LO FX FR MI PL BV LI UI, RANGES,
/// OBJSENSE (section form and `OBJSENSE MAX` on one line), OBJNAME; reading stops at
/// ENDATA. Format reference: the IBM/CPLEX "MPS file format" description and the
/// lp_solve "MPS format" page (range semantics, negative UP bound rule).
///
/// Conventions (the same as CPLEX and HiGHS):
///  * the first N row is the objective; later N rows are dropped with their entries;
///  * the RHS of the objective row is minus the objective constant;
///  * an integer column (MARKER block) without bounds has bounds [0, +inf);
///  * `UP` with a negative value on a column whose lower bound is still 0 makes the
///    lower bound -inf;
///  * values with magnitude >= 1e30 in RHS, RANGES and BOUNDS mean infinity.
/// Every malformed input throws IoError naming the line number, the field, its value and
/// what was expected.
#pragma once

#include <disagmoe/config.hpp>
#include <disagmoe/error.hpp>
#include <disagmoe/limits.hpp>
#include <disagmoe/milp/mps_writer.hpp>
#include <disagmoe/milp/problem.hpp>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#if DISAGMOE_HAS_ZLIB()
#include <zlib.h>
#endif

namespace disagmoe::milp {

/// How data lines are split into fields.
enum class MpsFormat : std::uint8_t {
  kFree,   ///< fields separated by white space (also reads fixed files without blanks in names)
  kFixed,  ///< fields at the fixed columns 2-3, 5-12, 15-22, 25-36, 40-47, 50-61
};

namespace detail {

inline constexpr double kMpsInfinity = 1e30;

class MpsReader {
 public:
  MpsReader(std::string_view text, MpsFormat format) : text_(text), format_(format) {}

  Problem read() {
    std::size_t pos = 0;
    bool ended = false;
    while (pos < text_.size() && !ended) {
      std::size_t eol = text_.find('\n', pos);
      if (eol == std::string_view::npos) eol = text_.size();
      std::string_view line = text_.substr(pos, eol - pos);
      pos = eol + 1;
      ++line_no_;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (is_blank_or_comment(line)) continue;
      if (line.front() != ' ' && line.front() != '\t') {
        ended = header(line);
      } else {
        data(line);
      }
    }
    if (!ended) error("end of file", "(missing)", "an ENDATA line");
    return build();
  }

 private:
  enum class Section { kNone, kName, kObjSense, kObjName, kRows, kColumns, kRhs, kRanges, kBounds };
  struct Column {
    std::string name;
    double obj = 0, lb = 0, ub = kInf;
    bool integer = false, lb_set = false;
    std::vector<std::pair<int, double>> entries;  // (row, value)
  };

  [[noreturn]] void error(std::string_view field, std::string_view value,
                          std::string_view expected) const {
    fail<IoError>("MPS line " + std::to_string(line_no_) + ": " + std::string(field), value,
                  expected);
  }

  static bool is_blank_or_comment(std::string_view line) {
    std::size_t k = 0;
    while (k < line.size() && std::isspace(static_cast<unsigned char>(line[k]))) ++k;
    return k == line.size() || line[0] == '*';
  }

  static std::vector<std::string_view> split(std::string_view s) {
    std::vector<std::string_view> out;
    std::size_t k = 0;
    while (k < s.size()) {
      while (k < s.size() && std::isspace(static_cast<unsigned char>(s[k]))) ++k;
      const std::size_t b = k;
      while (k < s.size() && !std::isspace(static_cast<unsigned char>(s[k]))) ++k;
      if (k > b) out.push_back(s.substr(b, k - b));
    }
    return out;
  }

  static std::string_view trim(std::string_view s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
    return s;
  }

  // Fixed MPS: fields 1-6 at columns 2-3, 5-12, 15-22, 25-36, 40-47, 50-61 (1-based);
  // the last field runs to the end of the line so that long numbers survive.
  std::vector<std::string_view> fields(std::string_view line) const {
    if (format_ == MpsFormat::kFree) return split(line);
    static constexpr std::size_t kStart[] = {1, 4, 14, 24, 39, 49};
    static constexpr std::size_t kLen[] = {2, 8, 8, 12, 8, std::string_view::npos};
    std::vector<std::string_view> out;
    for (int f = 0; f < 6; ++f) {
      if (kStart[f] >= line.size()) break;
      const std::string_view v = trim(line.substr(kStart[f], kLen[f]));
      if (!v.empty()) out.push_back(v);
    }
    return out;
  }

  double number(std::string_view tok, std::string_view field) const {
    const std::string s(tok);
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (s.empty() || end != s.c_str() + s.size() || std::isnan(v) || !decimal(s))
      error(field, tok, "a number");
    return v;
  }
  // A decimal number as MPS writes one: [sign] digits [. digits] [e [sign] digits],
  // with digits on at least one side of the point. strtod also reads hexadecimal,
  // "inf" and "nan", which no MPS file means.
  static bool decimal(std::string_view s) {
    std::size_t i = 0, digits = 0;
    const auto run = [&] {
      const std::size_t from = i;
      while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
      return i - from;
    };
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    digits += run();
    if (i < s.size() && s[i] == '.') ++i, digits += run();
    if (digits == 0) return false;
    if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
      ++i;
      if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
      if (run() == 0) return false;
    }
    return i == s.size();
  }
  double finite_number(std::string_view tok, std::string_view field) const {
    const double v = number(tok, field);
    if (!std::isfinite(v) || std::abs(v) >= kMpsInfinity)
      error(field, tok, "a finite number of magnitude below 1e30 (1e30 is MPS's infinity)");
    return v;
  }
  // RANGES/BOUNDS values: |v| >= 1e30 is infinity, and so are "inf" and "infinity"
  // (any case, signed), which some writers print for a free bound.
  double bound_number(std::string_view tok, std::string_view field) const {
    const bool negative = !tok.empty() && tok[0] == '-';
    const std::string word = upper(!tok.empty() && (tok[0] == '-' || tok[0] == '+') ? tok.substr(1) : tok);
    if (word == "INF" || word == "INFINITY") return negative ? -kInf : kInf;
    const double v = number(tok, field);
    if (v >= kMpsInfinity) return kInf;
    if (v <= -kMpsInfinity) return -kInf;
    return v;
  }

  static std::string upper(std::string_view s) {
    std::string u(s);
    for (char& c : u) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return u;
  }

  void set_sense(std::string_view tok) {
    const std::string u = upper(tok);
    if (u == "MAX" || u == "MAXIMIZE" || u == "MAXIMISE") {
      maximize_ = true;
    } else if (u == "MIN" || u == "MINIMIZE" || u == "MINIMISE") {
      maximize_ = false;
    } else {
      error("OBJSENSE", tok, "MIN, MINIMIZE, MAX or MAXIMIZE");
    }
  }

  // Returns true at ENDATA.
  bool header(std::string_view line) {
    const auto tok = split(line);
    const std::string key = upper(tok[0]);
    if (in_int_) error("MARKER", "'INTORG'", "an 'INTEND' marker before " + key);
    if (key == "ENDATA") return true;
    if (key == "NAME") {
      if (seen_name_) error("section", key, "NAME at most once");
      seen_name_ = true;
      section_ = Section::kName;
      const auto rest = trim(line.substr(4));
      name_ = std::string(rest);
      return false;
    }
    if (key == "OBJSENSE") {
      section_ = Section::kObjSense;
      if (tok.size() > 1) set_sense(tok[1]);
      if (tok.size() > 2) error("OBJSENSE line", line, "OBJSENSE [MIN|MAX]");
      return false;
    }
    if (key == "OBJNAME") {
      section_ = Section::kObjName;
      if (tok.size() > 1) obj_name_ = std::string(tok[1]);
      return false;
    }
    if (key == "ROWS") {
      expect_order(Section::kRows, key);
      section_ = Section::kRows;
    } else if (key == "COLUMNS") {
      expect_order(Section::kColumns, key);
      section_ = Section::kColumns;
    } else if (key == "RHS") {
      expect_order(Section::kRhs, key);
      section_ = Section::kRhs;
    } else if (key == "RANGES") {
      expect_order(Section::kRanges, key);
      section_ = Section::kRanges;
    } else if (key == "BOUNDS") {
      expect_order(Section::kBounds, key);
      section_ = Section::kBounds;
    } else {
      error("section", tok[0],
            "one of NAME OBJSENSE OBJNAME ROWS COLUMNS RHS RANGES BOUNDS ENDATA");
    }
    if (tok.size() > 1) error("section line", line, "nothing after the section name");
    return false;
  }

  void expect_order(Section s, std::string_view key) {
    if (static_cast<int>(s) <= static_cast<int>(last_data_section_))
      error("section", key, "ROWS, COLUMNS, RHS, RANGES, BOUNDS in this order, each once");
    if (s != Section::kRows && last_data_section_ < Section::kRows)
      error("section", key, "ROWS before it");
    last_data_section_ = s;
  }

  void data(std::string_view line) {
    const auto f = fields(line);
    switch (section_) {
      case Section::kObjSense:
        if (f.size() != 1) error("OBJSENSE data", line, "one word MIN or MAX");
        set_sense(f[0]);
        return;
      case Section::kObjName:
        if (f.size() != 1) error("OBJNAME data", line, "one row name");
        obj_name_ = std::string(f[0]);
        return;
      case Section::kRows: return row_line(f);
      case Section::kColumns: return column_line(f);
      case Section::kRhs: return rhs_line(f, false);
      case Section::kRanges: return rhs_line(f, true);
      case Section::kBounds: return bound_line(f);
      default: error("data line", trim(line), "a section header (ROWS, COLUMNS, ...) before it");
    }
  }

  void row_line(const std::vector<std::string_view>& f) {
    if (f.size() != 2) error("ROWS line", f.empty() ? "" : f[0], "a type (N, L, G, E) and a name");
    const std::string type = upper(f[0]);
    if (type != "N" && type != "L" && type != "G" && type != "E")
      error("row type", f[0], "one of N L G E");
    const std::string name(f[1]);
    if (row_index_.count(name)) error("row name", name, "a name not used before");
    char t = type[0];
    if (t == 'N') {
      const bool is_obj = obj_name_.empty() ? obj_row_ < 0 : name == obj_name_;
      if (is_obj && obj_row_ < 0) {
        obj_row_ = static_cast<int>(rows_.size());
      } else {
        t = 'X';  // a further free row: dropped
      }
    }
    row_index_.emplace(name, static_cast<int>(rows_.size()));
    rows_.push_back({name, t, 0.0, std::nan(""), false});
  }

  int find_row(std::string_view name) const {
    const auto it = row_index_.find(std::string(name));
    if (it == row_index_.end()) error("row name", name, "a row declared in ROWS");
    return it->second;
  }

  void column_line(const std::vector<std::string_view>& f) {
    if (f.size() == 3 && upper(f[1]) == "'MARKER'") {
      const std::string m = upper(f[2]);
      if (m == "'INTORG'") {
        if (in_int_) error("MARKER", f[2], "'INTEND' first (integer markers do not nest)");
        in_int_ = true;
      } else if (m == "'INTEND'") {
        if (!in_int_) error("MARKER", f[2], "'INTORG' before it");
        in_int_ = false;
      } else {
        error("MARKER", f[2], "'INTORG' or 'INTEND'");
      }
      return;
    }
    if (f.size() != 3 && f.size() != 5)
      error("COLUMNS line", f.empty() ? "" : f[0], "column row value [row value]");
    const std::string name(f[0]);
    auto [it, fresh] = col_index_.emplace(name, static_cast<int>(cols_.size()));
    if (fresh) {
      cols_.push_back({});
      cols_.back().name = name;
      cols_.back().integer = in_int_;
    }
    Column& c = cols_[it->second];
    for (std::size_t k = 1; k + 1 < f.size(); k += 2) {
      const int r = find_row(f[k]);
      const double v = finite_number(f[k + 1], "coefficient of " + name);
      if (r == obj_row_) {
        c.obj += v;
      } else if (rows_[r].type != 'X') {
        c.entries.emplace_back(r, v);
      }
    }
  }

  // RHS and RANGES: [set] row value [row value]; the set name is present when the
  // number of fields is odd.
  void rhs_line(const std::vector<std::string_view>& f, bool ranges) {
    const char* what = ranges ? "RANGES line" : "RHS line";
    if (f.size() < 2 || f.size() > 5) error(what, f.empty() ? "" : f[0], "[set] row value [row value]");
    const std::size_t first = f.size() % 2 == 1 ? 1 : 0;
    if (first == 1) {  // several named sets are alternative vectors: this reader takes one
      std::string& set = ranges ? ranges_set_ : rhs_set_;
      if (set.empty()) set = std::string(f[0]);
      if (f[0] != set)
        error(ranges ? "RANGES set" : "RHS set", f[0],
              std::string("the file's one ") + (ranges ? "RANGES" : "RHS") + " set (\"" + set +
                  "\" came first; several sets are alternatives, and this reader takes one)");
    }
    for (std::size_t k = first; k + 1 < f.size(); k += 2) {
      const int r = find_row(f[k]);
      if (ranges) {
        const double v = bound_number(f[k + 1], "range of " + std::string(f[k]));
        if (rows_[r].type == 'N' || rows_[r].type == 'X')
          error("RANGES row", f[k], "a constraint row (L, G or E), not an N row");
        if (!std::isnan(rows_[r].range)) error("RANGES row", f[k], "one range per row (given twice)");
        rows_[r].range = v;
      } else {
        // Given twice, the last value would win without a word: refused instead.
        if (rows_[r].rhs_given) error("RHS row", f[k], "one right-hand side per row (given twice)");
        rows_[r].rhs_given = true;
        if (r == obj_row_)
          offset_ = -finite_number(f[k + 1], "RHS of objective " + std::string(f[k]));
        else
          rows_[r].rhs = finite_number(f[k + 1], "RHS of " + std::string(f[k]));
      }
    }
  }

  void bound_line(const std::vector<std::string_view>& f) {
    if (f.size() < 2) error("BOUNDS line", f.empty() ? "" : f[0], "type [set] column [value]");
    const std::string type = upper(f[0]);
    const bool needs_value =
        type == "UP" || type == "LO" || type == "FX" || type == "LI" || type == "UI";
    const bool no_value = type == "FR" || type == "MI" || type == "PL";
    if (!needs_value && !no_value && type != "BV")
      error("bound type", f[0], "one of UP LO FX FR MI PL BV LI UI");
    std::string_view col, val;
    if (needs_value) {
      if (f.size() == 4) {
        col = f[2], val = f[3];
      } else if (f.size() == 3) {
        col = f[1], val = f[2];
      } else {
        error("BOUNDS " + type + " line", f[1], "type [set] column value");
      }
    } else if (no_value) {
      if (f.size() == 3) {
        col = f[2];
      } else if (f.size() == 2) {
        col = f[1];
      } else {
        error("BOUNDS " + type + " line", f[1], "type [set] column");
      }
    } else {  // BV: value optional
      if (f.size() == 4) {
        col = f[2], val = f[3];
      } else if (f.size() == 3) {
        if (decimal(f[2])) {  // "BV x 1" has a value; "BV BND x" (or a column named nan) has a set
          col = f[1], val = f[2];
        } else {
          col = f[2];
        }
      } else if (f.size() == 2) {
        col = f[1];
      } else {
        error("BOUNDS BV line", f[1], "type [set] column [value]");
      }
    }
    const auto it = col_index_.find(std::string(col));
    if (it == col_index_.end()) error("bound column", col, "a column declared in COLUMNS");
    Column& c = cols_[it->second];
    const std::string field = type + " bound of " + c.name;
    if (type == "UP" || type == "UI") {
      const double v = bound_number(val, field);
      if (v == -kInf) error(field, val, "a value below +1e30 and above -1e30");
      c.ub = v;
      if (v < 0 && c.lb == 0 && !c.lb_set) c.lb = -kInf;
      if (type == "UI") c.integer = true;
    } else if (type == "LO" || type == "LI") {
      const double v = bound_number(val, field);
      if (v == kInf) error(field, val, "a value below +1e30");
      c.lb = v;
      c.lb_set = true;
      if (type == "LI") c.integer = true;
    } else if (type == "FX") {
      const double v = finite_number(val, field);
      c.lb = c.ub = v;
      c.lb_set = true;
    } else if (type == "FR") {
      c.lb = -kInf, c.ub = kInf;
      c.lb_set = true;
    } else if (type == "MI") {
      c.lb = -kInf;
      c.lb_set = true;
    } else if (type == "PL") {
      c.ub = kInf;
    } else {  // BV
      if (!val.empty()) {
        const double v = number(val, field);
        if (v != 0.0 && v != 1.0) error(field, val, "no value, 0 or 1");
      }
      c.lb = 0, c.ub = 1, c.integer = true;
      c.lb_set = true;
    }
  }

  Problem build() {
    if (obj_row_ < 0 && rows_.empty() && cols_.empty()) error("file", "(empty)", "ROWS and COLUMNS sections");
    Problem p;
    p.set_name(name_);
    p.set_sense(maximize_ ? Sense::kMaximize : Sense::kMinimize);
    p.set_objective_offset(offset_);
    for (const Column& c : cols_) {
      if (c.lb > c.ub)
        fail<IoError>("MPS bounds of column " + c.name, "[" + std::to_string(c.lb) + ", " +
                      std::to_string(c.ub) + "]", "lower <= upper");
      p.add_var(c.lb, c.ub, c.obj, c.integer ? VarType::kInteger : VarType::kContinuous, c.name);
    }
    // Transpose the column entries into rows (kept in column order, so sorted).
    std::vector<std::vector<int>> idx(rows_.size());
    std::vector<std::vector<double>> val(rows_.size());
    for (int j = 0; j < static_cast<int>(cols_.size()); ++j) {
      for (const auto& [r, v] : cols_[j].entries) {
        if (!idx[r].empty() && idx[r].back() == j) {
          fail<IoError>("MPS column " + cols_[j].name, rows_[r].name,
                        "each row at most once per column");
        }
        idx[r].push_back(j);
        val[r].push_back(v);
      }
    }
    for (std::size_t r = 0; r < rows_.size(); ++r) {
      const RowInfo& ri = rows_[r];
      if (ri.type == 'N' || ri.type == 'X') continue;
      double lo = -kInf, hi = kInf;
      const double R = ri.range;
      const bool ranged = !std::isnan(R);
      if (ri.type == 'E') {
        lo = hi = ri.rhs;
        if (ranged && R > 0) hi = ri.rhs + R;
        if (ranged && R < 0) lo = ri.rhs + R;
      } else if (ri.type == 'L') {
        hi = ri.rhs;
        if (ranged) lo = ri.rhs - std::abs(R);
      } else {
        lo = ri.rhs;
        if (ranged) hi = ri.rhs + std::abs(R);
      }
      p.add_row(idx[r], val[r], lo, hi, ri.name);
    }
    return p;
  }

  struct RowInfo {
    std::string name;
    char type;  // N (objective), X (dropped N), L, G, E
    double rhs;
    double range;  // NaN: none
    bool rhs_given = false;
  };

  std::string_view text_;
  MpsFormat format_;
  long line_no_ = 0;
  Section section_ = Section::kNone;
  Section last_data_section_ = Section::kNone;
  bool seen_name_ = false, maximize_ = false, in_int_ = false;
  std::string name_, obj_name_, rhs_set_, ranges_set_;
  int obj_row_ = -1;
  double offset_ = 0;
  std::vector<RowInfo> rows_;
  std::unordered_map<std::string, int> row_index_, col_index_;
  std::vector<Column> cols_;
};

}  // namespace detail

/// Parses MPS text. Throws IoError (with the line number) on malformed input.
/// Complexity O(size of text) expected (hash maps for names).
inline Problem read_mps_string(std::string_view text, MpsFormat format = MpsFormat::kFree) {
  return detail::MpsReader(text, format).read();
}

/// Reads a whole file into memory, gunzipping it when zlib is available (zlib reads
/// plain files too). Throws IoError when it cannot be opened or is gzipped without zlib.
/// Only regular files are read (a directory or a device such as /dev/zero would fail
/// late or never end), and a gzip stream stops at limits()' decompressed size and ratio.
inline std::string read_text_file(const std::string& path) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) fail<IoError>("file", path, "a readable file (it does not exist)");
  expect_regular_file("file", path);
#if DISAGMOE_HAS_ZLIB()
  const auto compressed = static_cast<std::int64_t>(std::filesystem::file_size(path, ec));
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) fail<IoError>("file", path, "a readable file");
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const int n = gzread(f, buf, sizeof buf);
    if (n < 0) {
      gzclose(f);
      fail<IoError>("file", path, "a readable (g)zip stream");
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
    try {
      expect_decompressed("file", path, compressed, static_cast<std::int64_t>(out.size()));
    } catch (...) {
      gzclose(f);
      throw;
    }
  }
  gzclose(f);
  return out;
#else
  std::ifstream in(path, std::ios::binary);
  if (!in) fail<IoError>("file", path, "a readable file");
  std::string out((std::istreambuf_iterator<char>(in)), {});
  if (out.size() >= 2 && static_cast<unsigned char>(out[0]) == 0x1f &&
      static_cast<unsigned char>(out[1]) == 0x8b)
    fail<IoError>("file", path, "an uncompressed file (this build has no zlib)");
  return out;
#endif
}

/// Reads an MPS file (`.mps` or `.mps.gz`).
inline Problem read_mps_file(const std::string& path, MpsFormat format = MpsFormat::kFree) {
  const std::string text = read_text_file(path);
  try {
    return read_mps_string(text, format);
  } catch (const IoError& e) {
    throw IoError(path + ": " + e.what());
  }
}

}  // namespace disagmoe::milp
