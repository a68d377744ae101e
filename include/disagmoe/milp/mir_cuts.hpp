// SPDX-License-Identifier: Apache-2.0
/// @file mir_cuts.hpp
/// Complemented mixed-integer rounding (c-MIR) cuts by the aggregation heuristic of
/// Marchand and Wolsey, "Aggregation and mixed integer rounding to solve MIPs",
/// Operations Research 49(3), 2001, §3 (as implemented in SCIP's cuts.c):
///  1. start from one row side, a·x <= b;
///  2. bound substitution: every continuous column goes to the bound closest to its LP
///     value, a simple bound or a variable bound x <= c·y + d / x >= c·y + d read from a
///     two-column row (this is what makes c-MIR cuts on fixed-charge rows x <= u·y act
///     like flow covers); integers are complemented to their closest bound;
///  3. divisor trial: the MIR inequality of the row divided by each |a_j| of an integer
///     strictly inside its bounds, then the best divided by 2, 4, 8, then complementing
///     the other way each integer strictly inside its bounds (at most 8); the most
///     efficacious is kept;
///  4. when nothing is violated, a continuous column strictly between its bounds is
///     eliminated by adding a multiple of another row that contains it (at most 5 times).
/// The MIR inequality of sum a_j x_j + sum c_k z_k <= beta (x integer, z continuous, all
/// >= 0) is sum F(a_j) x_j + sum_{c_k<0} c_k z_k / (1 - f0) <= floor(beta), with
/// f0 = frac(beta) and F(a) = floor(a) + max(0, frac(a) - f0) / (1 - f0).
///
/// Safe by construction: all arithmetic is in long double; f0 must lie in [0.05, 0.95],
/// so floor(beta) is far from a rounding discontinuity (F itself is continuous, so
/// round-off in a coefficient moves the cut by at most 20x that round-off); aggregation
/// multipliers are within [1e-4, 1e4]; an eliminated coefficient's residue is relaxed
/// over its column's range; tiny coefficients are relaxed with their bounds; cuts whose
/// coefficients span more than 6 orders of magnitude are dropped; the right-hand side is
/// relaxed by 1e-9 of the largest magnitude met in the derivation.
#pragma once

#include <disagmoe/milp/cover_cuts.hpp>
#include <disagmoe/milp/problem.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace disagmoe::milp::detail {

class MirSeparator {
 public:
  explicit MirSeparator(const Problem& p) : p_(p), n_(p.num_vars()) {
    col_rows_.resize(n_);
    vbounds_.resize(n_);
    for (int i = 0; i < p.num_rows(); ++i) {
      const RowView r = p.row(i);
      for (std::size_t k = 0; k < r.index.size(); ++k) col_rows_[r.index[k]].emplace_back(i, r.value[k]);
      if (r.index.size() == 2) read_variable_bound(i);
    }
  }

  /// Violated c-MIR cuts (sum terms <= hi) at point x for column bounds [lb, ub]; at most
  /// `max_starts` start rows, tightest (smallest relative slack) first, each aggregated
  /// with at most `max_aggregations` further rows.
  std::vector<LinearCut> separate(std::span<const double> x, std::span<const double> lb,
                                  std::span<const double> ub, int max_starts = 200,
                                  int max_aggregations = 5) const {
    Work w{x, lb, ub};
    w.max_aggregations = max_aggregations;
    w.agg.assign(n_, 0.0L);
    w.in.assign(n_, 0);
    w.icoef.assign(n_, 0.0L);
    w.iin.assign(n_, 0);
    std::vector<std::pair<double, int>> starts;  // (relative slack, row side encoded)
    for (int i = 0; i < p_.num_rows(); ++i) {
      const RowView r = p_.row(i);
      double act = 0, norm = 0;
      for (std::size_t k = 0; k < r.index.size(); ++k) act += r.value[k] * x[r.index[k]], norm += r.value[k] * r.value[k];
      norm = std::sqrt(std::max(norm, 1e-300));
      if (std::isfinite(p_.row_hi(i))) starts.emplace_back((p_.row_hi(i) - act) / norm, 2 * i);
      if (std::isfinite(p_.row_lo(i))) starts.emplace_back((act - p_.row_lo(i)) / norm, 2 * i + 1);
    }
    std::sort(starts.begin(), starts.end());
    if (static_cast<int>(starts.size()) > max_starts) starts.resize(max_starts);
    std::vector<LinearCut> cuts;
    for (const auto& s : starts) {
      LinearCut cut;
      if (from_row(w, s.second / 2, s.second % 2 == 0 ? 1.0L : -1.0L, cut)) cuts.push_back(std::move(cut));
    }
    return cuts;
  }

 private:
  // x_col <= c * y + d (upper) or x_col >= c * y + d, from a row a x + b y in [lo, hi].
  struct VarBound {
    int y;
    long double c, d;
    bool upper;
  };
  enum class Sub : std::uint8_t { kLower, kUpper, kVlb, kVub };
  struct Work {
    std::span<const double> x, lb, ub;
    std::vector<long double> agg;  // aggregated row, dense
    std::vector<char> in;          // column listed in nz
    std::vector<int> nz;
    long double beta = 0, mag = 0; // right-hand side; largest |term| met (for the margin)
    std::vector<int> used;         // rows aggregated
    std::vector<long double> icoef;  // integer coefficients after substitution, dense
    std::vector<int> inz;
    std::vector<char> iin;           // column listed in inz
    int max_aggregations = 5;
  };
  // The row after bound substitution: integers x' >= 0, continuous z >= 0.
  struct IntTerm {
    int col;
    long double a;   // coefficient of x' (x' = x - lb, or ub - x when flipped)
    bool flipped;
    double dist;     // LP value of x'
    double range;    // ub - lb
  };
  struct ContTerm {
    int col;
    long double c;   // coefficient of z
    Sub sub;
    int vb = -1;
  };

  void read_variable_bound(int i) {
    const RowView r = p_.row(i);
    for (int t = 0; t < 2; ++t) {
      const int xc = r.index[t], y = r.index[1 - t];
      const long double a = r.value[t], b = r.value[1 - t];
      if (p_.is_integer(xc) || !p_.is_integer(y) || !std::isfinite(p_.lb(y)) || !std::isfinite(p_.ub(y))) continue;
      // a x + b y <= hi  ->  x <= hi/a - (b/a) y when a > 0, x >= ... when a < 0.
      if (std::isfinite(p_.row_hi(i))) vbounds_[xc].push_back({y, -b / a, p_.row_hi(i) / a, a > 0});
      if (std::isfinite(p_.row_lo(i))) vbounds_[xc].push_back({y, -b / a, p_.row_lo(i) / a, a < 0});
    }
  }

  void add_to(Work& w, int j, long double v) const {
    if (!w.in[j]) w.in[j] = 1, w.nz.push_back(j);
    w.agg[j] += v;
  }

  bool add_row(Work& w, int i, long double lambda) const {
    const double side = lambda > 0 ? p_.row_hi(i) : p_.row_lo(i);
    if (!std::isfinite(side)) return false;
    const RowView r = p_.row(i);
    for (std::size_t k = 0; k < r.index.size(); ++k) {
      add_to(w, r.index[k], lambda * r.value[k]);
      w.mag = std::max(w.mag, std::abs(lambda * r.value[k]) * bound_size(w, r.index[k]));
    }
    w.beta += lambda * side;
    w.mag = std::max(w.mag, std::abs(lambda * side));
    w.used.push_back(i);
    return true;
  }

  static long double bound_size(const Work& w, int j) {
    const double b = std::max(std::abs(w.lb[j]), std::abs(w.ub[j]));
    return std::isfinite(b) ? std::max(1.0, b) : 1.0;
  }

  bool from_row(Work& w, int row, long double sign, LinearCut& best) const {
    for (int j : w.nz) w.agg[j] = 0, w.in[j] = 0;
    w.nz.clear();
    w.used.clear();
    w.beta = w.mag = 0;
    if (!add_row(w, row, sign)) return false;
    for (int round = 0; round <= w.max_aggregations; ++round) {
      if (try_cut(w, best)) {
        best.source_row = row;
        best.source_side = static_cast<double>(sign);
        return true;
      }
      if (round == w.max_aggregations || !aggregate(w)) return false;
    }
    return false;
  }

  // Distance of continuous column j's LP value to its nearest usable bound.
  double bound_distance(const Work& w, int j, Sub& sub, int& vb) const {
    double best = kInf;
    sub = Sub::kLower, vb = -1;
    if (std::isfinite(w.lb[j]) && w.x[j] - w.lb[j] < best) best = w.x[j] - w.lb[j], sub = Sub::kLower;
    if (std::isfinite(w.ub[j]) && w.ub[j] - w.x[j] < best) best = w.ub[j] - w.x[j], sub = Sub::kUpper;
    for (std::size_t t = 0; t < vbounds_[j].size(); ++t) {
      const VarBound& v = vbounds_[j][t];
      if (!std::isfinite(w.lb[v.y]) || !std::isfinite(w.ub[v.y])) continue;
      const double at = static_cast<double>(v.c * w.x[v.y] + v.d);
      const double d = v.upper ? at - w.x[j] : w.x[j] - at;
      if (d < best - 1e-9) best = d, sub = v.upper ? Sub::kVub : Sub::kVlb, vb = static_cast<int>(t);
    }
    return std::max(best, 0.0);
  }

  // Eliminates the continuous column farthest from its bounds with another row.
  bool aggregate(Work& w) const {
    int pick = -1;
    double far = 1e-6;
    for (int j : w.nz) {
      if (p_.is_integer(j) || std::abs(w.agg[j]) < 1e-9L) continue;
      Sub sub;
      int vb;
      const double d = bound_distance(w, j, sub, vb);
      if (d > far) far = d, pick = j;
    }
    if (pick < 0) return false;
    int best_row = -1;
    long double best_lambda = 0;
    double best_slack = kInf;
    for (const auto& [i, a] : col_rows_[pick]) {
      if (std::find(w.used.begin(), w.used.end(), i) != w.used.end()) continue;
      const long double lambda = -w.agg[pick] / a;
      if (std::abs(lambda) > 1e4L || std::abs(lambda) < 1e-4L) continue;
      const double side = lambda > 0 ? p_.row_hi(i) : p_.row_lo(i);
      if (!std::isfinite(side)) continue;
      const RowView r = p_.row(i);
      double act = 0;
      for (std::size_t k = 0; k < r.index.size(); ++k) act += r.value[k] * w.x[r.index[k]];
      const double slack = std::abs(side - act) / std::max(1.0, std::abs(a));
      if (slack < best_slack) best_slack = slack, best_row = i, best_lambda = lambda;
    }
    if (best_row < 0 || w.nz.size() + p_.row(best_row).index.size() > kMaxRowLength) return false;
    add_row(w, best_row, best_lambda);
    // The eliminated coefficient is zero up to round-off: relax by that over its range.
    const long double residue = w.agg[pick];
    w.agg[pick] = 0;
    if (residue != 0) {
      const double b = std::max(std::abs(w.lb[pick]), std::abs(w.ub[pick]));
      if (!std::isfinite(b)) return false;
      w.beta += std::abs(residue) * b;
    }
    return true;
  }

  // Bound substitution (step 2); false when a column has no usable bound.
  bool transform(Work& w, std::vector<IntTerm>& ints, std::vector<ContTerm>& conts, long double& beta) const {
    std::vector<long double>& icoef = w.icoef;
    std::vector<int>& inz = w.inz;
    ints.clear(), conts.clear();
    beta = w.beta;
    for (int j : inz) icoef[j] = 0, w.iin[j] = 0;
    inz.clear();
    auto add_int = [&](int j, long double v) {
      if (!w.iin[j]) w.iin[j] = 1, inz.push_back(j);
      icoef[j] += v;
    };
    for (int j : w.nz) {
      const long double a = w.agg[j];
      if (a == 0) continue;
      if (p_.is_integer(j)) {
        add_int(j, a);
        continue;
      }
      Sub sub;
      int vb;
      bound_distance(w, j, sub, vb);
      if (sub == Sub::kLower && !std::isfinite(w.lb[j])) return false;
      if (sub == Sub::kUpper && !std::isfinite(w.ub[j])) return false;
      switch (sub) {
        case Sub::kLower: beta -= a * w.lb[j]; conts.push_back({j, a, sub}); break;      // x = lb + z
        case Sub::kUpper: beta -= a * w.ub[j]; conts.push_back({j, -a, sub}); break;     // x = ub - z
        case Sub::kVub: {                                                                  // x = c y + d - z
          const VarBound& v = vbounds_[j][vb];
          add_int(v.y, a * v.c);
          beta -= a * v.d;
          conts.push_back({j, -a, sub, vb});
          break;
        }
        case Sub::kVlb: {                                                                  // x = c y + d + z
          const VarBound& v = vbounds_[j][vb];
          add_int(v.y, a * v.c);
          beta -= a * v.d;
          conts.push_back({j, a, sub, vb});
          break;
        }
      }
    }
    for (int j : inz) {
      const long double a = icoef[j];
      if (a == 0) continue;
      const bool has_lb = std::isfinite(w.lb[j]), has_ub = std::isfinite(w.ub[j]);
      if (!has_lb && !has_ub) return false;
      const bool flip = !has_lb || (has_ub && w.ub[j] - w.x[j] < w.x[j] - w.lb[j]);
      const double bound = flip ? w.ub[j] : w.lb[j];
      beta -= a * bound;
      ints.push_back({j, flip ? -a : a, flip, flip ? w.ub[j] - w.x[j] : w.x[j] - w.lb[j], w.ub[j] - w.lb[j]});
    }
    return !ints.empty();
  }

  // The MIR cut of the transformed row divided by delta, in the original columns.
  // Returns its efficacy at x (or -inf when f0 is outside [0.05, 0.95]).
  double mir(const Work& w, const std::vector<IntTerm>& ints, const std::vector<ContTerm>& conts,
             long double beta, long double delta, std::vector<std::pair<int, long double>>& pi,
             long double& pi0) const {
    const long double b = beta / delta, f0 = b - std::floor(b);
    if (f0 < 0.05L || f0 > 0.95L || std::abs(b) > 1e9L) return -kInf;
    pi.clear();
    pi0 = std::floor(b);
    for (const IntTerm& t : ints) {
      const long double a = t.a / delta, fa = a - std::floor(a);
      const long double F = std::floor(a) + std::max(0.0L, fa - f0) / (1 - f0);
      if (F == 0) continue;
      if (t.flipped) pi.emplace_back(t.col, -F), pi0 -= F * w.ub[t.col];
      else pi.emplace_back(t.col, F), pi0 += F * w.lb[t.col];
    }
    for (const ContTerm& t : conts) {
      const long double c = t.c / delta;
      if (c >= 0) continue;  // a positive continuous term is dropped (z >= 0)
      const long double e = c / (1 - f0);
      switch (t.sub) {
        case Sub::kLower: pi.emplace_back(t.col, e), pi0 += e * w.lb[t.col]; break;
        case Sub::kUpper: pi.emplace_back(t.col, -e), pi0 -= e * w.ub[t.col]; break;
        case Sub::kVub: {  // z = c y + d - x
          const VarBound& v = vbounds_[t.col][t.vb];
          pi.emplace_back(t.col, -e), pi.emplace_back(v.y, e * v.c), pi0 -= e * v.d;
          break;
        }
        case Sub::kVlb: {  // z = x - c y - d
          const VarBound& v = vbounds_[t.col][t.vb];
          pi.emplace_back(t.col, e), pi.emplace_back(v.y, -e * v.c), pi0 += e * v.d;
          break;
        }
      }
    }
    // Merge duplicates (a variable-bound column may also appear as an integer term).
    std::sort(pi.begin(), pi.end(), [](const auto& s, const auto& t) { return s.first < t.first; });
    std::size_t out = 0;
    for (std::size_t k = 0; k < pi.size(); ++k) {
      if (out > 0 && pi[out - 1].first == pi[k].first) pi[out - 1].second += pi[k].second;
      else pi[out++] = pi[k];
    }
    pi.resize(out);
    long double act = 0, norm = 0;
    for (const auto& [j, v] : pi) act += v * w.x[j], norm += v * v;
    if (norm < 1e-20L) return -kInf;
    return static_cast<double>((act - pi0) / std::sqrt(norm));
  }

  bool try_cut(Work& w, LinearCut& out) const {
    std::vector<IntTerm> ints;
    std::vector<ContTerm> conts;
    long double beta;
    if (!transform(w, ints, conts, beta)) return false;
    // Divisors: |a| of integers strictly inside their bounds (all integers if none).
    std::vector<long double> deltas;
    for (int pass = 0; pass < 2 && deltas.empty(); ++pass)
      for (const IntTerm& t : ints) {
        const bool inside = t.dist > 1e-6 && t.dist < t.range - 1e-6;
        const long double d = std::abs(t.a);
        if ((pass == 1 || inside) && d > 1e-6L && deltas.size() < 8 &&
            std::find(deltas.begin(), deltas.end(), d) == deltas.end())
          deltas.push_back(d);
      }
    std::vector<std::pair<int, long double>> pi, best_pi;
    long double pi0, best_pi0 = 0, best_delta = 0;
    double best = -kInf;
    auto consider = [&](long double d) {
      const double eff = mir(w, ints, conts, beta, d, pi, pi0);
      if (eff > best + 1e-9) best = eff, best_pi = pi, best_pi0 = pi0, best_delta = d;
    };
    for (long double d : deltas) consider(d);
    if (best_delta == 0) return false;
    const long double base = best_delta;
    for (long double k : {2.0L, 4.0L, 8.0L}) consider(base / k);
    // Complement each integer strictly inside its bounds the other way (the first
    // kMaxFlips); keep gains.
    int flips = 0;
    for (IntTerm& t : ints) {
      if (!(t.dist > 1e-6 && t.dist < t.range - 1e-6) || !std::isfinite(t.range)) continue;
      if (++flips > kMaxFlips) break;
      const long double bound_old = t.flipped ? w.ub[t.col] : w.lb[t.col];
      const long double bound_new = t.flipped ? w.lb[t.col] : w.ub[t.col];
      const long double a_orig = t.flipped ? -t.a : t.a;
      const long double beta_new = beta + a_orig * bound_old - a_orig * bound_new;
      t.flipped = !t.flipped, t.a = -t.a;
      const double eff = mir(w, ints, conts, beta_new, best_delta, pi, pi0);
      if (eff > best + 1e-9) {
        best = eff, best_pi = pi, best_pi0 = pi0, beta = beta_new;
      } else {
        t.flipped = !t.flipped, t.a = -t.a;
      }
    }
    if (best < 1e-4) return false;
    return finish(w, best_pi, best_pi0, best_delta, out);
  }

  // Clean-up and safety margin (see the file comment).
  bool finish(const Work& w, std::vector<std::pair<int, long double>>& pi, long double pi0, long double delta,
              LinearCut& out) const {
    long double mx = 0;
    for (const auto& [j, v] : pi) mx = std::max(mx, std::abs(v));
    if (mx < 1e-9L) return false;
    long double mag = std::max(std::abs(pi0), w.mag / delta);
    out.terms.clear();
    for (const auto& [j, v] : pi) {
      if (v == 0) continue;
      if (std::abs(v) < 1e-9L * mx) {  // relax: v x_j >= v * (its worst bound)
        const double b = v > 0 ? w.lb[j] : w.ub[j];
        if (!std::isfinite(b)) return false;
        pi0 -= v * b;
        continue;
      }
      if (std::abs(v) < 1e-6L * mx) return false;
      out.terms.emplace_back(j, static_cast<double>(v));
      mag = std::max(mag, std::abs(v) * bound_size(w, j));
    }
    if (out.terms.empty()) return false;
    pi0 += 1e-9L * std::max(1.0L, mag);
    out.lo = -kInf;
    out.hi = static_cast<double>(pi0);
    if (!std::isfinite(out.hi)) return false;
    double act = 0, norm = 0;
    for (const auto& [j, v] : out.terms) act += v * w.x[j], norm += v * v;
    out.efficacy = (act - out.hi) / std::sqrt(norm);
    return out.efficacy >= 1e-4;
  }

  static constexpr int kMaxFlips = 8;
  static constexpr std::size_t kMaxRowLength = 500;  // longer aggregated rows are not tried

  const Problem& p_;
  int n_;
  std::vector<std::vector<std::pair<int, double>>> col_rows_;
  std::vector<std::vector<VarBound>> vbounds_;
};

}  // namespace disagmoe::milp::detail
