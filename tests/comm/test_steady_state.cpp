// SPDX-License-Identifier: Apache-2.0
// "No allocation in steady state": counts operator new per thread while every rank
// repeats a layer whose sizes no longer grow. This file replaces the global
// operator new/delete of test_comm (counting, then forwarding to malloc/free).
#include "exchange_cases.hpp"

#include <disagmoe/backend/host/loopback_transport.hpp>

#include <doctest/doctest.h>

#include <cstdlib>
#include <new>

namespace {
thread_local long g_allocations = 0;
}  // namespace

void* operator new(std::size_t n) {
  ++g_allocations;
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

using namespace disagmoe;

TEST_CASE("M2NChannel steps allocate nothing once buffers reached their size") {
  for (std::uint64_t seed : {3u, 11u, 19u})
  for (bool hand_off : {false, true}) {
    INFO("seed = " << seed << ", hand_off = " << hand_off);
    auto p = exchange::make_problem(seed, 5, false, hand_off);
    for (auto& step : p.batches) step = p.batches[0];  // identical sizes every step
    p.steps = 6;
    p.batches.resize(6, p.batches[0]);
    host::LoopbackWorld world(5);
    std::vector<long> counted(5, -1);
    host::run_ranks(world, [&](host::LoopbackTransport& t) {
      auto pair = t.split(p.pair_members);
      if (!pair) return;
      comm::M2NChannel<host::LoopbackTransport> ch(*pair, exchange::config_of(p, 3000));
      const auto h = static_cast<std::size_t>(p.h), k = static_cast<std::size_t>(p.k);
      const int me = pair->rank();
      const bool next = me >= p.m + p.n;  // next-layer A-rank (hand-off)
      const exchange::Batch* b = me < p.m ? &p.batches[0][static_cast<std::size_t>(me)]
                                 : next   ? &p.batches[0][static_cast<std::size_t>(me - p.m - p.n)]
                                          : nullptr;
      std::vector<float> out(b ? b->tokens * h : 0), gx(out.size()), gg(b ? b->tokens * k : 0);
      long before = 0;
      for (int s = 0; s < p.steps; ++s) {
        if (s == 2) before = g_allocations;  // steps 0 and 1 warm the buffers and pools up
        if (next) {
          ch.receive_return(s, out);
          ch.backward_dispatch(b->grad_out);
        } else if (b) {
          ch.dispatch(s, b->x, b->ids, b->gates);
          if (!hand_off) {
            ch.combine(out);
            ch.backward_dispatch(b->grad_out);
          }
          ch.backward_combine(gx, gg);
        } else {
          ch.receive(s);
          for (std::size_t le = 0; le < ch.local_experts(); ++le) {
            const auto in = ch.expert_input(le);
            auto o = ch.expert_output(le);
            for (std::size_t r = 0; r < ch.expert_rows(le); ++r) exchange::expert_forward(p, ch.expert_id(le), &in[r * h], &o[r * h]);
          }
          ch.send_return();
          ch.receive_grad();
          for (std::size_t le = 0; le < ch.local_experts(); ++le) {
            const auto g = ch.expert_grad_output(le);
            auto dx = ch.expert_grad_input(le);
            for (std::size_t r = 0; r < ch.expert_rows(le); ++r) exchange::expert_backward(p, ch.expert_id(le), &g[r * h], &dx[r * h]);
          }
          ch.send_grad();
        }
      }
      counted[static_cast<std::size_t>(t.rank())] = g_allocations - before;
      ch.flush();
    });
    for (int r = 0; r < 5; ++r) {
      INFO("world rank " << r);
      CHECK(counted[static_cast<std::size_t>(r)] <= 0);  // -1: idle rank
    }
  }
}
