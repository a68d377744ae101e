// SPDX-License-Identifier: Apache-2.0
/// @file timeline.hpp
/// Measured timelines of a lowered schedule and what they say: the trace events of every
/// worker (for the Chrome trace beside the simulated run), step time and exposed
/// communication by the simulator's definition, and the simulator's prediction of the
/// same run calibrated with its measured compute times, all-to-all costs, per-transfer
/// overhead and cores.
///
/// Exposed communication, measured and simulated alike: a transfer is active from the
/// moment its sender posts it until its receiver has it, on both ends; a worker's exposed
/// communication is the time some transfer touching it is active while it computes
/// nothing. Waiting for a peer that is still computing is a bubble, not communication.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/io/chrome_trace.hpp>
#include <disagmoe/runtime/worker_executor.hpp>
#include <disagmoe/schedule/comm_links.hpp>
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
/// `run`. A transfer without its sender's event in `run` is left out. O(events log events).
struct WorkerExposure {
  std::vector<double> exposed;  ///< [worker] seconds some transfer touching it is active while it computes nothing
  std::vector<double> busy;     ///< [worker] seconds it computes (union of its compute ops)
  std::vector<double> active;   ///< [worker] seconds some transfer touching it is active
};

/// Per op of `s`: its interval in `run` where it has one, else (-1, -1). A transfer
/// between workers runs from its sender's post to its receiver's arrival (the sender's
/// end where the receiver is not in `run`); anything else, from its start to its end.
inline std::vector<std::pair<double, double>> op_intervals(const schedule::Schedule& s, const io::TraceRun& run) {
  std::vector<std::pair<double, double>> iv(s.ops.size(), {-1.0, -1.0});
  for (const auto& e : run.events) {
    auto& [start, end] = iv.at(static_cast<std::size_t>(e.op));
    if (!e.receive) start = e.start;
    if (e.receive || end < 0) end = e.end;
  }
  for (auto& x : iv)
    if (x.first < 0 || x.second < 0) x = {-1.0, -1.0};  // a receive whose post is missing
  return iv;
}

inline WorkerExposure worker_exposure(const schedule::Schedule& s, const io::TraceRun& run) {
  const std::size_t nw = s.workers.size();
  std::vector<std::vector<std::pair<double, double>>> busy(nw), comm(nw);
  const auto iv = op_intervals(s, run);
  for (std::size_t i = 0; i < s.ops.size(); ++i) {
    const auto& op = s.ops[i];
    if (iv[i].first < 0) continue;
    if (!schedule::is_comm(op.kind)) busy[static_cast<std::size_t>(op.worker)].push_back(iv[i]);
    else if (op.peer == op.worker) comm[static_cast<std::size_t>(op.worker)].push_back(iv[i]);  // inside a worker
    else
      for (int w : {op.worker, op.peer}) comm[static_cast<std::size_t>(w)].push_back(iv[i]);
  }
  WorkerExposure out;
  for (std::size_t w = 0; w < nw; ++w) {
    out.exposed.push_back(detail::uncovered(comm[w], busy[w]));
    out.busy.push_back(detail::uncovered(busy[w], {}));
    out.active.push_back(detail::uncovered(comm[w], {}));
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

namespace detail {
/// exposed_comm_floor with the workers' compute time `busy` in `run` (WorkerExposure::busy).
inline std::vector<double> exposed_comm_floor(const schedule::Schedule& s, const io::TraceRun& run,
                                              const std::vector<double>& busy) {
  const auto iv = op_intervals(s, run);
  std::vector<double> link_seconds(4 * s.workers.size(), 0.0);
  for (std::size_t i = 0; i < s.ops.size(); ++i)
    if (schedule::is_comm(s.ops[i].kind) && iv[i].first >= 0)
      for (const auto& u : schedule::detail::comm_uses(s, s.ops[i])) {
        const double capacity = schedule::detail::capacity(s, u.resource);
        expect(capacity > 0,
               "Schedule.workers[" + std::to_string(u.resource / 4) + "]." +
                   (u.resource % 4 < 2 ? "nic_bandwidth" : "nvlink_bandwidth"),
               capacity, "a positive bandwidth: op " + std::to_string(i) + " moves bytes over it");
        link_seconds[static_cast<std::size_t>(u.resource)] += u.bytes / capacity;
      }
  std::vector<double> floor(s.workers.size());
  for (std::size_t w = 0; w < floor.size(); ++w) {
    const auto links = link_seconds.begin() + static_cast<std::ptrdiff_t>(4 * w);
    floor[w] = std::max(0.0, *std::max_element(links, links + 4) - busy[w]);
  }
  return floor;
}
}  // namespace detail

/// Per worker of `s`: a floor under its exposed communication in `run`, at the bytes and
/// bandwidths the schedule models. Each of its links (NIC and NVLink, each direction;
/// schedule/comm_links.hpp) carries its bytes at most at its capacity, so some transfer
/// touching the worker is active for at least its busiest link's bytes / capacity; what
/// of that the worker does not spend computing (WorkerExposure::busy) is exposed. So no
/// run of the same transfers exposes less without computing longer (as compute that
/// shares its cores or SMs with the transfers does) or moving fewer bytes. Holds for
/// simulated runs. For a measured run it holds as far as the schedule's bytes are the
/// bytes sent and its bandwidths the emulated network's: the model's bytes are exact with
/// one F-rank per worker but for the backward return's dL/dgate (4 bytes per slot where
/// it counts 8; runtime/disaggregated_options.hpp), and the overload of
/// bottleneck_exposed_comm_floor with timelines takes each sender's posted bytes
/// (`with_measured_bytes`). A worker of uneven ranks then sends its busiest rank's bytes
/// from every rank (Op::rx_scale keeps the model's), so the floor of its receivers can
/// exceed what the run needed. A transfer without its sender's event in `run` is left out
/// (as in worker_exposure: the data-parallel all-reduce the runtime runs after the
/// schedule). O(ops + events log events).
inline std::vector<double> exposed_comm_floor(const schedule::Schedule& s, const io::TraceRun& run) {
  return detail::exposed_comm_floor(s, run, worker_exposure(s, run).busy);
}

/// exposed_comm_floor of the bottleneck worker, the one bottleneck_exposed_comm_seconds
/// reports.
inline double bottleneck_exposed_comm_floor(const schedule::Schedule& s, const io::TraceRun& run) {
  const WorkerExposure x = worker_exposure(s, run);
  if (x.busy.empty()) return 0.0;
  const auto w = std::max_element(x.busy.begin(), x.busy.end()) - x.busy.begin();
  return detail::exposed_comm_floor(s, run, x.busy)[static_cast<std::size_t>(w)];
}

/// `s` with every compute op costing what it measured (ops not measured keep their
/// cost), so that simulating it predicts the measured run from its own op times. The
/// cost is the op's CPU time where `timelines` has it (the simulator itself slows
/// compute ops that overlap on a worker), else its wall time in `run`.
inline schedule::Schedule calibrated_compute(schedule::Schedule s, const io::TraceRun& run,
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

/// True for the transfers between workers that `comm_overhead_seconds` prices: every comm
/// op but the all-to-alls inside a worker and the data-parallel all-reduce.
inline bool is_worker_transfer(schedule::OpKind k) {
  return schedule::is_comm(k) && k != schedule::OpKind::kAllReduce && k != schedule::OpKind::kAllToAll;
}

/// `s` with every transfer between workers moving the bytes its sender measured
/// (MeasuredOp::bytes, where `timelines` has them: a worker's busiest rank's,
/// runtime/rank_timelines.hpp) instead of the schedule's model, which counts a token's
/// rows to min(k + shared, N) F-ranks where send-once dispatch sends them to the ranks its
/// experts are on, fewer when two share one. A message that travels beside a channel's
/// hand-off counts with the op whose start posts it, which the simulator sends to that
/// op's peer: the residual with A_l's dispatch to F_l, as the model counts it, and dL/dy
/// with A_{l+1}'s backward dispatch to F_l, where the model has F_l return it to A_l (the
/// same bytes, another link). The all-to-alls inside a worker keep the model's bytes:
/// their measured duration is their cost already (`calibrated_all_to_alls`), and their
/// busiest rank's bytes, sent by every GPU of the simulator's representative worker,
/// would load every receiving link with them (on 4 ranks of one stage, A2A overlap's
/// prediction moved from +9.7% to +14.4% with them). So does the data-parallel
/// all-reduce, which the runtime runs after the schedule.
inline schedule::Schedule with_measured_bytes(schedule::Schedule s,
                                              std::span<const std::vector<MeasuredOp>> timelines) {
  for (std::size_t i = 0; i < s.ops.size(); ++i) {
    auto& op = s.ops[i];
    const auto w = static_cast<std::size_t>(op.worker);
    if (!is_worker_transfer(op.kind) || w >= timelines.size()) continue;
    const double measured = timelines[w].at(i).bytes;
    if (measured >= 0) op.bytes = measured;
  }
  return s;
}

/// bottleneck_exposed_comm_floor at the bytes each transfer's sender posted in the run
/// (`with_measured_bytes` of its merged `timelines`).
inline double bottleneck_exposed_comm_floor(const schedule::Schedule& s, const io::TraceRun& run,
                                            std::span<const std::vector<MeasuredOp>> timelines) {
  return bottleneck_exposed_comm_floor(with_measured_bytes(s, timelines), run);
}

/// `s` with `o` added to the overhead (comm `Op::seconds`) of every transfer between workers.
inline schedule::Schedule with_transfer_overhead(schedule::Schedule s, double o) {
  for (auto& op : s.ops)
    if (is_worker_transfer(op.kind)) op.seconds += o;
  return s;
}

/// What a transfer between workers costs beyond the network model's latency and bytes /
/// bandwidth: the transport's and the token kernels' work on the comm stream and thread
/// wake-ups (LogGP's overhead o). The o that, added to every such transfer's latency
/// (`with_transfer_overhead`), makes the median of them in `measured` last as long as it
/// does in the simulation of `s` (whose compute ops should already be calibrated): the
/// simulation keeps its contention model, and a median is not moved by the minority of
/// transfers that also waited for their receiver. All-to-alls inside a worker are left
/// out: they cost what they measured (`calibrated_all_to_alls`). Bisection: the simulated
/// durations grow with the latency. 0 without such transfers, or when the model is
/// already slower. Cost: about 60 simulations of `s`.
inline double comm_overhead_seconds(const schedule::Schedule& s, const io::TraceRun& measured) {
  const auto m = op_intervals(s, measured);
  std::vector<std::size_t> ids;
  double longest = 0;
  for (std::size_t i = 0; i < s.ops.size(); ++i)
    if (is_worker_transfer(s.ops[i].kind) && m[i].first >= 0) {
      ids.push_back(i);
      longest = std::max(longest, m[i].second - m[i].first);
    }
  if (ids.empty()) return 0.0;
  // Median over the transfers of measured minus simulated duration, at overhead o.
  auto gap = [&](double o) {
    const schedule::Schedule t = with_transfer_overhead(s, o);
    const auto sim = op_intervals(t, io::simulated_run(t, schedule::simulate(t)));
    std::vector<double> d;
    for (std::size_t i : ids)
      if (sim[i].first >= 0) d.push_back((m[i].second - m[i].first) - (sim[i].second - sim[i].first));
    if (d.empty()) return 0.0;
    const auto mid = d.begin() + static_cast<std::ptrdiff_t>(d.size() / 2);
    std::nth_element(d.begin(), mid, d.end());
    return *mid;
  };
  if (gap(0.0) <= 0) return 0.0;
  double lo = 0, hi = longest;
  if (gap(hi) > 0) return hi;
  for (int it = 0; it < 60 && hi - lo > 1e-12; ++it) {
    const double mid = 0.5 * (lo + hi);
    (gap(mid) > 0 ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

/// `s` with every all-to-all inside a worker costing what it measured in `measured`: the
/// part of its measured duration (from its worker's last rank's entry to its end) beyond
/// its duration in the simulation of `s` becomes the op's own overhead (a comm op's
/// `seconds`, added to its latency; at least 0). An all-to-all waits for no other worker,
/// so, as a compute op's, its measured time is its cost: its ranks' token kernels,
/// protocol rounds and thread wake-ups, which the network model does not see. One
/// simulation of `s`.
inline schedule::Schedule calibrated_all_to_alls(schedule::Schedule s, const io::TraceRun& measured) {
  for (auto& op : s.ops)  // priced afresh: an already calibrated schedule is not calibrated twice
    if (op.kind == schedule::OpKind::kAllToAll) op.seconds = 0;
  const auto m = op_intervals(s, measured);
  const auto sim = op_intervals(s, io::simulated_run(s, schedule::simulate(s)));
  for (std::size_t w = 0; w < s.workers.size() && w < s.order.size(); ++w) {
    const auto& comm = s.order[w][static_cast<std::size_t>(schedule::Stream::kComm)];
    double previous_end = -1;  // of the comm op before, on an in-order comm stream
    for (const int id : comm) {
      const auto i = static_cast<std::size_t>(id);
      if (s.ops[i].kind == schedule::OpKind::kAllToAll && m[i].first >= 0 && sim[i].first >= 0) {
        // The simulation starts it once the stream's op before it is done; the run may
        // have posted it earlier, while that op was still in flight.
        const double start = std::max(m[i].first, std::min(previous_end, m[i].second));
        s.ops[i].seconds = std::max(0.0, (m[i].second - start) - (sim[i].second - sim[i].first));
      }
      if (!schedule::outside_stream_order(s, s.ops[i])) previous_end = m[i].second;
    }
  }
  return s;
}

/// The share of a core that the comm threads took while their transfers were active: the
/// comm ops' CPU time in `timelines` (MeasuredOp::cpu: polling, the transport, the token
/// kernels) over the time some transfer touched their worker in `run`, summed over the
/// workers. On a host it is what comm kernels' SMs are on a GPU: compute that shares the
/// cores with the comm threads runs at (1 - share) while a transfer touches its worker.
/// 0 without measured comm CPU or transfers; at most 0.9.
inline double comm_cpu_share(const schedule::Schedule& s, const io::TraceRun& run,
                             std::span<const std::vector<MeasuredOp>> timelines) {
  const auto active = worker_exposure(s, run).active;
  double cpu = 0, seconds = 0;
  for (std::size_t w = 0; w < timelines.size() && w < active.size(); ++w) {
    double x = 0;
    for (std::size_t i = 0; i < s.ops.size() && i < timelines[w].size(); ++i)
      if (schedule::is_comm(s.ops[i].kind)) x += std::max(0.0, timelines[w][i].cpu);
    if (active[w] <= 0) continue;
    cpu += x;
    seconds += active[w];
  }
  return seconds > 0 ? std::min(0.9, cpu / seconds) : 0.0;
}

/// `s` calibrated from its measured `run`: compute ops at their measured cost
/// (`calibrated_compute`), transfers at their measured bytes (`with_measured_bytes`), at
/// most `host_cores` compute ops at once across workers (the cores the run's worker
/// threads shared; 0: a core each) and slowed by the comm threads' share of their cores
/// while transfers touch their worker (`comm_cpu_share`, with host cores only: the
/// simulator's comm-SM rule), every transfer between workers slowed by the measured
/// per-transfer overhead (`comm_overhead_seconds`) and every all-to-all at its measured
/// cost (`calibrated_all_to_alls`), so that the simulation predicts the run from its own
/// op times. The data-parallel all-reduce, which the runtime runs after the schedule,
/// keeps its modelled cost.
inline schedule::Schedule calibrated(schedule::Schedule s, const io::TraceRun& run,
                                     std::span<const std::vector<MeasuredOp>> timelines = {}, int host_cores = 0) {
  for (auto& w : s.workers) w.posted_sends = true;  // the runtime posts a send and moves on
  s = with_measured_bytes(calibrated_compute(std::move(s), run, timelines), timelines);
  s.network.host_cores = host_cores;
  if (host_cores > 0) {
    s.network.comm_sm_fraction = comm_cpu_share(s, run, timelines);
    s.network.rdma_sm_fraction = 0;
    for (auto& op : s.ops) op.uses_sms = schedule::is_comm(op.kind);
  }
  const double o = comm_overhead_seconds(s, run);
  return calibrated_all_to_alls(with_transfer_overhead(std::move(s), o), run);
}

}  // namespace disagmoe::runtime
