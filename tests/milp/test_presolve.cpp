// SPDX-License-Identifier: Apache-2.0
// Presolve and postsolve (presolve.hpp) against brute force: on random instances of
// every family the reduced problem, enumerated on its own, has the original's optimum,
// and its optimal point postsolved is feasible for the original; every enumerated
// feasible point of the original survives presolve (its restriction is feasible for the
// reduced problem); solve with and without presolve agree. Plus hand-made reductions.
#include "families.hpp"
#include "oracle.hpp"
#include "random_problem.hpp"

#include <disagmoe/milp/branch_and_bound.hpp>
#include <disagmoe/milp/presolve.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

using namespace disagmoe::milp;

namespace {

Problem instance(std::uint64_t seed) {
  if (seed % 8 == 7) {
    test::RandomSpec spec;
    spec.min_vars = 3, spec.max_vars = 6, spec.max_ints = 5, spec.int_range = 5, spec.max_rows = 5;
    return test::random_problem(seed, spec);
  }
  return test::family_problem(static_cast<test::Family>(seed % 8 % test::kFamilies), seed);
}

// One feasible point per feasible integer slice: the continuous columns at the slice's
// optimum (vertex_lp); the feasible set itself is not enumerable.
std::vector<std::vector<double>> slice_optima(const Problem& p) {
  std::vector<int> ints, conts;
  for (int j = 0; j < p.num_vars(); ++j) (p.is_integer(j) ? ints : conts).push_back(j);
  std::vector<std::vector<double>> out;
  std::vector<double> x(p.num_vars(), 0.0);
  for (int j : ints) x[j] = std::ceil(p.lb(j));
  while (true) {
    const test::OracleResult r = test::vertex_lp(p, conts, x);
    if (r.feasible) out.push_back(r.x);
    if (!test::next_integer_point(p, ints, x)) break;
  }
  return out;
}

}  // namespace

TEST_CASE("milp presolve: the reduced problem keeps the optimum and every feasible slice") {
  int reduced = 0, checked = 0;
  PresolveStats total;
  for (std::uint64_t seed = 1; seed <= 420; ++seed) {
    CAPTURE(seed);
    const Problem p = instance(seed);
    INFO("instance " << p.name());
    const test::OracleResult want = test::brute_force_milp(p);
    const Presolved pre = presolve(p);
    if (pre.stats.infeasible) {  // presolve may only call infeasible what is
      CHECK(!want.feasible);
      continue;
    }
    total.rows_removed += pre.stats.rows_removed, total.cols_removed += pre.stats.cols_removed;
    total.bounds_tightened += pre.stats.bounds_tightened, total.coefs_tightened += pre.stats.coefs_tightened;
    total.parallel_rows += pre.stats.parallel_rows, total.substituted_cols += pre.stats.substituted_cols;
    total.dominated_sides += pre.stats.dominated_sides;
    reduced += pre.problem.num_vars() < p.num_vars() || pre.problem.num_rows() < p.num_rows();
    // Every feasible point (one per integer slice) is still feasible after presolve.
    for (const auto& x : slice_optima(p)) {
      bool fixed_ok = true;
      for (int j = 0; j < p.num_vars(); ++j)
        if (!std::isnan(pre.fixed[j])) fixed_ok = fixed_ok && std::abs(x[j] - pre.fixed[j]) <= 1e-6;
      CHECK(fixed_ok);
      CHECK(pre.problem.max_scaled_violation(pre.restrict(x)) <= 1e-6);
    }
    const test::OracleResult got = pre.problem.num_vars() > 0 ? test::brute_force_milp(pre.problem) : [&] {
      test::OracleResult r;
      r.feasible = pre.problem.num_rows() == 0;
      r.x = {};
      r.objective = pre.problem.objective_offset();
      return r;
    }();
    REQUIRE(got.feasible == want.feasible);
    if (!want.feasible) continue;
    CHECK(got.objective == doctest::Approx(want.objective).epsilon(1e-6).scale(1.0));
    const std::vector<double> x = pre.postsolve(got.x);
    CHECK(p.max_violation(x) <= 1e-6);
    CHECK(p.evaluate(x) == doctest::Approx(want.objective).epsilon(1e-6).scale(1.0));
    ++checked;
  }
  MESSAGE("presolve: " << checked << " checked, " << reduced << " reduced; rows " << total.rows_removed
                       << ", columns " << total.cols_removed << ", bounds " << total.bounds_tightened
                       << ", coefficients " << total.coefs_tightened << ", parallel rows " << total.parallel_rows
                       << ", substituted columns " << total.substituted_cols << ", dominated sides "
                       << total.dominated_sides);
  CHECK(checked > 250);
  CHECK(reduced > 100);
  CHECK(total.coefs_tightened > 20);
  CHECK(total.parallel_rows > 2);
  CHECK(total.dominated_sides > 2);
}

TEST_CASE("milp presolve: solve with and without presolve agree with brute force") {
  for (std::uint64_t seed = 1000; seed < 1300; ++seed) {
    CAPTURE(seed);
    const Problem p = instance(seed);
    const test::OracleResult want = test::brute_force_milp(p);
    for (const bool on : {false, true}) {
      CAPTURE(on);
      Options o;
      o.presolve = on;
      if (want.feasible) o.debug_solution = &want.x;
      const Result r = solve(p, o);
      if (!want.feasible) {
        CHECK(r.status == Status::kInfeasible);
        continue;
      }
      REQUIRE(r.status == Status::kOptimal);
      CHECK(r.objective == doctest::Approx(want.objective).epsilon(1e-5).scale(1.0));
      CHECK(p.max_scaled_violation(r.solution) <= 1e-6);
      if (!on) CHECK(r.presolve.rows_removed + r.presolve.cols_removed + r.presolve.bounds_tightened == 0);
    }
  }
}

TEST_CASE("milp presolve: singleton rows, fixed columns, redundant rows, coefficient tightening") {
  Problem p;  // min -x - y - z - w;  x, y binary, z integer [0, 10], w continuous [0, 5]
  p.add_var(0, 1, -1, VarType::kBinary, "x");
  p.add_var(0, 1, -1, VarType::kBinary, "y");
  p.add_var(0, 10, -1, VarType::kInteger, "z");
  p.add_var(0, 5, -1, VarType::kContinuous, "w");
  p.add_row({{0, 2.0}, {1, 3.0}}, -kInf, 4.0, "knap");     // 2x + 3y <= 4 -> x + y <= 1
  p.add_row({{2, 2.0}}, -kInf, 7.0, "single");             // z <= 3.5 -> z <= 3
  p.add_row({{3, 1.0}, {2, 1.0}}, -kInf, 100.0, "loose");  // redundant within the bounds
  p.add_row({{3, 1.0}}, 2.0, 2.0, "fix_w");                // w = 2
  const Presolved pre = presolve(p);
  CHECK_FALSE(pre.stats.infeasible);
  CHECK(pre.problem.num_vars() == 3);  // w fixed and removed
  CHECK(pre.fixed[3] == 2.0);
  CHECK(pre.problem.objective_offset() == -2.0);
  CHECK(pre.problem.ub(2) == 3.0);     // z from the singleton row
  REQUIRE(pre.problem.num_rows() == 1);  // only the knapsack is left
  const RowView r = pre.problem.row(0);
  REQUIRE(r.index.size() == 2);
  // Coefficient tightening: x's 2 -> 1 with side 3 (x + 3y <= 3),
  // then y's 3 -> 1 with side 1.
  CHECK(r.value[0] == 1.0);  // integral data: exact, no slack
  CHECK(r.value[1] == 1.0);
  CHECK(pre.problem.row_hi(0) == 1.0);
  CHECK(pre.stats.coefs_tightened == 2);
  CHECK(pre.stats.rows_removed == 3);
  const Result res = solve(p);
  REQUIRE(res.status == Status::kOptimal);
  CHECK(res.objective == doctest::Approx(-6.0));  // x or y, z = 3, w = 2
  CHECK(res.solution.size() == 4);
  CHECK(res.solution[3] == 2.0);
  // An infeasible singleton row: presolve says so, solve confirms without presolve.
  Problem q = p;
  q.add_row({{2, 1.0}}, 4.0, kInf, "z_ge_4");
  CHECK(presolve(q).stats.infeasible);
  CHECK(solve(q).status == Status::kInfeasible);
}

TEST_CASE("milp presolve: parallel rows merged, an implied free column singleton substituted") {
  // min -3x - 3y + 2z; x, y integer [0, 5], z continuous [0, 100].
  Problem p;
  p.add_var(0, 5, -3, VarType::kInteger, "x");
  p.add_var(0, 5, -3, VarType::kInteger, "y");
  p.add_var(0, 100, 2, VarType::kContinuous, "z");
  p.add_row({{0, 1.0}, {1, 2.0}}, -kInf, 6.0, "r1");       // x + 2y <= 6
  p.add_row({{0, 2.0}, {1, 4.0}}, -kInf, 10.0, "r2");      // 2 r1 <= 10: x + 2y <= 5 (tighter)
  p.add_row({{1, -6.0}, {0, -3.0}}, -20.0, kInf, "r3");    // -3 r1 >= -20: x + 2y <= 6.67 (dominated)
  p.add_row({{2, 1.0}, {0, -1.0}, {1, -1.0}}, 1.0, 1.0, "link");  // z = 1 + x + y: implied free
  const Presolved pre = presolve(p);
  CHECK_FALSE(pre.stats.infeasible);
  CHECK(pre.stats.parallel_rows == 2);
  CHECK(pre.stats.substituted_cols == 1);
  REQUIRE(pre.problem.num_vars() == 2);  // z substituted out
  REQUIRE(pre.problem.num_rows() == 1);  // x + 2y <= 5, exact (lambda = 2)
  CHECK(pre.problem.row_hi(0) == 5.0);
  CHECK(pre.problem.obj(0) == -1.0);     // -3 - 2 * (-1) / 1
  CHECK(pre.problem.obj(1) == -1.0);
  CHECK(pre.problem.objective_offset() == 2.0);
  const std::vector<double> x = pre.postsolve(std::vector<double>{5.0, 0.0});
  CHECK(x == std::vector<double>{5.0, 0.0, 6.0});
  CHECK(p.evaluate(x) == -3.0);
  for (const bool on : {false, true}) {
    Options o;
    o.presolve = on;
    const Result r = solve(p, o);
    REQUIRE(r.status == Status::kOptimal);
    CHECK(r.objective == doctest::Approx(-3.0));
    CHECK(p.max_violation(r.solution) <= 1e-9);
  }
}

TEST_CASE("milp presolve: row sides implied by a row of the same columns are dropped") {
  // max x + 2y; x, y integer [0, 3]. r1 and r4 bind; r2 and r3 follow from r1 over the
  // bounds: 2x + 2.5y = 2 (x + y) + 0.5 y <= 6 + 1.5 = 7.5 <= 7.6, and
  // -x - 0.5y = -(x + y) + 0.5 y >= -3 + 0 >= -4. r4 = r1 + 2y is not implied (nor r1 by r4).
  Problem p;
  p.set_sense(Sense::kMaximize);
  p.add_var(0, 3, 1, VarType::kInteger, "x");
  p.add_var(0, 3, 2, VarType::kInteger, "y");
  p.add_row({{0, 1.0}, {1, 1.0}}, -kInf, 3.0, "r1");
  p.add_row({{0, 2.0}, {1, 2.5}}, -kInf, 7.6, "r2");
  p.add_row({{0, -1.0}, {1, -0.5}}, -4.0, kInf, "r3");
  p.add_row({{0, 1.0}, {1, 3.0}}, -kInf, 7.0, "r4");
  // A range row whose upper side r1 implies (x + 1.25 y <= 3 + 0.75) and whose lower
  // side it does not: only that side goes, the row stays.
  p.add_row({{0, 1.0}, {1, 1.25}}, 1.0, 3.8, "r5");
  const Presolved pre = presolve(p);
  CHECK_FALSE(pre.stats.infeasible);
  CHECK(pre.stats.dominated_sides == 3);
  REQUIRE(pre.problem.num_rows() == 3);
  CHECK(pre.problem.row_name(0) == "r1");
  CHECK(pre.problem.row_name(1) == "r4");
  CHECK(pre.problem.row_name(2) == "r5");
  CHECK(pre.problem.row_lo(2) == 1.0);
  CHECK(pre.problem.row_hi(2) == kInf);
  for (const bool on : {false, true}) {  // the optimum: x = 1, y = 2, value 5
    Options o;
    o.presolve = on;
    const Result r = solve(p, o);
    REQUIRE(r.status == Status::kOptimal);
    CHECK(r.objective == doctest::Approx(5.0));
    CHECK(p.max_violation(r.solution) <= 1e-9);
  }
}
