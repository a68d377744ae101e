// SPDX-License-Identifier: Apache-2.0
// Property tests on random sizes and costs, every policy: dependencies precede their ops,
// in-order streams never overlap, no deadlock, each micro-batch runs its layers forward
// in order and backward in reverse, step >= the busiest resource's work. For schedules
// without overlapped compute, a second, independent timing model (the sail-sg
// recurrence end = max(stream predecessor, deps) + cost, evaluated in Kahn order) must
// give the same step time.
#include "uniform.hpp"

#include <disagmoe/schedule/afpipe.hpp>
#include <disagmoe/schedule/baselines.hpp>
#include <disagmoe/schedule/dualpipe.hpp>
#include <disagmoe/schedule/simulator.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <queue>
#include <random>

namespace ds = disagmoe::schedule;

namespace {

ds::Problem random_problem(std::mt19937_64& rng, int workers, int layers, int m, bool comm) {
  return ds::test::random_problem(rng, workers, layers, m, comm, comm ? 0.15 : 0.0);
}

void check_properties(const ds::Schedule& s, const ds::SimResult& r) {
  REQUIRE_FALSE(r.deadlocked);
  const double eps = 1e-9 * std::max(1.0, r.step_seconds);
  for (std::size_t i = 0; i < s.ops.size(); ++i) {
    const auto& t = r.timings[i];
    REQUIRE(t.start >= 0);
    REQUIRE(t.end >= t.start - eps);
    for (int d : s.ops[i].deps) REQUIRE(t.start >= r.timings[static_cast<std::size_t>(d)].end - eps);
  }
  for (std::size_t w = 0; w < s.workers.size(); ++w)
    for (int k = 0; k < ds::kStreams; ++k) {
      if (k == 2 && !s.workers[w].in_order_comm) continue;
      int previous = -1;  // ops outside the stream's order keep no turn
      for (int id : s.order[w][static_cast<std::size_t>(k)]) {
        if (ds::outside_stream_order(s, s.ops[static_cast<std::size_t>(id)])) continue;
        if (previous >= 0)
          REQUIRE(r.timings[static_cast<std::size_t>(id)].start >=
                  r.timings[static_cast<std::size_t>(previous)].end - eps);
        previous = id;
      }
    }
  // Per micro-batch: attention forward of layer l ends before that of layer l+1 starts;
  // attention input-grad of l+1 ends before that of l starts.
  std::map<std::pair<int, int>, std::pair<double, double>> fwd, bwd;
  for (std::size_t i = 0; i < s.ops.size(); ++i) {
    const auto& op = s.ops[i];
    if (op.kind == ds::OpKind::kAttentionForward) fwd[{op.micro_batch, op.layer}] = {r.timings[i].start, r.timings[i].end};
    if (op.kind == ds::OpKind::kAttentionBackwardInput) bwd[{op.micro_batch, op.layer}] = {r.timings[i].start, r.timings[i].end};
  }
  for (const auto& [key, t] : fwd) {
    const auto next = fwd.find({key.first, key.second + 1});
    if (next != fwd.end()) REQUIRE(next->second.first >= t.second - eps);
    const auto up = bwd.find({key.first, key.second + 1});
    const auto me = bwd.find(key);
    REQUIRE(me != bwd.end());
    REQUIRE(me->second.first >= t.second - eps);
    if (up != bwd.end()) REQUIRE(me->second.first >= up->second.second - eps);
  }
  REQUIRE(r.step_seconds >= r.lower_bound_seconds - eps);
  REQUIRE(r.bubble_fraction >= -eps);
  REQUIRE(r.bubble_fraction <= 1 + eps);
}

// Independent timing model for schedules whose compute never overlaps on a worker and
// whose comm ops never share a link: comm ops cost their latency (bandwidth is huge).
double recurrence_step(const ds::Schedule& s) {
  const std::size_t n = s.ops.size();
  std::vector<std::vector<int>> pred(n);
  for (std::size_t i = 0; i < n; ++i) pred[i] = s.ops[i].deps;
  for (const auto& w : s.order)
    for (const auto& q : w)
      for (std::size_t i = 1; i < q.size(); ++i) pred[static_cast<std::size_t>(q[i])].push_back(q[i - 1]);
  std::vector<int> indeg(n, 0);
  std::vector<std::vector<int>> succ(n);
  for (std::size_t i = 0; i < n; ++i)
    for (int d : pred[i]) {
      succ[static_cast<std::size_t>(d)].push_back(static_cast<int>(i));
      ++indeg[i];
    }
  std::queue<int> ready;
  for (std::size_t i = 0; i < n; ++i)
    if (indeg[i] == 0) ready.push(static_cast<int>(i));
  std::vector<double> end(n, 0);
  double step = 0;
  std::size_t seen = 0;
  while (!ready.empty()) {
    const int i = ready.front();
    ready.pop();
    ++seen;
    const auto& op = s.ops[static_cast<std::size_t>(i)];
    double start = 0;
    for (int d : pred[static_cast<std::size_t>(i)]) start = std::max(start, end[static_cast<std::size_t>(d)]);
    const double cost = ds::is_comm(op.kind) ? (op.bytes > 0 && op.worker != op.peer ? s.network.nic_latency : 0)
                                             : op.seconds;
    end[static_cast<std::size_t>(i)] = start + cost;
    step = std::max(step, end[static_cast<std::size_t>(i)]);
    for (int k : succ[static_cast<std::size_t>(i)])
      if (--indeg[static_cast<std::size_t>(k)] == 0) ready.push(k);
  }
  REQUIRE(seen == n);
  return step;
}

}  // namespace

TEST_CASE("random sizes: every policy satisfies the schedule properties") {
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    std::mt19937_64 rng(seed);
    const int p = 1 + static_cast<int>(rng() % 4);
    const int v = 1 + static_cast<int>(rng() % 3);
    const int m = p * (1 + static_cast<int>(rng() % 3));
    const bool comm = seed % 2 == 0;
    INFO("seed " << seed << " p " << p << " v " << v << " m " << m << " comm " << comm);
    const auto pb = random_problem(rng, p, p * v * 2, m, comm);
    const int chunks = 1 + static_cast<int>(rng() % 3);
    std::vector<ds::Schedule> all{ds::OneFOneB{}.build(pb), ds::Interleaved1F1B{v}.build(pb),
                                  ds::A2AOverlap{v}.build(pb), ds::ChunkedOverlap{chunks, v}.build(pb)};
    const int pe = 2 * ((p + 1) / 2);
    auto pbe = random_problem(rng, pe, 2 * pe, 2 * pe + 2 * static_cast<int>(rng() % 3), comm);
    all.push_back(ds::DualPipe{}.build(pbe));
    all.push_back(ds::DualPipeV{}.build(pbe));
    auto pba = random_problem(rng, 2 * p, p * (1 + static_cast<int>(rng() % 3)), m + static_cast<int>(rng() % 5), comm);
    for (int i = 0; i < 2 * p; ++i) pba.workers[static_cast<std::size_t>(i)].role = i % 2 ? ds::Role::kFfn : ds::Role::kAttention;
    all.push_back(ds::AFPipe{1 + static_cast<int>(rng() % 4)}.build(pba));
    all.push_back(ds::AFPipe{0, 0, false, false}.build(pba));
    for (const auto& s : all) {
      INFO("policy " << s.name);
      check_properties(s, ds::simulate(s));
    }
  }
}

TEST_CASE("random costs: sequential schedules agree with the recurrence oracle") {
  for (std::uint64_t seed = 100; seed < 140; ++seed) {
    std::mt19937_64 rng(seed);
    const int p = 1 + static_cast<int>(rng() % 4);
    const int v = 1 + static_cast<int>(rng() % 3);
    const int m = p * (1 + static_cast<int>(rng() % 3));
    INFO("seed " << seed << " p " << p << " v " << v << " m " << m);
    auto pb = random_problem(rng, p, p * v + static_cast<int>(rng() % 3), m, false);
    // Latency-only communication: positive bytes over effectively infinite links.
    pb.network.nic_latency = 0.05;
    for (auto& w : pb.workers) w.nic_bandwidth = w.nvlink_bandwidth = 1e300;
    for (auto& l : pb.layers) l.hidden_bytes = l.dispatch_bytes = l.combine_bytes = 1;
    for (const auto& s : {ds::OneFOneB{}.build(pb), ds::Interleaved1F1B{v}.build(pb),
                          ds::ChunkedOverlap{3, v}.build(pb)}) {
      INFO("policy " << s.name);
      const auto r = ds::simulate(s);
      REQUIRE_FALSE(r.deadlocked);
      CHECK(r.step_seconds == doctest::Approx(recurrence_step(s)).epsilon(1e-9));
    }
  }
}

TEST_CASE("activation memory: 1F1B rank r holds at most min(p - r, m) micro-batches (B1)") {
  for (int p : {2, 3, 4})
    for (int m : {1, 3, 8}) {
      const auto pb = ds::test::uniform_problem(p, p, m);
      const auto r = ds::simulate(ds::OneFOneB{}.build(pb));
      for (int w = 0; w < p; ++w) {
        CAPTURE(p);
        CAPTURE(m);
        CAPTURE(w);
        // One layer per stage: 1 (attention) + 1 (experts) bytes per micro-batch.
        CHECK(r.workers[static_cast<std::size_t>(w)].peak_activation_bytes == doctest::Approx(2.0 * std::min(p - w, m)));
      }
    }
}
