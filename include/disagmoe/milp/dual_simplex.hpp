// SPDX-License-Identifier: Apache-2.0
/// @file dual_simplex.hpp
/// Bounded-variable dual simplex on Eigen, the LP engine of the branch and bound.
///
/// Computational form (Koberstein 2005, §2.2): min c·x  s.t.  A x - r = 0,
/// l <= x <= u, rl <= r <= ru — every row gets a logical variable r_i with column -e_i,
/// so row and column bounds are handled alike and the all-logical basis is always valid.
/// Algorithm (Koberstein 2005, Alg. 2 and 7; Forrest and Goldfarb 1992 for the dual
/// steepest-edge weights; Harris 1973 for the two-pass ratio test):
///  * dual phase 1 by the auxiliary problem (Fourer 1994; Koberstein §4.1.3): replace
///    bounds by boxes {0,[0,1],[-1,0],[-1,1]} and run the dual phase 2 on it; a zero
///    optimum leaves a dual feasible basis for the real bounds;
///  * dual phase 2 with dual steepest-edge pricing and a Harris ratio test; cost shifting
///    keeps the reduced costs feasible; random cost perturbation breaks stalling (cycling);
///  * if the problem is dual infeasible, the same loop with zero costs decides between
///    infeasible and unbounded;
///  * geometric scaling of rows and columns by powers of two (exact);
///  * warm start from any basis (branch and bound reloads the parent's basis).
/// `solve_lp` (simplex.hpp) is the one-call entry point.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/milp/basis_factor.hpp>
#include <disagmoe/milp/lp_scaling.hpp>
#include <disagmoe/milp/lp_status.hpp>
#include <disagmoe/milp/problem.hpp>
#include <disagmoe/milp/ratio_test.hpp>

#include <Eigen/Dense>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <vector>

namespace disagmoe::milp {

namespace detail {

/// The dual simplex engine. Variables 0..n-1 are the columns of the Problem, n..n+m-1
/// the logicals of its rows (r_i = a_i·x). The objective is minimised internally;
/// maximisation problems are negated on construction. Memory O(nnz + (n+m) + m^2 worst
/// case in the factor); one iteration costs three triangular solves plus O(nnz(A)).
class DualSimplex {
 public:
  using Clock = std::chrono::steady_clock;

  double primal_tol = 1e-7;  ///< feasibility tolerance (scaled space)
  double dual_tol = 1e-7;    ///< optimality tolerance on reduced costs (scaled space)
  long iteration_limit = -1; ///< per solve; -1: 50 (n + m) + 10000

  explicit DualSimplex(const Problem& p, bool scale = true) : n_(p.num_vars()), m_(0) {
    const double sign = p.sense() == Sense::kMaximize ? -1.0 : 1.0;
    col_scale_.assign(n_, 1.0);
    std::vector<std::vector<std::pair<int, double>>> rows(p.num_rows());
    for (int i = 0; i < p.num_rows(); ++i) {
      const RowView r = p.row(i);
      for (std::size_t k = 0; k < r.index.size(); ++k) rows[i].emplace_back(r.index[k], r.value[k]);
    }
    std::vector<double> rs(p.num_rows(), 1.0);
    if (scale) geometric_scale(rows, col_scale_, rs);
    lb_.resize(n_);
    ub_.resize(n_);
    cost_.resize(n_);
    for (int j = 0; j < n_; ++j) {
      lb_[j] = p.lb(j) / col_scale_[j];
      ub_[j] = p.ub(j) / col_scale_[j];
      cost_[j] = sign * p.obj(j) * col_scale_[j];
    }
    status_.assign(n_, BasisStatus::kAtLower);
    x_.assign(n_, 0.0);
    for (int i = 0; i < p.num_rows(); ++i) append_row(rows[i], p.row_lo(i), p.row_hi(i), rs[i]);
    true_cost_ = cost_;
    d_.assign(n_ + m_, 0.0);
    row_.assign(n_ + m_, 0.0);
    build_columns();
  }

  int num_cols() const { return n_; }
  int num_rows() const { return m_; }
  long iterations() const { return iterations_; }

  /// Sets the bounds of column j (unscaled). O(1); the next solve re-derives x_B.
  void set_col_bounds(int j, double lo, double hi) {
    lb_[j] = lo / col_scale_[j];
    ub_[j] = hi / col_scale_[j];
  }
  double col_lb(int j) const { return lb_[j] * col_scale_[j]; }
  double col_ub(int j) const { return ub_[j] * col_scale_[j]; }

  /// Appends the row lo <= sum val·x[idx] <= hi (unscaled) with its logical basic, so a
  /// dual feasible basis stays dual feasible (cuts). Refactors on the next solve.
  void add_row(const std::vector<std::pair<int, double>>& terms, double lo, double hi);

  /// The current basis status of all n + m variables.
  const std::vector<BasisStatus>& basis() const { return status_; }
  /// Loads a basis (from basis() earlier, same dimensions); falls back to the logical
  /// basis when it does not have exactly m basic variables. Resets DSE weights.
  void set_basis(const std::vector<BasisStatus>& b) {
    if (static_cast<int>(b.size()) != n_ + m_) return;
    int basic = 0;
    for (auto s : b) basic += s == BasisStatus::kBasic;
    if (basic != m_) return;
    status_ = b;
    head_.clear();
    for (int k = 0; k < n_ + m_; ++k)
      if (status_[k] == BasisStatus::kBasic) head_.push_back(k);
    weight_.assign(m_, 1.0);
    factored_ = false;
  }

  /// Returns to the all-logical basis (a fresh start after numerical trouble).
  void reset_basis() {
    for (int k = 0; k < n_ + m_; ++k) status_[k] = k < n_ ? BasisStatus::kAtLower : BasisStatus::kBasic;
    head_.resize(m_);
    for (int r = 0; r < m_; ++r) head_[r] = n_ + r;
    weight_.assign(m_, 1.0);
    factored_ = false;
  }

  /// Removes the rows i with drop[i] whose logical is basic (slack cuts). The basis
  /// stays valid and optimal: a basic logical's row and column leave B together.
  void remove_slack_rows(const std::vector<char>& drop);

  /// Basis status of variable k (column or logical).
  BasisStatus status(int k) const { return status_[k]; }

  /// Solves from the current basis. Stops with kCutoff once the dual objective provably
  /// exceeds `cutoff` (internal minimisation units, without offset).
  LpStatus solve(double cutoff = kInf, Clock::time_point deadline = Clock::time_point::max()) {
    deadline_ = deadline;
    perturbed_this_solve_ = false;
    limit_ = iterations_ + (iteration_limit >= 0 ? iteration_limit : 50L * (n_ + m_) + 10000);
    if (!factored_) refactor();
    for (int pass = 0; pass < 4; ++pass) {
      compute_duals();
      place_nonbasic();
      compute_primal();
      if (max_dual_infeasibility() > dual_tol) {
        const LpStatus s1 = phase1();
        if (s1 != LpStatus::kOptimal) return s1;
        if (max_dual_infeasibility() > dual_tol) return decide_unbounded();
      }
      const LpStatus s = iterate(cutoff);
      if (s != LpStatus::kOptimal) return s;
      if (!shifted_) return LpStatus::kOptimal;
      cost_ = true_cost_;
      shifted_ = false;
      compute_duals();
      if (max_dual_infeasibility() <= dual_tol && !boxed_flip_needed()) return LpStatus::kOptimal;
    }
    return LpStatus::kOptimal;  // accepted with tiny dual infeasibilities
  }

  /// Objective value c·x of the current basic solution (internal minimisation units).
  double objective() const {
    double v = 0;
    for (int j = 0; j < n_; ++j) v += cost_[j] * x_[j];
    return v;
  }
  /// Value of column j (unscaled).
  double value(int j) const { return x_[j] * col_scale_[j]; }
  /// Activity of row i (unscaled).
  double row_activity(int i) const { return x_[n_ + i] / row_scale_[i]; }
  /// Reduced cost of column j (unscaled, internal minimisation sign).
  double reduced_cost(int j) const { return d_[j] / col_scale_[j]; }
  /// Dual value of row i (unscaled, internal minimisation sign).
  double row_dual(int i) const { return d_[n_ + i] * row_scale_[i]; }
  bool is_basic(int k) const { return status_[k] == BasisStatus::kBasic; }
  /// Basic variable (index into 0..n+m-1) at basis position r.
  int basic_var(int r) const { return head_[r]; }
  /// Bound of variable k (column or logical) in unscaled units.
  double var_lb(int k) const { return lb_[k] * unscale(k); }
  double var_ub(int k) const { return ub_[k] * unscale(k); }
  double var_value(int k) const { return x_[k] * unscale(k); }
  /// Row r of the simplex tableau in unscaled units: x_{B_r} + sum_j alpha[j] x_j = 0
  /// over the nonbasic j (alpha[j] = 0 for basic j). Costs one BTRAN and O(nnz).
  void tableau_row(int r, std::vector<double>& alpha) {
    if (!factored_) refactor();
    Eigen::VectorXd rho = Eigen::VectorXd::Zero(m_);
    rho[r] = 1.0;
    factor_.btran(rho);
    compute_row(rho);
    alpha.assign(n_ + m_, 0.0);
    const double sb = unscale(head_[r]);
    for (int k = 0; k < n_ + m_; ++k)
      if (status_[k] != BasisStatus::kBasic) alpha[k] = row_[k] * sb / unscale(k);
  }

 private:
  // x_k(unscaled) = x_k(scaled) * unscale(k).
  double unscale(int k) const { return k < n_ ? col_scale_[k] : 1.0 / row_scale_[k - n_]; }

  // Appends a row scaled by rs with its logical (basic when the basis is not full).
  void append_row(const std::vector<std::pair<int, double>>& terms, double lo, double hi, double rs);

  // Rebuilds the column-wise copy of the scaled rows.
  void build_columns();

  double col_dot(int j, const Eigen::VectorXd& v) const {
    if (j >= n_) return -v[j - n_];
    double s = 0;
    for (int k = cstart_[j]; k < cstart_[j + 1]; ++k) s += cval_[k] * v[cidx_[k]];
    return s;
  }
  void col_axpy(int j, double a, Eigen::VectorXd& v) const {
    if (j >= n_) {
      v[j - n_] -= a;
      return;
    }
    for (int k = cstart_[j]; k < cstart_[j + 1]; ++k) v[cidx_[k]] += a * cval_[k];
  }

  void refactor() {
    std::vector<Eigen::Triplet<double>> t;
    for (int r = 0; r < m_; ++r) {
      const int j = head_[r];
      if (j >= n_) {
        t.emplace_back(j - n_, r, -1.0);
      } else {
        for (int k = cstart_[j]; k < cstart_[j + 1]; ++k) t.emplace_back(cidx_[k], r, cval_[k]);
      }
    }
    if (!factor_.factor(m_, t)) {
      // Singular basis (numerical trouble): restart from the logical basis.
      reset_basis();
      t.clear();
      for (int r = 0; r < m_; ++r) t.emplace_back(r, r, -1.0);
      if (!factor_.factor(m_, t)) throw SolverError("dual simplex: logical basis failed to factor");
    }
    factored_ = true;
  }

  void compute_duals() {
    Eigen::VectorXd y(m_);
    for (int r = 0; r < m_; ++r) y[r] = cost_[head_[r]];
    factor_.btran(y);
    for (int k = 0; k < n_ + m_; ++k)
      d_[k] = status_[k] == BasisStatus::kBasic ? 0.0 : cost_[k] - col_dot(k, y);
  }

  // Nonbasic variables at the bound their reduced cost asks for (boxed ones), at
  // their only finite bound otherwise, or at zero when free.
  void place_nonbasic() {
    for (int k = 0; k < n_ + m_; ++k) {
      if (status_[k] == BasisStatus::kBasic) continue;
      const bool fl = lb_[k] > -kInf, fu = ub_[k] < kInf;
      if (fl && fu) {
        if (lb_[k] == ub_[k]) {
          status_[k] = BasisStatus::kAtLower;
        } else if (d_[k] > dual_tol) {
          status_[k] = BasisStatus::kAtLower;
        } else if (d_[k] < -dual_tol) {
          status_[k] = BasisStatus::kAtUpper;
        } else if (status_[k] == BasisStatus::kFree) {
          status_[k] = BasisStatus::kAtLower;
        }
      } else if (fl) {
        status_[k] = BasisStatus::kAtLower;
      } else if (fu) {
        status_[k] = BasisStatus::kAtUpper;
      } else {
        status_[k] = BasisStatus::kFree;
      }
      x_[k] = status_[k] == BasisStatus::kAtLower ? lb_[k]
              : status_[k] == BasisStatus::kAtUpper ? ub_[k] : 0.0;
    }
  }

  bool boxed_flip_needed() const {
    for (int k = 0; k < n_ + m_; ++k) {
      if (status_[k] == BasisStatus::kAtLower && d_[k] < -dual_tol && ub_[k] > lb_[k]) return true;
      if (status_[k] == BasisStatus::kAtUpper && d_[k] > dual_tol && ub_[k] > lb_[k]) return true;
    }
    return false;
  }

  void compute_primal() {
    Eigen::VectorXd rhs = Eigen::VectorXd::Zero(m_);
    for (int k = 0; k < n_ + m_; ++k)
      if (status_[k] != BasisStatus::kBasic && x_[k] != 0.0) col_axpy(k, -x_[k], rhs);
    factor_.ftran(rhs);
    for (int r = 0; r < m_; ++r) x_[head_[r]] = rhs[r];
  }

  // Largest reduced cost of the wrong sign among non-boxed nonbasic variables.
  double max_dual_infeasibility() const {
    double worst = 0;
    for (int k = 0; k < n_ + m_; ++k) {
      const BasisStatus s = status_[k];
      if (s == BasisStatus::kBasic || lb_[k] == ub_[k]) continue;
      const bool boxed = lb_[k] > -kInf && ub_[k] < kInf;
      if (boxed) continue;
      if (s == BasisStatus::kAtLower) worst = std::max(worst, -d_[k]);
      else if (s == BasisStatus::kAtUpper) worst = std::max(worst, d_[k]);
      else worst = std::max(worst, std::abs(d_[k]));
    }
    return worst;
  }

  // Auxiliary problem: boxes instead of bounds; its optimum minimises the dual
  // infeasibility of the basis for the real bounds (Koberstein §4.1.3).
  LpStatus phase1() {
    const std::vector<double> lb = lb_, ub = ub_;
    for (int k = 0; k < n_ + m_; ++k) {
      const bool fl = lb[k] > -kInf, fu = ub[k] < kInf;
      lb_[k] = fl ? 0.0 : -1.0;
      ub_[k] = fu ? 0.0 : 1.0;
      if (fl && !fu) lb_[k] = 0.0, ub_[k] = 1.0;
      if (!fl && fu) lb_[k] = -1.0, ub_[k] = 0.0;
    }
    place_nonbasic();
    compute_primal();
    const LpStatus s = iterate(kInf);
    lb_ = lb;
    ub_ = ub;
    if (shifted_) {
      cost_ = true_cost_;
      shifted_ = false;
    }
    compute_duals();
    place_nonbasic();
    compute_primal();
    return s == LpStatus::kInfeasible ? LpStatus::kOptimal : s;
  }

  // Dual infeasible: primal feasible means unbounded, else infeasible.
  LpStatus decide_unbounded() {
    std::fill(cost_.begin(), cost_.end(), 0.0);
    compute_duals();
    place_nonbasic();
    compute_primal();
    const LpStatus s = iterate(kInf);
    cost_ = true_cost_;
    shifted_ = false;
    compute_duals();
    if (s == LpStatus::kOptimal) return LpStatus::kUnbounded;
    return s;
  }

  // Lagrangian bound min over the box of sum d_k x_k with the true costs: valid for any
  // y, so a cutoff decided on it never prunes a better solution.
  double safe_bound() {
    const std::vector<double> d = d_;
    const std::vector<double> cost = cost_;
    cost_ = true_cost_;
    compute_duals();
    double b = 0;
    for (int k = 0; k < n_ + m_; ++k) {
      const double dk = d_[k];
      if (status_[k] == BasisStatus::kBasic || dk == 0.0) continue;
      const double bound = dk > 0 ? lb_[k] : ub_[k];
      if (!std::isfinite(bound)) {
        b = -kInf;
        break;
      }
      b += dk * bound;
    }
    d_ = d;
    cost_ = cost;
    return b;
  }

  void compute_row(const Eigen::VectorXd& rho) {
    int nz = 0;
    for (int i = 0; i < m_; ++i) nz += rho[i] != 0.0;
    if (nz * 8 < m_) {  // sparse rho: accumulate row-wise
      std::fill(row_.begin(), row_.begin() + n_, 0.0);
      for (int i = 0; i < m_; ++i) {
        const double ri = rho[i];
        if (ri == 0.0) continue;
        for (int k = rstart_[i]; k < rstart_[i + 1]; ++k) row_[ridx_[k]] += ri * rval_[k];
      }
    } else {
      for (int j = 0; j < n_; ++j)
        row_[j] = status_[j] == BasisStatus::kBasic ? 0.0 : col_dot(j, rho);
    }
    for (int i = 0; i < m_; ++i) row_[n_ + i] = -rho[i];
  }

  void perturb() {
    // Deterministic LCG; shifts keep each reduced cost on its feasible side.
    std::uint64_t s = 0x9E3779B97F4A7C15ull;
    for (int k = 0; k < n_ + m_; ++k) {
      if (status_[k] == BasisStatus::kBasic || lb_[k] == ub_[k]) continue;
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      const double u = 0.5 + static_cast<double>(s >> 11) * 0x1.0p-53;
      const double delta = 1e-6 * u * (1.0 + std::abs(true_cost_[k]));
      if (status_[k] == BasisStatus::kAtLower) {
        cost_[k] += delta, d_[k] += delta;
      } else if (status_[k] == BasisStatus::kAtUpper) {
        cost_[k] -= delta, d_[k] -= delta;
      }
    }
    shifted_ = true;
  }

  // Dual phase 2 iterations on the current bounds; the basis must be dual feasible.
  LpStatus iterate(double cutoff) {
    Eigen::VectorXd rho(m_), col(m_), tau(m_);
    double last_obj = -kInf;
    long stall = 0;
    int retries = 0;
    for (;;) {
      if (iterations_ >= limit_) return LpStatus::kIterationLimit;
      if ((iterations_ & 31) == 0 && Clock::now() > deadline_) return LpStatus::kTimeLimit;
      if (factor_.updates() >= BasisFactor::kMaxUpdates) {
        refactor();
        compute_primal();
        compute_duals();
        place_boxed_after_recompute();
      }
      // Pricing: dual steepest edge on primal infeasibilities.
      int r = -1;
      double best = 0;
      for (int i = 0; i < m_; ++i) {
        const int k = head_[i];
        const double v = x_[k];
        double inf = 0;
        if (v < lb_[k] - primal_tol) inf = lb_[k] - v;
        else if (v > ub_[k] + primal_tol) inf = v - ub_[k];
        if (inf <= 0) continue;
        // A weight that overflowed (tiny pivot) would hide the row forever: reset it.
        if (!(weight_[i] >= 1e-6 && weight_[i] < 1e30)) weight_[i] = 1.0;
        if (inf * inf > best * weight_[i]) {
          best = inf * inf / weight_[i];
          r = i;
        }
      }
      if (r < 0) return LpStatus::kOptimal;
      const int p = head_[r];
      const bool to_lower = x_[p] < lb_[p];
      const double delta = x_[p] - (to_lower ? lb_[p] : ub_[p]);
      rho.setZero();
      rho[r] = 1.0;
      factor_.btran(rho);
      compute_row(rho);
      const int q = harris_ratio_test(status_, lb_, ub_, d_, row_, to_lower ? -1.0 : 1.0, dual_tol);
      if (q < 0) {  // no eligible column: the dual is unbounded, the primal infeasible
        if (factor_.updates() > 0 && retries++ < 2) {  // re-check on a fresh factorisation
          refactor();
          compute_primal();
          compute_duals();
          place_boxed_after_recompute();
          continue;
        }
        return LpStatus::kInfeasible;
      }
      const double arq = row_[q];
      // Reduced cost of q on the wrong side (within tolerance): shift its cost to zero it.
      if ((status_[q] == BasisStatus::kAtLower && d_[q] < 0) ||
          (status_[q] == BasisStatus::kAtUpper && d_[q] > 0) || status_[q] == BasisStatus::kFree) {
        cost_[q] -= d_[q];
        d_[q] = 0.0;
        shifted_ = true;
      }
      const double theta_d = d_[q] / arq;
      col.setZero();
      col_axpy(q, 1.0, col);
      factor_.ftran(col);
      if (std::abs(col[r] - arq) > 1e-7 * (1.0 + std::abs(arq))) {
        // Row and column disagree on the pivot: numerical trouble; refactor and retry.
        if (retries++ < 3) {
          refactor();
          compute_primal();
          compute_duals();
          place_boxed_after_recompute();
          continue;
        }
      }
      retries = 0;
      const double acr = col[r];
      tau = rho;
      factor_.ftran(tau);
      // Dual update.
      for (int k = 0; k < n_ + m_; ++k)
        if (status_[k] != BasisStatus::kBasic) d_[k] -= theta_d * row_[k];
      d_[p] = -theta_d;
      d_[q] = 0.0;
      // Primal update.
      const double theta_p = delta / acr;
      for (int i = 0; i < m_; ++i) x_[head_[i]] -= theta_p * col[i];
      x_[q] += theta_p;
      x_[p] = to_lower ? lb_[p] : ub_[p];
      // Dual steepest-edge weights (Forrest and Goldfarb 1992, eq. for beta_i).
      const double wr = weight_[r];
      for (int i = 0; i < m_; ++i) {
        if (i == r || col[i] == 0.0) continue;
        const double ratio = col[i] / acr;
        weight_[i] = std::max(weight_[i] + ratio * (ratio * wr - 2.0 * tau[i]), 1e-6);
      }
      weight_[r] = std::max(wr / (acr * acr), 1e-6);
      status_[p] = to_lower || lb_[p] == ub_[p] ? BasisStatus::kAtLower : BasisStatus::kAtUpper;
      status_[q] = BasisStatus::kBasic;
      head_[r] = q;
      factor_.update(r, col);
      ++iterations_;
      const double obj = objective();
      if (cutoff < kInf && obj > cutoff) {
        if (safe_bound() > cutoff) return LpStatus::kCutoff;
      }
      if (obj > last_obj + 1e-12 * (1.0 + std::abs(obj))) {
        last_obj = obj;
        stall = 0;
      } else if (++stall > 50 && !perturbed_this_solve_) {
        perturb();
        perturbed_this_solve_ = true;
      }
    }
  }


  // After recomputing d from scratch, boxed variables whose reduced cost drifted to the
  // wrong side move to the other bound; others get their cost shifted.
  void place_boxed_after_recompute() {
    bool moved = false;
    for (int k = 0; k < n_ + m_; ++k) {
      const BasisStatus s = status_[k];
      if (s == BasisStatus::kBasic || lb_[k] == ub_[k]) continue;
      const bool wrong = (s == BasisStatus::kAtLower && d_[k] < -dual_tol) ||
                         (s == BasisStatus::kAtUpper && d_[k] > dual_tol) ||
                         (s == BasisStatus::kFree && std::abs(d_[k]) > dual_tol);
      if (!wrong) continue;
      if (lb_[k] > -kInf && ub_[k] < kInf) {
        status_[k] = s == BasisStatus::kAtLower ? BasisStatus::kAtUpper : BasisStatus::kAtLower;
        x_[k] = status_[k] == BasisStatus::kAtLower ? lb_[k] : ub_[k];
        moved = true;
      } else {
        cost_[k] -= d_[k];
        d_[k] = 0.0;
        shifted_ = true;
      }
    }
    if (moved) compute_primal();
  }

  int n_, m_;
  std::vector<double> col_scale_, row_scale_;
  std::vector<int> rstart_{0}, ridx_;
  std::vector<double> rval_;
  std::vector<int> cstart_, cidx_;
  std::vector<double> cval_;
  std::vector<double> lb_, ub_, cost_, true_cost_, x_, d_, row_, weight_;
  std::vector<BasisStatus> status_;
  std::vector<int> head_;
  BasisFactor factor_;
  bool factored_ = false, shifted_ = false, perturbed_this_solve_ = false;
  long iterations_ = 0, limit_ = 0;
  Clock::time_point deadline_ = Clock::time_point::max();
};

}  // namespace detail

}  // namespace disagmoe::milp

// The row-editing members (cuts in and out) live in their own header.
#include <disagmoe/milp/dual_simplex_rows.hpp>
