// SPDX-License-Identifier: Apache-2.0
// Idle time by cause (schedule/idle_causes.hpp) against hand-built schedules whose waits
// have closed forms: behind a transfer's bytes, behind its latency, behind a peer's
// compute, and chains of both; the parts add up to each worker's idle time.
#include <disagmoe/schedule/afpipe.hpp>
#include <disagmoe/schedule/cost_adapter.hpp>
#include <disagmoe/schedule/idle_causes.hpp>
#include <disagmoe/schedule/schedules.hpp>
#include <disagmoe/schedule/side_metrics.hpp>
#include <disagmoe/schedule/simulator.hpp>
#include <disagmoe/spec/presets.hpp>

#include <doctest/doctest.h>

namespace ds = disagmoe::schedule;

namespace {
// Two one-GPU workers on separate nodes: NIC 100 B/s, so 100 B take 1 s.
ds::Schedule two_workers(double latency = 0, bool in_order = false) {
  ds::Schedule s;
  s.workers = ds::uniform_workers(2, ds::Role::kColocated, 100.0, 1000.0);
  for (auto& w : s.workers) w.in_order_comm = in_order;
  s.network.nic_latency = latency;
  return s;
}
int work(ds::Schedule& s, int w, double sec, std::vector<int> deps = {}) {
  return s.add({.worker = w, .seconds = sec, .deps = std::move(deps)});
}
int send(ds::Schedule& s, int from, int to, double bytes, std::vector<int> deps = {}) {
  return s.add({.kind = ds::OpKind::kSend, .stream = ds::Stream::kComm, .worker = from, .peer = to, .bytes = bytes,
                .deps = std::move(deps)});
}
// W0 computes 1 s -> sends 200 B to W1 -> W1 computes 2 s -> sends 100 B back -> W0
// computes 1 s.
void round_trip(ds::Schedule& s) {
  const int a = work(s, 0, 1.0);
  const int x = send(s, 0, 1, 200, {a});
  const int f = work(s, 1, 2.0, {x});
  const int y = send(s, 1, 0, 100, {f});
  work(s, 0, 1.0, {y});
}
// The idle causes of `s`, simulated in `step` seconds; every worker's busy time and
// causes add up to the step (exactly here: every time is a dyadic rational, so the
// simulator's sums and these are exact).
std::vector<ds::IdleCauses> causes_of(const ds::Schedule& s, double step) {
  const auto r = ds::simulate(s);
  REQUIRE(r.step_seconds == step);
  const auto c = ds::idle_causes(s, r);
  REQUIRE(c.size() == s.workers.size());
  for (std::size_t w = 0; w < c.size(); ++w) CHECK(r.workers[w].busy_seconds + c[w].total() == r.step_seconds);
  return c;
}
// The four causes of one worker, exactly.
void check_causes(const ds::IdleCauses& c, double network, double latency, double peer, double other) {
  CHECK(c.network_seconds == network);
  CHECK(c.latency_seconds == latency);
  CHECK(c.peer_compute_seconds == peer);
  CHECK(c.other_seconds == other);
}
}  // namespace

TEST_CASE("idle causes: a wait behind a transfer's bytes is network") {
  // W0 computes 1 s, then sends 300 B (3 s); W1 computes 1 s, then waits for them: its
  // next op starts at 4 s. W1 idles [1, 4) behind the bytes; W0 idles [1, 5) behind
  // them and then behind W1's compute [4, 5).
  auto s = two_workers();
  const int a = work(s, 0, 1.0);
  const int x = send(s, 0, 1, 300, {a});
  const int b = work(s, 1, 1.0);
  work(s, 1, 1.0, {b, x});
  const auto c = causes_of(s, 5.0);
  check_causes(c[1], 3.0, 0.0, 0.0, 0.0);
  check_causes(c[0], 3.0, 0.0, 1.0, 0.0);
}

TEST_CASE("idle causes: a wait on a peer's compute is imbalance even while a transfer touches the worker") {
  // W1's op needs W0's 3 s compute; meanwhile an unrelated 200 B transfer W0 -> W1 moves
  // bytes over [0, 2). The in-flight-transfer metric calls 2 s of W1's idle time exposed
  // communication; by dependency all 3 s are a peer's compute.
  auto s = two_workers();
  const int a = work(s, 0, 3.0);
  send(s, 0, 1, 200);
  work(s, 1, 1.0, {a});
  CHECK(ds::simulate(s).workers[1].exposed_comm_seconds == 2.0);
  const auto c = causes_of(s, 4.0);
  check_causes(c[1], 0.0, 0.0, 3.0, 0.0);
  check_causes(c[0], 0.0, 0.0, 1.0, 0.0);  // the tail: W1's compute ends the step
}

TEST_CASE("idle causes: a chain of compute, latency and bytes is split at each link") {
  // W0 computes 1 s -> sends 200 B after 0.5 s latency (bytes [1.5, 3.5)) -> W1 computes
  // 2 s [3.5, 5.5) -> sends 100 B back (latency [5.5, 6), bytes [6, 7)) -> W0 computes
  // 1 s [7, 8).
  // W1: [0, 3.5) = 1 peer + 0.5 latency + 2 network; tail [5.5, 8) = 0.5 latency + 1 network + 1 peer.
  // W0: [1, 7) = 0.5 latency + 2 network + 2 peer + 0.5 latency + 1 network.
  auto s = two_workers(0.5);
  round_trip(s);
  const auto c = causes_of(s, 8.0);
  check_causes(c[1], 3.0, 1.0, 2.0, 0.0);
  check_causes(c[0], 3.0, 1.0, 2.0, 0.0);
}

TEST_CASE("idle causes: a transfer queued behind another on an in-order comm stream waits on the network") {
  // W0 sends 100 B then 200 B in order (a NCCL stream): the second moves bytes over
  // [1, 3). W1 waits for the second only: [0, 3) all behind bytes, the first second
  // behind the transfer ahead of it on the stream.
  auto s = two_workers(0, true);
  send(s, 0, 1, 100);
  const int y = send(s, 0, 1, 200);
  work(s, 1, 1.0, {y});
  const auto c = causes_of(s, 4.0);
  check_causes(c[1], 3.0, 0.0, 0.0, 0.0);
}

TEST_CASE("side breakdown: idle causes per side, GPU-weighted, add up to the step") {
  // The chain above with W0 an attention worker and W1 a 3-GPU FFN group: per-GPU means.
  auto s = two_workers(0.5);
  s.workers[0].role = ds::Role::kAttention;
  s.workers[1].role = ds::Role::kFfn;
  s.workers[1].gpus = 3;
  s.workers[1].nodes = 3;
  round_trip(s);
  const auto r = ds::simulate(s);
  const auto b = ds::side_breakdown(s, r);
  CHECK(b.ffn.gpus == 3);
  CHECK(b.ffn.busy_seconds + b.ffn.idle.total() == doctest::Approx(r.step_seconds));
  CHECK(b.attention.busy_seconds + b.attention.idle.total() == doctest::Approx(r.step_seconds));
  CHECK(b.attention.idle.peer_compute_seconds == doctest::Approx(2.0));
  CHECK(b.ffn.idle.peer_compute_seconds > 0);
}

TEST_CASE("idle causes add up to every worker's idle time on AF-Pipe and a baseline at scale") {
  const auto m = disagmoe::model_preset("deepseek-moe-16b");
  const auto c = disagmoe::cluster_preset("h800x128");
  ds::CostOptions o;
  o.micro_batches = 16;
  for (const ds::Schedule& s : {ds::AFPipe{}.build(ds::af_problem(m, c, {8, 3, 5, 4, 4}, o)),
                                ds::build_schedule("1f1b", ds::colocated_problem(m, c, {4}, o))}) {
    CAPTURE(s.name);
    const auto r = ds::simulate(s);
    REQUIRE_FALSE(r.deadlocked);
    const auto causes = ds::idle_causes(s, r);
    double network = 0;
    for (std::size_t w = 0; w < causes.size(); ++w) {
      CHECK(r.workers[w].busy_seconds + causes[w].total() == doctest::Approx(r.step_seconds).epsilon(1e-9));
      CHECK(causes[w].other_seconds == doctest::Approx(0.0).epsilon(1e-9));
      network += causes[w].network_seconds;
    }
    CHECK(network > 0);
  }
}
