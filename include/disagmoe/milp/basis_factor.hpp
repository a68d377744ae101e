// SPDX-License-Identifier: Apache-2.0
/// @file basis_factor.hpp
/// LU factorisation of a simplex basis with product-form (eta) updates: B_k = B_0 E_1..E_k,
/// E_t the identity with column p_t replaced by alpha_t = B_{t-1}^{-1} a_q (Dantzig and
/// Orchard-Hays' product form of the inverse; see Koberstein, "The dual simplex method,
/// techniques for a fast and stable implementation", PhD thesis, Paderborn 2005, §5.1).
/// B_0 is factored by Eigen's dense partial-pivoting LU for small bases and by Eigen's
/// supernodal SparseLU otherwise; callers refactor after `kMaxUpdates` updates.
/// SparseLU uses the natural column order: COLAMD's analysis cost more than it saved on
/// the slack-heavy bases of branch and bound (measured on MIPLIB misc07/gesa2/p0201).
#pragma once

#include <Eigen/Dense>
#include <Eigen/SparseCore>
#include <Eigen/SparseLU>

#include <cmath>
#include <vector>

namespace disagmoe::milp::detail {

/// Factorised basis. Column c of B is given as (row, value) pairs.
class BasisFactor {
 public:
  /// Refactor once this many eta updates have accumulated (stability and speed).
  static constexpr int kMaxUpdates = 64;
  /// Bases up to this size use a dense LU (cheaper than SparseLU's set-up for tiny m).
  static constexpr int kDenseMax = 48;

  /// Factors B (m x m) from column-major triplets. Returns false when B is singular.
  /// O(m^3) dense or roughly O(nnz(L+U)) sparse.
  bool factor(int m, const std::vector<Eigen::Triplet<double>>& triplets) {
    m_ = m;
    etas_.clear();
    eta_start_.assign(1, 0);
    eta_index_.clear();
    eta_value_.clear();
    if (m == 0) return ok_ = true;
    dense_ = m <= kDenseMax;
    if (dense_) {
      Eigen::MatrixXd b = Eigen::MatrixXd::Zero(m, m);
      for (const auto& t : triplets) b(t.row(), t.col()) += t.value();
      dlu_.compute(b);
      // PartialPivLU does not report singularity: check the pivots of U against the scale.
      const double scale = std::max(1.0, b.cwiseAbs().maxCoeff());
      const auto& lu = dlu_.matrixLU();
      for (int i = 0; i < m; ++i)
        if (!(std::abs(lu(i, i)) > 1e-11 * scale)) return ok_ = false;
      return ok_ = true;
    }
    Eigen::SparseMatrix<double> b(m, m);
    b.setFromTriplets(triplets.begin(), triplets.end());
    b.makeCompressed();
    slu_.analyzePattern(b);
    slu_.factorize(b);
    ok_ = slu_.info() == Eigen::Success;
    return ok_;
  }

  int updates() const { return static_cast<int>(etas_.size()); }

  /// Solves B x = b in place. O(solve + nnz(etas)).
  void ftran(Eigen::VectorXd& x) const {
    if (m_ == 0) return;
    if (dense_) {
      x = dlu_.solve(x);
    } else {
      // Eigen's solve permutes in place through a cycle-following loop with a fresh
      // mask per call; explicit index permutations into a work vector are much cheaper.
      const auto& pr = slu_.rowsPermutation().indices();
      const auto& pc = slu_.colsPermutation().indices();
      work_.resize(m_);
      for (int i = 0; i < m_; ++i) work_[pr[i]] = x[i];
      slu_.matrixL().solveInPlace(work_);
      slu_.matrixU().solveInPlace(work_);
      for (int i = 0; i < m_; ++i) x[i] = work_[pc[i]];
    }
    for (std::size_t t = 0; t < etas_.size(); ++t) {
      const int p = etas_[t].pivot;
      const double xp = x[p] / etas_[t].value;
      x[p] = xp;
      if (xp == 0.0) continue;
      for (int k = eta_start_[t]; k < eta_start_[t + 1]; ++k) x[eta_index_[k]] -= eta_value_[k] * xp;
    }
  }

  /// Solves B^T y = c in place (y^T B = c^T). O(solve + nnz(etas)).
  void btran(Eigen::VectorXd& y) const {
    if (m_ == 0) return;
    for (std::size_t t = etas_.size(); t-- > 0;) {
      const int p = etas_[t].pivot;
      double s = y[p];
      for (int k = eta_start_[t]; k < eta_start_[t + 1]; ++k) s -= eta_value_[k] * y[eta_index_[k]];
      y[p] = s / etas_[t].value;
    }
    if (dense_) {
      y = dlu_.transpose().solve(y);
    } else {
      const auto& pr = slu_.rowsPermutation().indices();
      const auto& pc = slu_.colsPermutation().indices();
      work_.resize(m_);
      for (int i = 0; i < m_; ++i) work_[pc[i]] = y[i];
      slu_.matrixU().template solveTransposedInPlace<false>(work_);
      slu_.matrixL().template solveTransposedInPlace<false>(work_);
      for (int i = 0; i < m_; ++i) y[i] = work_[pr[i]];
    }
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
  int m_ = 0;
  bool dense_ = true, ok_ = false;
  Eigen::PartialPivLU<Eigen::MatrixXd> dlu_;
  mutable Eigen::SparseLU<Eigen::SparseMatrix<double>, Eigen::NaturalOrdering<int>> slu_;  // transpose() is not const
  mutable Eigen::VectorXd work_;
  std::vector<Eta> etas_;
  std::vector<int> eta_start_{0};
  std::vector<int> eta_index_;
  std::vector<double> eta_value_;
};

}  // namespace disagmoe::milp::detail
