// SPDX-License-Identifier: Apache-2.0
/// @file idle_causes.hpp
/// Why each worker idles: every stretch of a simulated step in which no compute op of
/// a worker runs is charged to what the worker waits for, found by following the
/// binding dependency backwards (critical-path attribution, as in Curtsinger and
/// Berger's causal profiling and the critical-path analysis of Yang and Miller,
/// ICDCS 1988): the op that ends the idle stretch started when its last dependency (or
/// the op ahead of it on its stream) finished; that op in turn waited for its own, and
/// so on until the chain reaches the worker's own compute. Each part of the stretch is
/// charged to the op of the chain that ran then: a transfer moving bytes (network), a
/// transfer's message latency, or compute on another worker (imbalance between the
/// sides, or a pipeline's fill and drain). A worker idling behind a busier peer group
/// thus counts as imbalance even while its receive is in flight, and as network only
/// for the span in which the transfer it waits for actually moves bytes.
///
/// A post-pass over SimResult::timings, kept out of the event engine: O(ops + deps).
#pragma once

#include <disagmoe/schedule/comm_links.hpp>
#include <disagmoe/schedule/op.hpp>
#include <disagmoe/schedule/simulator.hpp>

#include <algorithm>
#include <cstddef>
#include <vector>

namespace disagmoe::schedule {

/// Idle seconds of one worker (no compute op runs), by cause. With the worker's busy
/// time they add up to the step: busy + total() = step_seconds.
struct IdleCauses {
  double network_seconds = 0;       ///< behind a transfer moving its bytes
  double latency_seconds = 0;       ///< behind a transfer's message latency (and its calibrated overhead)
  double peer_compute_seconds = 0;  ///< behind another worker's compute: imbalance, fill and drain
  /// Not accounted for by any op of the chain: a ready op queued for host cores
  /// (Network::host_cores), or an op with nothing to wait for that starts late.
  double other_seconds = 0;
  /// Sum of the parts: the worker's idle time.
  [[nodiscard]] double total() const {
    return network_seconds + latency_seconds + peer_compute_seconds + other_seconds;
  }
  IdleCauses& operator+=(const IdleCauses& o) {
    network_seconds += o.network_seconds;
    latency_seconds += o.latency_seconds;
    peer_compute_seconds += o.peer_compute_seconds;
    other_seconds += o.other_seconds;
    return *this;
  }
  IdleCauses& operator*=(double k) {
    network_seconds *= k;
    latency_seconds *= k;
    peer_compute_seconds *= k;
    other_seconds *= k;
    return *this;
  }
};

namespace detail {

// Compute in the simulator's sense: an op that holds the GPU (zero-cost ops are instant).
inline bool holds_gpu(const Op& op) { return !is_comm(op.kind) && op.seconds > 0; }

class IdleAttribution {
 public:
  IdleAttribution(const Schedule& s, const SimResult& r) : s_(s), t_(r.timings), step_(r.step_seconds) {
    // The op ahead of each on its stream (ordered streams only): it binds like a dependency.
    prev_.assign(s.ops.size(), -1);
    for (std::size_t w = 0; w < s.order.size(); ++w)
      for (int k = 0; k < kStreams; ++k) {
        if (k == static_cast<int>(Stream::kComm) && !s.workers[w].in_order_comm) continue;
        int before = -1;  // posted sends keep no turn (outside_stream_order)
        for (const int id : s.order[w][static_cast<std::size_t>(k)]) {
          if (outside_stream_order(s, s.ops[static_cast<std::size_t>(id)])) continue;
          prev_[static_cast<std::size_t>(id)] = before;
          before = id;
        }
      }
  }

  std::vector<IdleCauses> run() {
    const std::size_t nw = s_.workers.size();
    std::vector<IdleCauses> out(nw);
    // Every worker's compute, by start time.
    std::vector<std::vector<int>> compute(nw);
    int last = -1;  // the op that ends the step
    for (std::size_t i = 0; i < s_.ops.size(); ++i) {
      if (t_[i].end < 0) continue;
      if (last < 0 || t_[i].end > t_[static_cast<std::size_t>(last)].end) last = static_cast<int>(i);
      if (holds_gpu(s_.ops[i])) compute[static_cast<std::size_t>(s_.ops[i].worker)].push_back(static_cast<int>(i));
    }
    for (std::size_t w = 0; w < nw; ++w) {
      auto& ops = compute[w];
      std::sort(ops.begin(), ops.end(), [&](int a, int b) { return t_[static_cast<std::size_t>(a)].start < t_[static_cast<std::size_t>(b)].start; });
      double busy_until = 0;  // end of the busy stretch so far
      for (int id : ops) {
        const OpTiming& x = t_[static_cast<std::size_t>(id)];
        if (x.start > busy_until) charge_wait(static_cast<int>(w), blocker(id), busy_until, x.start, out[w]);
        busy_until = std::max(busy_until, x.end);
      }
      // After its last compute the worker waits for the step's last op to end.
      if (step_ > busy_until && last >= 0) charge_wait(static_cast<int>(w), last, busy_until, step_, out[w]);
    }
    return out;
  }

 private:
  // The op whose end let `id` start: its dependency or stream predecessor that ended
  // last (on a tie the first dependency: data, rather than the stream's order).
  int blocker(int id) const {
    int b = -1;
    const auto later = [&](int a) { return b < 0 || t_[static_cast<std::size_t>(a)].end > t_[static_cast<std::size_t>(b)].end; };
    for (int d : s_.ops[static_cast<std::size_t>(id)].deps)
      if (later(d)) b = d;
    if (const int p = prev_[static_cast<std::size_t>(id)]; p >= 0 && later(p)) b = p;
    return b;
  }

  // Charges idle stretch [from, to) of worker `w` along the chain of blockers that
  // starts at `x` (an op ending at or before `to`), back to `from`.
  void charge_wait(int w, int x, double from, double to, IdleCauses& c) const {
    double cursor = to;
    while (cursor > from && x >= 0) {
      const Op& op = s_.ops[static_cast<std::size_t>(x)];
      const OpTiming& tx = t_[static_cast<std::size_t>(x)];
      const double end = std::min(cursor, tx.end), start = std::max(from, tx.start);
      if (end < cursor) c.other_seconds += cursor - std::max(end, from);  // x ended before its successor started
      if (end > start) charge_op(w, op, tx, start, end, c);
      cursor = std::max(from, std::min(cursor, tx.start));
      x = blocker(x);
    }
    if (cursor > from) c.other_seconds += cursor - from;
  }

  // Charges [start, end) ⊆ op's run time to what op was doing then.
  void charge_op(int w, const Op& op, const OpTiming& t, double start, double end, IdleCauses& c) const {
    if (!is_comm(op.kind)) {
      (op.worker != w ? c.peer_compute_seconds : c.other_seconds) += end - start;
      return;
    }
    // The simulator's comm op: its overhead and message latency, then its bytes (simulator.hpp).
    const CommUses u = comm_uses(s_, op);
    bool remote = false;
    for (const auto& x : u) remote = remote || x.resource % 4 < 2;
    const double lat = op.seconds + (u.empty() ? 0 : remote ? s_.network.nic_latency : s_.network.nvlink_latency);
    const double flow = std::clamp(t.start + lat, start, end);
    c.latency_seconds += flow - start;
    c.network_seconds += end - flow;
  }

  const Schedule& s_;
  const std::vector<OpTiming>& t_;
  double step_;
  std::vector<int> prev_;
};

}  // namespace detail

/// IdleCauses of every worker of schedule `s` in its simulation `r` (r = simulate(s),
/// not deadlocked): per worker, busy_seconds + total() = step_seconds (up to rounding of
/// the simulator's own sums). All zero for a deadlocked step, which has no end to wait
/// for. O(ops log ops + deps).
inline std::vector<IdleCauses> idle_causes(const Schedule& s, const SimResult& r) {
  if (r.deadlocked || r.timings.size() != s.ops.size()) return std::vector<IdleCauses>(s.workers.size());
  return detail::IdleAttribution(s, r).run();
}

}  // namespace disagmoe::schedule
