// SPDX-License-Identifier: Apache-2.0
// The reference simulator: the first implementation of schedule/simulator.hpp (binary
// heap of versioned events, per-op std::vector bookkeeping), kept verbatim as a second,
// independent implementation of the same event rules (the mapping of comm bytes onto
// links, detail::comm_uses, is shared). The fast simulator must agree with it
// bit for bit (test_reference.cpp); it is slow (~1 µs per op) and lives in the tests only.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/schedule/comm_links.hpp>
#include <disagmoe/schedule/op.hpp>
#include <disagmoe/schedule/simulator.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <queue>
#include <sstream>
#include <string>
#include <vector>

namespace disagmoe::schedule::test {

namespace reference_detail {

// The byte mapping of comm ops onto links (detail::comm_uses, detail::capacity) is
// shared with the fast simulator; what this file checks is the event engine.
using detail::capacity;
using detail::comm_uses;
using detail::CommUses;

class Simulator {
 public:
  explicit Simulator(const Schedule& s) : s_(s) {}

  SimResult run() {
    validate(s_);
    const std::size_t n = s_.ops.size();
    const std::size_t nw = s_.workers.size();
    st_.assign(n, {});
    res_.timings.assign(n, {});
    res_.ops = n;
    ws_.assign(nw, {});
    flows_on_.assign(4 * nw, {});
    // Reverse edges and dep counts.
    std::vector<int> count(n + 1, 0);
    for (std::size_t i = 0; i < n; ++i) {
      st_[i].deps_left = static_cast<int>(s_.ops[i].deps.size());
      for (int d : s_.ops[i].deps) ++count[static_cast<std::size_t>(d) + 1];
    }
    for (std::size_t i = 0; i < n; ++i) count[i + 1] += count[i];
    succ_start_ = count;
    succ_.assign(static_cast<std::size_t>(count[n]), 0);
    for (std::size_t i = 0; i < n; ++i)
      for (int d : s_.ops[i].deps) succ_[static_cast<std::size_t>(count[static_cast<std::size_t>(d)]++)] = static_cast<int>(i);
    for (std::size_t i = 0; i < n; ++i) {
      const Op& op = s_.ops[i];
      if (!is_comm(op.kind)) continue;
      const CommUses cu = comm_uses(s_, op);
      if (cu.empty() && op.seconds <= 0) continue;
      st_[i].uses = static_cast<int>(uses_.size());
      uses_.push_back(cu);
      for (const auto& u : cu)
        expect(capacity(s_, u.resource) > 0, "Schedule.workers[" + std::to_string(u.resource / 4) + "]." +
               (u.resource % 4 < 2 ? "nic_bandwidth" : "nvlink_bandwidth"), 0.0,
               "a positive bandwidth: op " + std::to_string(i) + " (" + std::string(to_string(op.kind)) + ") moves bytes over it");
    }
    head_.assign(nw, {0, 0, 0});
    for (std::size_t w = 0; w < nw; ++w) {
      for (int k = 0; k < kStreams; ++k) try_start_head(static_cast<int>(w), k);
      for (int k = 0; k < kStreams; ++k)
        for (int id : s_.order[w][static_cast<std::size_t>(k)])
          if (outside_stream_order(s_, s_.ops[static_cast<std::size_t>(id)])) try_start(id);
    }
    while (!events_.empty()) {
      const Event e = events_.top();
      events_.pop();
      auto& o = st_[static_cast<std::size_t>(e.op)];
      if (e.version != o.version || o.state == kDone) continue;
      now_ = e.time;
      if (o.state == kLatency) begin_flow(e.op);
      else finish(e.op);
    }
    return finalize();
  }

 private:
  enum State : std::uint8_t { kWaiting, kLatency, kRunning, kDone };
  struct OpState {
    int deps_left = 0;
    State state = kWaiting;
    std::uint32_t version = 0;
    double left = 1;      // fraction of work left
    double rate = 0;      // fraction per second
    double since = 0;     // time `left` was last updated
    int uses = -1;        // index into uses_ for comm ops that move bytes
  };
  struct WorkerState {
    std::vector<int> compute;  // running compute ops
    int comm = 0;              // comm ops (latency or flow) touching the worker
    int sm_comm = 0;           // of which use SMs
    int rdma_comm = 0;         // of which are RDMA transfers taxed by rdma_sm_fraction
    double mark = 0;
    WorkerMetrics m;
    double mem = 0;
  };
  struct Event {
    double time;
    int op;
    std::uint32_t version;
    bool operator>(const Event& o) const { return time > o.time || (time == o.time && op > o.op); }
  };

  const CommUses& uses_of(int id) const {
    return uses_[static_cast<std::size_t>(st_[static_cast<std::size_t>(id)].uses)];
  }

  void touch(int w) {
    auto& k = ws_[static_cast<std::size_t>(w)];
    const double dt = now_ - k.mark;
    if (dt > 0) {
      if (!k.compute.empty()) k.m.busy_seconds += dt;
      if (k.comm > 0) {
        k.m.comm_seconds += dt;
        if (k.compute.empty()) k.m.exposed_comm_seconds += dt;
      }
    }
    k.mark = now_;
  }

  bool is_head(int id) const {
    const Op& op = s_.ops[static_cast<std::size_t>(id)];
    const auto w = static_cast<std::size_t>(op.worker);
    const auto k = static_cast<std::size_t>(op.stream);
    if (outside_stream_order(s_, op)) return true;
    const auto& q = s_.order[w][k];
    return head_[w][k] < q.size() && q[head_[w][k]] == id;
  }

  void try_start_head(int w, int k) {
    const auto& q = s_.order[static_cast<std::size_t>(w)][static_cast<std::size_t>(k)];
    if (k == 2 && !s_.workers[static_cast<std::size_t>(w)].in_order_comm) return;
    std::size_t& h = head_[static_cast<std::size_t>(w)][static_cast<std::size_t>(k)];
    while (h < q.size() && outside_stream_order(s_, s_.ops[static_cast<std::size_t>(q[h])]))
      ++h;  // posted sends
    if (h < q.size()) try_start(q[h]);
  }

  void try_start(int id) {
    auto& o = st_[static_cast<std::size_t>(id)];
    if (o.state != kWaiting || o.deps_left > 0 || !is_head(id)) return;
    const Op& op = s_.ops[static_cast<std::size_t>(id)];
    res_.timings[static_cast<std::size_t>(id)].start = now_;
    auto& wk = ws_[static_cast<std::size_t>(op.worker)];
    wk.mem += op.alloc_bytes;
    wk.m.peak_activation_bytes = std::max(wk.m.peak_activation_bytes, wk.mem);
    if (!is_comm(op.kind)) {
      if (op.seconds <= 0) return instant(id);
      touch(op.worker);
      o.state = kRunning;
      o.left = 1;
      o.since = now_;
      wk.compute.push_back(id);
      rerate_compute(op.worker);
      return;
    }
    if (o.uses < 0) return instant(id);
    const bool rdma = !op.uses_sms && s_.network.rdma_sm_fraction > 0;
    touch(op.worker);
    ++wk.comm;
    if (op.uses_sms) ++wk.sm_comm;
    if (rdma) ++wk.rdma_comm;
    if (op.peer != op.worker) {
      touch(op.peer);
      auto& pk = ws_[static_cast<std::size_t>(op.peer)];
      ++pk.comm;
      if (op.uses_sms) ++pk.sm_comm;
      if (rdma) ++pk.rdma_comm;
    }
    if (op.uses_sms || rdma) {
      rerate_compute(op.worker);
      if (op.peer != op.worker) rerate_compute(op.peer);
    }
    bool remote = false;
    for (const auto& u : uses_of(id)) remote = remote || u.resource % 4 < 2;
    const double lat =  // its overhead, then the latency of a message that moves bytes
        op.seconds + (uses_of(id).empty() ? 0.0 : remote ? s_.network.nic_latency : s_.network.nvlink_latency);
    o.state = kLatency;
    push(id, now_ + lat);
  }

  // Zero-cost ops finish through the event queue, not recursively, so long chains of
  // them cannot overflow the stack.
  void instant(int id) {
    st_[static_cast<std::size_t>(id)].state = kRunning;
    push(id, now_);
  }

  void push(int id, double t) {
    auto& o = st_[static_cast<std::size_t>(id)];
    ++o.version;
    events_.push({t, id, o.version});
  }

  void begin_flow(int id) {
    auto& o = st_[static_cast<std::size_t>(id)];
    o.state = kRunning;
    if (uses_of(id).empty()) return push(id, now_);
    o.left = 1;
    o.since = now_;
    for (const auto& u : uses_of(id)) flows_on_[static_cast<std::size_t>(u.resource)].push_back(id);
    rerate_flows(uses_of(id));
  }

  void advance(int id) {
    auto& o = st_[static_cast<std::size_t>(id)];
    o.left = std::max(0.0, o.left - o.rate * (now_ - o.since));
    o.since = now_;
  }

  void rerate_compute(int w) {
    const auto& k = ws_[static_cast<std::size_t>(w)];
    const double share = k.compute.empty() ? 0 : 1.0 / static_cast<double>(k.compute.size());
    double slow = k.sm_comm > 0 ? 1.0 - s_.network.comm_sm_fraction : 1.0;
    if (k.rdma_comm > 0) slow -= s_.network.rdma_sm_fraction;
    for (int id : k.compute) {
      advance(id);
      auto& o = st_[static_cast<std::size_t>(id)];
      const double rate = share * slow / s_.ops[static_cast<std::size_t>(id)].seconds;
      if (rate == o.rate) continue;  // its pending event is still exact
      o.rate = rate;
      push(id, now_ + o.left / o.rate);
    }
  }

  void rerate_flows(const CommUses& uses) {
    auto& ids = scratch_;
    ids.clear();
    for (const auto& u : uses)
      for (int id : flows_on_[static_cast<std::size_t>(u.resource)]) ids.push_back(id);
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    for (int id : ids) {
      advance(id);
      auto& o = st_[static_cast<std::size_t>(id)];
      double rate = std::numeric_limits<double>::infinity();
      for (const auto& u : uses_of(id)) {
        const double n = static_cast<double>(flows_on_[static_cast<std::size_t>(u.resource)].size());
        rate = std::min(rate, capacity(s_, u.resource) / (n * u.bytes));
      }
      if (rate == o.rate) continue;  // its pending event is still exact
      o.rate = rate;
      push(id, now_ + o.left / o.rate);
    }
  }

  void finish(int id) {
    auto& o = st_[static_cast<std::size_t>(id)];
    o.state = kDone;
    ++o.version;
    ++done_;
    res_.timings[static_cast<std::size_t>(id)].end = now_;
    const Op& op = s_.ops[static_cast<std::size_t>(id)];
    auto& wk = ws_[static_cast<std::size_t>(op.worker)];
    wk.mem -= op.free_bytes;
    if (!is_comm(op.kind)) {
      auto& c = wk.compute;
      const auto it = std::find(c.begin(), c.end(), id);
      if (it != c.end()) {
        touch(op.worker);
        c.erase(it);
        rerate_compute(op.worker);
      }
    } else if (o.uses >= 0) {
      const bool rdma = !op.uses_sms && s_.network.rdma_sm_fraction > 0;
      touch(op.worker);
      --wk.comm;
      if (op.uses_sms) --wk.sm_comm;
      if (rdma) --wk.rdma_comm;
      if (op.peer != op.worker) {
        touch(op.peer);
        auto& pk = ws_[static_cast<std::size_t>(op.peer)];
        --pk.comm;
        if (op.uses_sms) --pk.sm_comm;
        if (rdma) --pk.rdma_comm;
      }
      for (const auto& u : uses_of(id)) {
        auto& f = flows_on_[static_cast<std::size_t>(u.resource)];
        f.erase(std::remove(f.begin(), f.end(), id), f.end());
      }
      rerate_flows(uses_of(id));
      if (op.uses_sms || rdma) {
        rerate_compute(op.worker);
        if (op.peer != op.worker) rerate_compute(op.peer);
      }
    }
    // Release the stream, then wake dependents.
    const auto w = static_cast<std::size_t>(op.worker);
    const auto k = static_cast<std::size_t>(op.stream);
    if (!outside_stream_order(s_, op)) {
      ++head_[w][k];
      try_start_head(op.worker, static_cast<int>(k));
    }
    for (int e = succ_start_[static_cast<std::size_t>(id)]; e < succ_start_[static_cast<std::size_t>(id) + 1]; ++e) {
      const int d = succ_[static_cast<std::size_t>(e)];
      if (--st_[static_cast<std::size_t>(d)].deps_left == 0) try_start(d);
    }
  }

  std::string label(int id) const {
    const Op& op = s_.ops[static_cast<std::size_t>(id)];
    std::ostringstream os;
    os << "op " << id << " (" << to_string(op.kind) << " " << s_.workers[static_cast<std::size_t>(op.worker)].name
       << "/" << to_string(op.stream) << " mb " << op.micro_batch << " layer " << op.layer << ")";
    return os.str();
  }

  void report_deadlock() {
    res_.deadlocked = true;
    std::ostringstream os;
    os << "deadlock: " << (s_.ops.size() - done_) << " of " << s_.ops.size() << " ops never ran";
    int lines = 0;
    auto blocked = [&](int id) {
      if (st_[static_cast<std::size_t>(id)].state != kWaiting) return;
      Wait wt{id, {}};
      for (int d : s_.ops[static_cast<std::size_t>(id)].deps)
        if (st_[static_cast<std::size_t>(d)].state != kDone) wt.waiting_on.push_back(d);
      if (lines++ < 12) {
        os << "\n  " << label(id) << " waits on";
        for (int d : wt.waiting_on) os << ' ' << label(d);
        if (wt.waiting_on.empty()) os << " its stream";
      }
      res_.waits.push_back(std::move(wt));
    };
    for (std::size_t w = 0; w < s_.workers.size(); ++w)
      for (std::size_t k = 0; k < kStreams; ++k) {
        const auto& q = s_.order[w][k];
        for (int id : q)
          if (outside_stream_order(s_, s_.ops[static_cast<std::size_t>(id)])) blocked(id);
        if (k == 2 && !s_.workers[w].in_order_comm) continue;
        if (head_[w][k] < q.size()) blocked(q[head_[w][k]]);
      }
    res_.deadlock_report = os.str();
  }

  SimResult finalize() {
    if (done_ < s_.ops.size()) report_deadlock();
    double step = 0;
    for (const auto& t : res_.timings) step = std::max(step, t.end);
    now_ = step;
    res_.step_seconds = step;
    std::vector<double> load(4 * s_.workers.size(), 0.0);
    for (std::size_t i = 0; i < s_.ops.size(); ++i) {
      const Op& op = s_.ops[i];
      if (!is_comm(op.kind)) ws_[static_cast<std::size_t>(op.worker)].m.compute_seconds += op.seconds;
      if (st_[i].uses >= 0)
        for (const auto& u : uses_of(static_cast<int>(i)))
          load[static_cast<std::size_t>(u.resource)] += u.bytes / capacity(s_, u.resource);
    }
    double gpus = 0, peak = 0;
    for (std::size_t w = 0; w < s_.workers.size(); ++w) {
      touch(static_cast<int>(w));
      auto& m = ws_[w].m;
      m.busy_fraction = step > 0 ? m.busy_seconds / step : 0;
      m.bubble_fraction = 1 - m.busy_fraction;
      const double g = s_.workers[w].gpus;
      gpus += g;
      peak += g * s_.workers[w].peak_flops;
      res_.bubble_fraction += g * m.bubble_fraction;
      res_.exposed_comm_seconds += g * m.exposed_comm_seconds;
      res_.max_worker_compute_seconds = std::max(res_.max_worker_compute_seconds, m.compute_seconds);
      res_.peak_activation_bytes = std::max(res_.peak_activation_bytes, m.peak_activation_bytes);
      m.peak_memory_bytes = s_.workers[w].static_bytes + m.peak_activation_bytes;
      res_.peak_memory_bytes = std::max(res_.peak_memory_bytes, m.peak_memory_bytes);
      res_.workers.push_back(m);
    }
    res_.bubble_fraction /= gpus;
    res_.exposed_comm_seconds /= gpus;
    res_.lower_bound_seconds = res_.max_worker_compute_seconds;
    for (double l : load) res_.lower_bound_seconds = std::max(res_.lower_bound_seconds, l);
    if (step > 0 && !res_.deadlocked) {
      res_.tokens_per_second = s_.tokens_per_step / step;
      res_.mfu = peak > 0 ? s_.flops_per_step / (step * peak) : 0;
    }
    return std::move(res_);
  }

  const Schedule& s_;
  std::vector<OpState> st_;
  std::vector<WorkerState> ws_;
  std::vector<std::vector<int>> flows_on_;
  std::vector<int> succ_start_, succ_;
  std::vector<int> scratch_;
  std::vector<CommUses> uses_;
  std::vector<std::array<std::size_t, kStreams>> head_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  double now_ = 0;
  std::size_t done_ = 0;
  SimResult res_;
};

}  // namespace reference_detail

/// Simulates one step of `s` with the reference implementation (same rules and result
/// as schedule::simulate).
inline SimResult simulate_reference(const Schedule& s) { return reference_detail::Simulator(s).run(); }

}  // namespace disagmoe::schedule::test
