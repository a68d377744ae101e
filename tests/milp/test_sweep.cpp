// SPDX-License-Identifier: Apache-2.0
// The checker sweep: every generated family (families.hpp) solved with and without root
// cuts, the brute-force optimum (oracle.hpp) as debug solution, so that the first cut,
// bound change or pruned node that removes it throws; each result is compared with the
// oracle: same status, the same objective, integers exact and the point feasible by
// the solver's own rule. Plus the regression cases the sweep found.
#include "families.hpp"
#include "oracle.hpp"

#include <disagmoe/milp/branch_and_bound.hpp>
#include <disagmoe/milp/mps.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

using namespace disagmoe::milp;

namespace {

// The oracle's tolerance is 1e-7 absolute; the solver's 1e-6 relative to what a row's
// continuous columns absorb, so objectives may differ in the 6th digit.
bool same_objective(double a, double b) { return std::abs(a - b) <= 1e-5 * std::max(1.0, std::abs(b)); }

void check_result(const Problem& p, const test::OracleResult& want, const Result& r) {
  if (!want.feasible) {
    CHECK(r.status == Status::kInfeasible);
    return;
  }
  REQUIRE(r.status == Status::kOptimal);
  INFO("objective " << r.objective << ", oracle " << want.objective);
  CHECK(same_objective(r.objective, want.objective));
  for (int j = 0; j < p.num_vars(); ++j)
    if (p.is_integer(j)) CHECK(r.solution[j] == std::round(r.solution[j]));
  CHECK(p.max_scaled_violation(r.solution) <= 1e-6);
}

}  // namespace

TEST_CASE("milp sweep: every family against brute force, with the optimum as debug solution") {
  for (int f = 0; f < test::kFamilies; ++f) {
    const auto family = static_cast<test::Family>(f);
    int feasible = 0;
    for (std::uint64_t seed = 1; seed <= 250; ++seed) {
      const Problem p = test::family_problem(family, seed);
      const std::string name = test::family_name(family);
      INFO("family " << name << ", seed " << seed);
      const test::OracleResult want = test::brute_force_milp(p);
      feasible += want.feasible;
      for (const int rounds : {0, 20}) {
        CAPTURE(rounds);
        Options o;
        o.cut_rounds = rounds;
        o.time_limit = 20;
        if (want.feasible) o.debug_solution = &want.x;
        Result r;
        CHECK_NOTHROW(r = solve(p, o));
        check_result(p, want, r);
      }
    }
    MESSAGE(std::string(test::family_name(family)) << ": " << feasible << " of 250 feasible");
    CHECK(feasible > 100);
  }
}

// Regression (found by the sweep): x0..x3 binary, r1 over integers only with capacity
// 2029770.409; (1, 1, 1, 1) has activity 2029770.454, 2.2e-8 over relative to the side,
// which the old rule (rows relative to max(1, |side|)) accepted: "optimal" -79.94
// against the true -76.94.
TEST_CASE("milp regression: an integer-only row is judged absolutely") {
  const Problem p = read_mps_file(std::string(DISAGMOE_MILP_CORPUS) + "/big_knapsack_trap.mps");
  const std::vector<double> trap{1, 1, 1, 1, 2.97039341};
  CHECK(p.max_scaled_violation(trap) > 1e-6);
  for (const int rounds : {0, 20}) {
    CAPTURE(rounds);
    Options o;
    o.cut_rounds = rounds;
    const Result r = solve(p, o);
    REQUIRE(r.status == Status::kOptimal);
    CHECK(r.objective == doctest::Approx(-76.94078682).epsilon(1e-8));
  }
}

TEST_CASE("milp violation: a continuous column absorbs a row's error only where it may move") {
  Problem p;  // 1e6 y + x <= 5, y continuous in [0, 1], x integer in [0, 9]
  p.add_var(0, 1, 0);
  p.add_var(0, 9, 0, VarType::kInteger);
  p.add_row({{0, 1e6}, {1, 1.0}}, -kInf, 5.0);
  // y = 1.5e-6 may drop to 0: 0.5 over is 1e6 * 5e-7, within y's tolerance, absorbed.
  CHECK(p.max_scaled_violation(std::vector<double>{1.5e-6, 4}) <= 1e-6);
  CHECK(p.max_violation(std::vector<double>{1.5e-6, 4}) == doctest::Approx(0.5));
  // y at its lower bound absorbs nothing: x = 6 (integer) is 1 over, absolutely.
  CHECK(p.max_scaled_violation(std::vector<double>{0, 6}) == doctest::Approx(1.0));
  // Between: y = 1e-7 can move 1e-7, i.e. 0.1 of activity; 1.1 over stays infeasible.
  CHECK(p.max_scaled_violation(std::vector<double>{1e-7, 6}) > 1e-6);
}
