// SPDX-License-Identifier: Apache-2.0
// Diving heuristics: every point a dive reports is integral on the integer columns and
// feasible for the problem (exact recheck against the rows and bounds), its objective
// is never below the brute-force optimum, and dives find solutions on most feasible
// instances (the check is not vacuous).
#include "oracle.hpp"
#include "random_problem.hpp"

#include <disagmoe/milp/diving.hpp>

#include <doctest/doctest.h>

#include <cmath>

using namespace disagmoe::milp;

TEST_CASE("milp diving: reported points are feasible, integral and not better than optimal") {
  int feasible = 0, found_any = 0;
  for (std::uint64_t seed = 1; seed <= 200; ++seed) {
    CAPTURE(seed);
    test::RandomSpec spec;
    spec.min_vars = 3, spec.max_vars = 8;
    spec.min_rows = 1, spec.max_rows = 5;
    spec.max_ints = 6;
    spec.int_range = 4;
    const Problem p = test::random_problem(seed, spec);
    int conts = 0;
    for (int j = 0; j < p.num_vars(); ++j) conts += !p.is_integer(j);
    if (conts > 3) continue;
    const test::OracleResult want = test::brute_force_milp(p);
    std::vector<int> ints, down(p.num_vars(), 1), up(p.num_vars(), 1);
    for (int j = 0; j < p.num_vars(); ++j)
      if (p.is_integer(j)) ints.push_back(j);
    for (const auto rule : {detail::DiveRule::kFractional, detail::DiveRule::kCoefficient}) {
      detail::DualSimplex lp(p);
      if (lp.solve() != LpStatus::kOptimal) continue;
      detail::DiveContext ctx{&ints, &down, &up};
      bool found = false;
      detail::dive(lp, ctx, rule, p.lbs(), p.ubs(), [&](const std::vector<double>& x) {
        std::vector<double> r = x;
        for (int j : ints) {
          CHECK(std::abs(x[j] - std::round(x[j])) <= 1e-6);
          r[j] = std::round(x[j]);
        }
        CHECK(p.max_violation(r) <= 1e-6);
        REQUIRE(want.feasible);  // a dive cannot find a point of an infeasible problem
        const double obj = p.evaluate(r);
        if (p.sense() == Sense::kMinimize) CHECK(obj >= want.objective - 1e-6);
        else CHECK(obj <= want.objective + 1e-6);
        found = true;
      });
      found_any += found;
    }
    feasible += want.feasible;
  }
  MESSAGE("feasible " << feasible << ", dives that found a point " << found_any);
  CHECK(found_any > feasible / 2);
}
