// SPDX-License-Identifier: Apache-2.0
// comm::LanedTransport on the host model of NCCL matching (in_order_transport.hpp) over
// loopback worlds: two channels of one connection in flight at once, posted in opposite
// orders by the A-ranks and the F-ranks, cross on one communicator and run correctly on
// one lane each.
#include "exchange_cases.hpp"
#include "in_order_transport.hpp"

#include <disagmoe/backend/host/loopback_transport.hpp>
#include <disagmoe/comm/laned_transport.hpp>

#include <doctest/doctest.h>

#include <mutex>
#include <string>

using namespace disagmoe;
using host::LoopbackTransport;
using host::LoopbackWorld;
using InOrder = nccl_model::InOrderTransport<LoopbackTransport>;
using Laned = comm::LanedTransport<InOrder>;

namespace {

/// Steps 0 and 1 of `p` in flight at once on channels 0 and 1 of one connection: each
/// A-rank dispatches step 0, then step 1, then combines both; each F-rank serves step 1
/// first, then step 0 (as a rank whose schedule reaches micro-batch 1 first would).
/// Verifies each A-rank's outputs against exchange::oracle. Collective over `world`.
template <class T>
void run_crossed(T& world, const exchange::Problem& p, int timeout_ms) {
  auto pair = world.split(p.pair_members);
  if (!pair) return;
  exchange::Device dev;
  comm::M2NConnection<T> connection(*pair, exchange::config_of(p, timeout_ms), sizeof(float), 2);
  exchange::Channel<T> ch0(connection, 0, dev.backend, dev.stream), ch1(connection, 1, dev.backend, dev.stream);
  exchange::Channel<T>* chans[2] = {&ch0, &ch1};
  const auto h = static_cast<std::size_t>(p.h);
  if (pair->rank() < p.m) {
    const auto a = static_cast<std::size_t>(pair->rank());
    for (int s = 0; s < 2; ++s) {
      const auto& b = p.batches[static_cast<std::size_t>(s)][a];
      chans[s]->dispatch(s, b.x, b.ids, b.gates);
    }
    for (int s = 0; s < 2; ++s) {
      const auto& b = p.batches[static_cast<std::size_t>(s)][a];
      std::vector<float> out(b.tokens * h, -1);
      chans[s]->combine(out);
      dev.sync();
      const auto ex = exchange::oracle(p, b);
      exchange::verify(exchange::same_result(p, out.data(), ex.y.data(), out.size()), p, world.rank(),
                       "combined output of step " + std::to_string(s) + " differs from the oracle");
    }
  } else {
    for (int s : {1, 0}) {
      auto& ch = *chans[s];
      ch.receive(s);
      dev.sync();
      for (std::size_t le = 0; le < ch.local_experts(); ++le) {
        const auto in = ch.expert_input(le);
        auto out = ch.expert_output(le);
        for (std::size_t r = 0; r < ch.expert_rows(le); ++r) exchange::expert_forward(p, ch.expert_id(le), &in[r * h], &out[r * h]);
      }
      ch.send_return();
    }
  }
  ch0.flush();
  ch1.flush();
}

/// Runs `body(world transport)` on every rank of a loopback world wrapped by `wrap`;
/// returns the first verification failure and the first other error (empty: none).
template <class Wrap, class Body>
std::pair<std::string, std::string> on_world(int size, Wrap&& wrap, Body&& body) {
  std::mutex mu;
  std::string failure, other;
  host::run_ranks(LoopbackWorld(size), [&](LoopbackTransport& t) {
    try {
      auto world = wrap(std::move(t));
      body(world);
    } catch (const exchange::Failure& e) {
      std::lock_guard lock(mu);
      if (failure.empty()) failure = e.what();
    } catch (const std::exception& e) {
      std::lock_guard lock(mu);
      if (other.empty() || std::string(e.what()).find("in-order transport") != std::string::npos) other = e.what();
    }
  });
  return {failure, other};
}

auto in_order = [](LoopbackTransport t) { return InOrder(std::move(t)); };
// exchange::config_of's channels start at tag 8 (lane 1): lanes 1 and 2 carry channels
// 0 and 1, lane 0 the handshake.
auto laned = [](LoopbackTransport t) { return Laned(InOrder(std::move(t)), 3); };

}  // namespace

TEST_CASE("the in-order model passes the exchange suite when both sides post in the same order") {
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    const int size = 2 + static_cast<int>(seed % 5);
    INFO("seed = " << seed << ", world = " << size);
    const auto p = exchange::make_problem(seed, size, seed % 2 == 0);
    const auto [failure, other] = on_world(size, in_order, [&](InOrder& w) { exchange::run_exchange(w, p); });
    CHECK(failure.empty());
    INFO(other);
    CHECK(other.empty());
  }
}

TEST_CASE("two channels in flight on one NCCL-like communicator cross, and the model says so") {
  for (std::uint64_t seed = 20; seed <= 23; ++seed) {
    const int size = 2 + static_cast<int>(seed % 4);
    INFO("seed = " << seed << ", world = " << size);
    const auto p = exchange::make_problem(seed, size, false);
    const auto [failure, other] = on_world(size, in_order, [&](InOrder& w) { run_crossed(w, p, 300); });
    INFO(failure);
    INFO(other);
    // The F-rank's first channel receive (#0 is the handshake) got channel 0's header.
    CHECK(other.find("in-order transport: receive #1 from rank") != std::string::npos);
    CHECK(other.find("NCCL matches per peer in issue order") != std::string::npos);
  }
}

TEST_CASE("one lane per channel: the crossed order completes and matches the oracle bitwise") {
  for (std::uint64_t seed = 30; seed <= 45; ++seed) {
    const int size = 2 + static_cast<int>(seed % 5);
    INFO("seed = " << seed << ", world = " << size);
    const auto p = exchange::make_problem(seed, size, seed % 2 == 0);
    const auto [failure, other] = on_world(size, laned, [&](Laned& w) { run_crossed(w, p, 5000); });
    CHECK(failure.empty());
    INFO(other);
    CHECK(other.empty());
  }
}

TEST_CASE("the laned transport also passes the sequential exchange suite") {
  for (std::uint64_t seed = 50; seed <= 55; ++seed) {
    const int size = 3 + static_cast<int>(seed % 4);
    INFO("seed = " << seed << ", world = " << size);
    const auto p = exchange::make_problem(seed, size, false, seed % 2 == 0);
    const auto [failure, other] = on_world(size, laned, [&](Laned& w) { exchange::run_exchange(w, p, 1, false, 2); });
    CHECK(failure.empty());
    INFO(other);
    CHECK(other.empty());
  }
}

TEST_CASE("lanes: tag t of a channel on lane t / kTagsPerChannel, control tags on lane 0, others refused") {
  LoopbackWorld world(1);
  host::run_ranks(world, [&](LoopbackTransport& t) {
    auto spare = t.split(std::vector<int>{0});
    CHECK_THROWS_AS(Laned(InOrder(std::move(*spare)), 0), ConfigError);
    Laned w(InOrder(std::move(t)), 3);
    CHECK(w.split(std::vector<int>{0})->lanes() == 3);
    CHECK(w.lanes() == 3);
    for (int tag = 0; tag < 3 * comm::kTagsPerChannel; ++tag) CHECK(w.lane_of(tag) == tag / comm::kTagsPerChannel);
    CHECK(w.lane_of(comm::kHandshakeTag) == 0);
    CHECK(w.lane_of(w.max_tag()) == 0);
    try {
      (void)w.lane_of(3 * comm::kTagsPerChannel);
      FAIL("a tag beyond the lanes was accepted");
    } catch (const ConfigError& e) {
      CHECK(std::string(e.what()).find("comm::LanedTransport tag") != std::string::npos);
      CHECK(std::string(e.what()).find("24") != std::string::npos);
    }
  });
}
