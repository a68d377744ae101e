// SPDX-License-Identifier: Apache-2.0
// Synthetic generator and coupling statistics: determinism, an independent brute-force
// recount (std::map over token sets), and the paper's top-2 statistic reproduced.
#include <disagmoe/placement/coupling_stats.hpp>
#include <disagmoe/placement/synthetic.hpp>

#include <doctest/doctest.h>

#include <map>
#include <set>
#include <utility>

using namespace disagmoe::placement;

TEST_CASE("generator is deterministic and chunking-invariant") {
  SyntheticTraceSpec spec;
  spec.tokens = 500;
  spec.layers = 3;
  spec.num_experts = 32;
  spec.top_k = 4;
  spec.popularity_skew = 1.2;
  spec.group_size = 6;
  spec.gates = true;
  spec.seed = 99;
  const SyntheticTraceGenerator gen(spec);
  const RoutingTrace all = gen.generate_all();
  const RoutingTrace again = SyntheticTraceGenerator(spec).generate_all();
  CHECK(std::equal(all.ids().begin(), all.ids().end(), again.ids().begin(), again.ids().end()));
  const RoutingTrace tail = gen.generate(123, 77);
  for (std::int64_t t = 0; t < 77; ++t)
    for (int l = 0; l < 3; ++l) {
      const auto a = tail.experts(t, l), b = all.experts(123 + t, l);
      REQUIRE(std::equal(a.begin(), a.end(), b.begin(), b.end()));
    }
  spec.seed = 100;
  const RoutingTrace other = SyntheticTraceGenerator(spec).generate_all();
  CHECK(!std::equal(all.ids().begin(), all.ids().end(), other.ids().begin(), other.ids().end()));
  // Gates: descending, sum to one.
  for (std::int64_t t = 0; t < all.tokens(); ++t) {
    const auto g = all.gates(t, 1);
    float sum = 0;
    for (int s = 0; s < 4; ++s) sum += g[static_cast<std::size_t>(s)];
    REQUIRE(sum == doctest::Approx(1.0).epsilon(1e-5));
    REQUIRE(g[0] >= g[3]);
  }
  CHECK_THROWS_WITH_AS(SyntheticTraceGenerator(SyntheticTraceSpec{.group_prob = 1.5}), doctest::Contains("group_prob = 1.5"),
                       disagmoe::ConfigError);
}

TEST_CASE("statistics equal a brute-force recount") {
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    CAPTURE(seed);
    SyntheticTraceSpec spec;
    spec.tokens = 700;
    spec.layers = 4;
    spec.num_experts = 16;
    spec.top_k = 3;
    spec.popularity_skew = 0.8;
    spec.group_size = 4;
    spec.seed = seed;
    const RoutingTrace tr = SyntheticTraceGenerator(spec).generate_all();
    CouplingStats s1(4, 16, 3), s2(4, 16, 3);
    // Streaming in chunks with two threads equals one pass with one thread.
    SyntheticTraceGenerator gen(spec);
    s1.add(gen.generate(0, 300), 2);
    s1.add(gen.generate(300, 400), 2);
    s2.add(tr, 1);
    std::map<std::tuple<int, int, int>, std::uint64_t> load, co, trans;
    for (std::int64_t t = 0; t < tr.tokens(); ++t)
      for (int l = 0; l < 4; ++l) {
        const auto e = tr.experts(t, l);
        const std::set<int> here(e.begin(), e.end());
        for (int a : here) {
          ++load[{l, a, 0}];
          for (int b : here)
            if (a != b) ++co[{l, a, b}];
          if (l + 1 < 4) {
            const auto n = tr.experts(t, l + 1);
            for (int b : std::set<int>(n.begin(), n.end())) ++trans[{l, a, b}];
          }
        }
      }
    auto get = [](const auto& m, int l, int a, int b) {
      const auto it = m.find({l, a, b});
      return it == m.end() ? std::uint64_t{0} : it->second;
    };
    for (int l = 0; l < 4; ++l)
      for (int a = 0; a < 16; ++a) {
        REQUIRE(s1.load(l, a) == get(load, l, a, 0));
        REQUIRE(s2.load(l, a) == get(load, l, a, 0));
        for (int b = 0; b < 16; ++b) {
          REQUIRE(s1.co_selection(l, a, b) == get(co, l, a, b));
          REQUIRE(s2.co_selection(l, a, b) == get(co, l, a, b));
          if (l < 3) {
            REQUIRE(s1.transition(l, a, b) == get(trans, l, a, b));
            REQUIRE(s2.transition(l, a, b) == get(trans, l, a, b));
          }
        }
      }
    // pair_coverage: recount from the map with an explicit sort.
    std::vector<std::uint64_t> pairs;
    for (int a = 0; a < 16; ++a)
      for (int b = a + 1; b < 16; ++b) pairs.push_back(get(co, 2, a, b));
    std::sort(pairs.rbegin(), pairs.rend());
    const double events = 700.0 * 3;
    const double top12 = std::accumulate(pairs.begin(), pairs.begin() + 12, 0.0) / events;
    CHECK(s1.pair_coverage(2, 12.0 / 120) == doctest::Approx(top12));
    CHECK(s1.pair_coverage(2, 1.0) == doctest::Approx(1.0));
    CHECK(s1.pairs_for_coverage(2, top12) == doctest::Approx(12.0 / 120));
    // Predictability recount: (token, a) with a's argmax successor in the next set.
    for (int l = 0; l < 3; ++l) {
      std::vector<int> best(16, 0);
      for (int a = 0; a < 16; ++a)
        for (int b = 0; b < 16; ++b)
          if (get(trans, l, a, b) > get(trans, l, a, best[static_cast<std::size_t>(a)])) best[static_cast<std::size_t>(a)] = b;
      double hit = 0;
      for (std::int64_t t = 0; t < tr.tokens(); ++t) {
        const auto n = tr.experts(t, l + 1);
        for (int a : tr.experts(t, l)) hit += std::count(n.begin(), n.end(), best[static_cast<std::size_t>(a)]);
      }
      CHECK(s1.next_layer_predictability(l) == doctest::Approx(hit / (700.0 * 3)));
    }
  }
}

TEST_CASE("top-2: 0.8% of pairs chosen together by ~40% of tokens, as in the paper") {
  SyntheticTraceSpec spec;
  spec.tokens = 20000;
  spec.layers = 2;
  spec.num_experts = 128;
  spec.top_k = 2;
  spec.group_prob = 0.4;
  spec.transition_prob = 0.6;
  spec.seed = 5;
  const auto stats = CouplingStats::of(SyntheticTraceGenerator(spec).generate_all());
  const double cover = stats.pair_coverage(0, 64.0 / (128 * 127 / 2));  // the 64 planted pairs, 0.79%
  INFO("coverage " << cover);
  // 40% planted plus chance hits; binomial sd over 20000 tokens is 0.35%.
  CHECK(cover > 0.39);
  CHECK(cover < 0.43);
  // Next-layer predictability is far above the independent k/E = 1.6%: the planted
  // successor pair is chosen with probability 0.4 * 0.6 * 0.4 ~ 0.1 per token.
  CHECK(stats.next_layer_predictability(0) > 0.08);
  spec.group_prob = 0.0;
  const auto flat = CouplingStats::of(SyntheticTraceGenerator(spec).generate_all());
  CHECK(flat.pair_coverage(0, 64.0 / (128 * 127 / 2)) < 0.05);
  CHECK(flat.next_layer_predictability(0) < 0.05);
}

TEST_CASE("popularity skew shows in max/mean load") {
  SyntheticTraceSpec spec{.tokens = 5000, .layers = 1, .num_experts = 64, .top_k = 8, .popularity_skew = 1.0, .group_prob = 0};
  const auto skewed = CouplingStats::of(SyntheticTraceGenerator(spec).generate_all());
  spec.popularity_skew = 0;
  const auto flat = CouplingStats::of(SyntheticTraceGenerator(spec).generate_all());
  CHECK(skewed.max_load_over_mean(0) > 3.0);
  CHECK(flat.max_load_over_mean(0) < 1.3);
  CHECK_THROWS_AS(CouplingStats(2, 64, 8).add(SyntheticTraceGenerator(spec).generate(0, 3)), disagmoe::ConfigError);
}

TEST_CASE("statistics equal a naive recount on every counting path (direct, 16-bit passes, fixed k)") {
  // Chunk sizes hit the direct 32-bit path (a few tokens), the 16-bit scratch passes
  // and their fold; k = 2 and 8 take the fixed-k code, k = 5 the generic one.
  for (const int k : {2, 5, 8}) {
    CAPTURE(k);
    SyntheticTraceSpec spec{.layers = 3, .num_experts = 64, .top_k = k, .popularity_skew = 0.7, .group_size = k,
                            .group_prob = 0.6, .transition_prob = 0.6, .seed = static_cast<std::uint64_t>(40 + k)};
    const SyntheticTraceGenerator gen(spec);
    const RoutingTrace whole = gen.generate(0, 1500);
    CouplingStats streamed(3, 64, k);
    std::int64_t first = 0;
    for (const std::int64_t n : {1, 7, 300, 1192}) {
      streamed.add(gen.generate(first, n), static_cast<int>(n % 2) + 1);
      first += n;
    }
    // Naive recount: plain nested loops over every token, no shared code.
    std::vector<std::uint64_t> load(3 * 64, 0), co(3 * 64 * 64, 0), tr(2 * 64 * 64, 0);
    for (std::int64_t t = 0; t < 1500; ++t)
      for (int l = 0; l < 3; ++l) {
        const auto e = whole.experts(t, l);
        for (int i = 0; i < k; ++i) {
          ++load[static_cast<std::size_t>(l * 64 + e[i])];
          for (int j = 0; j < k; ++j)
            if (i != j) ++co[static_cast<std::size_t>((l * 64 + e[i]) * 64 + e[j])];
          if (l < 2)
            for (const auto b : whole.experts(t, l + 1)) ++tr[static_cast<std::size_t>((l * 64 + e[i]) * 64 + b)];
        }
      }
    for (int l = 0; l < 3; ++l)
      for (int a = 0; a < 64; ++a) {
        REQUIRE(streamed.load(l, a) == load[static_cast<std::size_t>(l * 64 + a)]);
        for (int b = 0; b < 64; ++b) {
          REQUIRE(streamed.co_selection(l, a, b) == co[static_cast<std::size_t>((l * 64 + a) * 64 + b)]);
          if (l < 2) REQUIRE(streamed.transition(l, a, b) == tr[static_cast<std::size_t>((l * 64 + a) * 64 + b)]);
        }
      }
  }
}

TEST_CASE("statistics past the 16-bit pass length: closed form") {
  // Every token takes all 8 experts at both layers, so every count equals the token
  // count, 70000 > 65535: a pass that held more tokens than its 16-bit counters allow
  // would wrap.
  const std::int64_t T = 70000;
  std::vector<ExpertId> ids(static_cast<std::size_t>(T) * 2 * 8);
  for (std::int64_t t = 0; t < T; ++t)
    for (int l = 0; l < 2; ++l)
      for (int s = 0; s < 8; ++s) ids[static_cast<std::size_t>((t * 2 + l) * 8 + s)] = static_cast<ExpertId>((s + t + l) % 8);
  const RoutingTrace tr(T, 2, 8, 8, std::move(ids));
  for (const int threads : {1, 2}) {
    CAPTURE(threads);
    const auto s = CouplingStats::of(tr, threads);
    for (int a = 0; a < 8; ++a) {
      REQUIRE(s.load(0, a) == 70000u);
      REQUIRE(s.load(1, a) == 70000u);
      for (int b = 0; b < 8; ++b) {
        REQUIRE(s.co_selection(1, a, b) == (a == b ? 0u : 70000u));
        REQUIRE(s.transition(0, a, b) == 70000u);
      }
    }
  }
}
