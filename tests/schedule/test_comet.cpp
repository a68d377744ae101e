// SPDX-License-Identifier: Apache-2.0
// Comet's fused GEMM + all-to-all kernels (CometOverlap): one MoE layer's step against the
// two-stage pipeline's closed form, one tile against the unchunked schedule, and op counts
// that do not grow with the tiles.
#include "uniform.hpp"

#include <disagmoe/schedule/baselines.hpp>
#include <disagmoe/schedule/simulator.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <random>

namespace ds = disagmoe::schedule;

namespace {

// A stage of `a` seconds feeding one of `b` seconds tile by tile over t tiles.
double pipelined(double a, double b, int t) { return a / t + std::max(a, b) * (t - 1) / t + b / t; }

}  // namespace

TEST_CASE("comet: one MoE layer, one micro-batch, equals the fused kernels' closed form") {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0.1, 3.0);
  for (int t : {1, 2, 3, 16, 1000})
    for (int trial = 0; trial < 20; ++trial) {
      ds::test::Uniform c{u(rng), u(rng), u(rng), u(rng), u(rng), u(rng)};
      ds::Problem pb = ds::test::uniform_problem(1, 1, 1, c);
      // Every all-to-all byte over the NIC at 1 GB/s: dispatch and combine take d and r seconds.
      const double d = u(rng), r = u(rng);
      pb.layers[0].dispatch_bytes = d * 1e9;
      pb.layers[0].combine_bytes = r * 1e9;
      pb.workers[0].a2a_nic_share = 1;
      pb.workers[0].a2a_nvlink_share = 0;
      const double up = 2.0 / 3, down = 1.0 / 3;
      // Forward: attention, dispatch → gate/up GEMM, down GEMM → combine. Backward: the
      // combine's gradient → down GEMM's input gradient, gate/up's → the dispatch's
      // gradient, beside which the expert weight gradient follows the gate/up part on the
      // backward stream; then attention's input and weight gradients.
      const double k2b = pipelined(c.eb * up, d, t);
      const double expected = c.f + pipelined(d, c.ef * up, t) + pipelined(c.ef * down, r, t) +
                              pipelined(r, c.eb * down, t) + std::max(k2b, c.eb * up + c.ew) + c.b + c.w;
      const auto s = ds::CometOverlap{t, 1}.build(pb);
      const auto res = ds::simulate(s);
      CAPTURE(t);
      CAPTURE(trial);
      REQUIRE_FALSE(res.deadlocked);
      CHECK(res.step_seconds == doctest::Approx(expected).epsilon(1e-12));
    }
}

TEST_CASE("comet: one tile is the unchunked interleaved schedule; ops do not grow with tiles") {
  for (std::uint64_t seed = 1; seed <= 30; ++seed) {
    std::mt19937_64 rng(seed);
    const int p = 1 + static_cast<int>(rng() % 3);
    const int v = 1 + static_cast<int>(rng() % 2);
    const int m = p * (1 + static_cast<int>(rng() % 3));
    const auto pb = ds::test::random_problem(rng, p, p * v * 2, m, true, seed % 2 ? 0.15 : 0.0);
    CAPTURE(seed);
    const auto one_tile = ds::simulate(ds::CometOverlap{1, v}.build(pb));
    const auto unchunked = ds::simulate(ds::ChunkedOverlap{1, v}.build(pb));
    REQUIRE_FALSE(one_tile.deadlocked);
    CHECK(one_tile.step_seconds == doctest::Approx(unchunked.step_seconds).epsilon(1e-9));
    CHECK(one_tile.peak_memory_bytes == doctest::Approx(unchunked.peak_memory_bytes));
    const auto few = ds::CometOverlap{2, v}.build(pb), many = ds::CometOverlap{4096, v}.build(pb);
    CHECK(few.ops.size() == many.ops.size());
    // Finer tiles overlap more: never slower than one tile, here on uncontended links.
    CHECK(ds::simulate(many).step_seconds <= one_tile.step_seconds * (1 + 1e-9));
  }
}
