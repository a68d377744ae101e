// SPDX-License-Identifier: Apache-2.0
// Lifted flow cover cuts (flow_cover_cuts.hpp). Every cut separated on random
// fixed-charge, mixed and knapsack instances at LP and random box points holds at every
// vertex of every integer slice of the feasible set, so at every feasible point (a
// linear function attains its minimum over a slice at a vertex); the check is not
// vacuous (cuts are found and violated). On a hand-built single-node flow set the cut
// at the LP optimum is the closed-form flow cover, and the solver with the debug
// solution (the brute-force optimum) never cuts it off on the fixed-charge family.
#include "cut_validity.hpp"
#include "families.hpp"
#include "oracle.hpp"

#include <disagmoe/milp/branch_and_bound.hpp>
#include <disagmoe/milp/flow_cover_cuts.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <random>
#include <vector>

using namespace disagmoe::milp;

using test::activity;

TEST_CASE("milp cuts: no flow cover cut removes a feasible point of a random instance") {
  const auto seen = test::check_cuts_hold<detail::FlowCoverSeparator>(
      {test::Family::kFixedCharge, test::Family::kMixedRows, test::Family::kBigKnapsack, test::Family::kWideIntegers}, 200, 8);
  MESSAGE("instances " << seen.instances << ", flow cover cuts checked " << seen.cuts);
  CHECK(seen.instances > 300);
  CHECK(seen.cuts > 300);
}

TEST_CASE("milp cuts: the flow cover of a single-node flow set at its LP optimum") {
  // max y1 + y2 - x1 - 2 x2: y1 + y2 <= 6, y1 <= 5 x1, y2 <= 4 x2, x binary. The LP
  // fills y1 (profit 0.8 per unit) then y2 (0.5): y = (5, 1), x = (1, 0.25), value 4.5.
  // Cover C = {1, 2}, lambda = 5 + 4 - 6 = 3, so y1 + y2 + 2 (1 - x1) + 1 (1 - x2) <= 6,
  // i.e. y1 + y2 - 2 x1 - x2 <= 3, violated there by 0.75. The integer optimum is 4.
  Problem p;
  p.set_sense(Sense::kMaximize);
  const int y1 = p.add_var(0, 5, 1), y2 = p.add_var(0, 4, 1);
  const int x1 = p.add_var(0, 1, -1, VarType::kBinary), x2 = p.add_var(0, 1, -2, VarType::kBinary);
  p.add_row({{y1, 1.0}, {y2, 1.0}}, -kInf, 6, "node");
  p.add_row({{y1, 1.0}, {x1, -5.0}}, -kInf, 0, "vub1");
  p.add_row({{y2, 1.0}, {x2, -4.0}}, -kInf, 0, "vub2");
  detail::DualSimplex lp(p);
  REQUIRE(lp.solve() == LpStatus::kOptimal);
  std::vector<double> x(p.num_vars());
  for (int j = 0; j < p.num_vars(); ++j) x[j] = lp.value(j);
  REQUIRE(x[y1] == doctest::Approx(5.0));
  REQUIRE(x[y2] == doctest::Approx(1.0));
  REQUIRE(x[x2] == doctest::Approx(0.25));
  const auto cuts = detail::FlowCoverSeparator(p).separate(x, p.lbs(), p.ubs());
  bool found = false;
  for (const auto& cut : cuts) {
    if (cut.source_row != 0) continue;
    std::map<int, double> t(cut.terms.begin(), cut.terms.end());
    found = found || (t.size() == 4 && t[y1] == doctest::Approx(1) && t[y2] == doctest::Approx(1) &&
                      t[x1] == doctest::Approx(-2) && t[x2] == doctest::Approx(-1) && cut.hi == doctest::Approx(3));
    CHECK(activity(cut, x) - cut.hi == doctest::Approx(0.75));
  }
  CHECK(found);
  // The solver's root cuts move the bound below the LP's 4.5, the optimum stays 4.
  Options o;
  o.flow_cover_cuts = true;
  const Result r = solve(p, o);
  REQUIRE(r.status == Status::kOptimal);
  CHECK(r.objective == doctest::Approx(4.0));
  CHECK(r.root_bound_cuts <= 4.5 - 0.1);
}

TEST_CASE("milp cuts: flow covers never cut off the brute-force optimum of a fixed-charge instance") {
  // The debug solution makes the first reduction that removes the optimum throw; the
  // solver runs with flow covers on and every other family too.
  int checked = 0, with_flow_covers = 0;
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    const Problem p = test::family_problem(test::Family::kFixedCharge, seed);
    INFO("seed " << seed);
    const test::OracleResult want = test::brute_force_milp(p);
    if (!want.feasible) continue;
    Options o;
    o.flow_cover_cuts = true;  // off by default
    o.presolve = false;        // the cuts see the generated rows
    o.debug_solution = &want.x;
    Result r;
    REQUIRE_NOTHROW(r = solve(p, o));
    REQUIRE(r.status == Status::kOptimal);
    CHECK(std::abs(r.objective - want.objective) <= 1e-5 * std::max(1.0, std::abs(want.objective)));
    ++checked;
    with_flow_covers += r.cuts.flow_cover > 0;
  }
  MESSAGE("instances " << checked << ", with flow cover cuts " << with_flow_covers);
  CHECK(checked > 150);
  CHECK(with_flow_covers > 10);
}
