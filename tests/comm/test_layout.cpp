// SPDX-License-Identifier: Apache-2.0
// Send-once and arrival layouts against brute-force recounts.
#include <disagmoe/comm/layout.hpp>

#include <doctest/doctest.h>

#include <random>
#include <set>
#include <vector>

using namespace disagmoe;
using comm::ArrivalLayout;
using comm::RoutingSlot;
using comm::SendOnceLayout;

TEST_CASE("SendOnceLayout sends each token once to each rank holding one of its experts") {
  SendOnceLayout layout;  // reused across seeds: storage reuse must not leak state
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    INFO("seed = " << seed);
    std::mt19937_64 rng(seed);
    const int ranks = 1 + static_cast<int>(rng() % 6), experts = 1 + static_cast<int>(rng() % 12);
    const int k = 1 + static_cast<int>(rng() % static_cast<unsigned>(std::min(experts, 4)));
    const std::size_t tokens = rng() % 4 == 0 ? 0 : rng() % 40;
    std::vector<std::int32_t> expert_rank(static_cast<std::size_t>(experts));
    for (auto& r : expert_rank) r = static_cast<std::int32_t>(rng() % static_cast<unsigned>(ranks));
    std::vector<std::int32_t> ids(tokens * static_cast<std::size_t>(k));
    for (auto& e : ids) e = static_cast<std::int32_t>(rng() % static_cast<unsigned>(experts));
    layout.build(expert_rank, ranks, ids, k);
    // Oracle: the set of destinations of each token.
    std::vector<std::vector<std::int64_t>> expect_rows(static_cast<std::size_t>(ranks));
    std::vector<std::set<int>> dests(tokens);
    for (std::size_t t = 0; t < tokens; ++t) {
      for (int j = 0; j < k; ++j) dests[t].insert(expert_rank[static_cast<std::size_t>(ids[t * static_cast<std::size_t>(k) + static_cast<std::size_t>(j)])]);
      for (int d : dests[t]) expect_rows[static_cast<std::size_t>(d)].push_back(static_cast<std::int64_t>(t));
    }
    REQUIRE(layout.tokens() == tokens);
    std::int64_t total = 0;
    for (int d = 0; d < ranks; ++d) {
      const auto& want = expect_rows[static_cast<std::size_t>(d)];
      REQUIRE(layout.count(d) == static_cast<std::int64_t>(want.size()));
      CHECK(layout.offset(d) == total);
      for (std::size_t i = 0; i < want.size(); ++i)
        CHECK(layout.row_token()[static_cast<std::size_t>(total) + i] == want[i]);
      total += layout.count(d);
    }
    CHECK(layout.total_rows() == total);
    for (std::size_t t = 0; t < tokens; ++t) {
      const auto b = layout.token_offsets()[t], e = layout.token_offsets()[t + 1];
      REQUIRE(e - b == static_cast<std::int64_t>(dests[t].size()));
      auto it = dests[t].begin();
      for (auto q = b; q < e; ++q, ++it) {
        const auto row = layout.token_rows()[static_cast<std::size_t>(q)];
        CHECK(layout.row_token()[static_cast<std::size_t>(row)] == static_cast<std::int64_t>(t));
        CHECK(layout.dest_of_row(row) == *it);
      }
    }
  }
}

TEST_CASE("SendOnceLayout names a bad expert id and a bad placement") {
  SendOnceLayout layout;
  std::vector<std::int32_t> expert_rank{0, 1}, ids{0, 2};
  CHECK_THROWS_WITH_AS(layout.build(expert_rank, 2, ids, 1),
                       "topk_ids[token * top_k + slot] = 2: expected an expert id in [0, experts)", ConfigError);
  std::vector<std::int32_t> bad_rank{0, 5}, ids_ok{1};
  CHECK_THROWS_WITH_AS(layout.build(bad_rank, 2, ids_ok, 1), "expert_rank[expert] = 5: expected a rank in [0, num_ranks)",
                       ConfigError);
  CHECK_THROWS_AS(layout.build(expert_rank, 2, ids, 3), ConfigError);  // 2 ids, top_k 3
}

TEST_CASE("ArrivalLayout fans rows out per local expert in row order") {
  ArrivalLayout layout;
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    INFO("seed = " << seed);
    std::mt19937_64 rng(seed);
    const int ranks = 1 + static_cast<int>(rng() % 4), experts = 1 + static_cast<int>(rng() % 10);
    const int k = 1 + static_cast<int>(rng() % 3);
    std::vector<std::int32_t> expert_rank(static_cast<std::size_t>(experts));
    for (auto& r : expert_rank) r = static_cast<std::int32_t>(rng() % static_cast<unsigned>(ranks));
    const int me = static_cast<int>(rng() % static_cast<unsigned>(ranks));
    std::vector<std::int32_t> mine;
    for (int e = 0; e < experts; ++e)
      if (expert_rank[static_cast<std::size_t>(e)] == me) mine.push_back(e);
    layout.set_placement(expert_rank, me);
    REQUIRE(layout.local_experts() == mine.size());
    std::vector<RoutingSlot> slots;
    const std::size_t rows = mine.empty() ? 0 : rng() % 30;
    for (std::size_t r = 0; r < rows; ++r) {
      // Slot 0 is always local (a row is sent only to ranks holding one of its experts).
      const auto j0 = rng() % static_cast<unsigned>(k);
      for (int j = 0; j < k; ++j) {
        const auto e = static_cast<unsigned>(j) == j0 ? mine[rng() % mine.size()]
                                                       : static_cast<std::int32_t>(rng() % static_cast<unsigned>(experts));
        slots.push_back({e, static_cast<float>(rng() % 8) / 8});
      }
    }
    layout.build(slots, k);
    for (std::size_t le = 0; le < mine.size(); ++le) {
      CHECK(layout.expert_id(le) == mine[le]);
      std::vector<std::pair<std::int64_t, float>> want;
      for (std::size_t r = 0; r < rows; ++r)
        for (int j = 0; j < k; ++j) {
          const auto& s = slots[r * static_cast<std::size_t>(k) + static_cast<std::size_t>(j)];
          if (s.expert == mine[le]) want.emplace_back(static_cast<std::int64_t>(r), s.gate);
        }
      const auto b = layout.expert_offset(le), e = layout.expert_offset(le + 1);
      REQUIRE(e - b == static_cast<std::int64_t>(want.size()));
      for (auto p = b; p < e; ++p) {
        CHECK(layout.expert_row()[static_cast<std::size_t>(p)] == want[static_cast<std::size_t>(p - b)].first);
        CHECK(layout.expert_gate()[static_cast<std::size_t>(p)] == want[static_cast<std::size_t>(p - b)].second);
      }
    }
    for (std::size_t r = 0; r < rows; ++r) {
      std::vector<std::int32_t> local_slots;
      for (int j = 0; j < k; ++j)
        if (expert_rank[static_cast<std::size_t>(slots[r * static_cast<std::size_t>(k) + static_cast<std::size_t>(j)].expert)] == me)
          local_slots.push_back(j);
      const auto b = layout.row_seg()[r], e = layout.row_seg()[r + 1];
      REQUIRE(e - b == static_cast<std::int64_t>(local_slots.size()));
      for (auto q = b; q < e; ++q) {
        const auto uq = static_cast<std::size_t>(q);
        CHECK(layout.row_slot()[uq] == local_slots[uq - static_cast<std::size_t>(b)]);
        CHECK(layout.expert_row()[static_cast<std::size_t>(layout.row_pos()[uq])] == static_cast<std::int64_t>(r));
      }
    }
  }
}

TEST_CASE("ArrivalLayout rejects rows that were mis-addressed") {
  ArrivalLayout layout;
  std::vector<std::int32_t> expert_rank{0, 1};
  layout.set_placement(expert_rank, 0);
  std::vector<RoutingSlot> foreign{{1, 1.0f}}, out_of_range{{7, 1.0f}};
  CHECK_THROWS_WITH_AS(layout.build(foreign, 1), "arrived row = 0: expected at least one expert held by this rank",
                       IoError);
  CHECK_THROWS_AS(layout.build(out_of_range, 1), IoError);
}
