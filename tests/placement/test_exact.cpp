// SPDX-License-Identifier: Apache-2.0
// The exact DP (exact.hpp) against brute-force enumeration of every balanced placement
// of every layer, scored by coupling_objective, with the load filter re-applied
// independently: single- and multi-node topologies, one and several experts per GPU,
// the 8-experts-on-4-GPUs case, and a binding load tolerance.
#include <disagmoe/placement/exact.hpp>
#include <disagmoe/placement/synthetic.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <limits>
#include <vector>

using namespace disagmoe::placement;

namespace {

CouplingWeights make_weights(std::uint64_t seed, std::int64_t tokens, int layers, int experts, int k, double skew,
                             double cross_layer) {
  SyntheticTraceSpec s;
  s.tokens = tokens;
  s.layers = layers;
  s.num_experts = experts;
  s.top_k = k;
  s.group_size = 2;
  s.group_prob = 0.5;
  s.transition_prob = 0.5;
  s.popularity_skew = skew;
  s.seed = seed;
  return CouplingWeights::from(CouplingStats::of(SyntheticTraceGenerator(s).generate_all()), cross_layer);
}

// Every map of E experts to G GPUs with E/G experts each: all G^E maps, filtered.
std::vector<std::vector<std::int32_t>> balanced_maps(int E, int G) {
  std::vector<std::vector<std::int32_t>> out;
  std::vector<std::int32_t> m(static_cast<std::size_t>(E), 0);
  for (;;) {
    std::vector<int> count(static_cast<std::size_t>(G), 0);
    for (const auto g : m) ++count[static_cast<std::size_t>(g)];
    if (std::all_of(count.begin(), count.end(), [&](int c) { return c == E / G; })) out.push_back(m);
    int i = 0;
    while (i < E && ++m[static_cast<std::size_t>(i)] == G) m[static_cast<std::size_t>(i++)] = 0;
    if (i == E) return out;
  }
}

double peak_load(const CouplingWeights& w, int l, const std::vector<std::int32_t>& m, int G) {
  std::vector<double> load(static_cast<std::size_t>(G), 0.0);
  for (int e = 0; e < w.experts; ++e)
    load[static_cast<std::size_t>(m[static_cast<std::size_t>(e)])] += w.load[static_cast<std::size_t>(l * w.experts + e)];
  return *std::max_element(load.begin(), load.end());
}

// The best objective over placements whose every layer meets the rule of exact.hpp:
// GPU load within (1 + tolerance) of the mean, or the layer's least peak when no map
// meets it. Every combination of allowed maps is scored by the objective's formula
// written out term by term (within-layer terms cached per map); the winner is
// re-scored by coupling_objective, which must agree.
double brute_force_best(const CouplingWeights& w, Topology topo, double nu, double tolerance) {
  const int L = w.layers, E = w.experts, G = topo.gpus;
  const auto maps = balanced_maps(E, G);
  auto same = [&](int ga, int gb) { return (ga == gb) + nu * (topo.node_of(ga) == topo.node_of(gb)); };
  std::vector<std::vector<std::size_t>> ok(static_cast<std::size_t>(L));
  std::vector<std::vector<double>> within(static_cast<std::size_t>(L));
  for (int l = 0; l < L; ++l) {
    double total = 0, least = std::numeric_limits<double>::infinity();
    for (int e = 0; e < E; ++e) total += w.load[static_cast<std::size_t>(l * E + e)];
    for (const auto& m : maps) least = std::min(least, peak_load(w, l, m, G));
    const double cap = std::max((1 + tolerance) * total / G, least) + 1e-9 * total;
    for (std::size_t i = 0; i < maps.size(); ++i) {
      if (peak_load(w, l, maps[i], G) > cap) continue;
      ok[static_cast<std::size_t>(l)].push_back(i);
      double v = 0;
      for (int a = 0; a < E; ++a)
        for (int b = a + 1; b < E; ++b) v += w.co_row(l, a)[b] * same(maps[i][static_cast<std::size_t>(a)], maps[i][static_cast<std::size_t>(b)]);
      within[static_cast<std::size_t>(l)].push_back(v);
    }
  }
  std::vector<std::size_t> pick(static_cast<std::size_t>(L), 0), best_pick;  // odometer over allowed maps per layer
  double best = -1;
  for (;;) {
    double v = 0;
    for (int l = 0; l < L; ++l) {
      v += within[static_cast<std::size_t>(l)][pick[static_cast<std::size_t>(l)]];
      if (l + 1 == L) break;
      const auto& m = maps[ok[static_cast<std::size_t>(l)][pick[static_cast<std::size_t>(l)]]];
      const auto& n = maps[ok[static_cast<std::size_t>(l + 1)][pick[static_cast<std::size_t>(l + 1)]]];
      for (int a = 0; a < E; ++a)
        for (int b = 0; b < E; ++b) v += w.trans_row(l, a)[b] * same(m[static_cast<std::size_t>(a)], n[static_cast<std::size_t>(b)]);
    }
    if (v > best) best = v, best_pick = pick;
    int l = 0;
    while (l < L && ++pick[static_cast<std::size_t>(l)] == ok[static_cast<std::size_t>(l)].size()) pick[static_cast<std::size_t>(l++)] = 0;
    if (l == L) break;
  }
  std::vector<std::int32_t> flat;
  for (int l = 0; l < L; ++l) {
    const auto& m = maps[ok[static_cast<std::size_t>(l)][best_pick[static_cast<std::size_t>(l)]]];
    flat.insert(flat.end(), m.begin(), m.end());
  }
  CHECK(coupling_objective(w, Placement(L, E, topo, flat), nu) == doctest::Approx(best).epsilon(1e-12));
  return best;
}

// The DP's placement: balanced, meets the same load rule, and scores the brute-force best.
void check_exact(const CouplingWeights& w, Topology topo, double nu, double tolerance) {
  const auto p = exact_placement(w, topo, nu, tolerance);
  REQUIRE(p.balanced());
  const auto maps = balanced_maps(w.experts, topo.gpus);
  for (int l = 0; l < w.layers; ++l) {
    double total = 0, least = std::numeric_limits<double>::infinity();
    for (int e = 0; e < w.experts; ++e) total += w.load[static_cast<std::size_t>(l * w.experts + e)];
    for (const auto& m : maps) least = std::min(least, peak_load(w, l, m, topo.gpus));
    const auto mine = p.layer(l);
    CHECK(peak_load(w, l, {mine.begin(), mine.end()}, topo.gpus) <=
          std::max((1 + tolerance) * total / topo.gpus, least) + 1e-9 * total);
  }
  CHECK(coupling_objective(w, p, nu) == doctest::Approx(brute_force_best(w, topo, nu, tolerance)).epsilon(1e-12));
}

constexpr double kNoLimit = std::numeric_limits<double>::infinity();

}  // namespace

TEST_CASE("exact DP equals brute force: two experts per GPU, one node and several") {
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    CAPTURE(seed);
    const auto w4 = make_weights(seed, 300, 3, 4, 2, 0.5, 0.7);
    for (const Topology topo : {Topology{2, 2}, Topology{2, 1}}) check_exact(w4, topo, 0.5, kNoLimit);
    const auto w6 = make_weights(seed, 400, 3, 6, 2, 0.5, 0.7);
    for (const Topology topo : {Topology{3, 3}, Topology{3, 1}}) check_exact(w6, topo, 0.5, kNoLimit);
  }
}

TEST_CASE("exact DP equals brute force: one expert per GPU (cross-layer alignment only)") {
  for (std::uint64_t seed : {4u, 5u}) {
    CAPTURE(seed);
    check_exact(make_weights(seed, 300, 3, 4, 2, 0.5, 1.0), Topology{4, 2}, 0.5, kNoLimit);
    check_exact(make_weights(seed, 300, 2, 6, 2, 0.5, 1.0), Topology{6, 3}, 0.7, kNoLimit);
  }
}

TEST_CASE("exact DP equals brute force: 8 experts on 4 GPUs, on one node and on two") {
  const auto w = make_weights(6, 600, 2, 8, 2, 0.5, 0.8);
  check_exact(w, Topology{4, 4}, 0.5, kNoLimit);
  check_exact(w, Topology{4, 2}, 0.5, kNoLimit);
}

TEST_CASE("exact DP equals brute force under a binding load tolerance") {
  // Skewed loads: the unconstrained optimum stacks hot experts, so the filter binds.
  for (std::uint64_t seed : {7u, 8u}) {
    CAPTURE(seed);
    const auto w = make_weights(seed, 500, 3, 6, 2, 1.5, 0.7);
    for (const double tol : {0.0, 0.1, 0.3}) {
      CAPTURE(tol);
      check_exact(w, Topology{3, 3}, 0.5, tol);
      check_exact(w, Topology{3, 1}, 0.5, tol);
    }
  }
}

TEST_CASE("exact DP covers 8 experts on 8 GPUs at 32 layers and rejects large instances clearly") {
  // 40320 maps per layer but one orbit: accepted within the default work bound.
  const auto w = make_weights(9, 2000, 32, 8, 2, 0.5, 1.0);
  const auto p = exact_placement(w, Topology{8, 8}, 1.0);
  CHECK(p.balanced());
  // Each layer pair's alignment is then an independent 8x8 assignment: the brute-force
  // best relative permutation per layer pair sums to the optimum.
  std::vector<int> perm{0, 1, 2, 3, 4, 5, 6, 7};
  double expected = 0;
  for (int l = 0; l + 1 < 32; ++l) {
    double best = 0;
    std::sort(perm.begin(), perm.end());
    do {
      double v = 0;
      for (int a = 0; a < 8; ++a) v += w.trans_row(l, a)[perm[static_cast<std::size_t>(a)]];
      best = std::max(best, v);
    } while (std::next_permutation(perm.begin(), perm.end()));
    double all_pairs = 0;  // one node: every transition is within it, weight nu = 1
    for (int a = 0; a < 8; ++a)
      for (int b = 0; b < 8; ++b) all_pairs += w.trans_row(l, a)[b];
    expected += best + all_pairs;
  }
  const double co_all = [&] {  // one node: every pair is on the node, nu * C summed
    double c = 0;
    for (int l = 0; l < 32; ++l)
      for (int a = 0; a < 8; ++a)
        for (int b = a + 1; b < 8; ++b) c += w.co_row(l, a)[b];
    return c;
  }();
  CHECK(coupling_objective(w, p, 1.0) == doctest::Approx(expected + co_all).epsilon(1e-12));

  const auto big = make_weights(1, 50, 2, 64, 2, 0.0, 1.0);
  CHECK_THROWS_WITH_AS(exact_placement(big, Topology{8, 8}, 1.0), doctest::Contains("experts = 64: expected at most"),
                       disagmoe::ConfigError);
}
