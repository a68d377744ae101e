// SPDX-License-Identifier: Apache-2.0
// Closed-form bubble checks under uniform costs and zero communication
// (the bubble formulas published with each schedule).
#include "uniform.hpp"

#include <disagmoe/schedule/baselines.hpp>
#include <disagmoe/schedule/simulator.hpp>

#include <doctest/doctest.h>

namespace ds = disagmoe::schedule;
using ds::test::Uniform;
using ds::test::uniform_problem;

TEST_CASE("1F1B step equals (m + p - 1)(F + B_full)") {
  for (int p : {1, 2, 3, 4, 6})
    for (int m : {1, 2, 5, 8, 13}) {
      for (int lps : {1, 2}) {
        const Uniform u{1.0, 1.5, 0.5, 0.25, 0.75, 0.5};
        const auto pb = uniform_problem(p, p * lps, m, u);
        const auto r = ds::simulate(ds::OneFOneB{}.build(pb));
        const double F = lps * (u.f + u.ef), B = lps * (u.b + u.w + u.eb + u.ew);
        CAPTURE(p);
        CAPTURE(m);
        CAPTURE(lps);
        REQUIRE_FALSE(r.deadlocked);
        CHECK(r.step_seconds == doctest::Approx((m + p - 1) * (F + B)));
        CHECK(r.bubble_fraction == doctest::Approx(double(p - 1) / (m + p - 1)));
      }
    }
}

TEST_CASE("interleaved 1F1B step equals m(F + B) + (p - 1)(F + B)/v") {
  for (int p : {2, 3, 4})
    for (int v : {1, 2, 3})
      for (int mult : {1, 2, 3}) {
        const int m = p * mult;
        const Uniform u{1.0, 1.0, 1.0, 1.0, 1.0, 1.0};
        const auto pb = uniform_problem(p, p * v, m, u);
        const auto r = ds::simulate(ds::Interleaved1F1B{v}.build(pb));
        const double F = v * (u.f + u.ef), B = v * (u.b + u.w + u.eb + u.ew);
        CAPTURE(p);
        CAPTURE(v);
        CAPTURE(m);
        REQUIRE_FALSE(r.deadlocked);
        CHECK(r.step_seconds == doctest::Approx(m * (F + B) + (p - 1) * (F + B) / v));
      }
}

#include <disagmoe/schedule/dualpipe.hpp>

// DualPipe README: bubble (PP/2 − 1)(F&B + B − 3W) with F&B = F + B_full when the
// pair only shares compute (no communication to hide), B = B_full = B_in + W.
TEST_CASE("DualPipe and DualPipeV bubbles match the README formula") {
  for (int p : {2, 4, 6, 8})
    for (int extra : {0, 2, 6}) {
      const Uniform u{1.0, 1.0, 1.0, 0.0, 0.0, 0.0, false};
      {
        const int m = 2 * p + extra;
        const auto pb = uniform_problem(p, p, m, u);
        const auto r = ds::simulate(ds::DualPipe{}.build(pb));
        const double F = u.f, W = u.w, Bf = u.b + u.w;
        CAPTURE(p);
        CAPTURE(m);
        REQUIRE_FALSE(r.deadlocked);
        const double ideal = m * (F + Bf);
        CHECK(r.step_seconds - ideal == doctest::Approx((p / 2 - 1) * (F + Bf + Bf - 3 * W)));
      }
      {
        const int m = 2 * p + extra;
        const auto pb = uniform_problem(p, 2 * p, m, u);
        const auto r = ds::simulate(ds::DualPipeV{}.build(pb));
        const double F = u.f, W = u.w, Bf = u.b + u.w;
        CAPTURE(p);
        CAPTURE(m);
        REQUIRE_FALSE(r.deadlocked);
        const double ideal = 2 * m * (F + Bf);
        CHECK(r.step_seconds - ideal == doctest::Approx((p - 1) * (F + Bf + Bf - 3 * W)));
      }
    }
}
