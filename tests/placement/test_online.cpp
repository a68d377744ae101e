// SPDX-License-Identifier: Apache-2.0
// Online re-placement (online.hpp) on a synthetic stream whose coupling changes midway:
// it must move exactly at the first refit whose window lies wholly after the change
// (before it the placement already fits; after the move it fits again), never when
// migration is dearer than any saving, and report moved experts as recounted.
#include <disagmoe/placement/online.hpp>

#include <doctest/doctest.h>

using namespace disagmoe::placement;

namespace {
SyntheticTraceGenerator stream(std::uint64_t seed) {
  return SyntheticTraceGenerator(SyntheticTraceSpec{.layers = 3, .num_experts = 64, .top_k = 8, .popularity_skew = 0.3,
                                                    .group_size = 8, .group_prob = 0.6, .transition_prob = 0.6, .seed = seed});
}
}  // namespace

TEST_CASE("online re-placement moves once, at the first refit after the routing changed") {
  const auto a = stream(21), b = stream(22);  // different planted groups
  const Topology topo{8, 8};
  const CorrelatedPlacementOptions fit{.starts = 1, .kicks = 0, .seed = 3, .threads = 1};
  const auto initial = CorrelatedPlacement(fit).fit(CouplingStats::of(a.generate(0, 8000), 1), topo);
  const std::int64_t window = 4000, chunk = 1000;
  // Tokens 0..7999 of the stream follow a, 8000..15999 follow b: refits at 4000 and
  // 8000 see only a, at 12000 and 16000 only b; the change sits on a window boundary,
  // so the move is due at the third refit exactly.
  auto run = [&](double expert_bytes) {
    OnlineReplacer r(initial, {.window_tokens = window, .row_bytes = 1, .expert_bytes = expert_bytes, .fit = fit});
    for (std::int64_t t = 0; t < 16000; t += chunk) r.observe(t < 8000 ? a.generate(8000 + t, chunk) : b.generate(t, chunk));
    return r;
  };
  const auto r = run(20);
  const auto& d = r.decisions();
  REQUIRE(d.size() == 4);
  for (std::size_t i = 0; i < d.size(); ++i) {
    CAPTURE(i);
    CHECK(d[i].at_token == static_cast<std::int64_t>(i + 1) * window);
    CHECK(d[i].moved == (i == 2));
    CHECK(d[i].saving_bytes == doctest::Approx(2.0 * static_cast<double>(d[i].rows_current - d[i].rows_candidate)));
    CHECK(d[i].migration_bytes == doctest::Approx(20.0 * static_cast<double>(d[i].experts_moved)));
  }
  // The moved experts recounted from the placements before and after.
  std::int64_t moved = 0;
  for (std::size_t i = 0; i < initial.map().size(); ++i) moved += initial.map()[i] != r.placement().map()[i];
  CHECK(moved == d[2].experts_moved);
  CHECK(moved > 0);
  CHECK(d[2].saving_bytes > 5 * d[2].migration_bytes);  // the change is worth far more than the move here
  // Migration dearer than any possible saving (every row of the horizon): never moves.
  const auto never = run(2.0 * 16000 * 3 * 8);
  for (const auto& x : never.decisions()) CHECK(!x.moved);
  CHECK(never.placement().map().size() == initial.map().size());
  CHECK(std::equal(never.placement().map().begin(), never.placement().map().end(), initial.map().begin()));
}

TEST_CASE("online re-placement rejects bad options, naming the field") {
  const auto p = contiguous_placement(3, 64, Topology{8, 8});
  CHECK_THROWS_WITH_AS(OnlineReplacer(p, {.window_tokens = 3}), doctest::Contains("window_tokens = 3"), disagmoe::ConfigError);
  CHECK_THROWS_WITH_AS(OnlineReplacer(p, {.row_bytes = 0}), doctest::Contains("row_bytes = 0"), disagmoe::ConfigError);
  OnlineReplacer r(p, {.window_tokens = 8});
  const auto two_layers = SyntheticTraceGenerator(SyntheticTraceSpec{.layers = 2, .num_experts = 64, .top_k = 8, .seed = 1}).generate(0, 4);
  CHECK_THROWS_WITH_AS(r.observe(two_layers), doctest::Contains("chunk shape"), disagmoe::ConfigError);
}
