// SPDX-License-Identifier: Apache-2.0
/// @file basis_factor.hpp
/// LU factorisation of a simplex basis with product-form (eta) updates: B_k = B_0 E_1..E_k,
/// E_t the identity with column p_t replaced by alpha_t = B_{t-1}^{-1} a_q (Dantzig and
/// Orchard-Hays' product form of the inverse; see Koberstein, "The dual simplex method,
/// techniques for a fast and stable implementation", PhD thesis, Paderborn 2005, §5.1).
///
/// B_0 is factored triangular-first (Suhl and Suhl, "Computing sparse LU factorizations
/// for large-scale linear programming bases", ORSA J. Computing 2(4), 1990, §2): column
/// singletons, then row singletons are pivoted without any arithmetic, which permutes
///
///     P B Q = [ U1  X12  X13 ]    U1 upper and L3 lower triangular,
///             [ 0   K    X23 ]    K the remaining "bump";
///             [ 0   0    L3  ]
///
/// only the bump K is factored numerically: by Eigen's dense partial-pivoting LU when it
/// is small, by Eigen's SparseLU otherwise. Branch-and-bound bases are mostly logicals
/// and singletons, so K is typically a small fraction of B, and FTRAN skips the columns
/// of zero entries (sparse right-hand sides stay cheap). Callers refactor after
/// `kMaxUpdates` updates.
#pragma once

#include <Eigen/Dense>
#include <Eigen/SparseCore>
#include <Eigen/SparseLU>

#include <algorithm>
#include <cmath>
#include <vector>

namespace disagmoe::milp::detail {

/// Factorised basis. Column c of B is given as (row, value) pairs.
class BasisFactor {
 public:
  /// Refactor once this many eta updates have accumulated (stability and speed).
  static constexpr int kMaxUpdates = 64;
  /// Bumps up to this size use a dense LU (cheaper than SparseLU's set-up for small k).
  static constexpr int kDenseMax = 96;

  /// Factors B (m x m) from triplets (row, column = basis position, value); duplicates
  /// are summed. Returns false when B is (numerically) singular. O(nnz(B)) for the
  /// triangular part plus O(k^3) dense or about O(nnz(L+U)) sparse for a bump of size k.
  bool factor(int m, const std::vector<Eigen::Triplet<double>>& triplets) {
    m_ = m;
    etas_.clear();
    eta_start_.assign(1, 0);
    eta_index_.clear();
    eta_value_.clear();
    col_piv_.clear();
    row_piv_.clear();
    bump_row_.clear();
    bump_col_.clear();
    if (m == 0) return ok_ = true;
    if (!build_columns(triplets)) return ok_ = false;
    if (!find_singletons()) return ok_ = false;
    return ok_ = factor_bump();
  }

  int updates() const { return static_cast<int>(etas_.size()); }
  /// Size of the bump of the last factorisation (for tests and tuning).
  int bump_size() const { return static_cast<int>(bump_row_.size()); }

  /// Solves B x = b in place (b indexed by row, x by basis position).
  /// O(nnz of the columns with nonzero x + bump solve + nnz(etas)).
  void ftran(Eigen::VectorXd& x) const {
    if (m_ == 0) return;
    work_ = x;  // w: the right-hand side being reduced, indexed by row
    // Row-singleton part L3, in pivot order.
    for (const Pivot& pv : row_piv_) eliminate(pv, x);
    // Bump.
    const int k = bump_size();
    if (k > 0) {
      bump_rhs_.resize(k);
      for (int a = 0; a < k; ++a) bump_rhs_[a] = work_[bump_row_[a]];
      solve_bump(bump_rhs_, false);
      for (int b = 0; b < k; ++b) {
        const int c = bump_col_[b];
        const double xc = bump_rhs_[b];
        x[c] = xc;
        if (xc == 0.0) continue;
        for (int e = cstart_[c]; e < cstart_[c + 1]; ++e) work_[cidx_[e]] -= cval_[e] * xc;
      }
    }
    // Column-singleton part U1, in reverse pivot order.
    for (auto it = col_piv_.rbegin(); it != col_piv_.rend(); ++it) eliminate(*it, x);
    for (std::size_t t = 0; t < etas_.size(); ++t) {
      const int p = etas_[t].pivot;
      const double xp = x[p] / etas_[t].value;
      x[p] = xp;
      if (xp == 0.0) continue;
      for (int e = eta_start_[t]; e < eta_start_[t + 1]; ++e) x[eta_index_[e]] -= eta_value_[e] * xp;
    }
  }

  /// Solves B^T y = c in place (c indexed by basis position, y by row).
  /// O(nnz(B) + bump solve + nnz(etas)).
  void btran(Eigen::VectorXd& y) const {
    if (m_ == 0) return;
    for (std::size_t t = etas_.size(); t-- > 0;) {
      const int p = etas_[t].pivot;
      double s = y[p];
      for (int e = eta_start_[t]; e < eta_start_[t + 1]; ++e) s -= eta_value_[e] * y[eta_index_[e]];
      y[p] = s / etas_[t].value;
    }
    // B^T is block lower triangular in the order U1, K, L3; every row of the result is
    // still zero when it is computed, so a full column dot product is exact.
    work_.setZero(m_);
    for (const Pivot& pv : col_piv_) work_[pv.row] = (y[pv.col] - col_dot(pv.col)) / pv.value;
    const int k = bump_size();
    if (k > 0) {
      bump_rhs_.resize(k);
      for (int b = 0; b < k; ++b) bump_rhs_[b] = y[bump_col_[b]] - col_dot(bump_col_[b]);
      solve_bump(bump_rhs_, true);
      for (int a = 0; a < k; ++a) work_[bump_row_[a]] = bump_rhs_[a];
    }
    for (auto it = row_piv_.rbegin(); it != row_piv_.rend(); ++it)
      work_[it->row] = (y[it->col] - col_dot(it->col)) / it->value;
    y = work_;
  }

  /// Records the basis change at position p with alpha = B^{-1} a_q (before the change).
  void update(int p, const Eigen::VectorXd& alpha) {
    etas_.push_back({p, alpha[p]});
    for (int i = 0; i < m_; ++i) {
      if (i != p && alpha[i] != 0.0 && std::abs(alpha[i]) > 1e-14) {
        eta_index_.push_back(i);
        eta_value_.push_back(alpha[i]);
      }
    }
    eta_start_.push_back(static_cast<int>(eta_index_.size()));
  }

 private:
  struct Eta {
    int pivot;
    double value;
  };
  struct Pivot {
    int row, col;
    double value;
  };

  // Column c of B times the current result (btran).
  double col_dot(int c) const {
    double s = 0;
    for (int e = cstart_[c]; e < cstart_[c + 1]; ++e) s += cval_[e] * work_[cidx_[e]];
    return s;
  }

  // x_c = w_r / pivot, then w -= column c * x_c (the pivot row's own entry included:
  // w_r is not read again).
  void eliminate(const Pivot& pv, Eigen::VectorXd& x) const {
    const double xc = work_[pv.row] / pv.value;
    x[pv.col] = xc;
    if (xc == 0.0) return;
    const int c = pv.col;
    for (int e = cstart_[c]; e < cstart_[c + 1]; ++e) work_[cidx_[e]] -= cval_[e] * xc;
  }

  bool build_columns(const std::vector<Eigen::Triplet<double>>& triplets) {
    std::vector<Eigen::Triplet<double>> t(triplets);
    std::sort(t.begin(), t.end(), [](const auto& a, const auto& b) {
      return a.col() != b.col() ? a.col() < b.col() : a.row() < b.row();
    });
    cstart_.assign(m_ + 1, 0);
    cidx_.clear();
    cval_.clear();
    for (std::size_t e = 0; e < t.size(); ++e) {
      if (!cidx_.empty() && e > 0 && t[e].col() == t[e - 1].col() && t[e].row() == t[e - 1].row()) {
        cval_.back() += t[e].value();
        continue;
      }
      cidx_.push_back(t[e].row());
      cval_.push_back(t[e].value());
      ++cstart_[t[e].col() + 1];
    }
    for (int c = 0; c < m_; ++c) cstart_[c + 1] += cstart_[c];
    scale_ = 1.0;
    for (double v : cval_) scale_ = std::max(scale_, std::abs(v));
    return true;
  }

  bool acceptable(double pivot) const { return std::abs(pivot) > 1e-11 * scale_; }

  // Column singletons (U1), then row singletons (L3) of what remains; the rest is the bump.
  bool find_singletons() {
    // Row-wise pattern of B.
    std::vector<int> rstart(m_ + 1, 0), rcol(cidx_.size());
    for (int i : cidx_) ++rstart[i + 1];
    for (int i = 0; i < m_; ++i) rstart[i + 1] += rstart[i];
    std::vector<int> fill(rstart.begin(), rstart.end() - 1);
    for (int c = 0; c < m_; ++c)
      for (int e = cstart_[c]; e < cstart_[c + 1]; ++e) rcol[fill[cidx_[e]]++] = c;
    std::vector<char> row_done(m_, 0), col_done(m_, 0);
    if (!peel(cstart_, cidx_, rstart, rcol, col_done, row_done, true, col_piv_)) return false;
    if (!peel(rstart, rcol, cstart_, cidx_, row_done, col_done, false, row_piv_)) return false;
    for (int r = 0; r < m_; ++r)
      if (!row_done[r]) bump_row_.push_back(r);
    for (int c = 0; c < m_; ++c)
      if (!col_done[c]) bump_col_.push_back(c);
    return bump_row_.size() == bump_col_.size();
  }

  // Peels singletons along one orientation (Suhl and Suhl 1990, §2): a line (a column
  // when `columns`, else a row) with one active entry pivots there, and the lines
  // through the pivot's cross index lose one active entry. `start/idx` list each line's
  // cross indices, `xstart/xidx` each cross index's lines. Returns false on a line that
  // runs empty (structurally singular) or a tiny pivot.
  bool peel(const std::vector<int>& start, const std::vector<int>& idx, const std::vector<int>& xstart,
            const std::vector<int>& xidx, std::vector<char>& done, std::vector<char>& xdone, bool columns,
            std::vector<Pivot>& out) const {
    std::vector<int> count(m_, 0), stack;
    for (int l = 0; l < m_; ++l) {
      if (done[l]) continue;
      for (int e = start[l]; e < start[l + 1]; ++e) count[l] += !xdone[idx[e]];
      if (count[l] == 0) return false;
      if (count[l] == 1) stack.push_back(l);
    }
    while (!stack.empty()) {
      const int l = stack.back();
      stack.pop_back();
      if (done[l] || count[l] != 1) continue;
      int x = -1;
      for (int e = start[l]; e < start[l + 1]; ++e)
        if (!xdone[idx[e]]) x = idx[e];
      const int r = columns ? x : l, c = columns ? l : x;
      double v = 0;
      for (int e = cstart_[c]; e < cstart_[c + 1]; ++e)
        if (cidx_[e] == r) v = cval_[e];
      if (!acceptable(v)) return false;
      out.push_back({r, c, v});
      done[l] = xdone[x] = 1;
      for (int e = xstart[x]; e < xstart[x + 1]; ++e) {
        const int l2 = xidx[e];
        if (done[l2]) continue;
        if (--count[l2] == 0) return false;
        if (count[l2] == 1) stack.push_back(l2);
      }
    }
    return true;
  }

  bool factor_bump() {
    const int k = bump_size();
    if (k == 0) return true;
    std::vector<int> pos(m_, -1);
    for (int a = 0; a < k; ++a) pos[bump_row_[a]] = a;
    dense_ = k <= kDenseMax;
    if (dense_) {
      Eigen::MatrixXd b = Eigen::MatrixXd::Zero(k, k);
      for (int j = 0; j < k; ++j) {
        const int c = bump_col_[j];
        for (int e = cstart_[c]; e < cstart_[c + 1]; ++e)
          if (pos[cidx_[e]] >= 0) b(pos[cidx_[e]], j) = cval_[e];
      }
      dlu_.compute(b);
      // PartialPivLU does not report singularity: check the pivots of U against the scale.
      const auto& lu = dlu_.matrixLU();
      for (int i = 0; i < k; ++i)
        if (!acceptable(lu(i, i))) return false;
      return true;
    }
    std::vector<Eigen::Triplet<double>> t;
    for (int j = 0; j < k; ++j) {
      const int c = bump_col_[j];
      for (int e = cstart_[c]; e < cstart_[c + 1]; ++e)
        if (pos[cidx_[e]] >= 0) t.emplace_back(pos[cidx_[e]], j, cval_[e]);
    }
    Eigen::SparseMatrix<double> b(k, k);
    b.setFromTriplets(t.begin(), t.end());
    b.makeCompressed();
    slu_.analyzePattern(b);
    slu_.factorize(b);
    return slu_.info() == Eigen::Success;
  }

  // K z = v (transposed: K^T z = v) in place.
  void solve_bump(Eigen::VectorXd& v, bool transposed) const {
    const int k = bump_size();
    if (dense_) {
      v = transposed ? Eigen::VectorXd(dlu_.transpose().solve(v)) : Eigen::VectorXd(dlu_.solve(v));
      return;
    }
    // Eigen's solve permutes in place through a cycle-following loop with a fresh
    // mask per call; explicit index permutations into a work vector are much cheaper.
    const auto& pr = slu_.rowsPermutation().indices();
    const auto& pc = slu_.colsPermutation().indices();
    bump_work_.resize(k);
    if (!transposed) {
      for (int i = 0; i < k; ++i) bump_work_[pr[i]] = v[i];
      slu_.matrixL().solveInPlace(bump_work_);
      slu_.matrixU().solveInPlace(bump_work_);
      for (int i = 0; i < k; ++i) v[i] = bump_work_[pc[i]];
    } else {
      for (int i = 0; i < k; ++i) bump_work_[pc[i]] = v[i];
      slu_.matrixU().template solveTransposedInPlace<false>(bump_work_);
      slu_.matrixL().template solveTransposedInPlace<false>(bump_work_);
      for (int i = 0; i < k; ++i) v[i] = bump_work_[pr[i]];
    }
  }

  int m_ = 0;
  bool dense_ = true, ok_ = false;
  double scale_ = 1.0;
  std::vector<int> cstart_, cidx_;  // B column-wise, columns = basis positions
  std::vector<double> cval_;
  std::vector<Pivot> col_piv_, row_piv_;
  std::vector<int> bump_row_, bump_col_;
  Eigen::PartialPivLU<Eigen::MatrixXd> dlu_;
  mutable Eigen::SparseLU<Eigen::SparseMatrix<double>, Eigen::NaturalOrdering<int>> slu_;  // transpose() is not const
  mutable Eigen::VectorXd work_, bump_rhs_, bump_work_;
  std::vector<Eta> etas_;
  std::vector<int> eta_start_{0};
  std::vector<int> eta_index_;
  std::vector<double> eta_value_;
};

}  // namespace disagmoe::milp::detail
