// SPDX-License-Identifier: Apache-2.0
// The fast simulator against the reference implementation (the first simulator, kept
// verbatim in reference_simulator.hpp): every op's start and end, every metric and the
// deadlock report must be identical, on every policy over random problems, on random
// op graphs (mixed in-order / unordered comm streams, SM-using comm, comm overheads,
// zero-cost ops, shared links, posted compute) and on cost-model schedules of a real model.
#include "reference_simulator.hpp"
#include "uniform.hpp"

#include <disagmoe/schedule/schedules.hpp>
#include <disagmoe/spec/presets.hpp>

#include <doctest/doctest.h>

#include <random>

namespace ds = disagmoe::schedule;

namespace {

void require_same(const ds::Schedule& s) {
  const ds::SimResult a = ds::simulate(s);
  const ds::SimResult b = ds::test::simulate_reference(s);
  REQUIRE(a.deadlocked == b.deadlocked);
  REQUIRE(a.deadlock_report == b.deadlock_report);
  REQUIRE(a.waits.size() == b.waits.size());
  for (std::size_t i = 0; i < a.waits.size(); ++i) {
    REQUIRE(a.waits[i].op == b.waits[i].op);
    REQUIRE(a.waits[i].waiting_on == b.waits[i].waiting_on);
  }
  REQUIRE(a.timings.size() == b.timings.size());
  for (std::size_t i = 0; i < a.timings.size(); ++i) {
    INFO("op " << i);
    REQUIRE(a.timings[i].start == b.timings[i].start);
    REQUIRE(a.timings[i].end == b.timings[i].end);
  }
  CHECK(a.step_seconds == b.step_seconds);
  CHECK(a.tokens_per_second == b.tokens_per_second);
  CHECK(a.mfu == b.mfu);
  CHECK(a.bubble_fraction == b.bubble_fraction);
  CHECK(a.exposed_comm_seconds == b.exposed_comm_seconds);
  CHECK(a.max_worker_compute_seconds == b.max_worker_compute_seconds);
  CHECK(a.lower_bound_seconds == b.lower_bound_seconds);
  CHECK(a.peak_activation_bytes == b.peak_activation_bytes);
  CHECK(a.peak_memory_bytes == b.peak_memory_bytes);
  CHECK(a.ops == b.ops);
  REQUIRE(a.workers.size() == b.workers.size());
  for (std::size_t w = 0; w < a.workers.size(); ++w) {
    INFO("worker " << w);
    CHECK(a.workers[w].compute_seconds == b.workers[w].compute_seconds);
    CHECK(a.workers[w].busy_seconds == b.workers[w].busy_seconds);
    CHECK(a.workers[w].comm_seconds == b.workers[w].comm_seconds);
    CHECK(a.workers[w].exposed_comm_seconds == b.workers[w].exposed_comm_seconds);
    CHECK(a.workers[w].peak_activation_bytes == b.workers[w].peak_activation_bytes);
  }
}

// Workers of 1-16 GPUs on a few nodes, some sharing nodes (NVLink + NIC splits).
std::vector<ds::Worker> random_workers(std::mt19937_64& rng, int n, ds::Role role) {
  std::vector<ds::Worker> ws;
  for (int i = 0; i < n; ++i) {
    ds::Worker w;
    w.name = "W" + std::to_string(i);
    w.role = role;
    w.nodes = 1 + static_cast<int>(rng() % 3);
    w.gpus = w.nodes * (1 + static_cast<int>(rng() % 4));
    w.first_node = static_cast<int>(rng() % 3);
    w.nic_bandwidth = 1e9 * (1 + static_cast<double>(rng() % 4));
    w.nvlink_bandwidth = 1e10;
    w.peak_flops = 1e12;
    w.static_bytes = 100;
    const auto order = rng();  // one draw for both, so the graphs of every seed stay as they were
    w.in_order_comm = order % 2 == 0;
    w.posted_sends = (order >> 1) % 2 == 0;
    ws.push_back(w);
  }
  return ws;
}

// A random op graph: deps only on earlier ids (so it runs) plus, when `cyclic`, one
// back edge (so it may deadlock). Costs include zeros (instant ops).
ds::Schedule random_graph(std::mt19937_64& rng, bool cyclic) {
  ds::Schedule s;
  s.name = "random";
  const int nw = 2 + static_cast<int>(rng() % 4);
  s.workers = random_workers(rng, nw, ds::Role::kColocated);
  s.network = {0.01 * static_cast<double>(rng() % 3), 0.001, rng() % 2 ? 0.15 : 0.0};
  s.network.rdma_sm_fraction = rng() % 2 ? 0.05 : 0.0;  // RDMA transfers' share too
  s.tokens_per_step = 1000;
  s.flops_per_step = 1e13;
  const int n = 20 + static_cast<int>(rng() % 200);
  std::uniform_real_distribution<double> u(0.0, 2.0);
  for (int i = 0; i < n; ++i) {
    ds::Op o;
    o.worker = static_cast<int>(rng() % static_cast<unsigned>(nw));
    const int kind = static_cast<int>(rng() % 3);
    if (kind == 2) {
      o.kind = rng() % 2 ? ds::OpKind::kSend : ds::OpKind::kAllToAll;
      o.stream = ds::Stream::kComm;
      o.peer = o.kind == ds::OpKind::kAllToAll ? o.worker : static_cast<int>(rng() % static_cast<unsigned>(nw));
      o.bytes = rng() % 5 == 0 ? 0.0 : u(rng) * 1e9;
      o.uses_sms = rng() % 2 == 0;
      if (rng() % 3 == 0) o.seconds = u(rng) * 1e-3;  // a calibrated overhead (also without bytes)
    } else {
      o.kind = kind == 0 ? ds::OpKind::kAttentionForward : ds::OpKind::kExpertBackwardInput;
      o.stream = kind == 0 ? ds::Stream::kForward : ds::Stream::kBackward;
      o.seconds = rng() % 6 == 0 ? 0.0 : u(rng);
    }
    o.alloc_bytes = static_cast<double>(rng() % 3);
    o.free_bytes = static_cast<double>(rng() % 2);
    for (int d = 0; d < 3 && i > 0; ++d)
      if (rng() % 2) o.deps.push_back(static_cast<int>(rng() % static_cast<unsigned>(i)));
    std::sort(o.deps.begin(), o.deps.end());
    o.deps.erase(std::unique(o.deps.begin(), o.deps.end()), o.deps.end());
    s.add(std::move(o));
  }
  // Posted compute ops (Op::posted), chained per worker as policies must, each after a
  // random earlier op, from a generator of their own (the graph above stays as it was).
  std::mt19937_64 more(rng());
  std::vector<int> last(static_cast<std::size_t>(nw), -1);
  for (int i = 0, m = static_cast<int>(more() % 6); i < m; ++i) {
    ds::Op o;
    o.worker = static_cast<int>(more() % static_cast<unsigned>(nw));
    o.kind = ds::OpKind::kHeadForward;
    o.stream = more() % 2 ? ds::Stream::kForward : ds::Stream::kBackward;
    o.seconds = u(more);
    o.posted = true;
    o.deps.push_back(static_cast<int>(more() % static_cast<unsigned>(s.ops.size())));
    int& chain = last[static_cast<std::size_t>(o.worker)];
    if (chain >= 0 && chain != o.deps[0]) o.deps.push_back(chain);
    chain = s.add(std::move(o));
  }
  if (cyclic) s.ops[0].deps.push_back(n - 1);
  return s;
}

ds::Problem random_problem(std::mt19937_64& rng, int p, bool af) {
  ds::Problem pb;
  if (af) {
    pb.workers = random_workers(rng, p, ds::Role::kAttention);
    auto f = random_workers(rng, p, ds::Role::kFfn);
    pb.workers.insert(pb.workers.end(), f.begin(), f.end());
  } else {
    pb.workers = random_workers(rng, p, ds::Role::kColocated);
  }
  pb.network = {0.01, 0.001, rng() % 2 ? 0.15 : 0.0};
  pb.network.rdma_sm_fraction = rng() % 2 ? 0.05 : 0.0;
  pb.micro_batches = 2 * p + static_cast<int>(rng() % 6);
  pb.tokens_per_micro_batch = 100;
  pb.flops_per_micro_batch = 1e12;
  const int layers = p * (1 + static_cast<int>(rng() % 3));
  for (int l = 0; l < layers; ++l) pb.layers.push_back(ds::test::random_layer(rng, true));
  return pb;
}

}  // namespace

TEST_CASE("fast simulator = reference simulator on random op graphs, deadlocks included") {
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    std::mt19937_64 rng(seed);
    INFO("seed " << seed);
    require_same(random_graph(rng, seed % 5 == 0));
  }
}

TEST_CASE("fast simulator = reference simulator on every policy over random problems") {
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    std::mt19937_64 rng(seed);
    const int p = 2 + static_cast<int>(rng() % 3);
    for (auto name : ds::kScheduleNames) {
      INFO("seed " << seed << " policy " << name);
      const bool af = name == ds::AFPipe::kName;
      ds::PolicyKnobs k;
      k.chunks = k.tiles = 1 + static_cast<int>(rng() % 3);  // comet's one-tile kernels too
      k.af_uses_sms = rng() % 2 == 0;
      k.af_fuse = rng() % 2 == 0;
      ds::Schedule s;
      try {
        s = ds::build_schedule(name, random_problem(rng, p, af), k);
      } catch (const disagmoe::ConfigError&) {
        continue;  // sizes this policy does not take (DualPipe with m < 2p)
      }
      require_same(s);
    }
  }
}

TEST_CASE("fast simulator = reference simulator on cost-model schedules of a real model") {
  const auto [m, c, o] = ds::test::small_setting(2048);
  for (auto name : ds::kScheduleNames) {
    INFO(name);
    const ds::Problem pb = name == ds::AFPipe::kName ? ds::af_problem(m, c, {2, 3, 5, 3, 5}, o)  // F group of 5, 64 experts
                                                     : ds::colocated_problem(m, c, {2}, o);
    require_same(ds::build_schedule(name, pb));
  }
}
