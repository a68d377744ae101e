// SPDX-License-Identifier: Apache-2.0
/// @file flow_cover_cuts.hpp
/// Lifted flow cover cuts from single-node flow sets (Padberg, Van Roy and Wolsey,
/// "Valid linear inequalities for fixed charge problems", Operations Research 33(4),
/// 1985; Van Roy and Wolsey, "Valid inequalities for mixed 0-1 programs", Discrete
/// Applied Mathematics 14, 1986; lifting as in Gu, Nemhauser and Savelsbergh, "Lifted
/// flow cover inequalities for mixed 0-1 integer programs", Mathematical Programming
/// 85, 1999).
///
/// Every row side a·z <= b is relaxed to a flow set
///   sum_{N1} y_j - sum_{N2} y_j <= b',  0 <= y_j <= u_j x_j,  x_j binary:
///  * a continuous column with lower bound 0 and a variable upper bound z <= c·w (w
///    binary, read from a two-column row) is the flow y = |a| z of switch w with
///    u = |a| min(c, ub) (z <= c w and z <= ub imply z <= min(c, ub) w);
///  * a binary w is the flow y = |a| w of switch w, u = |a|;
///  * any other column with a finite bound is an always-on flow (x = 1) over its
///    shifted range (its bound goes to b'); without one the row is skipped.
/// A flow cover C1 ⊆ N1, C2 ⊆ N2 with lambda = sum_{C1} u - sum_{C2} u - b' > 0 gives
/// the generalized flow cover inequality (Van Roy and Wolsey 1986, L2 ⊆ N2 \ C2)
///   sum_{C1} y_j + sum_{C1} (u_j - lambda)^+ (1 - x_j)
///     - sum_{L2} lambda x_j - sum_{N2\(C2∪L2)} y_j <= b' + sum_{C2} u_j,
/// and with L2 empty its lift over N1 \ C1: each such flow adds y_j - k(u_j) x_j where
/// k(z) = sum_{i<r} clamp(z - i·ū, 0, ū - lambda), r = |{j ∈ C1 : u_j > lambda}| and
/// ū = max_{C1} u_j. Why that is valid: z - k(z) = g(z) is superadditive (the
/// mixed-integer rounding function of period ū, continued with slope 1 after r
/// periods), 1-Lipschitz and below the exact lifting function f of the cover (f's
/// breakpoints are partial sums of the sorted u_j, each at most i·ū), so the
/// sequence-independent lifting of Gu et al. applies; a flow of capacity z spends
/// z - k(z) <= g(z) of the cover's slack.
///
/// Covers: two greedy orders over the flows with y* > 0 (x* descending; (1 - x*)/u
/// ascending) with C2 the outflows whose switch is on at x* (or none). Each cover
/// gives the lifted cut and the L2 cut (an outflow is in L2 when lambda x* < y*); the
/// more efficacious is kept, one per row side.
///
/// Safe by construction: long double arithmetic; lambda at least 1e-6 of the largest
/// capacity in the cover; cuts whose coefficients span more than 6 orders of magnitude
/// are dropped; tiny coefficients are relaxed with their bounds; the right-hand side is
/// relaxed by 1e-9 of the largest magnitude met.
#pragma once

#include <disagmoe/milp/cover_cuts.hpp>
#include <disagmoe/milp/problem.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <utility>
#include <vector>

namespace disagmoe::milp::detail {

class FlowCoverSeparator {
 public:
  explicit FlowCoverSeparator(const Problem& p) : p_(p), vub_(p.num_vars()) {
    for (int i = 0; i < p.num_rows(); ++i) {
      const RowView r = p.row(i);
      if (r.index.size() != 2) continue;
      for (int t = 0; t < 2; ++t) {
        // z + b w <= hi with hi == 0, b < 0: z <= -b w (scaled by a > 0).
        const int z = r.index[t], w = r.index[1 - t];
        const double a = r.value[t], b = r.value[1 - t];
        if (p.is_integer(z) || !is_binary_col(w)) continue;
        if (a > 0 && p.row_hi(i) == 0 && b < 0) vub_[z].push_back({w, -b / a});
        if (a < 0 && p.row_lo(i) == 0 && b > 0) vub_[z].push_back({w, -b / a});
      }
    }
  }

  /// Violated flow cover cuts (sum terms <= hi) at point x for column bounds [lb, ub].
  std::vector<LinearCut> separate(std::span<const double> x, std::span<const double> lb,
                                  std::span<const double> ub) const {
    std::vector<LinearCut> cuts;
    for (int i = 0; i < p_.num_rows(); ++i) {
      LinearCut cut;
      if (std::isfinite(p_.row_hi(i)) && from_side(i, 1.0L, x, lb, ub, cut)) cuts.push_back(std::move(cut));
      if (std::isfinite(p_.row_lo(i)) && from_side(i, -1.0L, x, lb, ub, cut)) cuts.push_back(std::move(cut));
    }
    return cuts;
  }

 private:
  struct Vub {
    int w;
    double c;  // z <= c w
  };
  // One flow: y = ys * (z[ycol] - yshift) (ycol == -1: y = ys * x), switch x = z[xcol]
  // (xcol == -1: always on).
  struct Flow {
    bool out;  // in N2
    long double u, ys, yshift;
    int ycol, xcol;
    double y, xv;  // values at x*
  };

  bool is_binary_col(int j) const { return p_.is_integer(j) && p_.lb(j) == 0.0 && p_.ub(j) == 1.0; }

  static bool binary_at(int j, const Problem& p, std::span<const double> lb, std::span<const double> ub) {
    return p.is_integer(j) && lb[j] == 0.0 && ub[j] == 1.0;
  }

  // The flow set of side sign * row <= sign-side; false when a column is unbounded.
  bool flows_of(int i, long double sign, std::span<const double> x, std::span<const double> lb,
                std::span<const double> ub, std::vector<Flow>& flows, long double& b, long double& mag) const {
    const RowView r = p_.row(i);
    b = sign > 0 ? p_.row_hi(i) : -p_.row_lo(i);
    mag = std::abs(b);
    flows.clear();
    bool switched = false;
    for (std::size_t k = 0; k < r.index.size(); ++k) {
      const int j = r.index[k];
      const long double a = sign * r.value[k];
      if (a == 0) continue;
      const bool out = a < 0;
      const long double s = std::abs(a);
      if (binary_at(j, p_, lb, ub)) {
        flows.push_back({out, s, s, 0, j, j, static_cast<double>(s * x[j]), x[j]});
        switched = true;
        continue;
      }
      const Vub* v = nullptr;
      if (!p_.is_integer(j) && lb[j] == 0.0) {
        for (const Vub& c : vub_[j])
          if (binary_at(c.w, p_, lb, ub) && (v == nullptr || c.c < v->c)) v = &c;
      }
      if (v != nullptr) {  // z <= c w and z <= ub give z <= min(c, ub) w for binary w
        const long double u = s * std::min<long double>(v->c, ub[j]);
        flows.push_back({out, u, s, 0, j, v->w, static_cast<double>(s * x[j]), x[v->w]});
        switched = true;
        mag = std::max(mag, u);
        continue;
      }
      // Always on: a z = a lb + sign(a) |a| (z - lb), or a ub - sign(a) |a| (ub - z).
      if (std::isfinite(lb[j])) {
        b -= a * lb[j];
        mag = std::max(mag, std::abs(a * lb[j]));
        flows.push_back({out, s * (static_cast<long double>(ub[j]) - lb[j]), s, lb[j], j, -1,
                         static_cast<double>(s * (x[j] - lb[j])), 1.0});
      } else if (std::isfinite(ub[j])) {
        b -= a * ub[j];
        mag = std::max(mag, std::abs(a * ub[j]));
        // y = |a| (ub - z): ys = -|a|, yshift = ub; the flow is on the other side.
        flows.push_back({!out, kInfL, -s, ub[j], j, -1, static_cast<double>(s * (ub[j] - x[j])), 1.0});
      } else {
        return false;
      }
    }
    return switched && flows.size() >= 2;
  }

  bool from_side(int i, long double sign, std::span<const double> x, std::span<const double> lb,
                 std::span<const double> ub, LinearCut& best) const {
    std::vector<Flow> f;
    long double b, mag;
    if (!flows_of(i, sign, x, lb, ub, f, b, mag)) return false;
    std::vector<int> in;
    for (std::size_t t = 0; t < f.size(); ++t)
      if (!f[t].out && f[t].y > 1e-9 && std::isfinite(static_cast<double>(f[t].u))) in.push_back(static_cast<int>(t));
    if (in.empty()) return false;
    bool found = false;
    best.efficacy = 1e-4;  // the least efficacy kept
    for (int order = 0; order < 2; ++order) {
      std::sort(in.begin(), in.end(), [&](int s, int t) {
        const double ks = order == 0 ? -f[s].xv : (1 - f[s].xv) / static_cast<double>(f[s].u);
        const double kt = order == 0 ? -f[t].xv : (1 - f[t].xv) / static_cast<double>(f[t].u);
        return ks != kt ? ks < kt : f[s].u > f[t].u;
      });
      for (int with_c2 = 0; with_c2 < 2; ++with_c2) found = try_cover(f, in, with_c2 == 1, b, mag, x, lb, ub, best) || found;
    }
    if (found) best.source_row = i, best.source_side = static_cast<double>(sign);
    return found;
  }

  // The cover of the inflows `in` taken in order until they exceed b' (plus C2's
  // capacity when `with_c2`); its two cuts replace `best` when more efficacious.
  bool try_cover(const std::vector<Flow>& f, const std::vector<int>& in, bool with_c2, long double b,
                 long double mag, std::span<const double> x, std::span<const double> lb,
                 std::span<const double> ub, LinearCut& best) const {
    std::vector<char> c1(f.size(), 0), c2(f.size(), 0);
    long double cap = b;
    for (std::size_t t = 0; t < f.size() && with_c2; ++t) {
      if (!f[t].out || f[t].xcol < 0 || f[t].xv <= 0.5) continue;
      if (!std::isfinite(static_cast<double>(f[t].u))) return false;
      c2[t] = 1, cap += f[t].u;
    }
    long double sum = 0, umax = 0;
    for (int t : in) {
      if (sum > cap) break;
      c1[t] = 1, sum += f[t].u, umax = std::max(umax, f[t].u);
    }
    const long double lambda = sum - cap;
    if (!(lambda > 1e-6L * std::max(1.0L, umax))) return false;
    bool found = false;
    for (int lifted = 0; lifted < 2; ++lifted) {
      LinearCut cut;
      if (build(f, c1, c2, cap, lambda, umax, lifted == 1, x, lb, ub, mag, cut) && cut.efficacy > best.efficacy) {
        best = std::move(cut);
        found = true;
      }
    }
    return found;
  }

  // k(z) of the file comment: the part of a lifted flow's capacity the cut charges.
  static long double lift_charge(long double z, long double umax, long double lambda, int r) {
    if (!std::isfinite(static_cast<double>(z))) return r * (umax - lambda);
    long double k = 0;
    for (int q = 0; q < r; ++q) k += std::clamp(z - q * umax, 0.0L, umax - lambda);
    return k;
  }

  bool build(const std::vector<Flow>& f, const std::vector<char>& c1, const std::vector<char>& c2, long double cap,
             long double lambda, long double umax, bool lifted, std::span<const double> x,
             std::span<const double> lb, std::span<const double> ub, long double mag, LinearCut& out) const {
    int r = 0;
    for (std::size_t t = 0; t < f.size(); ++t) r += c1[t] && f[t].u > lambda;
    std::vector<std::pair<int, long double>> pi;
    long double rhs = cap;  // b' + sum_{C2} u
    // coef * y_t, y = ys (z - yshift).
    auto add_y = [&](const Flow& fl, long double coef) {
      pi.emplace_back(fl.ycol, coef * fl.ys);
      rhs += coef * fl.ys * fl.yshift;
    };
    auto add_x = [&](const Flow& fl, long double coef) {  // coef * x_t
      if (fl.xcol >= 0) pi.emplace_back(fl.xcol, coef);
      else rhs -= coef;
    };
    for (std::size_t t = 0; t < f.size(); ++t) {
      const Flow& fl = f[t];
      if (c1[t]) {
        add_y(fl, 1);
        const long double d = fl.u - lambda;
        if (d > 0) rhs -= d, add_x(fl, -d);  // d (1 - x)
      } else if (!fl.out) {
        if (!lifted) continue;
        const long double k = lift_charge(fl.u, umax, lambda, r);
        const double xv = fl.xcol >= 0 ? x[fl.xcol] : 1.0;
        if (fl.y - static_cast<double>(k) * xv <= 0) continue;  // only terms that add violation
        add_y(fl, 1);
        add_x(fl, -k);
      } else if (!c2[t]) {
        const bool l2 = !lifted && fl.xcol >= 0 && static_cast<double>(lambda) * fl.xv < fl.y;
        if (l2) add_x(fl, -lambda);
        else add_y(fl, -1);
      }
    }
    std::sort(pi.begin(), pi.end(), [](const auto& s, const auto& t) { return s.first < t.first; });
    std::size_t n = 0;
    for (std::size_t k = 0; k < pi.size(); ++k) {
      if (n > 0 && pi[n - 1].first == pi[k].first) pi[n - 1].second += pi[k].second;
      else pi[n++] = pi[k];
    }
    pi.resize(n);
    long double mx = 0;
    for (const auto& [j, v] : pi) mx = std::max(mx, std::abs(v));
    if (mx < 1e-9L) return false;
    mag = std::max({mag, std::abs(rhs), std::abs(cap)});
    out.terms.clear();
    for (const auto& [j, v] : pi) {
      if (v == 0) continue;
      if (std::abs(v) < 1e-9L * mx) {  // relax: v z_j >= v * (its worst bound)
        const double bd = v > 0 ? lb[j] : ub[j];
        if (!std::isfinite(bd)) return false;
        rhs -= v * bd;
        continue;
      }
      if (std::abs(v) < 1e-6L * mx) return false;
      out.terms.emplace_back(j, static_cast<double>(v));
      const double bs = std::max(std::abs(lb[j]), std::abs(ub[j]));
      mag = std::max(mag, std::abs(v) * (std::isfinite(bs) ? std::max(1.0, bs) : 1.0));
    }
    if (out.terms.empty()) return false;
    rhs += 1e-9L * std::max(1.0L, mag);
    out.lo = -kInf;
    out.hi = static_cast<double>(rhs);
    if (!std::isfinite(out.hi)) return false;
    double act = 0, norm = 0;
    for (const auto& [j, v] : out.terms) act += v * x[j], norm += v * v;
    out.efficacy = (act - out.hi) / std::sqrt(norm);
    return true;
  }

  static constexpr long double kInfL = std::numeric_limits<long double>::infinity();

  const Problem& p_;
  std::vector<std::vector<Vub>> vub_;
};

}  // namespace disagmoe::milp::detail
