// SPDX-License-Identifier: Apache-2.0
// Redundant experts (replication.hpp): copies within the per-GPU budget, every
// token-expert pair served exactly once on a GPU holding the expert (recounted from the
// serving GPUs), rows and load recounted, and without replicas the send-once rows of
// metrics.hpp's evaluate_placement.
#include <disagmoe/placement/correlated.hpp>
#include <disagmoe/placement/dispatch_plan.hpp>
#include <disagmoe/placement/metrics.hpp>
#include <disagmoe/placement/replication.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <set>

using namespace disagmoe::placement;

namespace {
RoutingTrace skewed(std::uint64_t seed, std::int64_t first, std::int64_t tokens) {
  SyntheticTraceSpec s{.layers = 3, .num_experts = 64, .top_k = 8, .popularity_skew = 1.0, .group_size = 8,
                       .group_prob = 0.5, .transition_prob = 0.6, .seed = seed};
  return SyntheticTraceGenerator(s).generate(first, tokens);
}
}  // namespace

TEST_CASE("replicas: every token-expert pair served once on a holder; rows and load recounted") {
  const int G = 8, slots = 2;
  const auto fit = skewed(5, 0, 4000);
  const auto stats = CouplingStats::of(fit, 1);
  const auto p = CorrelatedPlacement({.starts = 1, .kicks = 0, .seed = 5, .threads = 1}).fit(stats, Topology{G, 8});
  const auto rp = replicate_experts(p, stats, slots);
  const std::int64_t T = 3000;
  const auto eval = skewed(5, 4000, T);
  const int L = eval.layers(), k = eval.top_k(), E = eval.num_experts();
  // The copies: primary first and equal to the base placement, no GPU twice, every
  // replica slot filled and none over budget.
  std::vector<std::set<std::pair<int, int>>> holds(static_cast<std::size_t>(L));  // (gpu, expert)
  for (int l = 0; l < L; ++l) {
    std::vector<int> extra(G, 0);
    for (int e = 0; e < E; ++e) {
      const auto h = rp.hosts(l, e);
      REQUIRE(!h.empty());
      CHECK(h[0] == p.gpu(l, e));
      CHECK(std::set<int>(h.begin(), h.end()).size() == h.size());
      for (std::size_t j = 0; j < h.size(); ++j) {
        holds[static_cast<std::size_t>(l)].insert({h[j], e});
        if (j > 0) ++extra[static_cast<std::size_t>(h[j])];
      }
    }
    for (int g = 0; g < G; ++g) CHECK(extra[static_cast<std::size_t>(g)] == slots);
  }
  const auto home = contiguous_homes(T, L, G);
  const auto with = dispatch_replicas(eval, rp, home);
  const auto without = dispatch_replicas(eval, ReplicatedPlacement(p), home);
  std::int64_t rows = 0;
  double worst = 0;
  for (int l = 0; l < L; ++l) {
    std::vector<std::int64_t> load(G, 0);
    std::int64_t layer_rows = 0;
    for (std::int64_t t = 0; t < T; ++t) {
      const auto experts = eval.experts(t, l);
      std::set<int> dest;
      std::multiset<int> served;  // experts of this token served, over all GPUs
      for (int s = 0; s < k; ++s) {
        const int g = with.gpu[(static_cast<std::size_t>(l) * static_cast<std::size_t>(T) + static_cast<std::size_t>(t)) * static_cast<std::size_t>(k) + static_cast<std::size_t>(s)];
        REQUIRE(g >= 0);
        REQUIRE(g < G);
        CHECK(holds[static_cast<std::size_t>(l)].count({g, experts[static_cast<std::size_t>(s)]}) == 1);
        served.insert(experts[static_cast<std::size_t>(s)]);
        dest.insert(g);
        ++load[static_cast<std::size_t>(g)];
      }
      for (const auto e : experts) CHECK(served.count(e) == 1);  // exactly once per chosen expert
      rows += static_cast<std::int64_t>(dest.size());
      layer_rows += static_cast<std::int64_t>(dest.size());
    }
    // The serving GPUs of a layer are the send-once plan's input as they are.
    const auto lt = static_cast<std::size_t>(l) * static_cast<std::size_t>(T);
    const auto plan = make_dispatch_plan(std::span<const std::int32_t>(with.gpu).subspan(lt * static_cast<std::size_t>(k), static_cast<std::size_t>(T) * static_cast<std::size_t>(k)),
                                         k, std::span<const std::int32_t>(home).subspan(lt, static_cast<std::size_t>(T)), G, 8, 1);
    CHECK(plan.rows_dedup == layer_rows);
    for (int g = 0; g < G; ++g) CHECK(plan.rows_to(g) <= load[static_cast<std::size_t>(g)]);  // a row carries >= 1 pair
    worst = std::max(worst, static_cast<double>(*std::max_element(load.begin(), load.end())) / (static_cast<double>(T) * k / G));
  }
  CHECK(with.rows_naive == T * L * k);
  CHECK(with.rows_dedup == rows);
  CHECK(with.max_load_over_mean == doctest::Approx(worst).epsilon(1e-12));
  // Without replicas the dispatcher is the plain send-once dispatch of metrics.hpp.
  const auto plain = evaluate_placement(eval, p, home);
  CHECK(without.rows_dedup == plain.rows_dedup);
  CHECK(without.max_load_over_mean == doctest::Approx(plain.max_load_over_mean).epsilon(1e-12));
  // The point of replicas on a skewed trace: the hottest GPU carries less.
  CHECK(with.max_load_over_mean < without.max_load_over_mean);
}

TEST_CASE("replicas reject a bad budget or copy, naming the field") {
  const auto fit = skewed(6, 0, 500);
  const auto stats = CouplingStats::of(fit, 1);
  const auto p = contiguous_placement(3, 64, Topology{8, 8});
  CHECK_THROWS_WITH_AS(replicate_experts(p, stats, 9), doctest::Contains("slots_per_gpu = 9"), disagmoe::ConfigError);
  ReplicatedPlacement rp(p, 1);
  CHECK_THROWS_WITH_AS(rp.add_replica(0, 0, p.gpu(0, 0)), doctest::Contains("a GPU not yet holding expert 0"), disagmoe::ConfigError);
  rp.add_replica(0, 0, 5);
  CHECK_THROWS_WITH_AS(rp.add_replica(0, 1, 5), doctest::Contains("at most slots_per_gpu = 1"), disagmoe::ConfigError);
}
