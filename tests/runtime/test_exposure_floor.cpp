// SPDX-License-Identifier: Apache-2.0
// The floor under a worker's exposed communication (runtime::exposed_comm_floor): on a
// hand-built step whose floors are written out by hand, and as a bound that the simulator's
// own runs of every policy, over random problems, never go below.
#include <disagmoe/runtime/timeline.hpp>
#include <disagmoe/schedule/schedules.hpp>

#include <doctest/doctest.h>

#include "../schedule/uniform.hpp"
#include <random>

namespace rt = disagmoe::runtime;
namespace ds = disagmoe::schedule;

namespace {

ds::Op floor_test_compute(int worker, double seconds, std::vector<int> deps = {}) {
  ds::Op o;
  o.kind = ds::OpKind::kAttentionForward;
  o.worker = worker;
  o.seconds = seconds;
  o.deps = std::move(deps);
  return o;
}

ds::Op floor_test_transfer(ds::OpKind kind, int from, int to, double bytes, std::vector<int> deps = {}) {
  ds::Op o;
  o.kind = kind;
  o.stream = ds::Stream::kComm;
  o.worker = from;
  o.peer = to;
  o.bytes = bytes;
  o.deps = std::move(deps);
  return o;
}

// Two one-GPU workers on two nodes, 1 GB/s NICs, no latency: A computes 1 s and then sends
// 2 GB to B (2 s on the wire), and B computes 0.5 s once A's compute is done, while the
// bytes move. A's tx link carries 2 s with 1 s of compute; B's rx link 2 s with 0.5 s.
ds::Schedule send_beside_compute() {
  ds::Schedule s;
  s.name = "hand";
  s.workers = ds::uniform_workers(2, ds::Role::kColocated, 1e9, 1e10);
  const int a = s.add(floor_test_compute(0, 1.0));
  s.add(floor_test_transfer(ds::OpKind::kSend, 0, 1, 2e9, {a}));
  s.add(floor_test_compute(1, 0.5, {a}));
  return s;
}

}  // namespace

TEST_CASE("the exposure floor is each worker's busiest link beyond its compute, by hand") {
  const auto s = send_beside_compute();
  const auto sim = ds::simulate(s);
  REQUIRE_FALSE(sim.deadlocked);
  const auto run = disagmoe::io::simulated_run(s, sim);
  const auto floor = rt::exposed_comm_floor(s, run);
  REQUIRE(floor.size() == 2);
  CHECK(floor[0] == doctest::Approx(2.0 - 1.0));
  CHECK(floor[1] == doctest::Approx(2.0 - 0.5));
  // A computes before it sends (2 s exposed, above its floor); B computes while the bytes
  // move, so its exposure is its floor.
  const auto exposure = rt::worker_exposure(s, run);
  CHECK(exposure.exposed[0] == doctest::Approx(2.0));
  CHECK(exposure.exposed[1] == doctest::Approx(floor[1]));
  CHECK(rt::bottleneck_exposed_comm_floor(s, run) == doctest::Approx(floor[0]));  // A computes longest

  // More compute than link time: no floor.
  auto busy = s;
  busy.ops[2].seconds = 3.0;
  const auto busy_run = disagmoe::io::simulated_run(busy, ds::simulate(busy));
  CHECK(rt::exposed_comm_floor(busy, busy_run)[1] == 0.0);

  // A measured run also has the receiver's event of a transfer. Without it the transfer
  // still counts (it ends at the sender's end); without the sender's event it does not,
  // as the all-reduce the runtime runs after the schedule is missing from a measured run.
  auto measured = run;
  for (const auto& e : run.events)
    if (ds::is_comm(s.ops[static_cast<std::size_t>(e.op)].kind))
      measured.events.push_back({1, e.op, ds::Stream::kComm, e.start, e.end, true});
  CHECK(rt::exposed_comm_floor(s, measured) == floor);
  auto no_sender = measured;
  std::erase_if(no_sender.events, [&](const disagmoe::io::TraceEvent& e) {
    return ds::is_comm(s.ops[static_cast<std::size_t>(e.op)].kind) && !e.receive;
  });
  REQUIRE(no_sender.events.size() + 1 == measured.events.size());
  CHECK(rt::exposed_comm_floor(s, no_sender) == std::vector<double>{0.0, 0.0});

  // Two GPUs on B's side receive half the bytes each: B's link carries 1 s.
  auto wide = s;
  wide.workers[1].gpus = 2;
  const auto wide_run = disagmoe::io::simulated_run(wide, ds::simulate(wide));
  CHECK(rt::exposed_comm_floor(wide, wide_run)[1] == doctest::Approx(1.0 - 0.5));

  // B also sends 2 GB back at once: each direction is a link of its own, so the exchange
  // takes 2 s, not 4, and B's floor stays 1.5 s; A's rx link now carries 2 s too.
  auto both = s;
  both.add(floor_test_transfer(ds::OpKind::kSend, 1, 0, 2e9, {0}));
  const auto both_sim = ds::simulate(both);
  const auto both_run = disagmoe::io::simulated_run(both, both_sim);
  CHECK(both_sim.step_seconds == doctest::Approx(3.0));
  CHECK(rt::exposed_comm_floor(both, both_run) == rt::exposed_comm_floor(s, run));
  CHECK(rt::worker_exposure(both, both_run).exposed[1] == doctest::Approx(1.5));

  // An all-to-all inside one worker of 2 GPUs loads both directions of its own links:
  // across 2 nodes half of each GPU's 4 GB leaves over the NIC (2 s at 1 GB/s), within one
  // node over NVLink (0.2 s at 10 GB/s).
  for (const int nodes : {2, 1}) {
    CAPTURE(nodes);
    ds::Schedule a2a;
    a2a.name = "a2a";
    a2a.workers = ds::uniform_workers(1, ds::Role::kColocated, 1e9, 1e10);
    a2a.workers[0].gpus = 2;
    a2a.workers[0].nodes = nodes;
    a2a.add(floor_test_transfer(ds::OpKind::kAllToAll, 0, 0, 4e9));
    const auto a2a_run = disagmoe::io::simulated_run(a2a, ds::simulate(a2a));
    CHECK(rt::exposed_comm_floor(a2a, a2a_run)[0] == doctest::Approx(nodes == 2 ? 2.0 : 0.2));
  }

  // A link without bandwidth that carries bytes is named.
  auto dead = s;
  dead.workers[1].nic_bandwidth = 0;
  CHECK_THROWS_WITH_AS(rt::exposed_comm_floor(dead, run),
                       doctest::Contains("Schedule.workers[1].nic_bandwidth"), disagmoe::ConfigError);
}

TEST_CASE("no simulated run of any policy exposes less than its floor") {
  int checked = 0, positive = 0;
  for (std::uint64_t seed = 1; seed <= 30; ++seed) {
    std::mt19937_64 rng(seed);
    const int p = 1 + static_cast<int>(rng() % 3);
    for (auto name : ds::kScheduleNames) {
      INFO("seed " << seed << " policy " << name);
      const bool af = name == ds::AFPipe::kName;
      ds::Problem pb =
          ds::test::random_problem(rng, af ? 2 * p : p, p * (1 + static_cast<int>(rng() % 3)),
                                   2 * p + static_cast<int>(rng() % 4), true, rng() % 2 ? 0.2 : 0.0);
      if (af)
        for (std::size_t w = 0; w < pb.workers.size(); ++w)
          pb.workers[w].role = w < static_cast<std::size_t>(p) ? ds::Role::kAttention : ds::Role::kFfn;
      // Links slow enough that most workers have a floor; compute on shared host cores
      // in half the cases (it stretches while transfers run).
      for (auto& w : pb.workers) {
        w.gpus = 1 + static_cast<int>(rng() % 2);
        w.nic_bandwidth = 2e7;
        w.nvlink_bandwidth = 1e8;
      }
      pb.network.host_cores = rng() % 2 ? 2 : 0;
      ds::Schedule s;
      try {
        s = ds::build_schedule(name, pb);
      } catch (const disagmoe::ConfigError&) {
        continue;  // sizes this policy does not take
      }
      const auto sim = ds::simulate(s);
      REQUIRE_FALSE(sim.deadlocked);
      const auto run = disagmoe::io::simulated_run(s, sim);
      const auto floor = rt::exposed_comm_floor(s, run);
      const auto exposure = rt::worker_exposure(s, run);
      for (std::size_t w = 0; w < floor.size(); ++w) {
        CAPTURE(w);
        CHECK(exposure.exposed[w] >= floor[w] - 1e-9 * sim.step_seconds);
        ++checked;
        if (floor[w] > 0) ++positive;
      }
    }
  }
  CHECK(checked > 200);
  CHECK(positive > checked / 2);
}
