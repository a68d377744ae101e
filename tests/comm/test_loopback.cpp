// SPDX-License-Identifier: Apache-2.0
// LoopbackTransport semantics: matching, ordering, groups, splits, deadlines, errors;
// NetworkModel against its closed form.
#include <disagmoe/backend/host/loopback_transport.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <numeric>
#include <random>
#include <span>
#include <stdexcept>
#include <vector>

using namespace disagmoe;
using host::LoopbackTransport;
using host::LoopbackWorld;
using namespace std::chrono_literals;

namespace {
template <class R>
void must_wait(LoopbackTransport& t, R& req) {
  REQUIRE(t.wait(req, comm::deadline_after(5s)));
}
}  // namespace

TEST_CASE("messages with one (source, tag) arrive in posting order; tags select") {
  LoopbackWorld world(2);
  host::run_ranks(world, [](LoopbackTransport& t) {
    constexpr int kMessages = 50;
    std::vector<int> data(kMessages);
    std::vector<LoopbackTransport::Request> reqs(kMessages);
    if (t.rank() == 0) {
      std::iota(data.begin(), data.end(), 0);
      // Odd messages on tag 1, even ones on tag 0, all interleaved.
      for (int i = 0; i < kMessages; ++i)
        reqs[static_cast<std::size_t>(i)] = comm::isend(t, 1, i % 2, std::span<const int>(&data[static_cast<std::size_t>(i)], 1));
    } else {
      // Receive all of tag 1 first, then tag 0: order within a tag is preserved.
      int slot = 0;
      for (int tag : {1, 0})
        for (int i = tag; i < kMessages; i += 2, ++slot)
          reqs[static_cast<std::size_t>(slot)] = comm::irecv(t, 0, tag, std::span<int>(&data[static_cast<std::size_t>(slot)], 1));
    }
    for (auto& r : reqs) must_wait(t, r);
    if (t.rank() == 1) {
      int slot = 0;
      for (int tag : {1, 0})
        for (int i = tag; i < kMessages; i += 2, ++slot) CHECK(data[static_cast<std::size_t>(slot)] == i);
    }
  });
}

TEST_CASE("grouped all-to-all posts in any order without deadlock") {
  for (int n : {1, 2, 5}) {
    LoopbackWorld world(n);
    host::run_ranks(world, [n](LoopbackTransport& t) {
      std::vector<std::int64_t> out(static_cast<std::size_t>(n)), in(static_cast<std::size_t>(n), -1);
      std::vector<LoopbackTransport::Request> reqs;
      t.group_begin();
      for (int p = 0; p < n; ++p) {  // sends first: without the group a rendezvous would block nothing,
        out[static_cast<std::size_t>(p)] = t.rank() * 100 + p;  // but the group must also accept it
        reqs.push_back(comm::isend(t, p, 7, std::span<const std::int64_t>(&out[static_cast<std::size_t>(p)], 1)));
      }
      for (int p = 0; p < n; ++p)
        reqs.push_back(comm::irecv(t, p, 7, std::span<std::int64_t>(&in[static_cast<std::size_t>(p)], 1)));
      CHECK_THROWS_AS((void)t.wait(reqs[0], comm::deadline_after(1s)), ConfigError);  // group still open
      t.group_end();
      for (auto& r : reqs) must_wait(t, r);
      for (int p = 0; p < n; ++p) CHECK(in[static_cast<std::size_t>(p)] == p * 100 + t.rank());
    });
  }
}

TEST_CASE("split makes A-, F- and pair groups whose traffic never crosses") {
  LoopbackWorld world(5);
  host::run_ranks(world, [](LoopbackTransport& t) {
    const std::vector<int> a{0, 1}, f{4, 2}, pair{0, 1, 4, 2};  // F-group in a non-sorted order
    auto ga = t.split(a);
    auto gf = t.split(f);
    auto gp = t.split(pair);
    const int r = t.rank();
    CHECK(ga.has_value() == (r == 0 || r == 1));
    CHECK(gf.has_value() == (r == 4 || r == 2));
    CHECK(gp.has_value() == (r != 3));
    if (gf) CHECK(gf->rank() == (r == 4 ? 0 : 1));
    if (!gp) return;
    CHECK(gp->size() == 4);
    // Same tag, same peers, three groups: each receive sees its own group's value.
    const int me = gp->rank(), peer = (me + 1) % 4, from = (me + 3) % 4;
    int v_world = 1000 + r, v_pair = 2000 + r, got_world = 0, got_pair = 0;
    auto s1 = comm::isend(*gp, peer, 3, std::span<const int>(&v_pair, 1));
    auto s2 = comm::isend(t, pair[static_cast<std::size_t>(peer)], 3, std::span<const int>(&v_world, 1));
    auto r2 = comm::irecv(t, pair[static_cast<std::size_t>(from)], 3, std::span<int>(&got_world, 1));
    auto r1 = comm::irecv(*gp, from, 3, std::span<int>(&got_pair, 1));
    for (auto* q : {&s1, &r1}) must_wait(*gp, *q);
    for (auto* q : {&s2, &r2}) must_wait(t, *q);
    CHECK(got_pair == 2000 + pair[static_cast<std::size_t>(from)]);
    CHECK(got_world == 1000 + pair[static_cast<std::size_t>(from)]);
  });
}

TEST_CASE("split rejects bad member lists") {
  LoopbackWorld world(1);
  auto t = world.transport(0);
  const std::vector<int> out_of_range{0, 3}, twice{0, 0};
  CHECK_THROWS_WITH_AS(t.split(out_of_range), "split.members[i] = 3: expected a rank of the parent group", ConfigError);
  CHECK_THROWS_AS(t.split(twice), ConfigError);
}

TEST_CASE("GroupGuard closes its group when the scope throws; the first exception escapes") {
  LoopbackWorld world(1);
  auto t = world.transport(0);
  const int v = 7;
  int got = 0;
  LoopbackTransport::Request s;
  const auto throwing_scope = [&] {
    comm::GroupGuard<LoopbackTransport> g(t);
    s = comm::isend(t, 0, 0, std::span<const int>(&v, 1));  // deferred to the group's end
    throw std::runtime_error("compute failed");
  };
  CHECK_THROWS_WITH_AS(throwing_scope(), "compute failed", std::runtime_error);
  // The send was posted by the guard while unwinding, and the group depth is back to 0.
  auto r = comm::irecv(t, 0, 0, std::span<int>(&got, 1));
  must_wait(t, r);
  must_wait(t, s);
  CHECK(got == 7);
  CHECK_THROWS_AS(t.group_end(), ConfigError);
}

TEST_CASE("a silent peer makes wait return false at the deadline; cancel withdraws") {
  LoopbackWorld world(2);
  auto t0 = world.transport(0);
  auto t1 = world.transport(1);
  int x = 0;
  auto r = comm::irecv(t0, 1, 0, std::span<int>(&x, 1));
  CHECK_FALSE(t0.test(r));
  CHECK_FALSE(t0.wait(r, comm::deadline_after(50ms)));
  t0.cancel(r);
  // A later message on the same tag goes to a new receive, not the cancelled one.
  int y = 0, v = 42;
  auto r2 = comm::irecv(t0, 1, 0, std::span<int>(&y, 1));
  auto s = comm::isend(t1, 0, 0, std::span<const int>(&v, 1));
  must_wait(t1, s);
  must_wait(t0, r2);
  CHECK(x == 0);
  CHECK(y == 42);
  CHECK_THROWS_AS(t0.test(r2), ConfigError);  // consumed
}

TEST_CASE("size mismatch is an IoError on both sides, never a truncation") {
  LoopbackWorld world(2);
  auto t0 = world.transport(0);
  auto t1 = world.transport(1);
  std::vector<float> big(4, 1.0f), small(2, 0.0f);
  auto s = comm::isend(t0, 1, 0, std::span<const float>(big));
  auto r = comm::irecv(t1, 0, 0, std::span<float>(small));
  CHECK_THROWS_WITH_AS((void)t1.wait(r, comm::deadline_after(1s)),
                       "LoopbackTransport message (world rank 0, tag 0) size = 8: expected the send size 16 bytes",
                       IoError);
  CHECK_THROWS_AS((void)t0.wait(s, comm::deadline_after(1s)), IoError);
  CHECK(small[0] == 0.0f);
}

TEST_CASE("NetworkModel shares NICs among the flows in flight (closed form)") {
  using Clock = host::NetworkModel::Clock;
  host::NetworkConfig cfg;
  cfg.node_of_rank = {0, 0, 1, 2};
  cfg.nic_bandwidth = 1e9;   // 1 GB/s
  cfg.link_bandwidth = 2e9;  // links faster than NICs: the NICs limit
  cfg.latency = 1e-6;
  const auto t0 = Clock::now() + std::chrono::seconds(100);
  auto at = [&](double us) { return t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::micro>(us)); };
  auto us = [&](Clock::time_point t) { return std::chrono::duration<double, std::micro>(t - t0).count(); };
  // Delivery time of `f` (asked once every flow has finished).
  auto delivered = [&](host::NetworkModel& net, host::NetworkModel::Flow f) {
    const auto d = net.poll(f, at(1e6));
    CHECK(d.delivered);
    return us(d.at);
  };
  SUBCASE("one flow: bytes / NIC bandwidth + latency") {
    host::NetworkModel net(cfg, 4);
    const auto f = net.start(0, 2, 1'000'000, t0);
    const auto d = net.poll(f, at(500));
    CHECK_FALSE(d.delivered);
    CHECK(us(d.at) == doctest::Approx(1001.0));
    CHECK(delivered(net, f) == doctest::Approx(1001.0));
  }
  SUBCASE("two flows out of one node's egress share it and arrive together") {
    host::NetworkModel net(cfg, 4);
    const auto a = net.start(0, 2, 1'000'000, t0);  // node 0 -> node 1
    const auto b = net.start(1, 3, 1'000'000, t0);  // node 0 -> node 2: same egress
    CHECK(delivered(net, a) == doctest::Approx(2001.0));
    CHECK(delivered(net, b) == doctest::Approx(2001.0));
  }
  SUBCASE("messages of one pair of ranks keep their order, one on the wire at a time") {
    host::NetworkModel net(cfg, 4);
    const auto first = net.start(0, 2, 1'000'000, t0);
    const auto second = net.start(0, 2, 1'000'000, t0);
    const auto d = net.poll(second, at(10));
    CHECK_FALSE(d.delivered);
    CHECK(us(d.at) == doctest::Approx(1000.0));  // when the first leaves the wire
    CHECK(delivered(net, first) == doctest::Approx(1001.0));
    CHECK(delivered(net, second) == doctest::Approx(2001.0));
  }
  SUBCASE("a flow speeds up when its neighbour finishes; a poll says when the rates change") {
    host::NetworkModel net(cfg, 4);
    const auto big = net.start(0, 2, 1'000'000, t0);
    const auto small = net.start(1, 3, 500'000, t0);  // 0.5 MB at 0.5 GB/s: done at 1000 us
    const auto d = net.poll(big, at(100));
    CHECK_FALSE(d.delivered);
    CHECK(us(d.at) == doctest::Approx(1000.0));        // the small flow's end, before its own 2001 us
    CHECK(delivered(net, small) == doctest::Approx(1001.0));
    CHECK(delivered(net, big) == doctest::Approx(1501.0));  // then 0.5 MB alone at 1 GB/s
  }
  SUBCASE("a later flow into a busy ingress slows the first from its start on") {
    host::NetworkModel net(cfg, 4);
    const auto first = net.start(0, 2, 1'000'000, t0);       // node 0 -> node 1
    const auto second = net.start(3, 2, 1'000'000, at(500));  // node 2 -> node 1 at 500 us
    // 0.5 MB left at 500 us, then both at 0.5 GB/s: first done at 1500 us; second has
    // 0.5 MB left then and runs alone.
    CHECK(delivered(net, first) == doctest::Approx(1501.0));
    CHECK(delivered(net, second) == doctest::Approx(2001.0));
  }
  SUBCASE("a link slower than the NICs limits; inside a node no NIC is used") {
    cfg.link_bandwidth = 0.25e9;
    host::NetworkModel net(cfg, 4);
    const auto f = net.start(0, 2, 1'000'000, t0);
    const auto local = net.start(0, 1, 1'000'000, t0);  // infinite intra-node bandwidth
    CHECK(delivered(net, f) == doctest::Approx(4001.0));
    // Times round-trip through the clock's ticks: the same 10 ns the other checks allow at ~1000 us.
    CHECK(delivered(net, local) == doctest::Approx(0.0).epsilon(0.01));
  }
  SUBCASE("a slot is reused only once both ends released it and its bytes left the wire") {
    host::NetworkModel net(cfg, 4);
    const auto f = net.start(0, 2, 1'000'000, t0);  // on the wire until 1000 us
    net.release(f);
    net.release(f);  // both ends gone, the bytes still in flight
    const auto g = net.start(3, 2, 1000, at(10));
    CHECK(g != f);
    (void)net.poll(g, at(2e6));  // f has long finished: its slot is free, g's is held
    CHECK(net.start(0, 2, 1000, at(2e6)) == f);
  }
  SUBCASE("an empty message waits behind its pair's earlier one") {
    host::NetworkModel net(cfg, 4);
    const auto big = net.start(0, 2, 1'000'000, t0);
    const auto empty = net.start(0, 2, 0, t0);
    CHECK(delivered(net, big) == doctest::Approx(1001.0));
    CHECK(delivered(net, empty) == doctest::Approx(1001.0));
    const auto alone = net.start(1, 3, 0, at(1e6));  // no earlier message: latency only
    CHECK(us(net.poll(alone, at(1e6)).at) == doctest::Approx(1e6 + 1.0));
  }
  SUBCASE("a delivery beyond any deadline saturates instead of overflowing") {
    cfg.nic_bandwidth = 1;  // 1 B/s
    cfg.link_bandwidth = 0;
    host::NetworkModel net(cfg, 4);
    const auto f = net.start(0, 2, std::size_t{1} << 40, t0);
    const auto d = net.poll(f, at(1));
    CHECK_FALSE(d.delivered);
    CHECK(d.at == Clock::time_point::max());
  }
  CHECK_THROWS_AS(host::NetworkModel(host::NetworkConfig{{0, 1}, -1, 0, 0, 0, 0}, 2), ConfigError);
  CHECK_THROWS_AS(host::NetworkModel(host::NetworkConfig{{0}, 0, 0, 0, 0, 0}, 2), ConfigError);
}

TEST_CASE("the emulated network delivers every message intact") {
  host::NetworkConfig cfg;
  cfg.nic_bandwidth = 5e9;
  cfg.latency = 2e-6;
  LoopbackWorld world(3, cfg);
  host::run_ranks(world, [](LoopbackTransport& t) {
    std::vector<double> out(1000), in(1000);
    std::iota(out.begin(), out.end(), t.rank() * 1e4);
    const int to = (t.rank() + 1) % 3, from = (t.rank() + 2) % 3;
    auto r = comm::irecv(t, from, 0, std::span<double>(in));
    auto s = comm::isend(t, to, 0, std::span<const double>(out));
    must_wait(t, s);
    must_wait(t, r);
    CHECK(in[999] == from * 1e4 + 999);
  });
}

#include <disagmoe/comm/groups.hpp>

TEST_CASE("make_af_groups splits the A-, F- and pair groups of a world") {
  LoopbackWorld world(6);
  host::run_ranks(world, [](LoopbackTransport& t) {
    const std::vector<int> a{5, 1}, f{0, 3, 2};  // rank 4 idle
    auto g = comm::make_af_groups(t, std::span<const int>(a), std::span<const int>(f));
    const int r = t.rank();
    const bool in_a = r == 5 || r == 1, in_f = r == 0 || r == 3 || r == 2;
    CHECK(g.attention.has_value() == in_a);
    CHECK(g.ffn.has_value() == in_f);
    CHECK(g.pair.has_value() == (in_a || in_f));
    if (g.pair) {
      CHECK(g.pair->size() == 5);
      // The pair lists A-ranks first: pair rank i is world rank (a ++ f)[i].
      const std::vector<int> order{5, 1, 0, 3, 2};
      CHECK(order[static_cast<std::size_t>(g.pair->rank())] == r);
      // A broadcast over the pair group from pair rank 0 reaches everyone.
      int v = g.pair->rank() == 0 ? 77 : 0;
      std::vector<LoopbackTransport::Request> reqs;
      if (g.pair->rank() == 0) {
        for (int p = 1; p < 5; ++p) reqs.push_back(comm::isend(*g.pair, p, 0, std::span<const int>(&v, 1)));
      } else {
        reqs.push_back(comm::irecv(*g.pair, 0, 0, std::span<int>(&v, 1)));
      }
      for (auto& q : reqs) must_wait(*g.pair, q);
      CHECK(v == 77);
    }
  });
  LoopbackWorld one(2);
  auto t = one.transport(0);
  const std::vector<int> a{0, 1}, f{1};
  CHECK_THROWS_WITH_AS(comm::make_af_groups(t, std::span<const int>(a), std::span<const int>(f)),
                       "make_af_groups ffn_ranks[i] = 1: expected a rank not in attention_ranks (the groups are disjoint)",
                       ConfigError);
}

TEST_CASE("a receive cancelled inside its open group is never posted; the next one gets the message") {
  LoopbackWorld world(2);
  host::run_ranks(world, [](LoopbackTransport& t) {
    if (t.rank() == 0) {
      std::int32_t first = -1, second = -1;
      t.group_begin();
      auto r = comm::irecv(t, 1, 0, std::span<std::int32_t>(&first, 1));
      t.cancel(r);  // withdrawn before group_end posts it: its buffer may go now
      t.group_end();
      auto r2 = comm::irecv(t, 1, 0, std::span<std::int32_t>(&second, 1));
      CHECK(t.wait(r2, comm::deadline_after(5s)));
      CHECK(second == 7);
      CHECK(first == -1);
    } else {
      const std::int32_t v = 7;
      auto s = comm::isend(t, 0, 0, std::span<const std::int32_t>(&v, 1));
      CHECK(t.wait(s, comm::deadline_after(5s)));
    }
  });
}
