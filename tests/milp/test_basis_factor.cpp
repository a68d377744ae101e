// SPDX-License-Identifier: Apache-2.0
// The triangular-first basis factorisation (with eta updates) against Eigen's dense
// full-pivoting LU of the same matrix: FTRAN and BTRAN on random slack-heavy bases of
// every bump size (none, dense, sparse), and singular bases are reported.
#include <disagmoe/milp/basis_factor.hpp>

#include <doctest/doctest.h>

#include <Eigen/Dense>

#include <algorithm>
#include <random>
#include <vector>

using disagmoe::milp::detail::BasisFactor;

namespace {

// A random m x m basis: `logicals` columns -e_i, the rest sparse structurals with a
// strong diagonal-ish entry so the matrix is nonsingular.
Eigen::MatrixXd random_basis(std::mt19937_64& rng, int m, int logicals, double density) {
  std::uniform_real_distribution<double> val(-3.0, 3.0);
  std::bernoulli_distribution keep(density);
  std::vector<int> perm(m);
  for (int i = 0; i < m; ++i) perm[i] = i;
  std::shuffle(perm.begin(), perm.end(), rng);
  Eigen::MatrixXd b = Eigen::MatrixXd::Zero(m, m);
  for (int c = 0; c < m; ++c) {
    const int r = perm[c];
    if (c < logicals) {
      b(r, c) = -1.0;
      continue;
    }
    for (int i = 0; i < m; ++i)
      if (keep(rng)) b(i, c) = val(rng);
    b(r, c) = 4.0 + val(rng);
  }
  // Mix the columns so logicals are not all first.
  std::shuffle(perm.begin(), perm.end(), rng);
  return b(Eigen::all, perm);
}

std::vector<Eigen::Triplet<double>> triplets(const Eigen::MatrixXd& b) {
  std::vector<Eigen::Triplet<double>> t;
  for (int c = 0; c < b.cols(); ++c)
    for (int r = 0; r < b.rows(); ++r)
      if (b(r, c) != 0.0) t.emplace_back(r, c, b(r, c));
  return t;
}

void check_solves(const BasisFactor& f, const Eigen::MatrixXd& b, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> val(-1.0, 1.0);
  const int m = static_cast<int>(b.rows());
  Eigen::FullPivLU<Eigen::MatrixXd> ref(b);
  Eigen::FullPivLU<Eigen::MatrixXd> ref_t(b.transpose());
  for (int rep = 0; rep < 3; ++rep) {
    Eigen::VectorXd rhs(m);
    for (int i = 0; i < m; ++i) rhs[i] = rep == 0 && i != m / 2 ? 0.0 : val(rng);  // one sparse rhs
    Eigen::VectorXd x = rhs;
    f.ftran(x);
    CHECK((x - ref.solve(rhs)).norm() <= 1e-8 * (1 + rhs.norm()));
    Eigen::VectorXd y = rhs;
    f.btran(y);
    CHECK((y - ref_t.solve(rhs)).norm() <= 1e-8 * (1 + rhs.norm()));
  }
}

}  // namespace

TEST_CASE("milp basis factor: FTRAN/BTRAN match a dense LU, before and after eta updates") {
  int dense_bumps = 0, sparse_bumps = 0;
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    const int m = std::uniform_int_distribution<int>(1, seed % 3 == 0 ? 260 : 40)(rng);
    const int logicals = std::uniform_int_distribution<int>(0, m)(rng);
    const double density = seed % 2 == 0 ? 0.02 : 0.3;
    Eigen::MatrixXd b = random_basis(rng, m, logicals, density);
    BasisFactor f;
    REQUIRE(f.factor(m, triplets(b)));
    CHECK(f.bump_size() <= m);
    dense_bumps += f.bump_size() > 0 && f.bump_size() <= BasisFactor::kDenseMax;
    sparse_bumps += f.bump_size() > BasisFactor::kDenseMax;
    check_solves(f, b, rng);
    // Replace a few columns by random new ones through eta updates (product form).
    std::uniform_real_distribution<double> val(-2.0, 2.0);
    for (int u = 0; u < 5; ++u) {
      Eigen::VectorXd a = Eigen::VectorXd::Zero(m);
      for (int i = 0; i < m; ++i) a[i] = (i + u) % 3 == 0 ? val(rng) : 0.0;
      a[std::uniform_int_distribution<int>(0, m - 1)(rng)] += 3.0;
      Eigen::VectorXd alpha = a;
      f.ftran(alpha);
      int p = 0;
      for (int i = 0; i < m; ++i)
        if (std::abs(alpha[i]) > std::abs(alpha[p])) p = i;
      if (std::abs(alpha[p]) < 1e-3) break;
      f.update(p, alpha);
      b.col(p) = a;
      check_solves(f, b, rng);
    }
  }
  CHECK(dense_bumps > 0);  // both bump factorisations were exercised
  CHECK(sparse_bumps > 0);
}

TEST_CASE("milp basis factor: singular bases are reported, not factored") {
  BasisFactor f;
  Eigen::MatrixXd b = Eigen::MatrixXd::Zero(3, 3);
  b(0, 0) = 1, b(1, 1) = 1;  // empty third column
  CHECK_FALSE(f.factor(3, triplets(b)));
  b(2, 2) = 1, b(0, 2) = 2;
  CHECK(f.factor(3, triplets(b)));
  b.col(2) = b.col(0) + b.col(1);  // numerically singular, no empty row or column
  CHECK_FALSE(f.factor(3, triplets(b)));
  CHECK(f.factor(0, {}));
}
