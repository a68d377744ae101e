// SPDX-License-Identifier: Apache-2.0
// comm::DualRoleGroup: a group of G ranks as a pair group of 2G in which every rank is
// both A-rank r and F-rank r. Messages are routed by the roles of both ends (A -> F and
// F -> A between the same two ranks, self included, never match each other), and two
// M2NChannel ends on one thread are created with a deferred handshake that still
// detects a mismatched configuration.
#include <disagmoe/backend/host/backend.hpp>
#include <disagmoe/backend/host/loopback_transport.hpp>
#include <disagmoe/comm/dual_role.hpp>
#include <disagmoe/comm/m2n_channel.hpp>

#include <doctest/doctest.h>

#include <array>
#include <mutex>
#include <string>
#include <vector>

using namespace disagmoe;
using host::LoopbackTransport;
using host::LoopbackWorld;

TEST_CASE("dual-role endpoints: ranks, sizes and routing by both ends' roles") {
  constexpr int kG = 3;
  LoopbackWorld world(kG);
  std::mutex mu;
  std::vector<std::string> errors;
  host::run_ranks(world, [&](LoopbackTransport& t) {
    comm::DualRoleGroup<LoopbackTransport> group(t);
    auto a = group.attention();
    auto f = group.ffn();
    static_assert(comm::transport<comm::DualRoleTransport<LoopbackTransport>>);
    CHECK(a.size() == 2 * kG);
    CHECK(a.rank() == t.rank());
    CHECK(f.rank() == kG + t.rank());
    // Every end sends its (role, rank, receiver) to every other end, all on one tag;
    // each receive must get exactly the message addressed to it from that sender.
    using Msg = std::array<int, 3>;
    std::vector<Msg> out, in(static_cast<std::size_t>(4 * kG));
    out.reserve(static_cast<std::size_t>(4 * kG));
    std::vector<comm::DualRoleTransport<LoopbackTransport>::Request> reqs;
    comm::DualRoleTransport<LoopbackTransport>* ends[2] = {&a, &f};
    for (auto* e : ends) e->group_begin();
    for (int role = 0; role < 2; ++role)
      for (int peer = 0; peer < 2 * kG; ++peer) {
        auto& me = *ends[role];
        if (peer == me.rank()) continue;
        out.push_back({role, t.rank(), peer});
        reqs.push_back(comm::isend(me, peer, 5, std::span<const Msg>(&out.back(), 1)));
        reqs.push_back(comm::irecv(me, peer, 5, std::span<Msg>(&in[static_cast<std::size_t>(2 * kG * role + peer)], 1)));
      }
    for (auto* e : ends) e->group_end();
    for (auto& r : reqs) CHECK(a.wait(r, comm::deadline_after(std::chrono::seconds(10))));  // the lanes are shared
    for (int role = 0; role < 2; ++role)
      for (int peer = 0; peer < 2 * kG; ++peer) {
        if (peer == ends[role]->rank()) continue;
        const Msg& m = in[static_cast<std::size_t>(2 * kG * role + peer)];
        const Msg want{peer / kG, peer % kG, ends[role]->rank()};
        if (m != want) {
          const std::lock_guard lock(mu);
          errors.push_back("rank " + std::to_string(t.rank()) + " role " + std::to_string(role) + " from pair rank " +
                           std::to_string(peer) + " got (" + std::to_string(m[0]) + ", " + std::to_string(m[1]) +
                           ", " + std::to_string(m[2]) + ")");
        }
      }
    CHECK_THROWS_AS((void)a.split(std::vector<int>{0}), ConfigError);
  });
  for (const auto& e : errors) MESSAGE(e);
  CHECK(errors.empty());
}

namespace {
comm::ChannelConfig config(int g, int hidden) {
  comm::ChannelConfig c;
  c.name = "ep";
  c.attention_ranks = c.ffn_ranks = g;
  c.hidden = hidden;
  c.top_k = 1;
  c.expert_rank = {0, 1};  // expert e on rank e
  c.timeout = std::chrono::milliseconds(3000);
  return c;
}
}  // namespace

TEST_CASE("both channel ends on one thread: deferred handshake, misuse and mismatch named") {
  constexpr int kG = 2;
  LoopbackWorld world(kG);
  std::mutex mu;
  std::vector<std::string> errors(kG);
  host::run_ranks(world, [&](LoopbackTransport& t) {
    comm::DualRoleGroup<LoopbackTransport> group(t);
    auto a = group.attention();
    auto f = group.ffn();
    using Channel = comm::M2NChannel<comm::DualRoleTransport<LoopbackTransport>, host::Backend, float>;
    host::Backend backend;
    auto stream = host::Stream::caller();
    {  // same configuration: both complete; a call before completion is refused
      Channel ca(a, config(kG, 4), backend, stream, Channel::DeferHandshake{});
      Channel cf(f, config(kG, 4), backend, stream, Channel::DeferHandshake{});
      const std::vector<float> x(4, 1.0f), g(1, 1.0f);
      const std::vector<std::int32_t> id{0};
      CHECK_THROWS_WITH_AS(ca.dispatch(1, x, id, g), doctest::Contains("handshake pending"), ConfigError);
      ca.complete_handshake();
      cf.complete_handshake();
      CHECK(ca.role() == Channel::Role::kAttention);
      CHECK(cf.role() == Channel::Role::kFfn);
    }
    // Rank 1's ends are configured with another width: every end reports the field.
    const int hidden = t.rank() == 1 ? 6 : 4;
    Channel ca(a, config(kG, hidden), backend, stream, Channel::DeferHandshake{});
    Channel cf(f, config(kG, hidden), backend, stream, Channel::DeferHandshake{});
    std::string what;
    for (Channel* c : {&ca, &cf}) {
      try {
        c->complete_handshake();
      } catch (const ConfigError& e) {
        if (what.empty()) what = e.what();
      }
    }
    const std::lock_guard lock(mu);
    errors[static_cast<std::size_t>(t.rank())] = what;
  });
  for (const auto& e : errors) {
    CAPTURE(e);
    CHECK(e.find("hidden") != std::string::npos);
  }
}
