// SPDX-License-Identifier: Apache-2.0
/// @file cover_cuts.hpp
/// Extended knapsack cover cuts (Crowder, Johnson and Padberg, "Solving large-scale
/// zero-one linear programming problems", Operations Research 31(5), 1983, §3; the
/// extension as in Nemhauser and Wolsey, "Integer and Combinatorial Optimization",
/// 1988, §II.2.2). Every row side a·x <= b is relaxed to a 0/1 knapsack:
///  * non-binary columns are replaced by the bound that keeps the row valid (a_j > 0:
///    lb_j, a_j < 0: ub_j; an infinite one drops the row);
///  * binaries with a_j < 0 are complemented (y_j = 1 - x_j), so sum |a_j| y_j <= b'.
/// A cover C (sum_C |a_j| > b') gives sum_C y_j <= |C| - 1, extended by every item at
/// least as heavy as C's heaviest. The cover is chosen greedily by (1 - y*_j) / |a_j| to
/// maximise the violation at the LP point y* (the CJP heuristic), then made minimal.
#pragma once

#include <disagmoe/milp/problem.hpp>

#include <algorithm>
#include <cmath>
#include <span>
#include <utility>
#include <vector>

namespace disagmoe::milp::detail {

/// A cut lo <= sum terms <= hi over the problem's columns (unscaled).
struct LinearCut {
  std::vector<std::pair<int, double>> terms;
  double lo = -kInf, hi = kInf;
  double efficacy = 0;  ///< violation at the separated point / Euclidean norm
  int source_row = -1;  ///< the problem row it was derived from (-1: none)
  double source_side = 0;  ///< +1: from its `<= hi` side, -1: from its `>= lo` side
};

/// Separates extended cover cuts from the rows of a problem. O(nnz) set-up; one
/// separation costs O(nnz log nnz).
class CoverSeparator {
 public:
  explicit CoverSeparator(const Problem& p) : p_(p) {}

  /// Violated cuts at point x for column bounds [lb, ub] (valid for every integer point
  /// of the problem within those bounds). `min_violation` is absolute.
  std::vector<LinearCut> separate(std::span<const double> x, std::span<const double> lb,
                                  std::span<const double> ub, double min_violation = 1e-4) const {
    std::vector<LinearCut> cuts;
    for (int i = 0; i < p_.num_rows(); ++i) {
      if (p_.row_hi(i) < kInf) separate_side(i, 1.0, p_.row_hi(i), x, lb, ub, min_violation, cuts);
      if (p_.row_lo(i) > -kInf) separate_side(i, -1.0, -p_.row_lo(i), x, lb, ub, min_violation, cuts);
    }
    return cuts;
  }

 private:
  struct Item {
    int col;
    double weight;  // |a_j| > 0
    double y;       // LP value of x_j or of its complement
    bool complemented;
  };

  bool is_binary(int j, std::span<const double> lb, std::span<const double> ub) const {
    return p_.is_integer(j) && lb[j] == 0.0 && ub[j] == 1.0;
  }

  // Side sign * a·x <= b of one row.
  void separate_side(int row_index, double sign, double b, std::span<const double> x,
                     std::span<const double> lb, std::span<const double> ub, double min_violation,
                     std::vector<LinearCut>& cuts) const {
    const RowView row = p_.row(row_index);
    std::vector<Item> items;
    for (std::size_t k = 0; k < row.index.size(); ++k) {
      const int j = row.index[k];
      const double a = sign * row.value[k];
      if (is_binary(j, lb, ub)) {
        if (a > 0) {
          items.push_back({j, a, std::clamp(x[j], 0.0, 1.0), false});
        } else {
          b -= a;  // a x = a - a (1 - x)
          items.push_back({j, -a, std::clamp(1.0 - x[j], 0.0, 1.0), true});
        }
      } else {
        const double bound = a > 0 ? lb[j] : ub[j];
        if (!std::isfinite(bound)) return;
        b -= a * bound;
      }
    }
    if (items.size() < 2 || b < 0) return;  // b < 0: the row itself is infeasible
    // Some fractional item is needed for a violated cover.
    bool fractional = false;
    for (const Item& it : items) fractional = fractional || (it.y > 1e-6 && it.y < 1 - 1e-6);
    if (!fractional) return;
    std::vector<int> order(items.size());
    for (std::size_t t = 0; t < items.size(); ++t) order[t] = static_cast<int>(t);
    std::sort(order.begin(), order.end(), [&](int s, int t) {
      const double rs = (1 - items[s].y) / items[s].weight, rt = (1 - items[t].y) / items[t].weight;
      return rs != rt ? rs < rt : items[s].col < items[t].col;
    });
    std::vector<int> cover;
    double w = 0;
    const double tol = 1e-9 * std::max(1.0, std::abs(b));
    for (int t : order) {
      cover.push_back(t);
      w += items[t].weight;
      if (w > b + tol) break;
    }
    if (!(w > b + tol)) return;  // no cover: the knapsack is redundant
    // Make it minimal: drop items of smallest y first while the rest still covers.
    std::sort(cover.begin(), cover.end(), [&](int s, int t) {
      return items[s].y != items[t].y ? items[s].y < items[t].y : items[s].col < items[t].col;
    });
    std::vector<int> minimal;
    for (std::size_t c = 0; c < cover.size(); ++c) {
      const int t = cover[c];
      if (w - items[t].weight > b + tol) {
        w -= items[t].weight;
      } else {
        minimal.push_back(t);
      }
    }
    double heaviest = 0;
    std::vector<char> in_cover(items.size(), 0);
    for (int t : minimal) heaviest = std::max(heaviest, items[t].weight), in_cover[t] = 1;
    // Extended cover: sum over C and every heavier item of y <= |C| - 1.
    LinearCut cut;
    double rhs = static_cast<double>(minimal.size()) - 1.0, lhs = 0, norm = 0;
    for (std::size_t t = 0; t < items.size(); ++t) {
      if (!in_cover[t] && items[t].weight < heaviest) continue;
      lhs += items[t].y;
      norm += 1.0;
      if (items[t].complemented) {  // y = 1 - x
        cut.terms.emplace_back(items[t].col, -1.0);
        rhs -= 1.0;
      } else {
        cut.terms.emplace_back(items[t].col, 1.0);
      }
    }
    const double violation = lhs - (static_cast<double>(minimal.size()) - 1.0);
    if (violation < min_violation) return;
    std::sort(cut.terms.begin(), cut.terms.end());
    cut.hi = rhs;
    cut.efficacy = violation / std::sqrt(norm);
    cut.source_row = row_index;
    cut.source_side = sign;
    cuts.push_back(std::move(cut));
  }

  const Problem& p_;
};

}  // namespace disagmoe::milp::detail
