// SPDX-License-Identifier: Apache-2.0
/// @file lowering.hpp
/// Lowers a `Schedule` (what the simulator runs) to one program per worker that real
/// workers can run: the receives made explicit, every dependency local to its worker,
/// and one communication order that all peers agree on.
///
/// A schedule's comm op lives on its sender only and its receiver learns of it through
/// cross-worker dependencies; AF-Pipe's workers even start comm ops out of their listed
/// order (`Worker::in_order_comm = false`). A transport that matches messages by issue
/// order per peer (NCCL; MPI per tag) needs both ends to post the same transfers in the
/// same order. The lowering therefore fixes one global order of all ops: the order in
/// which the simulator starts them (ties broken topologically), which respects every
/// dependency and every in-order stream. Each worker's comm stream lists its sends,
/// receives and collectives in that order; compute streams keep the schedule's order.
///
/// Why that cannot deadlock, even on a rendezvous transport that blocks a whole comm
/// stream until its head transfer is matched: take the unfinished task that comes first
/// in the global order. Everything before it is finished, so its dependencies are; if it
/// is a transfer, the matching task on the peer has the same position (it is the same
/// op), so it heads the peer's comm stream too, and the pair completes.
/// The argument rests on the simulator starting every op after its dependencies end and
/// in-order streams in their listed order, on (start time, topological index) being a
/// total order, and on every rank lowering to the same bits (the same build; the
/// disaggregated trainer checks a fingerprint of the order across ranks).
/// (tests/schedule/test_lowering.cpp checks this with such a model on random schedules
/// of every policy.)
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/schedule/op.hpp>
#include <disagmoe/schedule/simulator.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <numeric>
#include <queue>
#include <string>
#include <vector>

namespace disagmoe::schedule {

/// What a worker does for one op.
enum class TaskKind : std::uint8_t {
  kCompute,     ///< a compute op of this worker
  kSend,        ///< this worker sends the op's transfer to `peer`
  kRecv,        ///< this worker receives the op's transfer from `peer`
  kCollective,  ///< a comm op inside this worker (all-to-all, all-reduce)
};

/// One entry of a worker's stream. `deps` are ops whose task on this same worker must
/// finish first (a compute op, a send, or the receive of a transfer from a peer).
struct Task {
  int op = -1;
  TaskKind kind = TaskKind::kCompute;
  int peer = -1;          ///< kSend: the receiver; kRecv: the sender; else -1
  std::vector<int> deps;
};

/// What one worker runs: per stream, its tasks in issue order.
struct WorkerProgram {
  int worker = 0;
  std::array<std::vector<Task>, kStreams> streams;
};

/// The lowered schedule: one program per worker and the agreed global order
/// (`position[op]`: rank of the op in it).
struct LoweredSchedule {
  std::vector<WorkerProgram> workers;
  std::vector<int> position;
};

/// "attn_fwd (worker A1, layer 3, micro-batch 2)": how errors and traces name an op.
inline std::string describe_op(const Schedule& s, int id) {
  const Op& o = s.ops.at(static_cast<std::size_t>(id));
  std::string out = std::string(to_string(o.kind)) + (o.backward && is_comm(o.kind) ? " (backward, " : " (") +
                    "worker " + s.workers.at(static_cast<std::size_t>(o.worker)).name;
  if (is_comm(o.kind) && o.peer != o.worker) out += " -> " + s.workers.at(static_cast<std::size_t>(o.peer)).name;
  if (o.layer >= 0) out += ", layer " + std::to_string(o.layer);
  if (o.micro_batch >= 0) out += ", micro-batch " + std::to_string(o.micro_batch);
  return out + ")";
}

namespace detail {

/// True when op `o` has a task on worker `consumer`: it runs there, or it is a
/// transfer to it (the receive).
inline bool reaches(const Op& o, int consumer) {
  return o.worker == consumer || (is_comm(o.kind) && o.peer == consumer);
}

/// Deps of op `id` as seen on worker `w`; ConfigError for a dependency on another
/// worker that reaches `w` through no transfer.
inline std::vector<int> local_deps(const Schedule& s, int id, int w) {
  const Op& o = s.ops[static_cast<std::size_t>(id)];
  for (int d : o.deps)
    if (!reaches(s.ops[static_cast<std::size_t>(d)], w))
      fail("Schedule.ops[" + std::to_string(id) + "].deps", d,
           "an op of worker " + s.workers[static_cast<std::size_t>(w)].name +
               " or a transfer to it (" + describe_op(s, id) + " depends on " + describe_op(s, d) +
               ", which no transfer brings to that worker)");
  return o.deps;
}

/// Topological index of every op over dependencies and in-order streams (Kahn, FIFO).
inline std::vector<int> topological_index(const Schedule& s) {
  const std::size_t n = s.ops.size();
  std::vector<std::vector<int>> succ(n);
  std::vector<int> indeg(n, 0);
  auto edge = [&](int from, int to) {
    succ[static_cast<std::size_t>(from)].push_back(to);
    ++indeg[static_cast<std::size_t>(to)];
  };
  for (std::size_t i = 0; i < n; ++i)
    for (int d : s.ops[i].deps) edge(d, static_cast<int>(i));
  for (std::size_t w = 0; w < s.workers.size(); ++w)
    for (int k = 0; k < kStreams; ++k) {
      if (k == static_cast<int>(Stream::kComm) && !s.workers[w].in_order_comm) continue;
      int previous = -1;  // ops outside the stream's order keep no turn
      for (int id : s.order[w][static_cast<std::size_t>(k)]) {
        if (outside_stream_order(s, s.ops[static_cast<std::size_t>(id)])) continue;
        if (previous >= 0) edge(previous, id);
        previous = id;
      }
    }
  std::queue<int> ready;
  for (std::size_t i = 0; i < n; ++i)
    if (indeg[i] == 0) ready.push(static_cast<int>(i));
  std::vector<int> index(n, -1);
  int next = 0;
  while (!ready.empty()) {
    const int i = ready.front();
    ready.pop();
    index[static_cast<std::size_t>(i)] = next++;
    for (int k : succ[static_cast<std::size_t>(i)])
      if (--indeg[static_cast<std::size_t>(k)] == 0) ready.push(k);
  }
  expect(next == static_cast<int>(n), "Schedule", s.name, "acyclic dependencies and stream orders");
  return index;
}

}  // namespace detail

/// Lowers `s` (see the file comment). ConfigError when `s` is invalid, deadlocks in the
/// simulator, or has a dependency that no transfer carries between workers.
/// O(ops log ops + deps) plus one simulation.
inline LoweredSchedule lower(const Schedule& s) {
  validate(s);
  // The runtime's workers run their compute streams in order and have no stream for
  // posted compute (AF-Pipe's vocabulary-parallel head, which the runtime does not run).
  for (std::size_t i = 0; i < s.ops.size(); ++i)
    if (s.ops[i].posted && !is_comm(s.ops[i].kind))
      fail("Schedule.ops[" + std::to_string(i) + "].posted", true,
           "no posted compute: the runtime runs each compute stream in order");
  const SimResult sim = simulate(s);
  expect(!sim.deadlocked, "Schedule " + s.name, "deadlocks", "a schedule that completes:\n" + sim.deadlock_report);
  const std::vector<int> topo = detail::topological_index(s);
  const std::size_t n = s.ops.size();
  std::vector<int> by_start(n);
  std::iota(by_start.begin(), by_start.end(), 0);
  std::sort(by_start.begin(), by_start.end(), [&](int a, int b) {
    const double ta = sim.timings[static_cast<std::size_t>(a)].start, tb = sim.timings[static_cast<std::size_t>(b)].start;
    return ta != tb ? ta < tb : topo[static_cast<std::size_t>(a)] < topo[static_cast<std::size_t>(b)];
  });
  LoweredSchedule out;
  out.position.assign(n, 0);
  for (std::size_t i = 0; i < n; ++i) out.position[static_cast<std::size_t>(by_start[i])] = static_cast<int>(i);

  const int nw = static_cast<int>(s.workers.size());
  out.workers.resize(static_cast<std::size_t>(nw));
  for (int w = 0; w < nw; ++w) {
    WorkerProgram& prog = out.workers[static_cast<std::size_t>(w)];
    prog.worker = w;
    for (int k : {0, 1})
      for (int id : s.order[static_cast<std::size_t>(w)][static_cast<std::size_t>(k)])
        prog.streams[static_cast<std::size_t>(k)].push_back({id, TaskKind::kCompute, -1, detail::local_deps(s, id, w)});
  }
  // Comm tasks in the global order: each transfer once on its sender and its receiver.
  for (int id : by_start) {
    const Op& o = s.ops[static_cast<std::size_t>(id)];
    if (!is_comm(o.kind)) continue;
    auto& sender = out.workers[static_cast<std::size_t>(o.worker)].streams[static_cast<std::size_t>(Stream::kComm)];
    if (o.peer == o.worker) {
      sender.push_back({id, TaskKind::kCollective, -1, detail::local_deps(s, id, o.worker)});
      continue;
    }
    sender.push_back({id, TaskKind::kSend, o.peer, detail::local_deps(s, id, o.worker)});
    out.workers[static_cast<std::size_t>(o.peer)].streams[static_cast<std::size_t>(Stream::kComm)].push_back(
        {id, TaskKind::kRecv, o.worker, {}});
  }
  return out;
}

}  // namespace disagmoe::schedule
