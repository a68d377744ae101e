// SPDX-License-Identifier: Apache-2.0
// comm::ReplicaRouting and its serving rule, checked rule by rule against recounts on
// random layers: every token-expert pair served once by a copy of its expert, at home
// when home holds one, on a rank the token already sends to when one of its copies is,
// the loads and send-once rows recounted; and the placement's dispatcher serves a layer
// exactly as the routing does.
#include <disagmoe/comm/replica_routing.hpp>
#include <disagmoe/placement/replication.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <set>
#include <vector>

namespace {

using disagmoe::comm::ReplicaRouting;

struct Layer {
  int ranks = 0, experts = 0, k = 0;
  std::vector<std::vector<std::int32_t>> hosts;
  std::vector<std::int32_t> ids, home;
};

Layer random_layer(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uni = [&](int lo, int hi) { return lo + static_cast<int>(rng() % static_cast<unsigned>(hi - lo + 1)); };
  Layer l;
  l.ranks = uni(1, 6);
  l.experts = uni(1, 12);
  l.k = uni(1, std::min(4, l.experts));
  for (int e = 0; e < l.experts; ++e) {
    std::vector<std::int32_t> h{uni(0, l.ranks - 1)};
    for (int c = uni(0, 3); c > 0; --c) {
      const auto g = uni(0, l.ranks - 1);
      if (std::find(h.begin(), h.end(), g) == h.end()) h.push_back(g);
    }
    l.hosts.push_back(std::move(h));
  }
  std::vector<std::int32_t> all(static_cast<std::size_t>(l.experts));
  for (int e = 0; e < l.experts; ++e) all[static_cast<std::size_t>(e)] = e;
  const int tokens = uni(0, 40);
  for (int t = 0; t < tokens; ++t) {
    std::shuffle(all.begin(), all.end(), rng);
    l.ids.insert(l.ids.end(), all.begin(), all.begin() + l.k);
    l.home.push_back(uni(-1, l.ranks - 1));
  }
  return l;
}

}  // namespace

TEST_CASE("replica routing: each pair once, by a copy of its expert, at home or where the token already goes") {
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    CAPTURE(seed);
    const Layer l = random_layer(seed);
    ReplicaRouting r(l.hosts, l.ranks);
    int copies = 0;
    for (const auto& h : l.hosts) copies += static_cast<int>(h.size());
    REQUIRE(r.copies() == copies);
    for (int e = 0; e < l.experts; ++e) CHECK(r.expert_rank()[static_cast<std::size_t>(e)] == l.hosts[static_cast<std::size_t>(e)][0]);
    std::vector<std::int32_t> out(l.ids.size());
    const std::int64_t rows = r.route(l.ids, l.k, l.home, out);
    std::vector<std::int64_t> load(static_cast<std::size_t>(l.ranks));
    std::int64_t distinct = 0;
    const auto uk = static_cast<std::size_t>(l.k);
    for (std::size_t t = 0; t < l.home.size(); ++t) {
      // The rule's order: single-copy experts first, then the others slot by slot.
      std::set<std::int32_t> dest, sent;  // sent: ranks the token goes to before each slot
      for (int pass = 0; pass < 2; ++pass)
        for (std::size_t s = 0; s < uk; ++s) {
          const int e = l.ids[t * uk + s], v = out[t * uk + s];
          const auto& h = l.hosts[static_cast<std::size_t>(e)];
          if ((h.size() == 1) != (pass == 0)) continue;
          REQUIRE(v >= 0);
          REQUIRE(v < r.copies());
          CHECK(r.expert_of(v) == e);  // a copy of its own expert
          const auto g = r.expert_rank()[static_cast<std::size_t>(v)];
          CHECK(std::find(h.begin(), h.end(), g) != h.end());
          auto least = load[static_cast<std::size_t>(h[0])];
          for (const auto c : h) least = std::min(least, load[static_cast<std::size_t>(c)]);
          if (std::find(h.begin(), h.end(), l.home[t]) != h.end()) CHECK(g == l.home[t]);  // home first
          else if (std::any_of(h.begin(), h.end(), [&](std::int32_t c) { return sent.count(c) > 0; }))
            CHECK(sent.count(g) == 1);  // then a rank the token goes to anyway
          else
            CHECK(load[static_cast<std::size_t>(g)] == least);  // then the least loaded copy
          sent.insert(g);
          dest.insert(g);
          ++load[static_cast<std::size_t>(g)];
        }
      distinct += static_cast<std::int64_t>(dest.size());
    }
    CHECK(rows == distinct);
    CHECK(std::equal(load.begin(), load.end(), r.load().begin(), r.load().end()));
  }
}

TEST_CASE("the placement's replica dispatcher serves a layer as the channel's routing does") {
  namespace pl = disagmoe::placement;
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    const int gpus = 4, experts = 8, k = 2, tokens = 64;
    pl::Topology topo;
    topo.gpus = gpus;
    topo.gpus_per_node = gpus;
    std::vector<std::int32_t> base(experts);
    for (int e = 0; e < experts; ++e) base[static_cast<std::size_t>(e)] = e % gpus;
    pl::ReplicatedPlacement rp(pl::Placement(1, experts, topo, base), 1);
    for (int g = 0; g < gpus; ++g) {
      const int e = static_cast<int>(rng() % experts);
      if (base[static_cast<std::size_t>(e)] != g && rp.replicas_on(0, g) == 0) {
        const auto h = rp.hosts(0, e);
        if (std::find(h.begin(), h.end(), g) == h.end()) rp.add_replica(0, e, g);
      }
    }
    std::vector<std::int32_t> ids, home;
    for (int t = 0; t < tokens; ++t) {
      const auto a = static_cast<std::int32_t>(rng() % experts);
      auto b = static_cast<std::int32_t>(rng() % (experts - 1));
      if (b >= a) ++b;
      ids.push_back(a);
      ids.push_back(b);
      home.push_back(static_cast<std::int32_t>(rng() % gpus));
    }
    const pl::RoutingTrace trace(tokens, 1, k, experts, std::vector<pl::ExpertId>(ids.begin(), ids.end()));
    const auto d = pl::dispatch_replicas(trace, rp, home);
    std::vector<std::vector<std::int32_t>> hosts;
    for (int e = 0; e < experts; ++e) hosts.emplace_back(rp.hosts(0, e).begin(), rp.hosts(0, e).end());
    ReplicaRouting r(hosts, gpus);
    std::vector<std::int32_t> out(ids.size());
    CHECK(r.route(ids, k, home, out) == d.rows_dedup);
    for (std::size_t i = 0; i < ids.size(); ++i) CHECK(r.expert_rank()[static_cast<std::size_t>(out[i])] == d.gpu[i]);
  }
}

TEST_CASE("replica routing rejects bad hosts, ids and homes, naming them") {
  using V = std::vector<std::vector<std::int32_t>>;
  CHECK_THROWS_WITH_AS(ReplicaRouting(V{{0}, {}}, 2), doctest::Contains("hosts[1].size()"), disagmoe::ConfigError);
  CHECK_THROWS_WITH_AS(ReplicaRouting(V{{0, 2}}, 2), doctest::Contains("hosts[0]"), disagmoe::ConfigError);
  CHECK_THROWS_WITH_AS(ReplicaRouting(V{{1, 1}}, 2), doctest::Contains("distinct"), disagmoe::ConfigError);
  ReplicaRouting r(V{{0, 1}, {1}}, 2);
  std::vector<std::int32_t> out(2);
  CHECK_THROWS_WITH_AS(r.route(std::vector<std::int32_t>{0, 2}, 2, {}, out), doctest::Contains("expert id"), disagmoe::ConfigError);
  CHECK_THROWS_WITH_AS(r.route(std::vector<std::int32_t>{0, 1}, 2, std::vector<std::int32_t>{5}, out),
                       doctest::Contains("home[0]"), disagmoe::ConfigError);
  CHECK_THROWS_WITH_AS((void)r.expert_of(3), doctest::Contains("copy id"), disagmoe::ConfigError);
}
