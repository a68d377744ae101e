// SPDX-License-Identifier: Apache-2.0
/// @file dual_simplex_rows.hpp
/// Row editing of the dual simplex (detail::DualSimplex, declared in dual_simplex.hpp,
/// which includes this header at its end): appending rows (cuts) with their logical
/// basic, so a dual feasible basis stays dual feasible (Koberstein 2005, §2.2: a basic
/// logical adds an identity row and column to B), removing rows whose logical is basic
/// (slack cuts; the row and its logical leave B together, so the basis stays valid and
/// optimal), and the column-wise copy both keep up to date.
#pragma once

#include <disagmoe/milp/dual_simplex.hpp>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace disagmoe::milp::detail {

inline void DualSimplex::add_row(const std::vector<std::pair<int, double>>& terms, double lo, double hi) {
  double mx = 0;
  for (const auto& [j, v] : terms) mx = std::max(mx, std::abs(v * col_scale_[j]));
  const double rs = mx > 0 ? std::exp2(-std::round(std::log2(mx))) : 1.0;
  append_row(terms, lo, hi, rs);  // its logical enters the basis at position m-1
  build_columns();
  factored_ = false;
}

inline void DualSimplex::remove_slack_rows(const std::vector<char>& drop) {
  std::vector<int> new_row(m_, -1);
  int m2 = 0;
  for (int i = 0; i < m_; ++i)
    if (!drop[i] || status_[n_ + i] != BasisStatus::kBasic) new_row[i] = m2++;
  if (m2 == m_) return;
  std::vector<int> rstart{0}, ridx;
  std::vector<double> rval, rscale;
  const std::size_t keep = static_cast<std::size_t>(n_ + m2);
  std::vector<double> lb(lb_.begin(), lb_.begin() + n_), ub(ub_.begin(), ub_.begin() + n_);
  std::vector<double> cost(cost_.begin(), cost_.begin() + n_), tcost(true_cost_.begin(), true_cost_.begin() + n_);
  std::vector<double> x(x_.begin(), x_.begin() + n_);
  std::vector<BasisStatus> st(status_.begin(), status_.begin() + n_);
  for (int i = 0; i < m_; ++i) {
    if (new_row[i] < 0) continue;
    for (int k = rstart_[i]; k < rstart_[i + 1]; ++k) {
      ridx.push_back(ridx_[k]);
      rval.push_back(rval_[k]);
    }
    rstart.push_back(static_cast<int>(ridx.size()));
    rscale.push_back(row_scale_[i]);
    lb.push_back(lb_[n_ + i]);
    ub.push_back(ub_[n_ + i]);
    cost.push_back(cost_[n_ + i]);
    tcost.push_back(true_cost_[n_ + i]);
    x.push_back(x_[n_ + i]);
    st.push_back(status_[n_ + i]);
  }
  std::vector<int> head;
  std::vector<double> weight;
  for (int r = 0; r < m_; ++r) {
    const int k = head_[r];
    if (k >= n_ && new_row[k - n_] < 0) continue;
    head.push_back(k < n_ ? k : n_ + new_row[k - n_]);
    weight.push_back(weight_[r]);
  }
  rstart_ = std::move(rstart), ridx_ = std::move(ridx), rval_ = std::move(rval);
  row_scale_ = std::move(rscale);
  lb_ = std::move(lb), ub_ = std::move(ub), cost_ = std::move(cost), true_cost_ = std::move(tcost);
  x_ = std::move(x), status_ = std::move(st), head_ = std::move(head), weight_ = std::move(weight);
  m_ = m2;
  d_.assign(keep, 0.0);
  row_.assign(keep, 0.0);
  build_columns();
  factored_ = false;
}

inline void DualSimplex::append_row(const std::vector<std::pair<int, double>>& terms, double lo, double hi, double rs) {
  for (const auto& [j, v] : terms) {
    ridx_.push_back(j);
    rval_.push_back(v * rs * col_scale_[j]);
  }
  rstart_.push_back(static_cast<int>(ridx_.size()));
  row_scale_.push_back(rs);
  lb_.push_back(lo * rs);
  ub_.push_back(hi * rs);
  cost_.push_back(0.0);
  status_.push_back(BasisStatus::kBasic);
  x_.push_back(0.0);
  if (m_ == static_cast<int>(head_.size())) {
    head_.push_back(n_ + m_);
    weight_.push_back(1.0);
  }
  ++m_;
  d_.assign(n_ + m_, 0.0);
  row_.assign(n_ + m_, 0.0);
  true_cost_ = cost_;
}

inline void DualSimplex::build_columns() {
  cstart_.assign(n_ + 1, 0);
  for (int j : ridx_) ++cstart_[j + 1];
  for (int j = 0; j < n_; ++j) cstart_[j + 1] += cstart_[j];
  cidx_.resize(ridx_.size());
  cval_.resize(ridx_.size());
  std::vector<int> fill(cstart_.begin(), cstart_.end() - 1);
  for (int i = 0; i < m_; ++i)
    for (int k = rstart_[i]; k < rstart_[i + 1]; ++k) {
      const int p = fill[ridx_[k]]++;
      cidx_[p] = i;
      cval_[p] = rval_[k];
    }
}

}  // namespace disagmoe::milp::detail
