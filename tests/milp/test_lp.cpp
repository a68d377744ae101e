// SPDX-License-Identifier: Apache-2.0
// The dual simplex against vertex enumeration, plus optimality conditions (primal and
// dual feasibility, complementary slackness) checked on every returned solution.
#include "oracle.hpp"
#include "random_problem.hpp"

#include <disagmoe/milp/simplex.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <numeric>

using namespace disagmoe::milp;

namespace {

// Checks x, y, d satisfy the KKT conditions of p within tol (returns a reason or "").
std::string kkt_violation(const Problem& p, const LpResult& r, double tol) {
  const double sense = p.sense() == Sense::kMaximize ? -1.0 : 1.0;
  if (p.max_violation(r.x) > tol && [&] {
        for (int j = 0; j < p.num_vars(); ++j)
          if (r.x[j] < p.lb(j) - tol || r.x[j] > p.ub(j) + tol) return true;
        return false;
      }())
    return "bound violated";
  std::vector<double> d(p.objective());
  for (int i = 0; i < p.num_rows(); ++i) {
    const RowView row = p.row(i);
    double act = 0;
    for (std::size_t k = 0; k < row.index.size(); ++k) {
      act += row.value[k] * r.x[row.index[k]];
      d[row.index[k]] -= row.value[k] * r.duals[i];
    }
    if (act < p.row_lo(i) - tol || act > p.row_hi(i) + tol) return "row " + std::to_string(i) + " violated";
    // Sign conditions in minimisation terms.
    const double y = sense * r.duals[i];
    const bool at_lo = act <= p.row_lo(i) + tol, at_hi = act >= p.row_hi(i) - tol;
    if (!at_lo && y > tol) return "row dual positive off the lower bound";
    if (!at_hi && y < -tol) return "row dual negative off the upper bound";
  }
  for (int j = 0; j < p.num_vars(); ++j) {
    if (std::abs(d[j] - r.reduced_costs[j]) > tol * (1 + std::abs(d[j])))
      return "reduced cost inconsistent with duals at column " + std::to_string(j);
    const double dj = sense * d[j];
    const bool at_lo = r.x[j] <= p.lb(j) + tol, at_hi = r.x[j] >= p.ub(j) - tol;
    if (!at_lo && dj > tol) return "positive reduced cost off the lower bound";
    if (!at_hi && dj < -tol) return "negative reduced cost off the upper bound";
  }
  return "";
}

}  // namespace

TEST_CASE("milp lp: random bounded LPs match vertex enumeration and satisfy KKT") {
  int feasible = 0, infeasible = 0;
  for (std::uint64_t seed = 1; seed <= 600; ++seed) {
    test::RandomSpec spec;
    spec.max_vars = 4;
    spec.max_rows = 4;
    const Problem p = test::random_problem(seed, spec);
    std::vector<int> all(p.num_vars());
    std::iota(all.begin(), all.end(), 0);
    const auto want = test::vertex_lp(p, all, std::vector<double>(p.num_vars(), 0.0));
    const LpResult got = solve_lp(p);
    INFO("seed = " << seed);
    if (!want.feasible) {
      ++infeasible;
      CHECK(got.status == LpStatus::kInfeasible);
      continue;
    }
    ++feasible;
    REQUIRE(got.status == LpStatus::kOptimal);
    CHECK(got.objective == doctest::Approx(want.objective).epsilon(1e-7).scale(1.0));
    CHECK(kkt_violation(p, got, 1e-6) == "");
  }
  MESSAGE("feasible " << feasible << ", infeasible " << infeasible);
  CHECK(feasible > 100);
  CHECK(infeasible > 10);
}

TEST_CASE("milp lp: larger random LPs satisfy KKT (no oracle, optimality conditions)") {
  int optimal = 0;
  for (std::uint64_t seed = 1000; seed < 1060; ++seed) {
    test::RandomSpec spec;
    spec.min_vars = 30, spec.max_vars = 120;
    spec.min_rows = 10, spec.max_rows = 90;
    spec.density = 0.15;
    const Problem p = test::random_problem(seed, spec);
    const LpResult got = solve_lp(p);
    INFO("seed = " << seed);
    if (got.status == LpStatus::kOptimal) {
      ++optimal;
      CHECK(kkt_violation(p, got, 1e-6) == "");
    } else {
      CHECK(got.status == LpStatus::kInfeasible);
    }
  }
  CHECK(optimal > 10);
}

TEST_CASE("milp lp: unbounded, infeasible and free-variable cases") {
  SUBCASE("unbounded ray") {
    Problem p;  // min -x - y, x - y <= 1, x >= 0, y >= 0: unbounded along (1, 1)
    p.add_var(0, kInf, -1);
    p.add_var(0, kInf, -1);
    p.add_row({{0, 1.0}, {1, -1.0}}, -kInf, 1);
    CHECK(solve_lp(p).status == LpStatus::kUnbounded);
  }
  SUBCASE("infeasible with unbounded objective direction") {
    Problem p;  // min -x, x >= 0, x <= -1 via a row: infeasible though dual infeasible too
    p.add_var(0, kInf, -1);
    p.add_row({{0, 1.0}}, -kInf, -1);
    CHECK(solve_lp(p).status == LpStatus::kInfeasible);
  }
  SUBCASE("infeasible rows") {
    Problem p;
    p.add_var(0, 10, 1);
    p.add_var(0, 10, 1);
    p.add_row({{0, 1.0}, {1, 1.0}}, 5, kInf);
    p.add_row({{0, 1.0}, {1, 1.0}}, -kInf, 4);
    CHECK(solve_lp(p).status == LpStatus::kInfeasible);
  }
  SUBCASE("free variables, equality") {
    Problem p;  // min x + 2y, x + y = 3, x - y >= -1, x, y free -> x=... minimise: y=(3-x), obj = 6 - x
    p.add_var(-kInf, kInf, 1);  // x
    p.add_var(-kInf, kInf, 2);  // y
    p.add_row({{0, 1.0}, {1, 1.0}}, 3, 3);
    p.add_row({{0, 1.0}, {1, -1.0}}, -1, 5);  // x - y <= 5 -> 2x - 3 <= 5 -> x <= 4
    const auto r = solve_lp(p);
    REQUIRE(r.status == LpStatus::kOptimal);
    CHECK(r.objective == doctest::Approx(2.0));  // x = 4, y = -1
    CHECK(r.x[0] == doctest::Approx(4.0));
    CHECK(kkt_violation(p, r, 1e-7) == "");
  }
  SUBCASE("empty problem") {
    Problem p;
    p.add_var(1, 2, 3);
    const auto r = solve_lp(p);
    REQUIRE(r.status == LpStatus::kOptimal);
    CHECK(r.objective == doctest::Approx(3.0));
  }
}

TEST_CASE("milp lp: Beale's cycling example solves") {
  // Beale (1955): Dantzig's rule with the lowest-index tie break cycles on this LP.
  // min -3/4 x4 + 150 x5 - 1/50 x6 + 6 x7, optimum -1/20 at x4 = 1/25, x6 = 1, x1 = 3/100.
  Problem p;
  p.add_var(0, kInf, -0.75);
  p.add_var(0, kInf, 150);
  p.add_var(0, kInf, -0.02);
  p.add_var(0, kInf, 6);
  p.add_row({{0, 0.25}, {1, -60.0}, {2, -0.04}, {3, 9.0}}, -kInf, 0);
  p.add_row({{0, 0.5}, {1, -90.0}, {2, -0.02}, {3, 3.0}}, -kInf, 0);
  p.add_row({{2, 1.0}}, -kInf, 1);
  const auto r = solve_lp(p);
  REQUIRE(r.status == LpStatus::kOptimal);
  CHECK(r.objective == doctest::Approx(-0.05));
  CHECK(kkt_violation(p, r, 1e-9) == "");
}
