// SPDX-License-Identifier: Apache-2.0
// Branch and bound against brute-force enumeration of the integers (with vertex
// enumeration for the continuous part), a knapsack dynamic program, and hand-made
// infeasible/unbounded/limit cases.
#include "oracle.hpp"
#include "random_problem.hpp"

#include <disagmoe/milp/branch_and_bound.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>

using namespace disagmoe::milp;

namespace {

void check_against_oracle(const Problem& p, const Result& r, std::uint64_t seed) {
  const test::OracleResult want = test::brute_force_milp(p);
  INFO("seed = " << seed);
  if (!want.feasible) {
    CHECK(r.status == Status::kInfeasible);
    CHECK(!r.has_solution());
    return;
  }
  REQUIRE(r.status == Status::kOptimal);
  REQUIRE(r.has_solution());
  CHECK(r.objective == doctest::Approx(want.objective).epsilon(1e-6).scale(1.0));
  CHECK(p.max_violation(r.solution) <= 1e-6);
  CHECK(p.evaluate(r.solution) == doctest::Approx(r.objective));
  // The documented stopping rule: |obj - bound| <= rel_gap |obj| or <= abs_gap.
  CHECK(std::abs(r.objective - r.bound) <= std::max(1e-6 * std::abs(r.objective), 1e-6) + 1e-9);
}

}  // namespace

TEST_CASE("milp bb: random small bounded MILPs match brute force") {
  int feasible = 0, infeasible = 0;
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    test::RandomSpec spec;
    spec.min_vars = 2, spec.max_vars = 8;
    spec.min_rows = 1, spec.max_rows = 5;
    spec.max_ints = 6;
    spec.int_range = 3;
    Problem p = test::random_problem(seed, spec);
    // Keep the continuous part small for the vertex oracle.
    int conts = 0;
    for (int j = 0; j < p.num_vars(); ++j) conts += !p.is_integer(j);
    if (conts > 3) continue;
    Options o;
    o.cut_rounds = seed % 2 == 0 ? 20 : 0;  // with and without root cuts
    const Result r = solve(p, o);
    check_against_oracle(p, r, seed);
    (r.status == Status::kOptimal ? feasible : infeasible)++;
  }
  MESSAGE("feasible " << feasible << ", infeasible " << infeasible);
  CHECK(feasible > 50);
  CHECK(infeasible > 5);
}

TEST_CASE("milp bb: pure integer programs with wider ranges match brute force") {
  for (std::uint64_t seed = 500; seed < 620; ++seed) {
    test::RandomSpec spec;
    spec.min_vars = 3, spec.max_vars = 5;
    spec.min_rows = 2, spec.max_rows = 4;
    spec.max_ints = 5;
    spec.int_range = 6;
    Problem p = test::random_problem(seed, spec);
    for (int j = 0; j < p.num_vars(); ++j) p.set_type(j, VarType::kInteger);
    for (int j = 0; j < p.num_vars(); ++j) p.set_bounds(j, std::ceil(p.lb(j)), std::max(std::ceil(p.lb(j)), std::floor(p.ub(j))));
    check_against_oracle(p, solve(p), seed);
  }
}

TEST_CASE("milp bb: 0/1 knapsack with 40 items matches dynamic programming") {
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int> w(5, 60), v(1, 100);
    const int items = 40;
    std::vector<int> weight(items), value(items);
    Problem p;
    p.set_sense(Sense::kMaximize);
    std::vector<int> idx;
    std::vector<double> coef;
    for (int k = 0; k < items; ++k) {
      weight[k] = w(rng), value[k] = v(rng);
      idx.push_back(p.add_var(0, 1, value[k], VarType::kBinary));
      coef.push_back(weight[k]);
    }
    const int cap = 400;
    p.add_row(idx, coef, -kInf, cap);
    std::vector<int> best(cap + 1, 0);  // classic DP over capacity
    for (int k = 0; k < items; ++k)
      for (int c = cap; c >= weight[k]; --c) best[c] = std::max(best[c], best[c - weight[k]] + value[k]);
    const Result r = solve(p);
    INFO("seed = " << seed);
    REQUIRE(r.status == Status::kOptimal);
    CHECK(r.objective == doctest::Approx(best[cap]));
    CHECK(r.bound >= r.objective - 1e-9);
  }
}

TEST_CASE("milp bb: infeasible, unbounded and trivial problems") {
  SUBCASE("LP feasible, no integer point") {
    Problem p;  // 2x = 1
    p.add_var(0, 10, 1, VarType::kInteger);
    p.add_row({{0, 2.0}}, 1, 1);
    const Result r = solve(p);
    CHECK(r.status == Status::kInfeasible);
    CHECK(std::isnan(r.objective));
  }
  SUBCASE("parity: x + y = 1, x - y = 0 over integers") {
    Problem p;
    p.add_var(-5, 5, 0, VarType::kInteger);
    p.add_var(-5, 5, 0, VarType::kInteger);
    p.add_row({{0, 1.0}, {1, 1.0}}, 1, 1);
    p.add_row({{0, 1.0}, {1, -1.0}}, 0, 0);
    CHECK(solve(p).status == Status::kInfeasible);
  }
  SUBCASE("unbounded") {
    Problem p;
    p.add_var(0, kInf, -1, VarType::kInteger);
    p.add_var(0, kInf, 0);
    p.add_row({{0, 1.0}, {1, -1.0}}, -kInf, 0.5);
    CHECK(solve(p).status == Status::kUnbounded);
  }
  SUBCASE("integer bounds with no integer inside") {
    Problem p;
    p.add_var(0.2, 0.8, 1, VarType::kInteger);
    CHECK(solve(p).status == Status::kInfeasible);
  }
  SUBCASE("no rows, maximise with offset") {
    Problem p;
    p.set_sense(Sense::kMaximize);
    p.add_var(-3.5, 7.5, 2, VarType::kInteger);
    p.set_objective_offset(1.0);
    const Result r = solve(p);
    REQUIRE(r.status == Status::kOptimal);
    CHECK(r.objective == 15.0);
    CHECK(r.bound == doctest::Approx(15.0));
  }
  SUBCASE("no columns: the empty point is the solution, the offset its objective") {
    Problem p;
    p.set_objective_offset(-5.0);
    for (const bool presolve : {true, false}) {
      Options o;
      o.presolve = presolve;
      const Result r = solve(p, o);
      REQUIRE(r.status == Status::kOptimal);
      CHECK(r.has_solution());
      CHECK(r.solution.empty());
      CHECK(r.objective == -5.0);
    }
  }
}

TEST_CASE("milp bb: limits, callback, determinism and option checks") {
  test::RandomSpec spec;
  spec.min_vars = 30, spec.max_vars = 30, spec.min_rows = 20, spec.max_rows = 20;
  spec.max_ints = 30, spec.int_range = 4, spec.density = 0.4;
  Problem p;
  for (std::uint64_t seed = 7;; ++seed) {  // a feasible instance that needs branching
    p = test::random_problem(seed, spec);
    Options o;
    o.cut_rounds = 0;
    const Result r = solve(p, o);
    if (r.status == Status::kOptimal && r.nodes > 20) break;
    REQUIRE(seed < 200);
  }
  SUBCASE("node limit") {
    Options o;
    o.cut_rounds = 0;
    o.node_limit = 3;
    const Result r = solve(p, o);
    CHECK(r.status == Status::kNodeLimit);
    CHECK(r.nodes == 3);
  }
  SUBCASE("time limit zero") {
    Options o;
    o.time_limit = 0;
    const Result r = solve(p, o);
    CHECK(r.status == Status::kTimeLimit);
  }
  SUBCASE("incumbents improve monotonically and the last is the result") {
    Options o;
    std::vector<double> seen;
    o.on_incumbent = [&](const Incumbent& inc) {
      CHECK(p.max_violation(inc.solution) <= 1e-6);
      seen.push_back(inc.objective);
    };
    const Result r = solve(p, o);
    REQUIRE(!seen.empty());
    const double sign = p.sense() == Sense::kMaximize ? -1 : 1;
    for (std::size_t k = 1; k < seen.size(); ++k) CHECK(sign * seen[k] < sign * seen[k - 1]);
    CHECK(seen.back() == r.objective);
  }
  SUBCASE("deterministic") {
    const Result a = solve(p), b = solve(p);
    CHECK(a.objective == b.objective);
    CHECK(a.nodes == b.nodes);
    CHECK(a.lp_iterations == b.lp_iterations);
    CHECK(a.solution == b.solution);
  }
  SUBCASE("invalid options") {
    Options o;
    o.rel_gap = -1;
    CHECK_THROWS_WITH_AS(solve(p, o), "Options.rel_gap = -1: expected a finite value >= 0",
                         disagmoe::ConfigError);
    o = {};
    o.time_limit = std::nan("");
    CHECK_THROWS_AS(solve(p, o), disagmoe::ConfigError);
  }
}

TEST_CASE("milp bb: Harris ratio test finds a pivot when a huge reduced cost absorbs the tolerance") {
  // min c x s.t. 13 x >= 1, x >= 0 with c = 123456789012345: pass 1 gives
  // theta_max = fl((c + tol) / 13) = fl(c / 13), and fl(theta_max * 13) < c, so the old
  // pass-2 test |d| <= theta_max |a| rejected the only candidate and read row_[-1].
  Problem p;
  const double c = 123456789012345.0;
  const int x = p.add_var(0, kInf, c);
  p.add_row({{x, 13.0}}, 1.0, kInf);
  const LpResult lp = solve_lp(p);
  REQUIRE(lp.status == LpStatus::kOptimal);
  CHECK(lp.x[0] == doctest::Approx(1.0 / 13));
  Options o;
  o.cut_rounds = 0;
  const Result r = solve(p, o);
  REQUIRE(r.status == Status::kOptimal);
  CHECK(r.objective == doctest::Approx(c / 13));
}
