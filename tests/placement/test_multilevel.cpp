// SPDX-License-Identifier: Apache-2.0
// The multilevel placement (multilevel.hpp): its swap gains against coupling_objective
// recomputed, refinement never lowering the objective and keeping counts and the load
// rule (recounted), the exact DP's optimum on small instances, and the planted
// placement's rows on planted dense and sparse traces.
#include <disagmoe/placement/exact.hpp>
#include <disagmoe/placement/metrics.hpp>
#include <disagmoe/placement/multilevel.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <utility>
#include <vector>

using namespace disagmoe::placement;

namespace {

CouplingWeights weights_of(std::uint64_t seed, std::int64_t tokens, int layers, int experts, int k, int group, double skew) {
  SyntheticTraceSpec s{.tokens = tokens, .layers = layers, .num_experts = experts, .top_k = k, .popularity_skew = skew,
                       .group_size = group, .group_prob = 0.5, .transition_prob = 0.6, .seed = seed};
  return CouplingWeights::from(CouplingStats::of(SyntheticTraceGenerator(s).generate_all(), 1), 1.0);
}

// Peak GPU load of layer l, recounted from the map.
double peak(const CouplingWeights& w, const Placement& p, int l) {
  std::vector<double> load(static_cast<std::size_t>(p.topology().gpus), 0.0);
  for (int e = 0; e < w.experts; ++e) load[static_cast<std::size_t>(p.gpu(l, e))] += w.load[static_cast<std::size_t>(l * w.experts + e)];
  return *std::max_element(load.begin(), load.end());
}

double total_load(const CouplingWeights& w, int l) {
  double t = 0;
  for (int e = 0; e < w.experts; ++e) t += w.load[static_cast<std::size_t>(l * w.experts + e)];
  return t;
}

}  // namespace

TEST_CASE("multilevel: a cluster swap's gain equals the change of coupling_objective") {
  const auto w = weights_of(3, 800, 3, 16, 4, 4, 0.5);
  const Topology topo{4, 2};
  const double nu = 0.7;
  const auto start = random_placement(3, 16, topo, 3);
  detail::ClusterRefiner r(w, start, nu, 1e9);
  detail::SplitMix64 rng{11};
  for (int t = 0; t < 200; ++t) {
    const int l = static_cast<int>(rng.below(3)), s = 1 << rng.below(3);  // clusters of 1, 2 or 4 experts
    const int p = static_cast<int>(rng.below(4)), q = (p + 1 + static_cast<int>(rng.below(3))) % 4;
    std::vector<int> a, b;
    for (int e = 0; e < 16; ++e) {
      if (r.gpu(l, e) == p && static_cast<int>(a.size()) < s) a.push_back(e);
      if (r.gpu(l, e) == q && static_cast<int>(b.size()) < s) b.push_back(e);
    }
    const Placement before(3, 16, topo, r.map());
    const double gain = r.swap_gain(l, a, b);
    r.swap(l, a, b);
    const Placement after(3, 16, topo, r.map());
    CHECK(after.balanced());
    CHECK(gain == doctest::Approx(coupling_objective(w, after, nu) - coupling_objective(w, before, nu)).epsilon(1e-9));
  }
}

TEST_CASE("multilevel: refinement never lowers the objective and keeps counts and the load rule") {
  struct Case { int experts, gpus, per_node; double tolerance; };
  for (const auto& c : {Case{32, 4, 4, 0.1}, Case{32, 8, 4, 0.25}, Case{64, 8, 8, 0.05}})
    for (std::uint64_t seed = 1; seed <= 3; ++seed) {
      CAPTURE(c.experts);
      CAPTURE(seed);
      const auto w = weights_of(seed, 3000, 3, c.experts, 4, 4, 0.8);
      const Topology topo{c.gpus, c.per_node};
      const MultilevelPlacement ml({.start = {.weights = {.node = 0.5}, .load_tolerance = c.tolerance, .seed = seed}});
      // Weak starts, and a local optimum (the correlated heuristic's), where a pass that
      // kept a losing tail would show.
      for (const auto& start : {random_placement(3, c.experts, topo, seed), contiguous_placement(3, c.experts, topo),
                                CorrelatedPlacement(ml.options().start).fit(w, topo)}) {
        const auto p = ml.refine(w, start);
        CHECK(p.balanced());
        CHECK(coupling_objective(w, p, 0.5) >= coupling_objective(w, start, 0.5) - 1e-9);
        for (int l = 0; l < 3; ++l) {
          const double cap = (1 + c.tolerance) * total_load(w, l) / c.gpus;
          CHECK(peak(w, p, l) <= std::max(cap, peak(w, start, l)) + 1e-6);
        }
      }
    }
}

TEST_CASE("multilevel: near the exact DP's optimum on small instances, fitted and from a random start") {
  struct Case { int experts, gpus, per_node, layers, k; };
  int optimal[2] = {0, 0}, runs = 0;
  double worst[2] = {1, 1};
  for (const auto& c : {Case{8, 4, 4, 3, 2}, Case{8, 4, 2, 3, 2}, Case{8, 2, 2, 4, 3}, Case{8, 8, 4, 3, 2}})
    for (std::uint64_t seed = 1; seed <= 4; ++seed) {
      CAPTURE(c.gpus);
      CAPTURE(c.per_node);
      CAPTURE(seed);
      const auto w = weights_of(seed, 400, c.layers, c.experts, c.k, 1 + static_cast<int>(seed % 2), 0.4);
      const Topology topo{c.gpus, c.per_node};
      const double exact = coupling_objective(w, exact_placement(w, topo, 0.5), 0.5);
      const MultilevelPlacement ml({.start = {.weights = {.node = 0.5}, .load_tolerance = 1e9, .seed = seed}});
      const Placement found[2] = {ml.fit(w, topo), ml.refine(w, random_placement(c.layers, 8, topo, seed))};
      for (int i = 0; i < 2; ++i) {
        CAPTURE(i);
        const double v = coupling_objective(w, found[i], 0.5);
        CHECK(v <= exact * (1 + 1e-9));
        CHECK(v >= (i == 0 ? 0.995 : 0.985) * exact);
        worst[i] = std::min(worst[i], v / exact);
        optimal[i] += v >= exact * (1 - 1e-9);
      }
      ++runs;
    }
  MESSAGE("fitted: optimal in " << optimal[0] << " of " << runs << ", worst " << worst[0] << "; from random: optimal in "
                                << optimal[1] << ", worst " << worst[1]);
}

TEST_CASE("multilevel: escapes a local optimum of single swaps (a planted two-pair move)") {
  // One layer, experts a1 a2 x1 x2 | b1 b2 y1 y2 on two GPUs. Pairs weigh 10 inside; each
  // a-b and x-y link weighs 3. Every single swap loses (8 or 14), but trading the a
  // pair for the y pair gains 24: the optimum {a, b} | {x, y} (objective 64, brute
  // force below) needs a cluster move or an FM sequence through a loss.
  CouplingWeights w;
  w.layers = 1;
  w.experts = 8;
  w.co.assign(64, 0.0);
  w.load.assign(8, 1.0);
  auto link = [&](int i, int j, double x) { w.co[static_cast<std::size_t>(i * 8 + j)] = w.co[static_cast<std::size_t>(j * 8 + i)] = x; };
  enum { a1, a2, x1, x2, b1, b2, y1, y2 };
  for (const auto& [i, j] : {std::pair{a1, a2}, std::pair{x1, x2}, std::pair{b1, b2}, std::pair{y1, y2}}) link(i, j, 10);
  for (const int i : {a1, a2})
    for (const int j : {b1, b2}) link(i, j, 3);
  for (const int i : {x1, x2})
    for (const int j : {y1, y2}) link(i, j, 3);
  const Topology topo{2, 2};
  const Placement start(1, 8, topo, {0, 0, 0, 0, 1, 1, 1, 1});
  REQUIRE(coupling_objective(w, start, 0.0) == 40);
  double best = 0;  // brute force over the 70 balanced maps
  for (int mask = 0; mask < 256; ++mask) {
    std::vector<std::int32_t> m(8);
    int ones = 0;
    for (int e = 0; e < 8; ++e) ones += m[static_cast<std::size_t>(e)] = (mask >> e) & 1;
    if (ones == 4) best = std::max(best, coupling_objective(w, Placement(1, 8, topo, m), 0.0));
  }
  REQUIRE(best == 64);
  const auto p = MultilevelPlacement({.start = {.weights = {.node = 0.0}, .load_tolerance = 1e9}}).refine(w, start);
  CHECK(coupling_objective(w, p, 0.0) == 64);
}

TEST_CASE("multilevel: >= 95% of the planted placement's rows removed, dense and sparse") {
  struct Kind {
    const char* name;
    int experts, k;
    double group_prob, skew;
  };
  for (const auto& kind : {Kind{"dense", 64, 8, 0.5, 0.3}, Kind{"sparse", 128, 2, 0.6, 0.3}})
    for (std::uint64_t seed : {5u, 6u}) {
      CAPTURE(kind.name);
      CAPTURE(seed);
      SyntheticTraceSpec spec{.layers = 4, .num_experts = kind.experts, .top_k = kind.k, .popularity_skew = kind.skew,
                              .group_size = kind.k, .group_prob = kind.group_prob, .transition_prob = 0.6, .seed = seed};
      const SyntheticTraceGenerator gen(spec);
      const auto fit = gen.generate(0, 8000), eval = gen.generate(8000, 4000);
      const Topology topo{8, 8};
      const auto home = contiguous_homes(eval.tokens(), 4, 8);
      const double planted = evaluate_placement(eval, planted_placement(gen.planted(), topo), home).rows_removed_fraction;
      // From a random start, so that the refinement, not the correlated start, has to
      // recover the structure.
      const auto w = CouplingWeights::from(CouplingStats::of(fit, 1), 1.0);
      const auto random = random_placement(4, kind.experts, topo, seed);
      const double start = evaluate_placement(eval, random, home).rows_removed_fraction;
      const double ours = evaluate_placement(eval, MultilevelPlacement({.start = {.seed = seed}}).refine(w, random), home).rows_removed_fraction;
      CAPTURE(planted);
      CAPTURE(start);
      CAPTURE(ours);
      CHECK(ours >= 0.95 * planted);
    }
}

TEST_CASE("multilevel: bad options and starts are rejected by name") {
  CHECK_THROWS_WITH_AS(MultilevelPlacement({.max_cycles = -1}), doctest::Contains("max_cycles = -1"), disagmoe::ConfigError);
  CHECK_THROWS_WITH_AS(MultilevelPlacement({.max_passes = 5000}), doctest::Contains("max_passes = 5000"), disagmoe::ConfigError);
  const auto w = weights_of(1, 200, 2, 8, 2, 2, 0.3);
  std::vector<std::int32_t> lopsided(16, 0);
  lopsided[15] = 1;
  CHECK_THROWS_WITH_AS(MultilevelPlacement().refine(w, Placement(2, 8, Topology{2, 2}, lopsided)),
                       doctest::Contains("start placement balanced"), disagmoe::ConfigError);
  CHECK_THROWS_WITH_AS(MultilevelPlacement().refine(w, contiguous_placement(3, 8, Topology{2, 2})),
                       doctest::Contains("start placement layers = 3"), disagmoe::ConfigError);
}
