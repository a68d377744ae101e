// SPDX-License-Identifier: Apache-2.0
/// @file presolve.hpp
/// MILP presolve and postsolve (the reductions of Achterberg, "Constraint integer
/// programming", PhD thesis, TU Berlin 2007, ch. 10, and Savelsbergh, "Preprocessing and
/// probing techniques for mixed integer programming problems", ORSA J. Computing 6, 1994):
///  * integer bounds rounded;
///  * empty rows dropped (or the problem found infeasible);
///  * singleton rows turned into bounds of their column;
///  * activity-based bound tightening: from the minimum and maximum activity of every
///    row, each column's implied bounds (integers rounded; continuous columns only when
///    the bound was infinite or shrinks the range by at least a tenth, SCIP's rule
///    against many tiny steps), repeated while anything changes (at most 20 passes);
///  * rows that cannot be violated within the bounds (redundant) dropped;
///  * coefficient tightening of a binary in a one-sided row that is redundant when the
///    binary sits at one bound (Savelsbergh §1.2): the same integer points, a tighter LP;
///  * parallel rows (one row lambda times another, Andersen and Andersen, "Presolving in
///    linear programming", Math. Programming 71, 1995, §3.2): merged into one row with
///    the tighter sides, so duplicates and rows whose sides another implies (dominated)
///    are dropped;
///  * dominated sides (Achterberg's thesis §10.1.7 compares rows of the same support):
///    for two rows of the same columns, a_k x = (a_k - lambda a_i) x + lambda a_i x, so
///    a side of row k is implied by a side of row i when the first part's extreme over
///    the column bounds plus lambda times row i's side stays within it (lambda = the
///    ratio of the first coefficients); such a side is dropped, and a row with no side
///    left goes. Only a relaxation, never checked against the debug solution, but no
///    point is added: the side holds wherever row i does;
///  * implied free continuous column singletons substituted out (Andersen and Andersen
///    §3.4): see `substitute_free_singletons`;
///  * fixed columns (lb = ub) substituted into the rows and the objective offset.
/// Every derived bound is relaxed by the floating-point error of the activity it comes
/// from before it is rounded, so no feasible point is lost to rounding.
/// Postsolve puts the fixed columns back and computes the substituted ones from their rows. With a debug solution (debug_solution.hpp)
/// every bound change and tightened row is checked against it.
#pragma once

#include <disagmoe/milp/debug_solution.hpp>
#include <disagmoe/milp/problem.hpp>
#include <disagmoe/milp/result.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace disagmoe::milp {

/// The reduced problem and what postsolve needs: `col_map[j]` is the original index of
/// reduced column j; `fixed[k]` the value of original column k when it was removed
/// fixed; `substituted` the columns solved from an equation, in the order removed.
struct Presolved {
  /// x_col = (rhs - sum terms) / coef, over original columns.
  struct Substitution {
    int col;
    double coef, rhs;
    std::vector<std::pair<int, double>> terms;
  };
  Problem problem;
  std::vector<int> col_map;
  std::vector<double> fixed;  ///< one per original column (NaN when kept or substituted)
  std::vector<Substitution> substituted;
  PresolveStats stats;

  /// The original point of a reduced one. O(n + nnz of the substituted rows).
  std::vector<double> postsolve(std::span<const double> y) const {
    std::vector<double> x = fixed;
    for (std::size_t j = 0; j < col_map.size(); ++j) x[col_map[j]] = y[j];
    for (auto s = substituted.rbegin(); s != substituted.rend(); ++s) {
      double rest = 0;
      for (const auto& [k, a] : s->terms) rest += a * x[k];
      x[s->col] = (s->rhs - rest) / s->coef;
    }
    return x;
  }
  /// The reduced point of an original one (removed columns dropped). O(n).
  std::vector<double> restrict(std::span<const double> x) const {
    std::vector<double> y(col_map.size());
    for (std::size_t j = 0; j < col_map.size(); ++j) y[j] = x[col_map[j]];
    return y;
  }
};

namespace detail {

class Presolver {
 public:
  Presolver(const Problem& p, double int_tol, const DebugSolution* dbg)
      : p_(p), n_(p.num_vars()), int_tol_(int_tol), dbg_(dbg), lb_(p.lbs()), ub_(p.ubs()), obj_(p.objective()),
        offset_(p.objective_offset()) {
    for (int i = 0; i < p.num_rows(); ++i) {
      const RowView r = p.row(i);
      std::vector<std::pair<int, double>> row;
      for (std::size_t k = 0; k < r.index.size(); ++k) row.emplace_back(r.index[k], r.value[k]);
      rows_.push_back(std::move(row));
      lo_.push_back(p.row_lo(i));
      hi_.push_back(p.row_hi(i));
    }
    alive_.assign(rows_.size(), true);
  }

  Presolved run() {
    for (int j = 0; j < n_; ++j)
      if (p_.is_integer(j)) set_bounds(j, lb_[j], ub_[j], "integer rounding", int_tol_);
    for (int pass = 0; pass < 20 && !st_.infeasible; ++pass) {
      changed_ = false;
      for (std::size_t i = 0; i < rows_.size() && !st_.infeasible; ++i)
        if (alive_[i]) row_pass(static_cast<int>(i));
      if (!changed_) break;
    }
    if (!st_.infeasible) merge_parallel_rows();
    if (!st_.infeasible) substitute_free_singletons();
    return build();
  }

 private:
  struct Activity {
    double min = 0, max = 0, magnitude = 0;  // finite parts; magnitude: sum of |terms|
    int min_inf = 0, max_inf = 0;            // infinite contributions
  };

  Activity activity(int i) const {
    Activity a;
    for (const auto& [j, v] : rows_[i]) {
      const double lo = v > 0 ? lb_[j] : ub_[j], hi = v > 0 ? ub_[j] : lb_[j];
      if (std::isinf(lo)) ++a.min_inf;
      else a.min += v * lo, a.magnitude += std::abs(v * lo);
      if (std::isinf(hi)) ++a.max_inf;
      else a.max += v * hi, a.magnitude += std::abs(v * hi);
    }
    return a;
  }

  // Floating-point error bound of a sum of terms of total size `magnitude` (with room
  // for the subtractions that follow), plus an absolute 1e-9.
  static double fp_slack(double magnitude) { return 1e-12 * magnitude + 1e-9; }

  void row_pass(int i) {
    auto& row = rows_[i];
    if (row.empty()) {
      if (lo_[i] > fp_slack(0) || hi_[i] < -fp_slack(0)) st_.infeasible = true;
      drop_row(i);
      ++st_.empty_rows;
      return;
    }
    if (row.size() == 1) {  // a x_j in [lo, hi]: a bound of x_j
      const int j = row[0].first;  // (not structured bindings: clang 14 cannot capture them)
      const double a = row[0].second;
      // The quotient relaxed by its rounding error unless it is exact.
      auto divide = [&](double side, double dir) {
        const double q = side / a;
        return std::isinf(q) || q * a == side ? q : q + dir * 1e-12 * std::max(1.0, std::abs(q));
      };
      double lo = divide(lo_[i], a > 0 ? -1 : 1), hi = divide(hi_[i], a > 0 ? 1 : -1);
      if (a < 0) std::swap(lo, hi);
      set_bounds(j, std::max(lb_[j], lo), std::min(ub_[j], hi), "singleton row " + p_.row_name(i));
      drop_row(i);
      ++st_.singleton_rows;
      return;
    }
    const Activity act = activity(i);
    const double slack = fp_slack(act.magnitude + std::abs(std::isfinite(lo_[i]) ? lo_[i] : 0) +
                                  std::abs(std::isfinite(hi_[i]) ? hi_[i] : 0));
    // Infeasible when even the most favourable activity misses a side.
    if ((act.min_inf == 0 && act.min > hi_[i] + slack + 1e-6 * std::max(1.0, std::abs(hi_[i]))) ||
        (act.max_inf == 0 && act.max < lo_[i] - slack - 1e-6 * std::max(1.0, std::abs(lo_[i])))) {
      st_.infeasible = true;
      return;
    }
    // Redundant: no point within the bounds can violate it.
    if ((std::isinf(hi_[i]) || (act.max_inf == 0 && act.max <= hi_[i] - slack)) &&
        (std::isinf(lo_[i]) || (act.min_inf == 0 && act.min >= lo_[i] + slack))) {
      drop_row(i);
      ++st_.redundant_rows;
      return;
    }
    tighten_bounds(i, act, slack);
    if (!st_.infeasible) tighten_coefficients(i);
  }

  // Implied bounds of each column of row i (Achterberg §7.1, bound propagation of
  // linear constraints): a_j x_j <= hi - (min activity of the rest), and likewise.
  void tighten_bounds(int i, const Activity& act, double slack) {
    for (const auto& [j, a] : rows_[i]) {
      const double lo_j = a > 0 ? lb_[j] : ub_[j], hi_j = a > 0 ? ub_[j] : lb_[j];
      // Minimum / maximum activity of the other terms, when finite.
      double rest_min = kInf, rest_max = -kInf;
      if (act.min_inf == 0) rest_min = act.min - a * lo_j;
      else if (act.min_inf == 1 && std::isinf(lo_j)) rest_min = act.min;
      if (act.max_inf == 0) rest_max = act.max - a * hi_j;
      else if (act.max_inf == 1 && std::isinf(hi_j)) rest_max = act.max;
      double new_lb = -kInf, new_ub = kInf;  // of a·x_j, then of x_j
      if (std::isfinite(hi_[i]) && rest_min < kInf) new_ub = hi_[i] - rest_min + slack;
      if (std::isfinite(lo_[i]) && rest_max > -kInf) new_lb = lo_[i] - rest_max - slack;
      double lb = new_lb / a, ub = new_ub / a;
      if (a < 0) std::swap(lb, ub);
      if (!p_.is_integer(j)) {  // continuous: only worthwhile steps (SCIP's boundstreps)
        const double range = ub_[j] - lb_[j];
        if (!(std::isinf(lb_[j]) || (std::isfinite(range) && lb - lb_[j] > 0.1 * range))) lb = -kInf;
        if (!(std::isinf(ub_[j]) || (std::isfinite(range) && ub_[j] - ub > 0.1 * range))) ub = kInf;
        if (std::abs(lb) > 1e9) lb = -kInf;  // a huge implied bound only hurts the LP
        if (std::abs(ub) > 1e9) ub = kInf;
      }
      if (lb > lb_[j] || ub < ub_[j])
        set_bounds(j, std::max(lb, lb_[j]), std::min(ub, ub_[j]), "activity of row " + p_.row_name(i));
      if (st_.infeasible) return;
    }
  }

  // Savelsbergh's coefficient reduction for a binary x_j in a one-sided row
  // sum a x <= hi (a >= row is negated): with M the maximum activity,
  //  a_j > 0 and M - a_j < hi: the row holds whenever x_j = 0, so a_j -= d, hi -= d with
  //    d = hi - (M - a_j);
  //  a_j < 0 and M + a_j < hi: it holds whenever x_j = 1, so a_j += d with d = hi - (M + a_j).
  // Both keep every integer point's feasibility and cut LP points off.
  void tighten_coefficients(int i) {
    const bool upper = std::isfinite(hi_[i]);
    if (upper == std::isfinite(lo_[i])) return;  // ranges and equations: not here
    const double sgn = upper ? 1.0 : -1.0;
    double rhs = sgn * (upper ? hi_[i] : lo_[i]);  // of sgn * row, updated as it tightens
    auto& row = rows_[i];
    Activity act = activity(i);
    if ((upper ? act.max_inf : act.min_inf) != 0) return;
    for (auto& [j, coef] : row) {
      if (!p_.is_integer(j) || lb_[j] != 0 || ub_[j] != 1) continue;
      const double max_act = upper ? act.max : -act.min;  // of sgn * row
      const double a = sgn * coef;
      // Integral data below 2^50 is summed exactly: no slack, integral coefficients stay.
      const bool exact = a == std::round(a) && rhs == std::round(rhs) && max_act == std::round(max_act) &&
                         act.magnitude < 0x1p50;
      const double slack = exact ? 0.0 : fp_slack(act.magnitude + std::abs(rhs));
      double d = 0;
      if (a > 0) d = rhs - (max_act - a);
      else d = rhs - (max_act + a);
      // Only clear gains; never flip the coefficient's sign.
      if (!(d > 1e-6 * std::max(1.0, std::abs(a)) + slack) || d >= std::abs(a)) continue;
      d -= slack;
      const double new_a = a > 0 ? a - d : a + d, new_rhs = a > 0 ? rhs - d : rhs;
      if (dbg_ != nullptr) {
        std::vector<std::pair<int, double>> t = row;
        for (auto& [k, v] : t) v *= sgn;
        for (auto& [k, v] : t)
          if (k == j) v = new_a;
        dbg_->check_cut(t, -kInf, new_rhs, [&, col = j] {
          return "presolve coefficient tightening of " + p_.var_name(col) + " in row " + p_.row_name(i);
        });
      }
      coef = sgn * new_a;
      rhs = new_rhs;
      if (upper) hi_[i] = new_rhs;
      else lo_[i] = -new_rhs;
      ++st_.coefs_tightened;
      changed_ = true;
      act = activity(i);
    }
  }

  // Parallel rows: row k = lambda * row i, exactly in floating point (every
  // a_k = lambda a_i with lambda = a_k0 / a_i0). Row k's sides divided by lambda (relaxed
  // by their rounding error unless lambda is a power of two) tighten row i's, and row k
  // is dropped. Candidates share
  // their column set (hashed); at most 64 comparisons per row.
  void merge_parallel_rows() {
    std::unordered_map<std::size_t, std::vector<int>> by_support;
    for (std::size_t i = 0; i < rows_.size(); ++i) {
      if (!alive_[i] || rows_[i].size() < 2) continue;
      std::sort(rows_[i].begin(), rows_[i].end());
      std::size_t h = rows_[i].size();
      for (const auto& term : rows_[i]) h = h * 1000003u ^ static_cast<std::size_t>(term.first);
      std::vector<int>& bucket = by_support[h];
      bool merged = false;
      for (std::size_t b = 0; b < bucket.size() && b < 64 && !merged; ++b) {
        merged = merge_if_parallel(bucket[b], static_cast<int>(i));
        if (!merged) merged = drop_dominated_sides(bucket[b], static_cast<int>(i));
      }
      if (!merged) bucket.push_back(static_cast<int>(i));
      if (st_.infeasible) return;
    }
  }

  bool merge_if_parallel(int i, int k) {
    const auto& ri = rows_[i];
    const auto& rk = rows_[k];
    if (!alive_[i] || ri.size() != rk.size()) return false;
    const double lambda = rk[0].second / ri[0].second;
    for (std::size_t t = 0; t < ri.size(); ++t)
      if (ri[t].first != rk[t].first || rk[t].second != lambda * ri[t].second) return false;
    // Dividing by a power of two is exact (rows and sides alike); else relax.
    int e = 0;
    const bool exact = std::abs(std::frexp(lambda, &e)) == 0.5;
    const Activity act = activity(k);
    auto relax = [&](double side, double dir) {
      const double q = side / lambda;  // an infinite side stays infinite (sign flipped when lambda < 0)
      if (!std::isfinite(q)) return q;
      if (exact) return q;
      return q + dir * (fp_slack(act.magnitude + std::abs(side)) / std::abs(lambda) + 1e-12 * std::abs(q));
    };
    double lo = lambda > 0 ? relax(lo_[k], -1) : relax(hi_[k], -1);
    double hi = lambda > 0 ? relax(hi_[k], 1) : relax(lo_[k], 1);
    lo = std::max(lo, lo_[i]), hi = std::min(hi, hi_[i]);
    if (lo > hi) {
      if (lo - hi > 1e-9 * std::max(1.0, std::abs(lo))) {
        st_.infeasible = true;  // solve checks this without presolve
        return true;
      }
      lo = hi = 0.5 * (lo + hi);
    }
    if (dbg_ != nullptr)
      dbg_->check_cut(ri, lo, hi, [&] { return "presolve merging parallel rows " + p_.row_name(i) + " and " + p_.row_name(k); });
    lo_[i] = lo, hi_[i] = hi;
    drop_row(k);
    ++st_.parallel_rows;
    return true;
  }

  // Sides of row k that row i implies are dropped, then sides of row i that what is left
  // of row k implies (so two rows never drop each other's). True when row i goes.
  bool drop_dominated_sides(int i, int k) {
    if (!alive_[i] || !alive_[k] || rows_[i].size() != rows_[k].size()) return false;
    for (std::size_t t = 0; t < rows_[i].size(); ++t)
      if (rows_[i][t].first != rows_[k][t].first) return false;  // a hash collision
    drop_implied_sides(i, k);
    drop_implied_sides(k, i);
    return !alive_[i];
  }

  // Drops the sides of row `to` that row `from` implies (see the file comment).
  void drop_implied_sides(int from, int to) {
    if (!alive_[from] || !alive_[to]) return;
    const auto& rf = rows_[from];
    const auto& rt = rows_[to];
    const double lambda = rt[0].second / rf[0].second;
    // Extremes of (a_to - lambda a_from) x over the bounds, and the size of their terms.
    double dmin = 0, dmax = 0, mag = 0;
    for (std::size_t t = 0; t < rt.size(); ++t) {
      const int j = rt[t].first;
      const double d = rt[t].second - lambda * rf[t].second;
      const double bnd = std::max(std::abs(lb_[j]), std::abs(ub_[j]));
      if (d == 0) continue;
      if (!std::isfinite(bnd)) return;
      dmin += d > 0 ? d * lb_[j] : d * ub_[j];
      dmax += d > 0 ? d * ub_[j] : d * lb_[j];
      mag += (std::abs(rt[t].second) + std::abs(lambda * rf[t].second)) * bnd;
    }
    const double s_hi = lambda > 0 ? hi_[from] : lo_[from], s_lo = lambda > 0 ? lo_[from] : hi_[from];
    int dropped = 0;
    if (std::isfinite(hi_[to]) && std::isfinite(s_hi)) {
      const double implied = dmax + lambda * s_hi;
      if (implied <= hi_[to] - fp_slack(mag + std::abs(lambda * s_hi) + std::abs(hi_[to])) - 1e-9 * std::abs(implied))
        hi_[to] = kInf, ++dropped;
    }
    if (std::isfinite(lo_[to]) && std::isfinite(s_lo)) {
      const double implied = dmin + lambda * s_lo;
      if (implied >= lo_[to] + fp_slack(mag + std::abs(lambda * s_lo) + std::abs(lo_[to])) + 1e-9 * std::abs(implied))
        lo_[to] = -kInf, ++dropped;
    }
    st_.dominated_sides += dropped;
    if (dropped > 0 && std::isinf(lo_[to]) && std::isinf(hi_[to])) drop_row(to);
  }

  // Implied free column singletons: a continuous column j in one row only, an equation
  // a·x = b with |a_j| at least 1e-3 of the row's largest, whose bounds that row implies
  // (x_j = (b - rest) / a_j stays within [lb_j, ub_j], up to 1e-9 relative, for every value
  // of the other columns within their bounds). Then x_j and the row go: the row's other
  // columns take over x_j's cost (c_k -= c_j a_k / a_j, offset += c_j b / a_j), and
  // postsolve computes x_j from the row. No point is lost or added.
  void substitute_free_singletons() {
    std::vector<int> count(n_, 0), where(n_, -1);
    for (std::size_t i = 0; i < rows_.size(); ++i)
      if (alive_[i])
        for (const auto& term : rows_[i]) ++count[term.first], where[term.first] = static_cast<int>(i);
    for (int j = 0; j < n_; ++j) {
      if (p_.is_integer(j) || count[j] != 1 || lb_[j] == ub_[j]) continue;
      const int i = where[j];
      if (!alive_[i] || lo_[i] != hi_[i] || !std::isfinite(lo_[i]) || rows_[i].size() < 2) continue;
      double aj = 0, amax = 0, rmin = 0, rmax = 0, mag = std::abs(lo_[i]);
      bool finite = true;
      for (const auto& [k, a] : rows_[i]) {
        amax = std::max(amax, std::abs(a));
        if (k == j) {
          aj = a;
          continue;
        }
        const double lo = a > 0 ? lb_[k] : ub_[k], hi = a > 0 ? ub_[k] : lb_[k];
        finite = finite && std::isfinite(lo) && std::isfinite(hi);
        rmin += a * lo, rmax += a * hi, mag += std::abs(a * lo) + std::abs(a * hi);
      }
      if (!finite || std::abs(aj) < 1e-3 * amax) continue;
      // Implied range of x_j; its bounds may be exceeded by the round-off `tol` only.
      double imp_lo = (lo_[i] - rmax) / aj, imp_hi = (lo_[i] - rmin) / aj;
      if (aj < 0) std::swap(imp_lo, imp_hi);
      const double tol = fp_slack(mag) / std::abs(aj);
      if (imp_lo < lb_[j] - tol - 1e-9 * std::max(1.0, std::abs(lb_[j])) ||
          imp_hi > ub_[j] + tol + 1e-9 * std::max(1.0, std::abs(ub_[j])))
        continue;
      Presolved::Substitution sub{j, aj, lo_[i], {}};
      const double cj = obj_[j] / aj;
      for (const auto& [k, a] : rows_[i]) {
        if (k == j) continue;
        sub.terms.emplace_back(k, a);
        obj_[k] -= cj * a;
        --count[k];
      }
      offset_ += cj * lo_[i];
      obj_[j] = 0;
      subs_.push_back(std::move(sub));
      alive_[i] = false;
      ++st_.rows_removed;
      ++st_.substituted_cols;
      ++st_.cols_removed;
    }
  }

  // Integer bounds are rounded with `round_tol` relative to max(1, |bound|): the
  // integrality tolerance for the problem's own bounds (as branch and bound does), only
  // the floating-point error for derived ones. With the integrality tolerance, the row
  // 854830.619 x <= 854830.541 gave x <= floor(0.99999991 + 1e-6) = 1, and dropping the
  // row then admitted x = 1 (a wrong optimum, caught by the presolve test).
  void set_bounds(int j, double lb, double ub, const std::string& why, double round_tol = 1e-9) {
    if (p_.is_integer(j)) {
      lb = std::ceil(lb - round_tol * std::max(1.0, std::abs(lb)));
      ub = std::floor(ub + round_tol * std::max(1.0, std::abs(ub)));
    }
    lb = std::max(lb, lb_[j]);
    ub = std::min(ub, ub_[j]);
    if (lb > ub) {
      // Continuous bounds crossing by rounding noise meet in the middle.
      if (!p_.is_integer(j) && lb - ub <= 1e-9 * std::max(1.0, std::abs(lb))) lb = ub = 0.5 * (lb + ub);
      else {
        st_.infeasible = true;
        return;
      }
    }
    if (lb == lb_[j] && ub == ub_[j]) return;
    if (dbg_ != nullptr) dbg_->check_bounds(j, lb, ub, [&] { return "presolve (" + why + ")"; });
    lb_[j] = lb;
    ub_[j] = ub;
    ++st_.bounds_tightened;
    changed_ = true;
  }

  void drop_row(int i) {
    alive_[i] = false;
    ++st_.rows_removed;
    changed_ = true;
  }

  Presolved build() {
    Presolved out;
    out.stats = st_;
    out.fixed.assign(n_, std::numeric_limits<double>::quiet_NaN());
    if (st_.infeasible) return out;
    std::vector<int> new_index(n_, -1);
    std::vector<char> substituted(n_, 0);
    for (const Presolved::Substitution& sub : subs_) substituted[sub.col] = 1;
    out.substituted = subs_;
    double offset = offset_;
    for (int j = 0; j < n_; ++j) {
      if (substituted[j]) continue;
      if (lb_[j] == ub_[j]) {
        out.fixed[j] = lb_[j];
        offset += obj_[j] * lb_[j];
        ++out.stats.cols_removed;
        continue;
      }
      new_index[j] = out.problem.add_var(lb_[j], ub_[j], obj_[j], p_.type(j), p_.var_name(j));
      out.col_map.push_back(j);
    }
    out.problem.set_sense(p_.sense());
    out.problem.set_objective_offset(offset);
    out.problem.set_name(p_.name());
    std::vector<int> idx;
    std::vector<double> val;
    for (std::size_t i = 0; i < rows_.size(); ++i) {
      if (!alive_[i]) continue;
      idx.clear(), val.clear();
      double shift = 0;
      for (const auto& [j, a] : rows_[i]) {
        if (new_index[j] < 0) shift += a * out.fixed[j];
        else idx.push_back(new_index[j]), val.push_back(a);
      }
      const double lo = lo_[i] - shift, hi = hi_[i] - shift;
      if (idx.empty()) {  // every column fixed: the row is a check
        const double tol = 1e-6 * std::max(1.0, std::abs(shift));
        if (lo > tol || hi < -tol) out.stats.infeasible = true;
        ++out.stats.rows_removed;
        continue;
      }
      out.problem.add_row(idx, val, std::min(lo, hi), std::max(lo, hi), p_.row_name(static_cast<int>(i)));
    }
    return out;
  }

  const Problem& p_;
  int n_;
  double int_tol_;
  const DebugSolution* dbg_;
  std::vector<double> lb_, ub_, obj_;
  double offset_;
  std::vector<Presolved::Substitution> subs_;
  std::vector<std::vector<std::pair<int, double>>> rows_;
  std::vector<double> lo_, hi_;
  std::vector<bool> alive_;
  PresolveStats st_;
  bool changed_ = false;
};

}  // namespace detail

/// Presolves p (see the file comment). `dbg`, when given, is checked against every
/// reduction (a SolverError names the first that removes it). When stats.infeasible
/// the problem is empty. O(passes * nnz * max row length) in the worst case.
inline Presolved presolve(const Problem& p, double integrality_tol = 1e-6,
                          const detail::DebugSolution* dbg = nullptr) {
  return detail::Presolver(p, integrality_tol, dbg).run();
}

namespace detail {

/// `solve` with presolve: presolves p (unless options.presolve is false), solves the
/// reduced problem with `bb(problem, options)`, and postsolves the result. The debug
/// solution is checked through presolve and handed on restricted to the kept columns;
/// on_incumbent sees original points. Never trusts presolve where it would decide the
/// answer: when it finds the problem infeasible, or the postsolved point is not feasible
/// for p (Problem::max_scaled_violation), p is solved again without presolve.
template <class Solver>
Result presolve_and_solve(const Problem& p, const Options& options, Solver&& bb) {
  if (!options.presolve) return bb(p, options);
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<DebugSolution> dbg;
  if (options.debug_solution != nullptr)
    dbg = std::make_unique<DebugSolution>(p, *options.debug_solution, options.feasibility_tol);
  Presolved pre = presolve(p, options.integrality_tol, dbg.get());
  const PresolveStats stats = pre.stats;
  if (options.verbose)
    std::cerr << "milp: presolve removed " << stats.rows_removed << " rows (" << stats.empty_rows << " empty, "
              << stats.singleton_rows << " singleton, " << stats.redundant_rows << " redundant, "
              << stats.parallel_rows << " parallel, " << stats.substituted_cols << " with a substituted column) and "
              << stats.cols_removed << " columns (" << stats.substituted_cols << " substituted), dropped "
              << stats.dominated_sides << " dominated row sides, tightened "
              << stats.bounds_tightened << " bounds and " << stats.coefs_tightened << " coefficients"
              << (stats.infeasible ? "; found infeasible (checked without presolve)" : "") << "\n";
  Options without = options;
  without.presolve = false;
  const double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (std::isfinite(options.time_limit)) without.time_limit = std::max(0.0, options.time_limit - spent);
  auto fallback = [&] {
    Result r = bb(p, without);
    r.presolve = stats;
    return r;
  };
  if (stats.infeasible) return fallback();
  Result r;
  if (pre.problem.num_vars() == 0) {  // everything fixed: the point is the answer
    r.status = Status::kOptimal;
    r.solution = pre.postsolve({});
    r.objective = r.bound = p.evaluate(r.solution);
    r.gap = 0;
  } else {
    Options o = without;
    std::vector<double> dbg_y;
    if (options.debug_solution != nullptr) {
      dbg_y = pre.restrict(*options.debug_solution);
      o.debug_solution = &dbg_y;
    }
    if (options.on_incumbent)
      o.on_incumbent = [&](const Incumbent& inc) {
        const std::vector<double> x = pre.postsolve(inc.solution);
        options.on_incumbent({inc.objective, x, inc.nodes, inc.seconds});
      };
    r = bb(pre.problem, o);
    if (r.has_solution()) {
      r.solution = pre.postsolve(r.solution);
      r.objective = p.evaluate(r.solution);
    }
  }
  if (r.has_solution() && p.max_scaled_violation(r.solution, options.feasibility_tol) > options.feasibility_tol) {
    if (options.verbose) std::cerr << "milp: the postsolved point is not feasible; solving without presolve\n";
    return fallback();
  }
  r.presolve = stats;
  r.seconds += spent;
  return r;
}

}  // namespace detail

}  // namespace disagmoe::milp
