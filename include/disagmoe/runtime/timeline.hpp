// SPDX-License-Identifier: Apache-2.0
/// @file timeline.hpp
/// Measured timelines of a lowered schedule and what they say: the trace events of every
/// worker (for the Chrome trace beside the simulated run), step time and exposed
/// communication by the simulator's definition, and the simulator's prediction of the
/// same run calibrated with the measured compute times.
///
/// Exposed communication, measured and simulated alike: a transfer is active from the
/// moment its sender posts it until its receiver has it, on both ends; a worker's exposed
/// communication is the time some transfer touching it is active while it computes
/// nothing. Waiting for a peer that is still computing is a bubble, not communication.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/io/chrome_trace.hpp>
#include <disagmoe/runtime/worker_executor.hpp>
#include <disagmoe/schedule/lowering.hpp>
#include <disagmoe/schedule/simulator.hpp>

#include <algorithm>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace disagmoe::runtime {

/// Per-worker measured timelines (timelines[w][op], one epoch for all) as a trace run.
inline io::TraceRun measured_run(const schedule::LoweredSchedule& low, std::span<const std::vector<MeasuredOp>> timelines,
                                 std::string label = "measured") {
  expect(timelines.size() == low.workers.size(), "timelines.size()", timelines.size(),
         "one timeline per worker (" + std::to_string(low.workers.size()) + ")");
  io::TraceRun run{std::move(label), 0, {}};
  for (const auto& prog : low.workers)
    for (int k = 0; k < schedule::kStreams; ++k)
      for (const auto& t : prog.streams[static_cast<std::size_t>(k)]) {
        const MeasuredOp& m = timelines[static_cast<std::size_t>(prog.worker)].at(static_cast<std::size_t>(t.op));
        if (m.start < 0 || m.end < 0) continue;
        run.events.push_back({prog.worker, t.op, static_cast<schedule::Stream>(k), m.start, m.end,
                              t.kind == schedule::TaskKind::kRecv});
        run.step_seconds = std::max(run.step_seconds, m.end);
      }
  return run;
}

namespace detail {

/// Total length of the union of `iv` minus its overlap with the union of `busy`.
inline double uncovered(std::vector<std::pair<double, double>> iv, std::vector<std::pair<double, double>> busy) {
  auto merge = [](std::vector<std::pair<double, double>>& v) {
    std::sort(v.begin(), v.end());
    std::vector<std::pair<double, double>> out;
    for (const auto& x : v) {
      if (x.second <= x.first) continue;
      if (!out.empty() && x.first <= out.back().second) out.back().second = std::max(out.back().second, x.second);
      else out.push_back(x);
    }
    v = std::move(out);
  };
  merge(iv);
  merge(busy);
  double total = 0;
  std::size_t b = 0;
  for (const auto& [lo, hi] : iv) {
    double at = lo;
    while (b < busy.size() && busy[b].second <= at) ++b;
    for (std::size_t k = b; k < busy.size() && busy[k].first < hi; ++k) {
      if (busy[k].first > at) total += busy[k].first - at;
      at = std::max(at, busy[k].second);
    }
    if (at < hi) total += hi - at;
  }
  return total;
}

}  // namespace detail

/// Per worker of `s`: exposed communication (file comment) and compute busy time in
/// `run`. A transfer without both ends in `run` is left out. O(events log events).
struct WorkerExposure {
  std::vector<double> exposed;  ///< [worker] seconds some transfer touching it is active while it computes nothing
  std::vector<double> busy;     ///< [worker] seconds it computes (union of its compute ops)
};

inline WorkerExposure worker_exposure(const schedule::Schedule& s, const io::TraceRun& run) {
  const std::size_t nw = s.workers.size();
  std::vector<double> post(s.ops.size(), -1), arrive(s.ops.size(), -1);
  std::vector<std::vector<std::pair<double, double>>> busy(nw), comm(nw);
  for (const auto& e : run.events) {
    const auto& op = s.ops.at(static_cast<std::size_t>(e.op));
    if (!schedule::is_comm(op.kind)) {
      busy[static_cast<std::size_t>(e.worker)].emplace_back(e.start, e.end);
    } else if (op.peer == op.worker) {  // inside a worker
      comm[static_cast<std::size_t>(e.worker)].emplace_back(e.start, e.end);
    } else {
      if (!e.receive) post[static_cast<std::size_t>(e.op)] = e.start;
      if (e.receive || arrive[static_cast<std::size_t>(e.op)] < 0) arrive[static_cast<std::size_t>(e.op)] = e.end;
    }
  }
  for (std::size_t i = 0; i < s.ops.size(); ++i) {
    const auto& op = s.ops[i];
    if (!schedule::is_comm(op.kind) || op.peer == op.worker || post[i] < 0) continue;
    for (int w : {op.worker, op.peer}) comm[static_cast<std::size_t>(w)].emplace_back(post[i], arrive[i]);
  }
  WorkerExposure out;
  for (std::size_t w = 0; w < nw; ++w) {
    out.exposed.push_back(detail::uncovered(comm[w], busy[w]));
    out.busy.push_back(detail::uncovered(busy[w], {}));
  }
  return out;
}

/// Mean over workers of exposed communication (file comment) in `run` of `s`.
inline double exposed_comm_seconds(const schedule::Schedule& s, const io::TraceRun& run) {
  const WorkerExposure x = worker_exposure(s, run);
  double total = 0;
  for (double e : x.exposed) total += e;
  return x.exposed.empty() ? 0.0 : total / static_cast<double>(x.exposed.size());
}

/// Exposed communication of the bottleneck worker, the one that computes longest (ties:
/// the first): the communication that lengthens the step. An under-loaded worker that
/// waits on a transfer while the bottleneck computes (AF-Pipe's lighter side) adds to
/// the mean of exposed_comm_seconds but not to this.
inline double bottleneck_exposed_comm_seconds(const schedule::Schedule& s, const io::TraceRun& run) {
  const WorkerExposure x = worker_exposure(s, run);
  if (x.busy.empty()) return 0.0;
  const auto w = std::max_element(x.busy.begin(), x.busy.end()) - x.busy.begin();
  return x.exposed[static_cast<std::size_t>(w)];
}

/// `s` with every compute op costing what it measured (ops not measured keep their
/// cost), so that simulating it predicts the measured run from its own op times. The
/// cost is the op's CPU time where `timelines` has it (the simulator itself slows
/// compute ops that overlap on a worker), else its wall time in `run`.
inline schedule::Schedule calibrated(schedule::Schedule s, const io::TraceRun& run,
                                     std::span<const std::vector<MeasuredOp>> timelines = {}) {
  for (const auto& e : run.events) {
    auto& op = s.ops.at(static_cast<std::size_t>(e.op));
    if (schedule::is_comm(op.kind)) continue;
    const double cpu = static_cast<std::size_t>(e.worker) < timelines.size()
                           ? timelines[static_cast<std::size_t>(e.worker)].at(static_cast<std::size_t>(e.op)).cpu
                           : -1.0;
    op.seconds = std::max(0.0, cpu >= 0 ? cpu : e.end - e.start);
  }
  return s;
}

}  // namespace disagmoe::runtime
