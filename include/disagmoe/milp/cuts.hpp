// SPDX-License-Identifier: Apache-2.0
/// @file cuts.hpp
/// Root Gomory mixed-integer (GMI) cuts from the optimal simplex tableau (Gomory 1960;
/// the mixed-integer form as in Cornuéjols, "Revival of the Gomory cuts in the 1990's",
/// Annals of OR 149, 2007, eq. (2)). Each round reads the tableau rows of fractional
/// basic integer columns, complements nonbasic variables to their bounds, forms the GMI
/// inequality, substitutes the row logicals back and keeps numerically safe, violated
/// cuts; slack cuts are removed after every round. Each round also separates extended
/// knapsack covers (cover_cuts.hpp), c-MIR cuts (mir_cuts.hpp) and lifted flow covers
/// (flow_cover_cuts.hpp) of the original rows; the cut pool (cut_pool.hpp) chooses
/// among all families.
#pragma once

#include <disagmoe/milp/cover_cuts.hpp>
#include <disagmoe/milp/cut_pool.hpp>
#include <disagmoe/milp/debug_solution.hpp>
#include <disagmoe/milp/flow_cover_cuts.hpp>
#include <disagmoe/milp/mir_cuts.hpp>
#include <disagmoe/milp/problem.hpp>
#include <disagmoe/milp/dual_simplex.hpp>
#include <disagmoe/milp/result.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

namespace disagmoe::milp::detail {

class GomoryCuts {
 public:
  /// `debug` (may be null): every cut is checked against it before it is added.
  /// `flow_covers`: separate lifted flow covers too.
  GomoryCuts(const Problem& p, DualSimplex& lp, const std::vector<int>& ints,
             const DebugSolution* debug = nullptr, bool flow_covers = true)
      : p_(p), lp_(lp), n_(p.num_vars()), covers_(p), mirs_(p), flows_(p), flow_covers_(flow_covers), dbg_(debug) {
    is_int_.assign(n_, 0);
    for (int j : ints) is_int_[j] = 1;
    for (int i = 0; i < p.num_rows(); ++i) {
      const RowView r = p.row(i);
      std::vector<std::pair<int, double>> terms;
      bool integral = true;
      for (std::size_t k = 0; k < r.index.size(); ++k) {
        terms.emplace_back(r.index[k], r.value[k]);
        integral = integral && is_int_[r.index[k]] && r.value[k] == std::round(r.value[k]);
      }
      rows_.push_back(std::move(terms));
      row_int_.push_back(integral);
    }
  }

  /// Runs up to `rounds` rounds; stops early when the bound stalls. Returns the status
  /// of the last LP solve (kOptimal unless a limit or numerical trouble intervened).
  LpStatus run(int rounds, DualSimplex::Clock::time_point deadline) {
    double last = lp_.objective();
    int stall = 0;
    for (int round = 0; round < rounds; ++round) {
      round_ = round;
      const int added = separate();
      if (added == 0) break;
      const LpStatus s = lp_.solve(kInf, deadline);
      if (dbg_ != nullptr && s == LpStatus::kInfeasible)
        dbg_->fail("root LP after cut round " + std::to_string(round) + " is infeasible");
      if (s != LpStatus::kOptimal) return s;
      if (dbg_ != nullptr)
        dbg_->check_lower_bound(lp_.objective(), [&] { return "root LP after cut round " + std::to_string(round); });
      drop_slack_cuts();
      const double obj = lp_.objective();
      if (obj - last < 1e-4 * std::max(1.0, std::abs(obj))) {
        if (++stall >= 3) break;
      } else {
        stall = 0;
      }
      last = obj;
    }
    return LpStatus::kOptimal;
  }

  int cuts_in_lp() const { return static_cast<int>(rows_.size()) - p_.num_rows(); }

  /// Cuts added so far per family.
  const CutCounts& counts() const { return counts_; }

  /// Every cut added so far, in order (also those dropped later as slack).
  const std::vector<LinearCut>& added_cuts() const { return added_; }

  /// The one way a cut enters the LP: lo <= sum terms <= hi over the problem's columns;
  /// `integral` when its activity is integer at every integer point (integer columns,
  /// integer coefficients), so its logical counts as an integer for GMI. Checked against
  /// the debug solution first; `origin()` names it in that report.
  template <class Origin>
  void add_cut(std::vector<std::pair<int, double>> terms, double lo, double hi, bool integral, Origin&& origin) {
    if (dbg_ != nullptr) dbg_->check_cut(terms, lo, hi, origin);
    lp_.add_row(terms, lo, hi);
    LinearCut logged;
    logged.terms = terms;
    logged.lo = lo;
    logged.hi = hi;
    added_.push_back(std::move(logged));
    rows_.push_back(std::move(terms));
    row_int_.push_back(integral);
  }

 private:
  enum Family : int { kGmi, kCover, kMir, kFlowCover };  // PoolCut::family

  struct Cut {  // sum terms >= rhs
    std::vector<std::pair<int, double>> terms;
    double rhs;
    double score;
  };

  // One round: GMI cuts of the most fractional tableau rows, extended covers and c-MIR
  // cuts of the original rows all go to the pool, which picks the efficacious and
  // pairwise non-parallel ones for the LP.
  int separate() {
    const int m = lp_.num_rows();
    act_lo_.assign(m, 0.0);
    act_hi_.assign(m, 0.0);
    for (int i = 0; i < m; ++i)
      for (const auto& [j, v] : rows_[i]) {
        act_lo_[i] += v > 0 ? v * lp_.col_lb(j) : v * lp_.col_ub(j);
        act_hi_[i] += v > 0 ? v * lp_.col_ub(j) : v * lp_.col_lb(j);
      }
    std::vector<std::pair<double, int>> cand;
    for (int r = 0; r < m; ++r) {
      const int k = lp_.basic_var(r);
      if (k >= n_ || !is_int_[k]) continue;
      const double v = lp_.value(k);
      const double f = v - std::floor(v);
      if (f < 0.01 || f > 0.99) continue;
      cand.emplace_back(std::abs(f - 0.5), r);
    }
    std::sort(cand.begin(), cand.end());
    const std::size_t max_cuts = std::max(20, m / 2);
    std::vector<double> alpha;
    for (std::size_t c = 0; c < std::min(cand.size(), max_cuts); ++c) {
      Cut cut;
      const int r = cand[c].second, k = lp_.basic_var(r);
      if (!gmi(r, alpha, cut)) continue;
      LinearCut lc;
      lc.terms = std::move(cut.terms);
      lc.lo = cut.rhs;
      pool_.add(std::move(lc), false,
                "GMI cut of round " + std::to_string(round_) + " from tableau row " + std::to_string(r) + " (basic " +
                    p_.var_name(k) + " = " + DebugSolution::num(lp_.value(k)) + ")",
                kGmi);
    }
    std::vector<double> x(n_), lb(n_), ub(n_);
    for (int j = 0; j < n_; ++j) x[j] = lp_.value(j), lb[j] = lp_.col_lb(j), ub[j] = lp_.col_ub(j);
    // Covers: integral coefficients and sides, so their logicals are integer for GMI.
    for (LinearCut& cut : covers_.separate(x, lb, ub)) {
      std::string origin = "extended cover cut of round " + std::to_string(round_) + " from row " +
                           p_.row_name(cut.source_row) + (cut.source_side > 0 ? " (<= side)" : " (>= side)");
      pool_.add(std::move(cut), true, std::move(origin), kCover);
    }
    for (LinearCut& cut : mirs_.separate(x, lb, ub)) {
      std::string origin = "c-MIR cut of round " + std::to_string(round_) + " aggregated from row " +
                           p_.row_name(cut.source_row) + (cut.source_side > 0 ? " (<= side)" : " (>= side)");
      pool_.add(std::move(cut), false, std::move(origin), kMir);
    }
    if (flow_covers_) {
      for (LinearCut& cut : flows_.separate(x, lb, ub)) {
        std::string origin = "flow cover cut of round " + std::to_string(round_) + " from row " +
                             p_.row_name(cut.source_row) + (cut.source_side > 0 ? " (<= side)" : " (>= side)");
        pool_.add(std::move(cut), false, std::move(origin), kFlowCover);
      }
    }
    std::vector<PoolCut> chosen = pool_.select(x, max_cuts + 10);
    for (PoolCut& pc : chosen) {
      int& count = pc.family == kGmi ? counts_.gmi : pc.family == kCover ? counts_.cover
                                   : pc.family == kMir ? counts_.mir : counts_.flow_cover;
      ++count;
      const std::string& origin = pc.origin;
      add_cut(std::move(pc.cut.terms), pc.cut.lo, pc.cut.hi, pc.integral, [&] { return origin; });
    }
    return static_cast<int>(chosen.size());
  }

  // Safety rules (the usual ones, e.g. Cornuéjols 2007 §4; Wesselmann and Stuhl,
  // "Implementing cutting plane management and selection techniques", 2012): a row is
  // used only when x_B = -sum alpha_j x_j (nonbasics at their bounds) reproduces the LP
  // value of the basic variable (otherwise the tableau row is numerically dubious) and
  // no |alpha_j| exceeds 1e6 (an ill-conditioned basis); round-off entries of alpha
  // (below 1e-11) are not dropped silently but relaxed by their largest effect over
  // the variable's range, for a logical also bounded by its row's activity (over an
  // infinite range an entry above 1e-14 rejects the cut); the final cut is rejected
  // when its coefficients span more than 6 orders of magnitude.
  bool gmi(int r, std::vector<double>& alpha, Cut& cut) {
    lp_.tableau_row(r, alpha);
    const double beta = lp_.value(lp_.basic_var(r));
    const double f0 = beta - std::floor(beta);
    const int total = n_ + lp_.num_rows();
    double beta_row = 0, beta_scale = std::abs(beta);
    for (int j = 0; j < total; ++j) {
      const double a = alpha[j];
      if (a == 0.0) continue;
      if (std::abs(a) > 1e6) return false;
      const BasisStatus st = lp_.status(j);
      if (st == BasisStatus::kFree) return false;
      const double bound = st == BasisStatus::kAtLower ? lp_.var_lb(j) : lp_.var_ub(j);
      if (!std::isfinite(bound)) return false;
      beta_row -= a * bound;
      beta_scale = std::max(beta_scale, std::abs(a * bound));
    }
    if (std::abs(beta_row - beta) > 1e-9 * std::max(1.0, beta_scale)) return false;
    std::vector<double> pi(n_, 0.0);
    double pi0 = 1.0;
    const double gmax = 1.0 / std::min(f0, 1.0 - f0);  // largest g per unit of |alpha|
    for (int j = 0; j < total; ++j) {
      const double a = alpha[j];
      if (a == 0.0) continue;
      const BasisStatus st = lp_.status(j);
      const bool lower = st == BasisStatus::kAtLower;
      const double bound = lower ? lp_.var_lb(j) : lp_.var_ub(j);
      if (std::abs(a) < 1e-11) {
        // 0 <= g t_j <= gmax |a| (ub - lb): drop the term, lower the right-hand side. A
        // logical's range is also bounded by its row's activity over the column bounds.
        double lo = lp_.var_lb(j), hi = lp_.var_ub(j);
        if (j >= n_) lo = std::max(lo, act_lo_[j - n_]), hi = std::min(hi, act_hi_[j - n_]);
        const double range = hi - lo;
        if (std::isfinite(range)) {
          pi0 -= gmax * std::abs(a) * range;
        } else if (std::abs(a) > 1e-14) {
          return false;  // could matter over an unbounded range
        }  // else round-off of an entry that is zero in exact arithmetic
        continue;
      }
      const double ap = lower ? a : -a;  // coefficient of t_j >= 0
      const bool int_t = j < n_ ? is_int_[j] != 0
                                : row_int_[j - n_] && bound == std::round(bound);
      double g;
      if (int_t) {
        const double fj = ap - std::floor(ap);
        g = fj <= f0 ? fj / f0 : (1 - fj) / (1 - f0);
      } else {
        g = ap >= 0 ? ap / f0 : -ap / (1 - f0);
      }
      if (g == 0.0) continue;
      const double gs = lower ? g : -g;  // g * t_j = gs * x_j - gs * bound
      pi0 += gs * bound;
      if (j < n_) {
        pi[j] += gs;
      } else {
        for (const auto& [c, v] : rows_[j - n_]) pi[c] += gs * v;
      }
    }
    // Clean up: drop tiny coefficients by relaxing with the variable's bounds.
    double mx = 0;
    for (double v : pi) mx = std::max(mx, std::abs(v));
    if (mx < 1e-9) return false;
    double viol = pi0, norm = 0;
    for (int j = 0; j < n_; ++j) {
      const double v = pi[j];
      if (v == 0.0) continue;
      if (std::abs(v) < 1e-9 * mx) {
        const double b = v > 0 ? lp_.col_ub(j) : lp_.col_lb(j);
        if (!std::isfinite(b)) return false;
        pi0 -= v * b;
        viol -= v * b;
        continue;
      }
      if (std::abs(v) < 1e-6 * mx) return false;  // too much dynamism to be safe
      cut.terms.emplace_back(j, v);
      viol -= v * lp_.value(j);
      norm += v * v;
    }
    if (cut.terms.empty() || !std::isfinite(pi0)) return false;
    cut.score = viol / std::sqrt(norm);
    if (cut.score < 1e-5 || std::abs(pi0) > 1e9 * mx) return false;
    // Relax the right-hand side a little against round-off (the cut stays valid).
    cut.rhs = pi0 - 1e-9 * std::max(1.0, std::abs(pi0));
    return true;
  }

  void drop_slack_cuts() {
    const int m = lp_.num_rows(), m0 = p_.num_rows();
    std::vector<char> drop(m, 0);
    bool any = false;
    for (int i = m0; i < m; ++i) {
      if (lp_.is_basic(n_ + i)) {
        drop[i] = 1;
        any = true;
      }
    }
    if (!any) return;
    lp_.remove_slack_rows(drop);
    std::vector<std::vector<std::pair<int, double>>> rows;
    std::vector<char> row_int;
    for (int i = 0; i < m; ++i) {
      if (drop[i]) continue;
      rows.push_back(std::move(rows_[i]));
      row_int.push_back(row_int_[i]);
    }
    rows_ = std::move(rows);
    row_int_ = std::move(row_int);
  }

  const Problem& p_;
  DualSimplex& lp_;
  int n_;
  std::vector<char> is_int_, row_int_;
  std::vector<std::vector<std::pair<int, double>>> rows_;
  CoverSeparator covers_;
  MirSeparator mirs_;
  FlowCoverSeparator flows_;
  bool flow_covers_ = true;
  CutPool pool_;
  CutCounts counts_;
  const DebugSolution* dbg_ = nullptr;
  int round_ = 0;
  std::vector<LinearCut> added_;
  std::vector<double> act_lo_, act_hi_;  // row activity bounds over the column bounds
};

}  // namespace disagmoe::milp::detail
