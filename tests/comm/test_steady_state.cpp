// SPDX-License-Identifier: Apache-2.0
// "No allocation in steady state": counts operator new per thread while every rank
// repeats a layer whose sizes no longer grow, and counts the back end's buffer
// allocations after `reserve`. This file replaces the global operator new/delete of
// test_comm (counting, then forwarding to malloc/free).
#include "exchange_cases.hpp"

#include <disagmoe/backend/host/loopback_transport.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

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

namespace {
/// One rank's part of every step of `p` (forward, return, backward); `at_step(s)` runs
/// before step s. Every A-rank uses step `batch_step(s)`'s batch.
template <class Channel, class AtStep>
void run_steps(Channel& ch, exchange::Device& dev, const exchange::Problem& p, int me, AtStep&& at_step) {
  const auto h = static_cast<std::size_t>(p.h), k = static_cast<std::size_t>(p.k);
  const bool next = me >= p.m + p.n;  // next-layer A-rank (hand-off)
  std::vector<float> out, gx, gg;
  for (int s = 0; s < p.steps; ++s) {
    at_step(s);
    const auto& step = p.batches[static_cast<std::size_t>(s)];
    const exchange::Batch* b = me < p.m ? &step[static_cast<std::size_t>(me)]
                               : next   ? &step[static_cast<std::size_t>(me - p.m - p.n)]
                                        : nullptr;
    out.resize(b ? b->tokens * h : 0);
    gx.resize(out.size());
    gg.resize(b ? b->tokens * k : 0);
    if (next) {
      ch.receive_return(s, out);
      ch.backward_dispatch(b->grad_out);
    } else if (b) {
      ch.dispatch(s, b->x, b->ids, b->gates);
      if (!p.hand_off) {
        ch.combine(out);
        ch.backward_dispatch(b->grad_out);
      }
      ch.backward_combine(gx, gg);
    } else {
      ch.receive(s);
      dev.sync();
      for (std::size_t le = 0; le < ch.local_experts(); ++le) {
        const auto in = ch.expert_input(le);
        auto o = ch.expert_output(le);
        for (std::size_t r = 0; r < ch.expert_rows(le); ++r) exchange::expert_forward(p, ch.expert_id(le), &in[r * h], &o[r * h]);
      }
      ch.send_return();
      ch.receive_grad();
      dev.sync();
      for (std::size_t le = 0; le < ch.local_experts(); ++le) {
        const auto g = ch.expert_grad_output(le);
        auto dx = ch.expert_grad_input(le);
        for (std::size_t r = 0; r < ch.expert_rows(le); ++r) exchange::expert_backward(p, ch.expert_id(le), &g[r * h], &dx[r * h]);
      }
      ch.send_grad();
    }
  }
  ch.flush();
}

thread_local long g_buffer_allocations = 0;
thread_local std::size_t g_buffer_bytes = 0;

/// An allocator that counts what the back end's buffers allocate on this thread.
template <class E>
struct CountingAllocator {
  using value_type = E;
  CountingAllocator() = default;
  template <class U>
  CountingAllocator(const CountingAllocator<U>&) {}
  E* allocate(std::size_t n) {
    ++g_buffer_allocations;
    g_buffer_bytes += n * sizeof(E);
    return std::allocator<E>{}.allocate(n);
  }
  void deallocate(E* p, std::size_t n) { std::allocator<E>{}.deallocate(p, n); }
  friend bool operator==(const CountingAllocator&, const CountingAllocator&) = default;
};

/// The host back end with counted buffers: a second model of `comm::backend`.
struct CountingBackend : host::Backend {
  template <class E>
  using Buffer = std::vector<E, CountingAllocator<E>>;
};
static_assert(comm::backend<CountingBackend>);
}  // namespace

TEST_CASE("M2NChannel steps allocate nothing once buffers reached their size") {
  for (std::uint64_t seed : {3u, 11u, 19u})
  for (bool hand_off : {false, true}) {
    INFO("seed = " << seed << ", hand_off = " << hand_off);
    auto p = exchange::make_problem(seed, 5, false, hand_off);
    p.steps = 6;
    p.batches.assign(6, p.batches[0]);  // identical sizes every step
    host::LoopbackWorld world(5);
    std::vector<long> counted(5, -1);
    host::run_ranks(world, [&](host::LoopbackTransport& t) {
      auto pair = t.split(p.pair_members);
      if (!pair) return;
      exchange::Device dev;
      exchange::Channel<host::LoopbackTransport> ch(*pair, exchange::config_of(p, 3000), dev.backend, dev.stream);
      long before = 0;
      run_steps(ch, dev, p, pair->rank(), [&](int s) {
        if (s == 2) before = g_allocations;  // steps 0 and 1 warm the buffers and pools up
      });
      counted[static_cast<std::size_t>(t.rank())] = g_allocations - before;
    });
    for (int r = 0; r < 5; ++r) {
      INFO("world rank " << r);
      CHECK(counted[static_cast<std::size_t>(r)] <= 0);  // -1: idle rank
    }
  }
}

TEST_CASE("reserve(max_tokens) allocates workspace_bytes up front; no step up to that size allocates a buffer") {
  for (std::uint64_t seed : {5u, 23u, 41u, 57u})
  for (bool hand_off : {false, true}) {
    INFO("seed = " << seed << ", hand_off = " << hand_off);
    const auto p = exchange::make_problem(seed, 6, false, hand_off);  // sizes vary by step and rank
    std::size_t max_tokens = 0;
    for (const auto& step : p.batches)
      for (const auto& b : step) max_tokens = std::max(max_tokens, b.tokens);
    host::LoopbackWorld world(6);
    struct Count {
      long during = -1, unreserved = -1;
      std::size_t reserved_bytes = 0, workspace = 0;
    };
    std::vector<Count> counts(6);
    host::run_ranks(world, [&](host::LoopbackTransport& t) {
      auto pair = t.split(p.pair_members);
      if (!pair) return;
      using Channel = comm::M2NChannel<host::LoopbackTransport, CountingBackend>;
      exchange::Device dev;
      CountingBackend backend;
      auto& c = counts[static_cast<std::size_t>(t.rank())];
      {
        Channel ch(*pair, exchange::config_of(p, 3000), backend, dev.stream);
        g_buffer_bytes = 0;
        ch.reserve(max_tokens);
        c.reserved_bytes = g_buffer_bytes;
        c.workspace = Channel::workspace_bytes(ch.config(), pair->rank(), max_tokens);
        g_buffer_allocations = 0;
        run_steps(ch, dev, p, pair->rank(), [](int) {});
        c.during = g_buffer_allocations;
      }
      Channel control(*pair, exchange::config_of(p, 3000), backend, dev.stream);  // the same steps unreserved
      g_buffer_allocations = 0;
      run_steps(control, dev, p, pair->rank(), [](int) {});
      c.unreserved = g_buffer_allocations;
    });
    long unreserved = 0;
    for (int r = 0; r < 6; ++r) {
      const auto& c = counts[static_cast<std::size_t>(r)];
      INFO("world rank " << r);
      if (c.during < 0) continue;  // idle rank
      CHECK(c.during == 0);
      CHECK(c.reserved_bytes == c.workspace);
      unreserved += c.unreserved;
    }
    CHECK(unreserved > 0);  // the control: without reserve, buffers do grow during steps
  }
}
