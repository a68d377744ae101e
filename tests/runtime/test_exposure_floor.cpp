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

// Two one-GPU workers on two nodes, 1 GB/s NICs, no latency: A computes 1 s and then sends
// 2 GB to B (2 s on the wire), and B computes 0.5 s once A's compute is done, while the
// bytes move. A's tx link carries 2 s with 1 s of compute; B's rx link 2 s with 0.5 s.
ds::Schedule send_beside_compute() {
  ds::Schedule s;
  s.name = "hand";
  s.workers = ds::uniform_workers(2, ds::Role::kColocated, 1e9, 1e10);
  const int a = s.add(floor_test_compute(0, 1.0));
  ds::Op x;
  x.kind = ds::OpKind::kSend;
  x.stream = ds::Stream::kComm;
  x.worker = 0;
  x.peer = 1;
  x.bytes = 2e9;
  x.deps = {a};
  s.add(x);
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
  // move, which is the best any order can do: B's exposure is its floor.
  const auto exposure = rt::worker_exposure(s, run);
  CHECK(exposure.exposed[0] == doctest::Approx(2.0));
  CHECK(exposure.exposed[1] == doctest::Approx(floor[1]));
  CHECK(rt::bottleneck_exposed_comm_floor(s, run) == doctest::Approx(floor[0]));  // A computes longest

  // More compute than link time: no floor.
  auto busy = s;
  busy.ops[2].seconds = 3.0;
  const auto busy_run = disagmoe::io::simulated_run(busy, ds::simulate(busy));
  CHECK(rt::exposed_comm_floor(busy, busy_run)[1] == 0.0);

  // A transfer missing from the run (as the all-reduce the runtime runs after the schedule
  // is from a measured one) carries nothing.
  auto partial = run;
  std::erase_if(partial.events,
                [&](const disagmoe::io::TraceEvent& e) { return ds::is_comm(s.ops[e.op].kind); });
  CHECK(rt::exposed_comm_floor(s, partial) == std::vector<double>{0.0, 0.0});

  // Two GPUs on B's side receive half the bytes each: B's link carries 1 s.
  auto wide = s;
  wide.workers[1].gpus = 2;
  const auto wide_run = disagmoe::io::simulated_run(wide, ds::simulate(wide));
  CHECK(rt::exposed_comm_floor(wide, wide_run)[1] == doctest::Approx(1.0 - 0.5));

  // B also sends 2 GB back at once: each direction is a link of its own, so the exchange
  // takes 2 s, not 4, and B's floor stays 1.5 s; A's rx link now carries 2 s too.
  auto both = s;
  ds::Op back = s.ops[1];
  back.worker = 1;
  back.peer = 0;
  back.deps = {0};
  both.add(back);
  const auto both_sim = ds::simulate(both);
  const auto both_run = disagmoe::io::simulated_run(both, both_sim);
  CHECK(both_sim.step_seconds == doctest::Approx(3.0));
  CHECK(rt::exposed_comm_floor(both, both_run) == rt::exposed_comm_floor(s, run));
  CHECK(rt::worker_exposure(both, both_run).exposed[1] == doctest::Approx(1.5));

  // A link without bandwidth that carries bytes is named.
  auto dead = s;
  dead.workers[1].nic_bandwidth = 0;
  CHECK_THROWS_WITH_AS(rt::exposed_comm_floor(dead, run),
                       doctest::Contains("Schedule.workers[1].nic_bandwidth"), disagmoe::ConfigError);
}

TEST_CASE("no simulated run of any policy exposes less than its floor") {
  int checked = 0;
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
      for (auto& w : pb.workers) w.gpus = 1 + static_cast<int>(rng() % 2);
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
      }
      ++checked;
    }
  }
  CHECK(checked > 100);
}
