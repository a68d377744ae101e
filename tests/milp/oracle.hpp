// SPDX-License-Identifier: Apache-2.0
// Independent oracles for the milp tests: an LP solved by enumerating the vertices of a
// bounded polyhedron (every square subsystem of tight constraints, Eigen dense LU), and
// a MILP solved by enumerating the integer points and running that LP on the rest.
// Deliberately naive and independent of the simplex code.
#pragma once

#include <disagmoe/milp/problem.hpp>

#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

namespace disagmoe::milp::test {

struct OracleResult {
  bool feasible = false;
  double objective = 0;  // in the problem's sense, with offset
  std::vector<double> x;
};

// Hyperplane a·x = b over the free (continuous) variables.
struct Plane {
  Eigen::VectorXd a;
  double b;
};

// LP over the variables `free_vars` of p, with the others fixed to `fixed` values.
// All bounds of free variables must be finite. O(C(planes, n) n^3).
inline OracleResult vertex_lp(const Problem& p, const std::vector<int>& free_vars,
                              const std::vector<double>& fixed) {
  const int n = static_cast<int>(free_vars.size());
  const double sign = p.sense() == Sense::kMaximize ? -1.0 : 1.0;
  // Rows restricted to the free variables: lo - fixed part <= a x <= hi - fixed part.
  std::vector<Eigen::VectorXd> rows;
  std::vector<double> lo, hi;
  std::vector<int> pos(p.num_vars(), -1);
  for (int k = 0; k < n; ++k) pos[free_vars[k]] = k;
  for (int i = 0; i < p.num_rows(); ++i) {
    Eigen::VectorXd a = Eigen::VectorXd::Zero(n);
    double shift = 0;
    const RowView r = p.row(i);
    for (std::size_t k = 0; k < r.index.size(); ++k) {
      const int j = r.index[k];
      if (pos[j] >= 0) a[pos[j]] += r.value[k];
      else shift += r.value[k] * fixed[j];
    }
    rows.push_back(a);
    lo.push_back(p.row_lo(i) - shift);
    hi.push_back(p.row_hi(i) - shift);
  }
  auto feasible = [&](const Eigen::VectorXd& x) {
    for (int k = 0; k < n; ++k) {
      const int j = free_vars[k];
      if (x[k] < p.lb(j) - 1e-7 || x[k] > p.ub(j) + 1e-7) return false;
    }
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const double v = rows[i].dot(x);
      if (v < lo[i] - 1e-7 || v > hi[i] + 1e-7) return false;
    }
    return true;
  };
  auto full_x = [&](const Eigen::VectorXd& x) {
    std::vector<double> out = fixed;
    for (int k = 0; k < n; ++k) out[free_vars[k]] = x[k];
    return out;
  };
  OracleResult best;
  if (n == 0) {
    Eigen::VectorXd x(0);
    if (feasible(x)) {
      best.feasible = true;
      best.x = full_x(x);
      best.objective = p.evaluate(best.x);
    }
    return best;
  }
  std::vector<Plane> planes;
  for (int k = 0; k < n; ++k) {
    Eigen::VectorXd e = Eigen::VectorXd::Zero(n);
    e[k] = 1;
    planes.push_back({e, p.lb(free_vars[k])});
    planes.push_back({e, p.ub(free_vars[k])});
  }
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].norm() == 0) continue;
    if (std::isfinite(lo[i])) planes.push_back({rows[i], lo[i]});
    if (std::isfinite(hi[i]) && hi[i] != lo[i]) planes.push_back({rows[i], hi[i]});
  }
  const int P = static_cast<int>(planes.size());
  std::vector<int> pick(n);
  for (int k = 0; k < n; ++k) pick[k] = k;
  while (true) {
    Eigen::MatrixXd M(n, n);
    Eigen::VectorXd b(n);
    for (int k = 0; k < n; ++k) {
      M.row(k) = planes[pick[k]].a.transpose();
      b[k] = planes[pick[k]].b;
    }
    Eigen::FullPivLU<Eigen::MatrixXd> lu(M);
    if (lu.rank() == n) {
      const Eigen::VectorXd x = lu.solve(b);
      if (feasible(x)) {
        auto fx = full_x(x);
        const double v = p.evaluate(fx);
        if (!best.feasible || sign * v < sign * best.objective) {
          best.feasible = true;
          best.objective = v;
          best.x = fx;
        }
      }
    }
    int k = n - 1;
    while (k >= 0 && pick[k] == P - n + k) --k;
    if (k < 0) break;
    ++pick[k];
    for (int t = k + 1; t < n; ++t) pick[t] = pick[t - 1] + 1;
  }
  return best;
}

// MILP by enumerating all integer points in the (finite) integer bounds.
/// Advances the integer variables `ints` of `x` to the next point of their box, odometer
/// style (first variable fastest); false after the last point (x is back at the lower
/// corner).
inline bool next_integer_point(const Problem& p, const std::vector<int>& ints, std::vector<double>& x) {
  for (const int j : ints) {
    if (x[j] + 1 <= p.ub(j)) {
      x[j] += 1;
      return true;
    }
    x[j] = std::ceil(p.lb(j));
  }
  return false;
}

inline OracleResult brute_force_milp(const Problem& p) {
  std::vector<int> ints, conts;
  for (int j = 0; j < p.num_vars(); ++j) (p.is_integer(j) ? ints : conts).push_back(j);
  std::vector<double> x(p.num_vars(), 0.0);
  for (int j : ints) x[j] = std::ceil(p.lb(j));
  const double sign = p.sense() == Sense::kMaximize ? -1.0 : 1.0;
  OracleResult best;
  while (true) {
    bool in_range = true;
    for (int j : ints) in_range = in_range && x[j] <= p.ub(j);
    if (in_range) {
      const OracleResult r = vertex_lp(p, conts, x);
      if (r.feasible && (!best.feasible || sign * r.objective < sign * best.objective)) best = r;
    }
    if (!next_integer_point(p, ints, x)) break;
  }
  return best;
}

// Every vertex of every integer slice {x_I fixed} of the feasible set (all bounds are
// finite). A linear function's minimum over the feasible set is attained at one of them.
inline std::vector<std::vector<double>> slice_vertices(const Problem& p) {
  std::vector<int> ints, conts;
  for (int j = 0; j < p.num_vars(); ++j) (p.is_integer(j) ? ints : conts).push_back(j);
  const int nc = static_cast<int>(conts.size());
  std::vector<std::vector<double>> out;
  std::vector<double> x(p.num_vars(), 0.0);
  for (int j : ints) x[j] = std::ceil(p.lb(j));
  while (true) {
    // Planes over the continuous part: their bounds and the rows' finite sides.
    std::vector<Eigen::VectorXd> a;
    std::vector<double> b;
    for (int k = 0; k < nc; ++k) {
      Eigen::VectorXd e = Eigen::VectorXd::Zero(nc);
      e[k] = 1;
      a.push_back(e), b.push_back(p.lb(conts[k]));
      a.push_back(e), b.push_back(p.ub(conts[k]));
    }
    for (int i = 0; i < p.num_rows() && nc > 0; ++i) {
      Eigen::VectorXd r = Eigen::VectorXd::Zero(nc);
      double fixed = 0;
      const RowView rv = p.row(i);
      for (std::size_t k = 0; k < rv.index.size(); ++k) {
        const int j = rv.index[k];
        const auto it = std::find(conts.begin(), conts.end(), j);
        if (it != conts.end()) r[it - conts.begin()] = rv.value[k];
        else fixed += rv.value[k] * x[j];
      }
      if (r.norm() == 0) continue;
      if (std::isfinite(p.row_lo(i))) a.push_back(r), b.push_back(p.row_lo(i) - fixed);
      if (std::isfinite(p.row_hi(i))) a.push_back(r), b.push_back(p.row_hi(i) - fixed);
    }
    const int planes = static_cast<int>(a.size());
    std::vector<int> pick(nc);
    for (int k = 0; k < nc; ++k) pick[k] = k;
    while (true) {
      std::vector<double> y = x;
      bool ok = true;
      if (nc > 0) {
        Eigen::MatrixXd M(nc, nc);
        Eigen::VectorXd rhs(nc);
        for (int k = 0; k < nc; ++k) M.row(k) = a[pick[k]].transpose(), rhs[k] = b[pick[k]];
        Eigen::FullPivLU<Eigen::MatrixXd> lu(M);
        ok = lu.rank() == nc;
        if (ok) {
          const Eigen::VectorXd v = lu.solve(rhs);
          for (int k = 0; k < nc; ++k) y[conts[k]] = v[k];
        }
      }
      if (ok && p.max_violation(y) <= 1e-7) out.push_back(y);
      if (nc == 0) break;
      int k = nc - 1;
      while (k >= 0 && pick[k] == planes - nc + k) --k;
      if (k < 0) break;
      ++pick[k];
      for (int t = k + 1; t < nc; ++t) pick[t] = pick[t - 1] + 1;
    }
    if (!next_integer_point(p, ints, x)) break;
  }
  return out;
}

}  // namespace disagmoe::milp::test
