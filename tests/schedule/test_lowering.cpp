// SPDX-License-Identifier: Apache-2.0
// Lowering property tests on random schedules of every policy: every op has exactly its
// tasks (a compute op once, a transfer once on each end), every receive matches one send
// of the same op, the per-peer transfer order agrees on both ends, every dependency is
// local, and a model of the strictest in-order transport (a comm stream blocks until its
// head transfer is matched by the peer's head) runs every program to completion.
#include "uniform.hpp"

#include <disagmoe/schedule/afpipe.hpp>
#include <disagmoe/schedule/baselines.hpp>
#include <disagmoe/schedule/dualpipe.hpp>
#include <disagmoe/schedule/lowering.hpp>

#include <doctest/doctest.h>

#include <map>
#include <random>
#include <set>

namespace ds = disagmoe::schedule;

namespace {

ds::Problem random_problem(std::mt19937_64& rng, int workers, int layers, int m) {
  return ds::test::random_problem(rng, workers, layers, m, true);
}

std::vector<ds::Schedule> random_schedules(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int p = 1 + static_cast<int>(rng() % 4);
  const int v = 1 + static_cast<int>(rng() % 3);
  const int m = p * (1 + static_cast<int>(rng() % 3));
  const auto pb = random_problem(rng, p, p * v * 2, m);
  std::vector<ds::Schedule> all{ds::OneFOneB{}.build(pb), ds::Interleaved1F1B{v}.build(pb), ds::A2AOverlap{v}.build(pb),
                                ds::ChunkedOverlap{1 + static_cast<int>(rng() % 3), v}.build(pb)};
  for (std::size_t i = 0; i < 4; ++i) {  // and with their sends posted, as colocated_problem sets
    ds::Schedule posted = all[i];
    for (auto& w : posted.workers) w.posted_sends = true;
    all.push_back(std::move(posted));
  }
  const int pe = 2 * ((p + 1) / 2);
  const auto pbe = random_problem(rng, pe, 2 * pe, 2 * pe + 2 * static_cast<int>(rng() % 3));
  all.push_back(ds::DualPipe{}.build(pbe));
  all.push_back(ds::DualPipeV{}.build(pbe));
  auto pba = random_problem(rng, 2 * p, p * (1 + static_cast<int>(rng() % 3)), m + static_cast<int>(rng() % 5));
  for (int i = 0; i < 2 * p; ++i) pba.workers[static_cast<std::size_t>(i)].role = i % 2 ? ds::Role::kFfn : ds::Role::kAttention;
  all.push_back(ds::AFPipe{1 + static_cast<int>(rng() % 4)}.build(pba));
  all.push_back(ds::AFPipe{0, 0, false, false}.build(pba));
  return all;
}

// Every op has exactly its tasks; receives pair with sends per peer in the same order;
// dependencies are ops with a task on the same worker.
void check_structure(const ds::Schedule& s, const ds::LoweredSchedule& low) {
  const std::size_t n = s.ops.size();
  REQUIRE(low.workers.size() == s.workers.size());
  std::vector<int> compute(n, 0), sends(n, 0), recvs(n, 0), collectives(n, 0);
  std::map<std::pair<int, int>, std::vector<int>> sent, received;  // (from, to) -> ops in order
  for (const auto& prog : low.workers) {
    const int w = prog.worker;
    std::set<int> here;
    for (const auto& stream : prog.streams)
      for (const auto& t : stream) here.insert(t.op);
    for (int k = 0; k < ds::kStreams; ++k)
      for (const auto& t : prog.streams[static_cast<std::size_t>(k)]) {
        const ds::Op& o = s.ops[static_cast<std::size_t>(t.op)];
        for (int d : t.deps) REQUIRE(here.count(d) == 1);
        switch (t.kind) {
          case ds::TaskKind::kCompute:
            REQUIRE(!ds::is_comm(o.kind));
            REQUIRE(o.worker == w);
            REQUIRE(static_cast<int>(o.stream) == k);
            ++compute[static_cast<std::size_t>(t.op)];
            break;
          case ds::TaskKind::kSend:
            REQUIRE(o.worker == w);
            REQUIRE(t.peer == o.peer);
            sent[{w, t.peer}].push_back(t.op);
            ++sends[static_cast<std::size_t>(t.op)];
            break;
          case ds::TaskKind::kRecv:
            REQUIRE(o.peer == w);
            REQUIRE(t.peer == o.worker);
            REQUIRE(t.deps.empty());
            received[{t.peer, w}].push_back(t.op);
            ++recvs[static_cast<std::size_t>(t.op)];
            break;
          case ds::TaskKind::kCollective:
            REQUIRE(o.worker == w);
            REQUIRE(o.peer == w);
            ++collectives[static_cast<std::size_t>(t.op)];
            break;
        }
        if (t.kind != ds::TaskKind::kCompute) REQUIRE(k == static_cast<int>(ds::Stream::kComm));
      }
    // Compute streams keep the schedule's order.
    for (int k : {0, 1}) {
      const auto& q = s.order[static_cast<std::size_t>(w)][static_cast<std::size_t>(k)];
      const auto& tasks = prog.streams[static_cast<std::size_t>(k)];
      REQUIRE(q.size() == tasks.size());
      for (std::size_t i = 0; i < q.size(); ++i) REQUIRE(tasks[i].op == q[i]);
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    const ds::Op& o = s.ops[i];
    if (!ds::is_comm(o.kind)) REQUIRE(compute[i] == 1);
    else if (o.peer == o.worker) REQUIRE(collectives[i] == 1);
    else {
      REQUIRE(sends[i] == 1);
      REQUIRE(recvs[i] == 1);
    }
  }
  REQUIRE(sent == received);
}

// The strictest in-order transport: a stream runs its head task when the task's deps
// are done; a send and its receive complete together, only when both head their comm
// streams. Returns the number of tasks that never ran (0: no deadlock).
std::size_t run_in_order_model(const ds::Schedule& s, const ds::LoweredSchedule& low) {
  const std::size_t nw = low.workers.size();
  std::vector<std::array<std::size_t, ds::kStreams>> head(nw, {0, 0, 0});
  // done[w][op]: op's task on worker w finished.
  std::vector<std::vector<char>> done(nw, std::vector<char>(s.ops.size(), 0));
  auto ready = [&](std::size_t w, const ds::Task& t) {
    for (int d : t.deps)
      if (!done[w][static_cast<std::size_t>(d)]) return false;
    return true;
  };
  auto at_head = [&](std::size_t w, int k) -> const ds::Task* {
    const auto& q = low.workers[w].streams[static_cast<std::size_t>(k)];
    return head[w][static_cast<std::size_t>(k)] < q.size() ? &q[head[w][static_cast<std::size_t>(k)]] : nullptr;
  };
  const int comm = static_cast<int>(ds::Stream::kComm);
  for (bool progress = true; progress;) {
    progress = false;
    for (std::size_t w = 0; w < nw; ++w)
      for (int k = 0; k < ds::kStreams; ++k) {
        const ds::Task* t = at_head(w, k);
        if (t == nullptr || !ready(w, *t) || t->kind == ds::TaskKind::kRecv) continue;
        if (t->kind == ds::TaskKind::kSend) {
          const auto v = static_cast<std::size_t>(t->peer);
          const ds::Task* r = at_head(v, comm);
          if (r == nullptr || r->kind != ds::TaskKind::kRecv || r->op != t->op) continue;
          done[v][static_cast<std::size_t>(r->op)] = 1;
          ++head[v][static_cast<std::size_t>(comm)];
        }
        done[w][static_cast<std::size_t>(t->op)] = 1;
        ++head[w][static_cast<std::size_t>(k)];
        progress = true;
      }
  }
  std::size_t left = 0;
  for (std::size_t w = 0; w < nw; ++w)
    for (int k = 0; k < ds::kStreams; ++k)
      left += low.workers[w].streams[static_cast<std::size_t>(k)].size() - head[w][static_cast<std::size_t>(k)];
  return left;
}

}  // namespace

TEST_CASE("lowering: random schedules of every policy lower to matched, deadlock-free programs") {
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    for (const auto& s : random_schedules(seed)) {
      INFO("seed " << seed << " policy " << s.name);
      const auto low = ds::lower(s);
      check_structure(s, low);
      CHECK(run_in_order_model(s, low) == 0);
      // The global order respects every dependency.
      for (std::size_t i = 0; i < s.ops.size(); ++i)
        for (int d : s.ops[i].deps) REQUIRE(low.position[static_cast<std::size_t>(d)] < low.position[i]);
    }
  }
}

TEST_CASE("lowering: the model detects a comm order the peers disagree on (control)") {
  // AF-Pipe with p = 1: A0 sends dispatches to F0 in micro-batch order. Swapping two of
  // F0's receives must make the in-order model stall, so the test above can fail.
  const auto pb = [] {
    auto p = ds::test::uniform_problem(2, 2, 4, {1, 1, 1, 1, 1, 1, true});
    p.workers[0].role = ds::Role::kAttention;
    p.workers[1].role = ds::Role::kFfn;
    for (auto& l : p.layers) l.dispatch_bytes = l.combine_bytes = 1e6;
    return p;
  }();
  const auto s = ds::AFPipe{}.build(pb);
  auto low = ds::lower(s);
  REQUIRE(run_in_order_model(s, low) == 0);
  auto& q = low.workers[1].streams[static_cast<std::size_t>(ds::Stream::kComm)];
  std::vector<std::size_t> recv_at;
  for (std::size_t i = 0; i < q.size(); ++i)
    if (q[i].kind == ds::TaskKind::kRecv) recv_at.push_back(i);
  REQUIRE(recv_at.size() >= 2);
  std::swap(q[recv_at[0]], q[recv_at[1]]);
  CHECK(run_in_order_model(s, low) > 0);
}

TEST_CASE("lowering: a dependency across workers without a transfer is rejected, naming both ops") {
  auto pb = ds::test::uniform_problem(2, 2, 2);
  auto s = ds::OneFOneB{}.build(pb);
  // Make worker 1's first compute op depend directly on worker 0's first compute op.
  const int a = s.order[0][0].front(), b = s.order[1][0].front();
  s.ops[static_cast<std::size_t>(b)].deps.push_back(a);
  try {
    (void)ds::lower(s);
    FAIL("expected a ConfigError");
  } catch (const disagmoe::ConfigError& e) {
    const std::string what = e.what();
    CHECK(what.find("Schedule.ops[" + std::to_string(b) + "].deps") != std::string::npos);
    CHECK(what.find("no transfer") != std::string::npos);
  }
}

TEST_CASE("lowering: describe_op names kind, workers, layer and micro-batch") {
  auto pb = ds::test::uniform_problem(2, 2, 1, {1, 1, 1, 1, 1, 1, true});
  pb.workers[0].role = ds::Role::kAttention;
  pb.workers[1].role = ds::Role::kFfn;
  const auto s = ds::AFPipe{}.build(pb);
  for (std::size_t i = 0; i < s.ops.size(); ++i)
    if (s.ops[i].kind == ds::OpKind::kDispatch && !s.ops[i].backward) {
      CHECK(ds::describe_op(s, static_cast<int>(i)) == "m2n_dispatch (worker S0 -> S1, layer 0, micro-batch 0)");
      break;
    }
}
