// SPDX-License-Identifier: Apache-2.0
/// @file problem.hpp
/// The mixed-integer linear program as a value: variables with bounds, objective
/// coefficients and integrality; constraints as sparse rows with lower/upper activity
/// bounds (so `<=`, `>=`, `=` and ranges are one form: lo <= a·x <= hi).
#pragma once

#include <disagmoe/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <sstream>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace disagmoe::milp {

/// Positive infinity: an absent bound.
inline constexpr double kInf = std::numeric_limits<double>::infinity();

/// Integrality of a variable. `kBinary` is an integer variable whose bounds are
/// intersected with [0, 1] when it is added.
enum class VarType : std::uint8_t { kContinuous, kInteger, kBinary };

/// Direction of optimisation.
enum class Sense : std::uint8_t { kMinimize, kMaximize };

/// A read-only view of one sparse constraint row.
struct RowView {
  std::span<const int> index;     ///< column indices, strictly increasing
  std::span<const double> value;  ///< nonzero coefficients, same length as `index`
};

/// A MILP:  min/max  c·x + offset  s.t.  row_lo <= A x <= row_hi,  lb <= x <= ub,
/// x_j integer for integer columns. Rows are stored compressed (CSR); adding a row is
/// amortised O(nnz of the row · log) (it is sorted), everything else O(1).
/// Names are optional and kept only for messages and MPS output.
class Problem {
 public:
  /// Adds a variable and returns its index. Bounds may be infinite (`-kInf`, `kInf`).
  /// Throws ConfigError when a value is NaN, lb > ub, lb = +inf, ub = -inf, or the
  /// objective coefficient is not finite.
  int add_var(double lb, double ub, double obj = 0.0, VarType type = VarType::kContinuous,
              std::string name = {}) {
    const int j = num_vars();
    if (type == VarType::kBinary) {
      lb = std::max(lb, 0.0);
      ub = std::min(ub, 1.0);
    }
    check_bounds(j, lb, ub);
    expect(std::isfinite(obj), field("objective", j), obj, "a finite coefficient");
    lb_.push_back(lb);
    ub_.push_back(ub);
    obj_.push_back(obj);
    type_.push_back(type);
    var_names_.push_back(std::move(name));
    return j;
  }

  /// Adds the constraint lo <= sum value[k] * x[index[k]] <= hi and returns its index.
  /// Zero coefficients are dropped; indices must be distinct and in range. Use
  /// lo = -kInf or hi = kInf for one-sided rows and lo = hi for equations.
  int add_row(std::span<const int> index, std::span<const double> value, double lo, double hi,
              std::string name = {}) {
    const int i = num_rows();
    expect(index.size() == value.size(), field("row index/value size", i), value.size(),
           "as many values as indices (" + std::to_string(index.size()) + ")");
    expect(!std::isnan(lo) && !std::isnan(hi) && lo <= hi && lo < kInf && hi > -kInf,
           field("row bounds", i), "[" + num(lo) + ", " + num(hi) + "]",
           "lo <= hi, lo < +inf, hi > -inf");
    std::vector<std::pair<int, double>> terms;
    terms.reserve(index.size());
    for (std::size_t k = 0; k < index.size(); ++k) {
      expect(index[k] >= 0 && index[k] < num_vars(), field("row column index", i), index[k],
             "0 <= index < num_vars (" + std::to_string(num_vars()) + ")");
      expect(std::isfinite(value[k]), field("row coefficient", i), value[k], "a finite value");
      if (value[k] != 0.0) terms.emplace_back(index[k], value[k]);
    }
    std::sort(terms.begin(), terms.end());
    for (std::size_t k = 1; k < terms.size(); ++k)
      expect(terms[k].first != terms[k - 1].first, field("row column index", i), terms[k].first,
             "each column at most once per row");
    for (const auto& [c, v] : terms) {
      col_index_.push_back(c);
      values_.push_back(v);
    }
    row_start_.push_back(static_cast<int>(col_index_.size()));
    row_lo_.push_back(lo);
    row_hi_.push_back(hi);
    row_names_.push_back(std::move(name));
    return i;
  }

  /// Convenience overload: `add_row({{0, 1.0}, {2, -3.0}}, -kInf, 4.0)`.
  int add_row(std::initializer_list<std::pair<int, double>> terms, double lo, double hi,
              std::string name = {}) {
    std::vector<int> idx;
    std::vector<double> val;
    for (const auto& [c, v] : terms) {
      idx.push_back(c);
      val.push_back(v);
    }
    return add_row(idx, val, lo, hi, std::move(name));
  }

  /// Replaces the bounds of variable j (same checks as add_var).
  void set_bounds(int j, double lb, double ub) {
    check_var(j);
    check_bounds(j, lb, ub);
    lb_[j] = lb;
    ub_[j] = ub;
  }
  /// Replaces the objective coefficient of variable j.
  void set_objective(int j, double c) {
    check_var(j);
    expect(std::isfinite(c), field("objective", j), c, "a finite coefficient");
    obj_[j] = c;
  }
  /// Replaces the integrality of variable j (kBinary also clamps its bounds to [0, 1]).
  void set_type(int j, VarType t) {
    check_var(j);
    type_[j] = t;
    if (t == VarType::kBinary) set_bounds(j, std::max(lb_[j], 0.0), std::min(ub_[j], 1.0));
  }
  /// Replaces the activity bounds of row i.
  void set_row_bounds(int i, double lo, double hi) {
    expect(i >= 0 && i < num_rows(), "row", i, "0 <= row < num_rows");
    expect(!std::isnan(lo) && !std::isnan(hi) && lo <= hi && lo < kInf && hi > -kInf,
           field("row bounds", i), "[" + num(lo) + ", " + num(hi) + "]",
           "lo <= hi, lo < +inf, hi > -inf");
    row_lo_[i] = lo;
    row_hi_[i] = hi;
  }
  void set_sense(Sense s) { sense_ = s; }
  /// A constant added to the objective (MPS: minus the RHS of the objective row).
  void set_objective_offset(double c) {
    expect(std::isfinite(c), "objective offset", c, "a finite value");
    offset_ = c;
  }
  void set_name(std::string n) { name_ = std::move(n); }

  int num_vars() const { return static_cast<int>(lb_.size()); }
  int num_rows() const { return static_cast<int>(row_lo_.size()); }
  std::size_t num_nonzeros() const { return values_.size(); }
  double lb(int j) const { return lb_[j]; }
  double ub(int j) const { return ub_[j]; }
  double obj(int j) const { return obj_[j]; }
  VarType type(int j) const { return type_[j]; }
  bool is_integer(int j) const { return type_[j] != VarType::kContinuous; }
  double row_lo(int i) const { return row_lo_[i]; }
  double row_hi(int i) const { return row_hi_[i]; }
  RowView row(int i) const {
    const auto b = static_cast<std::size_t>(row_start_[i]);
    const auto n = static_cast<std::size_t>(row_start_[i + 1]) - b;
    return {std::span<const int>(col_index_).subspan(b, n),
            std::span<const double>(values_).subspan(b, n)};
  }
  Sense sense() const { return sense_; }
  double objective_offset() const { return offset_; }
  const std::string& name() const { return name_; }
  /// The variable's name, or "x<j>" when it has none.
  std::string var_name(int j) const {
    return var_names_[j].empty() ? "x" + std::to_string(j) : var_names_[j];
  }
  /// The row's name, or "r<i>" when it has none.
  std::string row_name(int i) const {
    return row_names_[i].empty() ? "r" + std::to_string(i) : row_names_[i];
  }
  const std::vector<double>& lbs() const { return lb_; }
  const std::vector<double>& ubs() const { return ub_; }
  const std::vector<double>& objective() const { return obj_; }

  /// Objective value c·x + offset of x in the problem's own sense. O(n).
  double evaluate(std::span<const double> x) const {
    double v = offset_;
    for (int j = 0; j < num_vars(); ++j) v += obj_[j] * x[j];
    return v;
  }

  /// Largest violation like max_violation, but a row's violation is relative to what
  /// its continuous columns can absorb: a continuous value comes from an LP whose
  /// tolerance is relative, so a row with a 1e6 coefficient on a continuous column may
  /// be off by 1e6 times that tolerance (the idea of SCIP's relative feasibility test:
  /// Achterberg, "Constraint integer programming", 2007, §3.3.1). The row's violation
  /// (less the floating-point error of its sum, 4 eps sum |a_ij x_j|) is divided by
  /// max(1, sum over continuous j of |a_ij| min(max(1, |x_j|), room_j / tol)), where
  /// room_j is how far x_j may move towards repairing the row before its bound: a
  /// continuous column at its bound absorbs nothing, and integer columns never do (a
  /// solution's integers are exact). Relative to max(1, |side|), as this was, it
  /// accepted 2013189.059 <= 2013189.058 over binaries and so a wrong optimum (the
  /// big-knapsack regression in test_sweep.cpp). Bounds and integrality stay absolute.
  /// O(nnz).
  double max_scaled_violation(std::span<const double> x, double tol = 1e-6) const {
    return violation(x, tol);
  }

  /// Largest violation of bounds, rows and integrality by x (absolute). O(nnz).
  double max_violation(std::span<const double> x) const { return violation(x, 0.0); }

 private:
  // Bounds and integrality absolute; rows absolute (tol = 0) or relative to what their
  // continuous terms absorb at tolerance tol (max_scaled_violation).
  double violation(std::span<const double> x, double tol) const {
    double worst = 0;
    for (int j = 0; j < num_vars(); ++j) {
      worst = std::max({worst, lb_[j] - x[j], x[j] - ub_[j]});
      if (is_integer(j)) worst = std::max(worst, std::abs(x[j] - std::round(x[j])));
    }
    for (int i = 0; i < num_rows(); ++i) {
      const RowView r = row(i);
      double a = 0;
      for (std::size_t k = 0; k < r.index.size(); ++k) a += r.value[k] * x[r.index[k]];
      const bool above = a > row_hi_[i];
      double v = above ? a - row_hi_[i] : row_lo_[i] - a;
      if (v <= 0 || tol <= 0) {
        worst = std::max(worst, v);
        continue;
      }
      double magnitude = 0, scale = 0;
      for (std::size_t k = 0; k < r.index.size(); ++k) {
        const int j = r.index[k];
        magnitude += std::abs(r.value[k] * x[j]);
        if (is_integer(j)) continue;
        // Repairing moves x_j down when (a_ij > 0) == above, else up.
        const double room = (r.value[k] > 0) == above ? x[j] - lb_[j] : ub_[j] - x[j];
        scale += std::abs(r.value[k]) * std::min(std::max(1.0, std::abs(x[j])), std::max(0.0, room) / tol);
      }
      v -= 4 * std::numeric_limits<double>::epsilon() * magnitude;
      worst = std::max(worst, v / std::max(1.0, scale));
    }
    return worst;
  }

  static std::string num(double v) {
    std::ostringstream os;
    os.precision(17);
    os << v;
    return os.str();
  }
  static std::string field(const char* what, int k) {
    return std::string(what) + "[" + std::to_string(k) + "]";
  }
  void check_var(int j) const {
    expect(j >= 0 && j < num_vars(), "variable", j,
           "0 <= variable < num_vars (" + std::to_string(num_vars()) + ")");
  }
  static void check_bounds(int j, double lb, double ub) {
    expect(!std::isnan(lb) && !std::isnan(ub) && lb <= ub && lb < kInf && ub > -kInf,
           field("variable bounds", j), "[" + num(lb) + ", " + num(ub) + "]",
           "lb <= ub, lb < +inf, ub > -inf");
  }

  std::vector<double> lb_, ub_, obj_;
  std::vector<VarType> type_;
  std::vector<std::string> var_names_;
  std::vector<int> row_start_{0};
  std::vector<int> col_index_;
  std::vector<double> values_;
  std::vector<double> row_lo_, row_hi_;
  std::vector<std::string> row_names_;
  Sense sense_ = Sense::kMinimize;
  double offset_ = 0.0;
  std::string name_;
};

}  // namespace disagmoe::milp
