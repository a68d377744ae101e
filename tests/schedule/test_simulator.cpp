// SPDX-License-Identifier: Apache-2.0
#include "uniform.hpp"

#include <disagmoe/schedule/simulator.hpp>

#include <doctest/doctest.h>

namespace ds = disagmoe::schedule;

TEST_CASE("a cyclic schedule is reported as a deadlock naming the waits") {
  ds::Schedule s;
  s.workers = ds::uniform_workers(2);
  ds::Op a;
  a.worker = 0;
  a.seconds = 1;
  a.deps = {1};
  ds::Op b;
  b.worker = 1;
  b.seconds = 1;
  b.deps = {0};
  s.add(a);
  s.add(b);
  const auto r = ds::simulate(s);
  CHECK(r.deadlocked);
  REQUIRE(r.waits.size() == 2);
  CHECK(r.waits[0].waiting_on == std::vector<int>{1});
  CHECK(r.deadlock_report.find("waits on op 1") != std::string::npos);
}

#include <disagmoe/error.hpp>

namespace {
ds::Schedule two_workers(bool in_order) {
  ds::Schedule s;
  s.workers = ds::uniform_workers(2, ds::Role::kColocated, 100.0, 1000.0);
  for (auto& w : s.workers) w.in_order_comm = in_order;
  return s;
}
ds::Op send(int from, int to, double bytes) {
  ds::Op o;
  o.kind = ds::OpKind::kSend;
  o.stream = ds::Stream::kComm;
  o.worker = from;
  o.peer = to;
  o.bytes = bytes;
  return o;
}
ds::Op work(int w, ds::Stream st, double sec) {
  ds::Op o;
  o.worker = w;
  o.stream = st;
  o.seconds = sec;
  return o;
}
}  // namespace

TEST_CASE("posted sends keep no turn on an in-order comm stream; all-to-alls still do") {
  // Worker 0's comm stream: all-to-all A (1000 B over its NVLink at 1000 B/s: 1 s), a
  // send S of 300 B to worker 1 over the NICs (100 B/s: 3 s), all-to-all B (1 s);
  // worker 1 computes 1 s once S has landed.
  ds::Op a2a;
  a2a.kind = ds::OpKind::kAllToAll;
  a2a.stream = ds::Stream::kComm;
  a2a.worker = a2a.peer = 0;
  a2a.bytes = 1000;
  for (bool posted : {false, true}) {
    auto s = two_workers(true);
    s.workers[0].a2a_nic_share = 0;
    s.workers[0].a2a_nvlink_share = 1;
    s.workers[0].posted_sends = posted;
    s.add(a2a);
    s.add(send(0, 1, 300));
    s.add(a2a);
    ds::Op after = work(1, ds::Stream::kForward, 1);
    after.deps = {1};
    s.add(after);
    const auto r = ds::simulate(s);
    CAPTURE(posted);
    REQUIRE_FALSE(r.deadlocked);
    // In turn: A [0, 1], S [1, 4], B [4, 5]. Posted: S [0, 3] beside A [0, 1], B [1, 2].
    CHECK(r.timings[0].end == doctest::Approx(1.0));
    CHECK(r.timings[1].start == doctest::Approx(posted ? 0.0 : 1.0));
    CHECK(r.timings[1].end == doctest::Approx(posted ? 3.0 : 4.0));
    CHECK(r.timings[2].start == doctest::Approx(posted ? 1.0 : 4.0));
    CHECK(r.timings[3].start == doctest::Approx(posted ? 3.0 : 4.0));
    CHECK(r.step_seconds == doctest::Approx(posted ? 4.0 : 5.0));
  }
}

TEST_CASE("bandwidth: concurrent flows share a NIC, in-order streams serialise, latency adds") {
  {
    auto s = two_workers(false);
    s.network.nic_latency = 0.5;
    s.add(send(0, 1, 100));
    s.add(send(0, 1, 100));
    const auto r = ds::simulate(s);
    CHECK(r.timings[0].end == doctest::Approx(2.5));  // two flows at 50 B/s each
    CHECK(r.timings[1].end == doctest::Approx(2.5));
    CHECK(r.exposed_comm_seconds == doctest::Approx(2.5));
  }
  {
    auto s = two_workers(true);
    s.add(send(0, 1, 100));
    s.add(send(0, 1, 300));
    const auto r = ds::simulate(s);
    CHECK(r.timings[0].end == doctest::Approx(1.0));
    CHECK(r.timings[1].start == doctest::Approx(1.0));
    CHECK(r.timings[1].end == doctest::Approx(4.0));
  }
  {  // a comm op's own overhead (a calibrated Op::seconds): then one without
    auto overhead_then_plain = [](double bytes) {
      auto s = two_workers(true);
      s.network.nic_latency = 0.5;
      s.add(send(0, 1, bytes));
      s.ops.back().seconds = 0.25;
      s.add(send(0, 1, bytes));
      return ds::simulate(s);
    };
    const auto r = overhead_then_plain(100);  // the overhead adds to the latency
    CHECK(r.timings[0].end == doctest::Approx(1.75));  // 0.5 + 0.25 + 100 B at 100 B/s
    CHECK(r.timings[1].end == doctest::Approx(3.25));  // then 0.5 + 1
    CHECK(r.workers[0].compute_seconds == 0.0);         // an overhead is not compute
    // An op that moves no bytes (an all-to-all of a one-GPU worker) takes its overhead alone.
    const auto z = overhead_then_plain(0);
    CHECK(z.timings[0].end == doctest::Approx(0.25));
    CHECK(z.timings[1].start == doctest::Approx(0.25));
    CHECK(z.timings[1].end == doctest::Approx(0.25));  // no overhead: done at once
  }
  {  // a short flow ends early and the long one speeds up: 100 B shared, then alone
    auto s = two_workers(false);
    s.add(send(0, 1, 100));
    s.add(send(0, 1, 300));
    const auto r = ds::simulate(s);
    CHECK(r.timings[0].end == doctest::Approx(2.0));
    CHECK(r.timings[1].end == doctest::Approx(4.0));
  }
}

TEST_CASE("bandwidth: M2N into a smaller group is limited by the receivers") {
  ds::Schedule s;
  s.workers = ds::uniform_workers(2, ds::Role::kColocated, 100.0, 1000.0);
  s.workers[0].gpus = 8;  // 8 senders, 4 receivers on other nodes: 2x bytes per receiver
  s.workers[1].gpus = 4;
  s.workers[1].first_node = 1;
  s.add(send(0, 1, 100));
  CHECK(ds::simulate(s).step_seconds == doctest::Approx(2.0));
}

TEST_CASE("bandwidth: an all-to-all over 2 nodes splits NIC and NVLink bytes") {
  ds::Schedule s;
  s.workers = ds::uniform_workers(1, ds::Role::kColocated, 100.0, 1000.0);
  s.workers[0].gpus = 16;
  s.workers[0].nodes = 2;
  ds::Op a = send(0, 0, 1600);
  a.kind = ds::OpKind::kAllToAll;
  s.add(a);
  // 8 of 16 destinations off-node: 800 B at 100 B/s; 7 on-node peers: 700 B at 1000 B/s.
  CHECK(ds::simulate(s).step_seconds == doctest::Approx(8.0));
}

TEST_CASE("compute: fwd and bwd streams share the GPU; SM-using comm slows compute") {
  {
    auto s = two_workers(true);
    s.add(work(0, ds::Stream::kForward, 1.0));
    s.add(work(0, ds::Stream::kBackward, 2.0));
    const auto r = ds::simulate(s);
    CHECK(r.timings[0].end == doctest::Approx(2.0));
    CHECK(r.timings[1].end == doctest::Approx(3.0));
    CHECK(r.workers[0].busy_fraction == doctest::Approx(1.0));
    CHECK(r.workers[1].bubble_fraction == doctest::Approx(1.0));
    CHECK(r.max_worker_compute_seconds == doctest::Approx(3.0));
  }
  {
    auto s = two_workers(true);
    s.network.comm_sm_fraction = 0.25;
    s.add(work(0, ds::Stream::kForward, 3.0));
    auto c = send(0, 1, 1e6);
    c.uses_sms = true;
    s.add(c);
    // Compute at 0.75 for the whole comm (10000 s) would take 4 s: ends at 4 s.
    const auto r = ds::simulate(s);
    CHECK(r.timings[0].end == doctest::Approx(4.0));
    CHECK(r.workers[0].exposed_comm_seconds == doctest::Approx(1e4 - 4.0));
  }
  {  // An RDMA-engine transfer takes rdma_sm_fraction, not comm_sm_fraction, on both ends.
    auto s = two_workers(true);
    s.network.comm_sm_fraction = 0.5;
    s.network.rdma_sm_fraction = 0.25;
    s.add(work(1, ds::Stream::kForward, 3.0));  // the receiving end
    s.add(send(0, 1, 1e6));                     // uses_sms = false: RDMA
    // 3 s of work at 0.75 while the 10000 s transfer runs: ends at 4 s.
    CHECK(ds::simulate(s).timings[0].end == doctest::Approx(4.0));
  }
  {  // A kernel and an RDMA transfer at once (unordered comm): both shares are held.
    auto s = two_workers(false);
    s.network.comm_sm_fraction = 0.25;
    s.network.rdma_sm_fraction = 0.25;
    s.add(work(0, ds::Stream::kForward, 3.0));
    auto k = send(0, 1, 1e6);
    k.uses_sms = true;
    s.add(k);
    s.add(send(0, 1, 1e6));
    CHECK(ds::simulate(s).timings[0].end == doctest::Approx(6.0));
  }
}

TEST_CASE("host cores: at most C compute ops run at once, first come first served, comm exempt") {
  // Four one-GPU workers on 2 host cores. a (2 s), b, c, d (1 s) are ready at 0; e
  // (0.5 s) follows b on W1; a 100 B send W3 -> W0 at 100 B/s needs no core.
  auto build = [](int cores) {
    ds::Schedule s;
    s.workers = ds::uniform_workers(4, ds::Role::kColocated, 100.0, 1000.0);
    s.network.host_cores = cores;
    s.add(work(0, ds::Stream::kForward, 2.0));  // a
    s.add(work(1, ds::Stream::kForward, 1.0));  // b
    s.add(work(2, ds::Stream::kForward, 1.0));  // c
    s.add(work(3, ds::Stream::kForward, 1.0));  // d
    s.add(work(1, ds::Stream::kForward, 0.5));  // e
    s.add(send(3, 0, 100));                     // f
    return s;
  };
  {  // By hand: a, b take the cores at 0; c, d queue. b ends at 1: c starts (e, ready
     // at 1, queues behind d). At 2 a ends first (lower id): d, the older waiter,
     // starts; then c ends: e starts. d ends at 3, e at 2.5.
    const auto r = ds::simulate(build(2));
    const double start[] = {0, 0, 1, 2, 2, 0}, end[] = {2, 1, 2, 3, 2.5, 1};
    for (int i = 0; i < 6; ++i) {
      CAPTURE(i);
      CHECK(r.timings[static_cast<std::size_t>(i)].start == doctest::Approx(start[i]));
      CHECK(r.timings[static_cast<std::size_t>(i)].end == doctest::Approx(end[i]));
    }
    CHECK(r.step_seconds == doctest::Approx(3.0));
    CHECK(r.workers[3].busy_seconds == doctest::Approx(1.0));  // queued is not busy
    CHECK(r.lower_bound_seconds == doctest::Approx(5.5 / 2));  // 5.5 s of compute on 2 cores
  }
  {  // 0 (the default): every op runs as soon as it is ready.
    const auto r = ds::simulate(build(0));
    CHECK(r.timings[2].start == 0);
    CHECK(r.timings[4].start == doctest::Approx(1.0));
    CHECK(r.step_seconds == doctest::Approx(2.0));
    CHECK(r.lower_bound_seconds == doctest::Approx(2.0));
  }
  {  // fwd and bwd of one worker take a core each: on one core they run one after the other.
    auto s = two_workers(true);
    s.network.host_cores = 1;
    s.add(work(0, ds::Stream::kForward, 1.0));
    s.add(work(0, ds::Stream::kBackward, 1.0));
    const auto r = ds::simulate(s);
    CHECK(r.timings[0].end == doctest::Approx(1.0));
    CHECK(r.timings[1].start == doctest::Approx(1.0));
    CHECK(r.timings[1].end == doctest::Approx(2.0));
  }
  auto bad = build(-1);
  CHECK_THROWS_WITH_AS(ds::simulate(bad), doctest::Contains("Schedule.network.host_cores = -1"), disagmoe::ConfigError);
}

TEST_CASE("host cores: a worker's ranks are threads, each stream its own; queued first come first served") {
  auto with_gpus = [](std::vector<int> gpus, int cores) {
    ds::Schedule s;
    s.workers = ds::uniform_workers(static_cast<int>(gpus.size()), ds::Role::kColocated, 100.0, 1000.0);
    for (std::size_t w = 0; w < gpus.size(); ++w) s.workers[w].gpus = gpus[w];
    s.network.host_cores = cores;
    return s;
  };
  {  // One rank, forward and backward threads on 2 cores: both at full rate (a GPU's
     // streams would share it: both would end at 2, as with no core limit).
    for (int cores : {2, 0}) {
      auto s = with_gpus({1}, cores);
      s.add(work(0, ds::Stream::kForward, 1.0));
      s.add(work(0, ds::Stream::kBackward, 1.0));
      const auto r = ds::simulate(s);
      CHECK(r.timings[1].end == doctest::Approx(cores > 0 ? 1.0 : 2.0));
      CHECK(r.lower_bound_seconds == doctest::Approx(cores > 0 ? 1.0 : 2.0));
    }
  }
  {  // Two ranks: each op holds both cores, so forward and backward run one after the other.
    auto s = with_gpus({2}, 2);
    s.add(work(0, ds::Stream::kForward, 1.0));
    s.add(work(0, ds::Stream::kBackward, 1.0));
    const auto r = ds::simulate(s);
    CHECK(r.timings[1].start == doctest::Approx(1.0));
    CHECK(r.step_seconds == doctest::Approx(2.0));
    CHECK(r.lower_bound_seconds == doctest::Approx(2.0));  // 4 core-seconds on 2 cores
  }
  {  // Four ranks on 2 cores: the op holds both, at half its rate.
    auto s = with_gpus({4}, 2);
    s.add(work(0, ds::Stream::kForward, 1.0));
    const auto r = ds::simulate(s);
    CHECK(r.step_seconds == doctest::Approx(2.0));
    CHECK(r.lower_bound_seconds == doctest::Approx(2.0));
  }
  {  // a (1 rank), b (2 ranks), c (1 rank), 1 s each, ready at 0 on 2 cores: a starts; b
     // waits for 2 cores; c waits behind b although a core is free. a ends at 1: b runs
     // 1-2, then c 2-3.
    auto s = with_gpus({1, 2, 1}, 2);
    s.add(work(0, ds::Stream::kForward, 1.0));
    s.add(work(1, ds::Stream::kForward, 1.0));
    s.add(work(2, ds::Stream::kForward, 1.0));
    const auto r = ds::simulate(s);
    const double start[] = {0, 1, 2}, end[] = {1, 2, 3};
    for (int i = 0; i < 3; ++i) {
      CAPTURE(i);
      CHECK(r.timings[static_cast<std::size_t>(i)].start == doctest::Approx(start[i]));
      CHECK(r.timings[static_cast<std::size_t>(i)].end == doctest::Approx(end[i]));
    }
    CHECK(r.lower_bound_seconds == doctest::Approx(2.0));  // 4 core-seconds on 2 cores
  }
}

TEST_CASE("host cores: comm threads take their share of the cores only when the cores are oversubscribed") {
  // W0 -> W1, a 10000 s transfer whose comm threads take half a core on each end, beside
  // 3 s of compute on W0 (and on W1): the cores are shared in proportion to demand once
  // the compute's cores plus the comm threads' shares exceed them.
  auto build = [](int cores, bool both) {
    auto s = two_workers(true);
    s.network.host_cores = cores;
    s.network.comm_sm_fraction = 0.5;
    s.add(work(0, ds::Stream::kForward, 3.0));
    if (both) s.add(work(1, ds::Stream::kForward, 3.0));
    auto c = send(0, 1, 1e6);
    c.uses_sms = true;
    s.add(c);
    return s;
  };
  // 2 cores: 1 held + 2 x 0.5 = 2, not over: full rate (a GPU would run at 0.5: 6 s).
  CHECK(ds::simulate(build(2, false)).timings[0].end == doctest::Approx(3.0));
  // 1 core: demand 2, every op at 1/2 of its rate.
  CHECK(ds::simulate(build(1, false)).timings[0].end == doctest::Approx(6.0));
  // 2 cores, both computing: demand 3, at 2/3.
  const auto r = ds::simulate(build(2, true));
  CHECK(r.timings[0].end == doctest::Approx(4.5));
  CHECK(r.timings[1].end == doctest::Approx(4.5));
  // Without the comm threads' share: full rate again.
  auto free = build(2, true);
  free.network.comm_sm_fraction = 0;
  CHECK(ds::simulate(free).timings[1].end == doctest::Approx(3.0));
}

TEST_CASE("memory: peak activation follows allocations and frees") {
  auto s = two_workers(true);
  auto a = work(0, ds::Stream::kForward, 1.0);
  a.alloc_bytes = 5;
  auto b = work(0, ds::Stream::kForward, 1.0);
  b.alloc_bytes = 7;
  auto c = work(0, ds::Stream::kBackward, 1.0);
  c.free_bytes = 12;
  c.deps = {1};
  s.add(a);
  s.add(b);
  s.add(c);
  CHECK(ds::simulate(s).peak_activation_bytes == doctest::Approx(12.0));
}

TEST_CASE("bad schedules are ConfigErrors naming the field") {
  auto s = two_workers(true);
  auto a = work(0, ds::Stream::kForward, 1.0);
  a.deps = {7};
  s.add(a);
  CHECK_THROWS_WITH_AS(ds::simulate(s), doctest::Contains("Schedule.ops[0].deps = 7"), disagmoe::ConfigError);
  auto t = two_workers(true);
  t.workers[1].nic_bandwidth = 0;
  t.add(send(0, 1, 10));
  CHECK_THROWS_WITH_AS(ds::simulate(t), doctest::Contains("nic_bandwidth"), disagmoe::ConfigError);
  auto u = two_workers(true);
  auto c = send(0, 1, 10);
  c.stream = ds::Stream::kForward;
  u.add(c);
  CHECK_THROWS_AS(ds::simulate(u), disagmoe::ConfigError);
}

TEST_CASE("stream orders that do not list every op once on its own stream are ConfigErrors") {
  auto base = two_workers(true);
  base.add(work(0, ds::Stream::kForward, 1.0));
  base.add(work(1, ds::Stream::kBackward, 1.0));
  REQUIRE_NOTHROW(ds::validate(base));
  auto twice = base;  // op 0 listed again on its own stream
  twice.order[0][0].push_back(0);
  CHECK_THROWS_WITH_AS(ds::validate(twice), doctest::Contains("Schedule.order[0][0] = 0"), disagmoe::ConfigError);
  CHECK_THROWS_WITH_AS(ds::validate(twice), doctest::Contains("each op listed once"), disagmoe::ConfigError);
  auto moved = base;  // op 1 (worker 1, bwd) listed on worker 0's comm stream instead
  moved.order[1][1].clear();
  moved.order[0][2].push_back(1);
  CHECK_THROWS_WITH_AS(ds::validate(moved), doctest::Contains("Schedule.order[0][2] = 1"), disagmoe::ConfigError);
  CHECK_THROWS_WITH_AS(ds::validate(moved), doctest::Contains("an op of this worker and stream"),
                       disagmoe::ConfigError);
  auto missing = base;
  missing.order[1][1].clear();
  CHECK_THROWS_WITH_AS(ds::validate(missing), doctest::Contains("Schedule.ops[1] = 1"), disagmoe::ConfigError);
  auto range = base;
  range.order[1][0].push_back(5);
  CHECK_THROWS_WITH_AS(ds::validate(range), doctest::Contains("an op id below 2"), disagmoe::ConfigError);
  auto negative = base;
  negative.order[0][1].push_back(-1);
  CHECK_THROWS_WITH_AS(ds::validate(negative), doctest::Contains("Schedule.order[0][1] = -1"),
                       disagmoe::ConfigError);
  // The simulator validates the same way before it uses the slots.
  CHECK_THROWS_WITH_AS(ds::simulate(moved), doctest::Contains("an op of this worker and stream"),
                       disagmoe::ConfigError);
  CHECK_THROWS_WITH_AS(ds::simulate(missing), doctest::Contains("Schedule.ops[1] = 1"), disagmoe::ConfigError);
  auto worker = base;
  worker.ops[1].worker = 9;
  CHECK_THROWS_WITH_AS(ds::validate(worker), doctest::Contains("Schedule.ops[1].worker = 9"), disagmoe::ConfigError);
  for (int bad : {3, 7}) {  // kStreams itself is the first invalid value
    auto stream = base;
    stream.ops[1].stream = static_cast<ds::Stream>(bad);
    const std::string field = "Schedule.ops[1].stream = " + std::to_string(bad);
    CHECK_THROWS_WITH_AS(ds::validate(stream), doctest::Contains(field.c_str()), disagmoe::ConfigError);
  }
}

#include <disagmoe/schedule/side_metrics.hpp>

TEST_CASE("side breakdown: busy, exposed communication and waiting on a peer, per side, by hand") {
  // A computes 1 s, sends 100 B at 100 B/s (1 s), F computes 2 s on it: step 4 s.
  // A: busy 1, exposed 1 (its send moves bytes, nothing to compute), waiting 2 (F computes).
  // F: waiting 1 (A computes), exposed 1 (the receive), busy 2.
  auto s = two_workers(true);
  s.workers[0].role = ds::Role::kAttention;
  s.workers[1].role = ds::Role::kFfn;
  s.workers[1].gpus = 3;  // per-GPU means: the group size must not weigh in
  s.workers[1].nodes = 3;
  const int a = s.add(work(0, ds::Stream::kForward, 1.0));
  auto c = send(0, 1, 100);
  c.deps = {a};
  const int ci = s.add(c);
  auto f = work(1, ds::Stream::kForward, 2.0);
  f.deps = {ci};
  s.add(f);
  const auto r = ds::simulate(s);
  REQUIRE(r.step_seconds == doctest::Approx(4.0));
  const auto b = ds::side_breakdown(s, r);
  CHECK(b.attention.gpus == 1);
  CHECK(b.attention.busy_seconds == doctest::Approx(1.0));
  CHECK(b.attention.exposed_comm_seconds == doctest::Approx(1.0));
  CHECK(b.attention.waiting_seconds == doctest::Approx(2.0));
  CHECK(b.ffn.gpus == 3);
  CHECK(b.ffn.busy_seconds == doctest::Approx(2.0));
  CHECK(b.ffn.exposed_comm_seconds == doctest::Approx(1.0));
  CHECK(b.ffn.waiting_seconds == doctest::Approx(1.0));
  CHECK(b.colocated.gpus == 0);
}

TEST_CASE("posted compute ops start when their deps are done and share the GPU; unchained ones are refused") {
  // One worker: a forward op and a backward op of 1 s each, and two posted ops of 1 s
  // queued behind the backward op in its stream's list. In turn the step would be
  // fwd ‖ (bwd, p1, p2) = 3 s. Posted and chained (p2 after p1): fwd, bwd and p1 share
  // the GPU at 1/3 each until 3 s, then p2 runs alone: 4 s, with p1 starting at 0.
  for (bool chained : {true, false}) {
    CAPTURE(chained);
    ds::Schedule s;
    s.workers = ds::uniform_workers(1);
    s.add(work(0, ds::Stream::kForward, 1));
    s.add(work(0, ds::Stream::kBackward, 1));
    ds::Op p1 = work(0, ds::Stream::kBackward, 1), p2 = p1;
    p1.posted = p2.posted = true;
    if (chained) p2.deps = {2};
    s.add(p1);
    s.add(p2);
    if (!chained) {  // four compute ops at once on one worker: a policy's bug, named
      CHECK_THROWS_WITH_AS(ds::simulate(s), doctest::Contains("posted"), disagmoe::ConfigError);
      continue;
    }
    const auto r = ds::simulate(s);
    REQUIRE_FALSE(r.deadlocked);
    CHECK(r.timings[2].start == 0);
    CHECK(r.timings[2].end == doctest::Approx(3));
    CHECK(r.timings[3].start == doctest::Approx(3));
    CHECK(r.step_seconds == doctest::Approx(4));
  }
}
