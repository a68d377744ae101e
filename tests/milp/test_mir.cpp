// SPDX-License-Identifier: Apache-2.0
// c-MIR cuts (mir_cuts.hpp) and the cut pool (cut_pool.hpp). Every c-MIR cut separated
// on random fixed-charge, mixed and wide-integer instances (general integers, continuous
// columns, variable bounds) at LP and random box points holds at every vertex of every
// integer slice of the feasible set, so at every feasible point (exact: a linear
// function attains its minimum over a slice at a vertex); the check is not vacuous
// (cuts are found and violated); the variable-bound substitution finds the switch a
// single-node fixed-charge set needs; the pool orders by efficacy and drops parallel cuts.
#include "cut_validity.hpp"
#include "families.hpp"
#include "oracle.hpp"

#include <disagmoe/milp/branch_and_bound.hpp>
#include <disagmoe/milp/cut_pool.hpp>
#include <disagmoe/milp/mir_cuts.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

using namespace disagmoe::milp;

using test::activity;

TEST_CASE("milp cuts: no c-MIR cut removes a feasible point of a random instance") {
  const auto seen = test::check_cuts_hold<detail::MirSeparator>(
      {test::Family::kFixedCharge, test::Family::kMixedRows, test::Family::kWideIntegers, test::Family::kBadlyScaled}, 150, 6);
  MESSAGE("instances " << seen.instances << ", c-MIR cuts checked " << seen.cuts);
  CHECK(seen.instances > 300);
  CHECK(seen.cuts > 500);
}

TEST_CASE("milp cuts: c-MIR with a variable-bound substitution on a fixed-charge node") {
  // min y1 + y2: x1 + x2 >= 5, x_j <= 4 y_j, x in [0, 4], y binary. LP: x = (4, 1),
  // y = (1, 0.25), bound 1.25. The demand row alone (no aggregation) with x1 = 4 - z1
  // (its bound) and x2 = 4 y2 - z2 (its variable bound), divided by 4, gives the c-MIR
  // y2 >= 1 (no arc carries 5 alone); with simple bounds only, no integer is left in it.
  Problem p;
  const int x1 = p.add_var(0, 4, 0), x2 = p.add_var(0, 4, 0);
  const int y1 = p.add_var(0, 1, 1, VarType::kBinary), y2 = p.add_var(0, 1, 1, VarType::kBinary);
  p.add_row({{x1, 1.0}, {x2, 1.0}}, 5, kInf, "demand");
  p.add_row({{x1, 1.0}, {y1, -4.0}}, -kInf, 0, "vub1");
  p.add_row({{x2, 1.0}, {y2, -4.0}}, -kInf, 0, "vub2");
  const std::vector<double> x{4, 1, 1, 0.25};
  const auto cuts = detail::MirSeparator(p).separate(x, p.lbs(), p.ubs(), 200, 0);
  bool found = false;
  for (const auto& cut : cuts) {
    if (cut.terms.size() != 1 || cut.terms[0].first != y2) continue;
    const double c = cut.terms[0].second;
    found = found || (c < 0 && cut.hi / c == doctest::Approx(1.0));
  }
  CHECK(found);
  // And the solver's root bound after cuts reaches the optimum 2.
  const Result r = solve(p);
  REQUIRE(r.status == Status::kOptimal);
  CHECK(r.objective == doctest::Approx(2.0));
  CHECK(r.root_bound_cuts >= 2.0 - 1e-6);
}

TEST_CASE("milp cut pool: efficacy order, parallel cuts dropped, a cap") {
  detail::CutPool pool;
  const std::vector<double> x{1.0, 1.0, 0.0};
  auto cut = [](std::vector<std::pair<int, double>> t, double hi) {
    detail::LinearCut c;
    c.terms = std::move(t);
    c.hi = hi;
    return c;
  };
  pool.add(cut({{0, 1.0}, {1, 1.0}}, 1.0), false, "a");            // violation 1, efficacy 0.707
  pool.add(cut({{1, 2.0}, {0, 2.01}}, 2.0), false, "a-parallel");  // nearly parallel to a, efficacy 0.709
  pool.add(cut({{0, 1.0}, {2, -1.0}}, 0.5), false, "b");            // efficacy 0.354
  pool.add(cut({{2, 1.0}}, 0.0), false, "satisfied");               // not violated
  pool.add(cut({{1, 1.0}}, 0.9), true, "c");                        // efficacy 0.1
  std::vector<detail::PoolCut> got = pool.select(x, 10);
  REQUIRE(got.size() == 3);
  CHECK(got[0].origin == "a-parallel");
  CHECK(got[0].cut.efficacy == doctest::Approx(2.01 / std::sqrt(4 + 2.01 * 2.01)));
  CHECK(got[1].origin == "b");
  CHECK(got[2].origin == "c");
  CHECK(got[2].integral);
  CHECK(pool.size() == 0);
  pool.add(cut({{0, 1.0}, {1, 1.0}}, 1.0), false, "a");
  pool.add(cut({{0, 1.0}, {2, -1.0}}, 0.5), false, "b");
  CHECK(pool.select(x, 1).size() == 1);
}
