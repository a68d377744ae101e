// SPDX-License-Identifier: Apache-2.0
// Balanced assignment against brute force and the Hungarian method; TokenShuffle keeps
// shares exactly equal, is causal, and reaches the closed-form optimum on planted data.
#include <disagmoe/placement/correlated.hpp>
#include <disagmoe/placement/token_shuffle.hpp>

#include <doctest/doctest.h>

#include <functional>
#include <limits>

using namespace disagmoe::placement;

namespace {

// Hungarian method (Kuhn 1955; O(n^3) shortest augmenting path form) on the n x n
// matrix that repeats bin g's column capacity[g] times: an independent exact oracle.
double hungarian_max(const std::vector<double>& score, const std::vector<std::int64_t>& cap) {
  const std::size_t G = cap.size(), n = score.size() / G;
  std::vector<std::size_t> col_bin;
  for (std::size_t g = 0; g < G; ++g)
    for (std::int64_t c = 0; c < cap[g]; ++c) col_bin.push_back(g);
  const double inf = std::numeric_limits<double>::infinity();
  auto cost = [&](std::size_t i, std::size_t j) { return -score[(i - 1) * G + col_bin[j - 1]]; };
  std::vector<double> u(n + 1, 0), v(n + 1, 0);
  std::vector<std::size_t> p(n + 1, 0), way(n + 1, 0);
  for (std::size_t i = 1; i <= n; ++i) {
    p[0] = i;
    std::size_t j0 = 0;
    std::vector<double> minv(n + 1, inf);
    std::vector<char> used(n + 1, 0);
    do {
      used[j0] = 1;
      const std::size_t i0 = p[j0];
      double delta = inf;
      std::size_t j1 = 0;
      for (std::size_t j = 1; j <= n; ++j)
        if (!used[j]) {
          const double cur = cost(i0, j) - u[i0] - v[j];
          if (cur < minv[j]) minv[j] = cur, way[j] = j0;
          if (minv[j] < delta) delta = minv[j], j1 = j;
        }
      for (std::size_t j = 0; j <= n; ++j)
        if (used[j]) u[p[j]] += delta, v[j] -= delta;
        else minv[j] -= delta;
      j0 = j1;
    } while (p[j0] != 0);
    do {
      const std::size_t j1 = way[j0];
      p[j0] = p[j1];
      j0 = j1;
    } while (j0);
  }
  double total = 0;
  for (std::size_t j = 1; j <= n; ++j) total += score[(p[j] - 1) * G + col_bin[j - 1]];
  return total;
}

double brute_force_max(const std::vector<double>& score, std::vector<std::int64_t> cap) {
  const std::size_t G = cap.size(), n = score.size() / G;
  double best = -std::numeric_limits<double>::infinity();
  std::function<void(std::size_t, double)> rec = [&](std::size_t i, double acc) {
    if (i == n) {
      best = std::max(best, acc);
      return;
    }
    for (std::size_t g = 0; g < G; ++g)
      if (cap[g] > 0) {
        --cap[g];
        rec(i + 1, acc + score[i * G + g]);
        ++cap[g];
      }
  };
  rec(0, 0.0);
  return best;
}

void check_assignment(const std::vector<double>& score, const std::vector<std::int64_t>& cap, double exact) {
  const auto r = balanced_assignment(score, cap);
  std::vector<std::int64_t> count(cap.size(), 0);
  double value = 0;
  for (std::size_t i = 0; i < r.bin.size(); ++i) {
    ++count[static_cast<std::size_t>(r.bin[i])];
    value += score[i * cap.size() + static_cast<std::size_t>(r.bin[i])];
  }
  CHECK(count == cap);
  CHECK(value == doctest::Approx(r.value));
  const double tol = 1e-6 * (1 + std::abs(exact));
  CHECK(r.value >= exact - tol);
  CHECK(r.value <= exact + tol);
  CHECK(r.upper_bound >= exact - tol);
}

}  // namespace

TEST_CASE("balanced assignment equals brute force and the Hungarian method") {
  for (std::uint64_t seed = 1; seed <= 30; ++seed) {
    CAPTURE(seed);
    detail::SplitMix64 g{seed};
    const std::size_t G = 1 + g.below(3), n = 1 + g.below(7);
    std::vector<std::int64_t> cap(G, 0);
    for (std::size_t i = 0; i < n; ++i) ++cap[g.below(G)];  // uneven, some bins empty
    std::vector<double> score(n * G);
    for (auto& s : score) s = seed % 3 == 0 ? static_cast<double>(g.below(3)) : g.uniform() * 10 - 5;  // ties too
    check_assignment(score, cap, brute_force_max(score, cap));
  }
  for (std::uint64_t seed = 100; seed < 106; ++seed) {
    CAPTURE(seed);
    detail::SplitMix64 g{seed};
    const std::size_t G = 4, n = 80;
    std::vector<std::int64_t> cap = {20, 20, 20, 20};
    std::vector<double> score(n * G);
    for (auto& s : score) s = seed % 2 ? g.uniform() : static_cast<double>(g.below(4));
    check_assignment(score, cap, hungarian_max(score, cap));
  }
  CHECK_THROWS_WITH_AS(balanced_assignment(std::vector<double>{1, 2}, std::vector<std::int64_t>{1, 0, 0}),
                       doctest::Contains("score.size() = 2"), disagmoe::ConfigError);
  CHECK_THROWS_WITH_AS(balanced_assignment(std::vector<double>{1, 2}, std::vector<std::int64_t>{2, 1}),
                       doctest::Contains("sum of capacities = 3"), disagmoe::ConfigError);
}

namespace {
// Tokens [first, first + tokens) of one planted model: fit and eval traces come from
// the same model (same seed) but are disjoint token ranges.
RoutingTrace planted_trace(std::uint64_t seed, std::int64_t first, std::int64_t tokens, double gp, double tp) {
  SyntheticTraceSpec s{.layers = 4, .num_experts = 32, .top_k = 2, .group_size = 4,
                       .group_prob = gp, .transition_prob = tp, .seed = seed};
  return SyntheticTraceGenerator(s).generate(first, tokens);
}
}  // namespace

TEST_CASE("shuffle keeps shares exactly equal and is causal") {
  for (std::uint64_t seed : {1u, 2u}) {
    CAPTURE(seed);
    const auto fit = planted_trace(seed, 0, 3000, 0.7, 0.7);
    const auto stats = CouplingStats::of(fit);
    const Topology topo{8, 4};
    const auto p = CorrelatedPlacement({.seed = seed}).fit(stats, topo);
    RoutingTrace eval = planted_trace(seed, 3000, 1003, 0.7, 0.7);
    const TokenShuffle shuffle(stats, p, {.batch_tokens = 256});
    const auto r = shuffle.assign(eval);
    const auto contiguous = contiguous_homes(1003, 4, 8, 256);
    for (int l = 0; l < 4; ++l)
      for (std::int64_t first = 0; first < 1003; first += 256) {
        std::vector<int> got(8, 0), want(8, 0);
        for (std::int64_t t = first; t < std::min<std::int64_t>(first + 256, 1003); ++t) {
          ++got[static_cast<std::size_t>(r.home[static_cast<std::size_t>(l * 1003 + t)])];
          ++want[static_cast<std::size_t>(contiguous[static_cast<std::size_t>(l * 1003 + t)])];
        }
        REQUIRE(got == want);
      }
    CHECK(r.score <= r.score_bound + 1e-9);
    // Causality: change every token's experts at layer 2 (rotate ids); homes at
    // layers 0..2 must not move, and layer 3 (which reads layer 2) should.
    std::vector<ExpertId> ids(eval.ids().begin(), eval.ids().end());
    for (std::int64_t t = 0; t < 1003; ++t)
      for (int s = 0; s < 2; ++s) {
        auto& x = ids[static_cast<std::size_t>((t * 4 + 2) * 2 + s)];
        x = static_cast<ExpertId>((x + 5) % 32);
      }
    const RoutingTrace changed(1003, 4, 2, 32, std::move(ids));
    const auto r2 = shuffle.assign(changed);
    for (std::size_t i = 0; i < 3 * 1003; ++i) REQUIRE(r2.home[i] == r.home[i]);
    CHECK(!std::equal(r.home.begin() + 3 * 1003, r.home.end(), r2.home.begin() + 3 * 1003));
  }
}

TEST_CASE("shuffle reaches the closed-form balanced optimum on perfectly predictable traces") {
  // Groups of 4 experts = one GPU each; tokens always follow the planted successor and
  // pick inside their group: a token's layer-l GPU is known from layer l-1, so the
  // best balanced homes serve sum_g min(tokens predicted for g, share of g) tokens locally.
  const auto fit = planted_trace(7, 0, 4000, 1.0, 1.0);
  const auto stats = CouplingStats::of(fit);
  const Topology topo{8, 8};
  const auto p = CorrelatedPlacement({.seed = 7}).fit(stats, topo);
  const auto eval = planted_trace(7, 4000, 2000, 1.0, 1.0);
  const auto r = TokenShuffle(stats, p).assign(eval);
  const auto m = evaluate_placement(eval, p, r.home);
  for (int l = 1; l < 4; ++l) {
    std::vector<std::int64_t> predicted(8, 0);
    for (std::int64_t t = 0; t < 2000; ++t) ++predicted[static_cast<std::size_t>(p.gpu(l, eval.experts(t, l)[0]))];
    double best = 0;
    for (int g = 0; g < 8; ++g) best += static_cast<double>(std::min<std::int64_t>(predicted[static_cast<std::size_t>(g)], 250));
    CHECK(m.local_share_per_layer[static_cast<std::size_t>(l)] == doctest::Approx(best / 2000));
  }
  // Without shuffling the contiguous shard serves about 1/G locally.
  const auto plain = evaluate_placement(eval, p, contiguous_homes(2000, 4, 8));
  CHECK(plain.local_share < 0.2);
  CHECK(m.local_share > 0.6);
}
