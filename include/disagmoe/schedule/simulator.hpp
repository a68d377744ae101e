// SPDX-License-Identifier: Apache-2.0
/// @file simulator.hpp
/// Discrete-event simulation of one training step of a Schedule in virtual time.
///
/// Rules (issue 5; the recurrence of sail-sg's `transform_schedule` generalised to
/// shared resources):
/// - an op starts when it heads its (worker, stream) queue and all its deps are done;
///   posted ops (Op::posted), comm ops of a worker with `in_order_comm == false`, and
///   pipeline sends of one with `posted_sends`, start as soon as deps are done;
/// - compute ops progress at 1/seconds, divided equally among the compute ops running on
///   the worker (fwd and bwd streams share the GPU), times (1 - comm_sm_fraction) while an
///   SM-using comm op touches the worker and (1 - rdma_sm_fraction) less while an RDMA
///   one does;
/// - with Network::host_cores = C > 0 the workers are host threads (a CPU runtime): a
///   compute op of a worker of g ranks runs on g threads and holds min(g, C) of the C
///   cores (at min(g, C) / g of its rate when g > C), and a worker's two compute streams
///   are threads of their own, so their ops do not share a rate; a ready compute op that
///   does not find its cores free waits in one first-come-first-served queue and starts
///   when running ones free them (before ops that end readies); a comm op that taxes
///   compute (as above) occupies comm_sm_fraction (rdma_sm_fraction) of a core per
///   rank of each worker it touches (the comm threads), and while the cores held plus
///   these shares exceed C, every compute op runs at C / their sum of its rate (the
///   cores shared in proportion to demand);
/// - a comm op first waits its message latency (plus its own `seconds`: an overhead
///   measured for it, 0 unless calibrated), then moves its bytes (one that moves none
///   takes its overhead alone, without a latency); intra-node bytes go over NVLink, the
///   rest over the worker's NIC share, each direction a separate resource per worker;
///   flows on a resource share it equally and the op advances at its slowest resource's
///   pace (processor sharing, no max-min refinement);
/// - when nothing can run and ops remain, the step is reported as deadlocked with the
///   ops each blocked stream waits on.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/schedule/comm_links.hpp>
#include <disagmoe/schedule/op.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace disagmoe::schedule {

/// Start and end of one op in virtual seconds (-1 when it never ran).
struct OpTiming {
  double start = -1;
  double end = -1;
};

/// Per-worker results. Fractions are of the step time.
struct WorkerMetrics {
  double compute_seconds = 0;        ///< sum of compute op costs at full rate
  double busy_seconds = 0;           ///< time any compute op ran
  double busy_fraction = 0;
  double bubble_fraction = 0;        ///< 1 - busy_fraction
  double comm_seconds = 0;           ///< time any comm op touching the worker was active
  double exposed_comm_seconds = 0;   ///< comm active while no compute ran
  double peak_activation_bytes = 0;  ///< per GPU
  double peak_memory_bytes = 0;      ///< per GPU: Worker::static_bytes + peak activations
};

/// A blocked op and the unfinished ops it waits on (deadlock report).
struct Wait {
  int op = -1;
  std::vector<int> waiting_on;
};

/// Outcome of `simulate`.
struct SimResult {
  bool deadlocked = false;
  std::string deadlock_report;     ///< one line per blocked stream head
  std::vector<Wait> waits;
  double step_seconds = 0;         ///< makespan
  double tokens_per_second = 0;
  double mfu = 0;                  ///< flops_per_step / (step * sum of GPU peaks)
  double bubble_fraction = 0;      ///< GPU-weighted mean over workers
  double exposed_comm_seconds = 0; ///< GPU-weighted mean over workers
  double max_worker_compute_seconds = 0;
  double lower_bound_seconds = 0;  ///< max over workers' compute and resources' bytes/capacity
  double peak_activation_bytes = 0;  ///< max over workers, per GPU
  double peak_memory_bytes = 0;      ///< max over workers of static + peak activation, per GPU
  std::vector<WorkerMetrics> workers;
  std::vector<OpTiming> timings;   ///< per op
  std::size_t ops = 0;
};

namespace detail {

// The event engine. Hot data is flat: one 64-byte Node per op (costs, indices and
// mutable state together, so an event touches one cache line of op data), stream
// orders concatenated into one array with per-(worker, stream) heads, successors in
// CSR form, per-resource capacities in an array, and an indexed binary heap that holds
// at most one entry per op (re-keyed in place when a rate changes) instead of a heap
// of versioned events, so the queue never grows beyond the ops in flight.
// Every floating-point expression is the one of the first implementation, evaluated in
// the same order on the same events, so results are bit-identical to it
// (tests/schedule/reference_simulator.hpp keeps that implementation as the oracle).
class Simulator {
 public:
  explicit Simulator(const Schedule& s) : s_(s) {}
  // On every exit, a ConfigError from validation or setup included.
  ~Simulator() { release_if_large(); }
  Simulator(const Simulator&) = delete;
  Simulator& operator=(const Simulator&) = delete;

  SimResult run() {
    detail::validate(s_, slots_);
    const std::size_t n = s_.ops.size();
    const std::size_t nw = s_.workers.size();
    nodes_.resize(n);
    res_.timings.assign(n, {});
    res_.ops = n;
    ws_.assign(nw, {});
    flows_on_.resize(4 * nw);
    for (auto& f : flows_on_) f.clear();
    cap_.resize(4 * nw);
    for (std::size_t r = 0; r < 4 * nw; ++r) cap_[r] = capacity(s_, static_cast<int>(r));
    // Stream orders, concatenated (validate numbered each op's place in q_).
    q_.clear();
    for (const auto& streams : s_.order)
      for (const auto& ids : streams) q_.insert(q_.end(), ids.begin(), ids.end());
    const auto& qbeg = slots_.begin;
    head_.assign(qbeg.begin(), qbeg.end() - 1);
    // Per-op constants, dependency counters and successor counts in one pass over the
    // ops (each pass reads every Op and its deps array), then successors in CSR form.
    succ_start_.assign(n + 1, 0);
    gate_.resize(n);
    uses_.clear();
    delay_.clear();
    std::vector<int> unordered_roots;  // ops outside stream order with no deps: started first
    for (std::size_t i = 0; i < n; ++i) {
      const Op& op = s_.ops[i];
      gate_[i] = {static_cast<int>(op.deps.size()), -1};
      for (int d : op.deps) ++succ_start_[static_cast<std::size_t>(d) + 1];
      Node& o = nodes_[i];
      o = Node{};
      if (outside_stream_order(s_, op)) {
        o.flags |= kUnordered;
        if (op.deps.empty()) unordered_roots.push_back(static_cast<int>(i));
      } else {
        o.pos = slots_.pos[i];
      }
      o.worker = op.worker;
      o.stream = static_cast<std::uint8_t>(op.stream);
      o.alloc = op.alloc_bytes;
      o.release = op.free_bytes;
      if (!is_comm(op.kind)) {
        o.seconds = op.seconds;
        continue;
      }
      o.flags |= kComm;
      o.peer = op.peer;
      if (op.uses_sms) o.flags |= kSms;
      else if (s_.network.rdma_sm_fraction > 0) o.flags |= kRdma;
      const CommUses cu = comm_uses(s_, op);
      if (cu.empty() && op.seconds <= 0) continue;  // moves nothing: done at once
      o.uses = static_cast<int>(uses_.size());
      uses_.push_back(cu);
      for (const auto& u : cu) {
        if (u.resource % 4 < 2) o.flags |= kRemote;
        if (cap_[static_cast<std::size_t>(u.resource)] > 0) continue;
        fail("Schedule.workers[" + std::to_string(u.resource / 4) + "]." +
                 (u.resource % 4 < 2 ? "nic_bandwidth" : "nvlink_bandwidth"),
             0.0,
             "a positive bandwidth: op " + std::to_string(i) + " (" + std::string(to_string(op.kind)) +
                 ") moves bytes over it");
      }
      // Its overhead, then (if it moves bytes) the message latency, summed here so that
      // starting it reads one double, not its link uses (a cache miss per comm op: 11%
      // of AF-Pipe's CPU at 1.15M ops).
      delay_.push_back(op.seconds + (cu.empty()                 ? 0.0
                                     : (o.flags & kRemote) != 0 ? s_.network.nic_latency
                                                                : s_.network.nvlink_latency));
    }
    for (std::size_t i = 0; i < n; ++i) succ_start_[i + 1] += succ_start_[i];
    fill_.assign(succ_start_.begin(), succ_start_.end() - 1);
    succ_.resize(static_cast<std::size_t>(succ_start_[n]));
    for (std::size_t i = 0; i < n; ++i)
      for (int d : s_.ops[i].deps) succ_[static_cast<std::size_t>(fill_[static_cast<std::size_t>(d)]++)] = static_cast<int>(i);
    heap_.clear();
    core_queue_.clear();
    core_next_ = 0;
    // Worker by worker, its streams' heads, then its unordered roots in stream order.
    std::sort(unordered_roots.begin(), unordered_roots.end(), [&](int a, int b) {
      return slots_.pos[static_cast<std::size_t>(a)] < slots_.pos[static_cast<std::size_t>(b)];
    });
    auto root = unordered_roots.begin();
    for (std::size_t w = 0; w < nw; ++w) {
      for (int k = 0; k < kStreams; ++k) try_start_head(static_cast<int>(w), k);
      for (; root != unordered_roots.end() &&
             nodes_[static_cast<std::size_t>(*root)].worker == static_cast<int>(w);
           ++root)
        try_start(*root);
    }
    while (!heap_.empty()) {
      const Entry e = pop();
      now_ = e.time;
      if (nodes_[static_cast<std::size_t>(e.op)].state == kLatency) begin_flow(e.op);
      else finish(e.op);
    }
    return finalize();
  }

 private:
  enum State : std::uint8_t { kWaiting, kQueued, kLatency, kRunning, kDone };
  enum Flag : std::uint8_t { kComm = 1, kSms = 2, kUnordered = 4, kRemote = 8, kRdma = 16 };
  // One cache line per op: starting an op reads nothing else about it (the peer of a
  // comm op lives here, not in its Uses entry, which only its flow needs).
  struct alignas(64) Node {
    union {
      double seconds = 0;       // compute: time at the worker's full rate
      int peer;                 // comm: the other worker
    };
    double alloc = 0;           // bytes allocated at start / released at end, per GPU
    double release = 0;
    double left = 1;            // fraction of work left
    double rate = 0;            // fraction per second
    double since = 0;           // time `left` was last updated
    int pos = -1;               // index in q_ (ordered streams), -1 for unordered comm
    int worker = 0;
    int uses = -1;              // index into uses_ for comm ops that move bytes
    std::uint8_t stream = 0, flags = 0;
    State state = kWaiting;
  };
  static_assert(sizeof(Node) == 64);
  // Per op, apart from nodes_ (the most frequent random accesses, kept small so they
  // stay in cache): unfinished dependencies and the index in heap_ (-1: not queued);
  // an op that becomes ready reads the one and then writes the other.
  struct Gate {
    int deps_left;
    int heap;
  };
  struct WorkerState {
    std::array<int, kStreams> compute{};  // running compute ops (at most one per compute stream)
    int ncompute = 0;
    int comm = 0;              // comm ops (latency or flow) touching the worker
    int sm_comm = 0;           // of which use SMs
    int rdma_comm = 0;         // of which are RDMA transfers taxed by rdma_sm_fraction
    double mark = 0;
    WorkerMetrics m;
    double mem = 0;
  };
  // Heap entry: the op's pending event; ties broken by op id (the first
  // implementation's order).
  struct Entry {
    double time;
    int op;
  };
  static bool earlier(const Entry& a, const Entry& b) { return a.time < b.time || (a.time == b.time && a.op < b.op); }

  Node& node(int id) { return nodes_[static_cast<std::size_t>(id)]; }
  const CommUses& uses_of(const Node& o) const { return uses_[static_cast<std::size_t>(o.uses)]; }

  // ── indexed binary heap ──
  void place(std::size_t i, const Entry& e) {
    heap_[i] = e;
    gate_[static_cast<std::size_t>(e.op)].heap = static_cast<int>(i);
  }
  void sift_up(std::size_t i, Entry e) {
    while (i > 0) {
      const std::size_t parent = (i - 1) / 2;
      if (!earlier(e, heap_[parent])) break;
      place(i, heap_[parent]);
      i = parent;
    }
    place(i, e);
  }
  void sift_down(std::size_t i, Entry e) {
    const std::size_t n = heap_.size();
    for (;;) {
      std::size_t c = 2 * i + 1;
      if (c >= n) break;
      if (c + 1 < n && earlier(heap_[c + 1], heap_[c])) ++c;
      if (!earlier(heap_[c], e)) break;
      place(i, heap_[c]);
      i = c;
    }
    place(i, e);
  }
  // Schedules (or re-schedules) the op's single pending event at time t.
  void push(int id, double t) {
    const Entry e{t, id};
    const int at = gate_[static_cast<std::size_t>(id)].heap;
    if (at < 0) {
      heap_.push_back(e);
      sift_up(heap_.size() - 1, e);
      return;
    }
    const auto i = static_cast<std::size_t>(at);
    if (earlier(e, heap_[i])) sift_up(i, e);
    else sift_down(i, e);
  }
  Entry pop() {
    const Entry top = heap_.front();
    gate_[static_cast<std::size_t>(top.op)].heap = -1;
    const Entry last = heap_.back();
    heap_.pop_back();
    if (!heap_.empty()) sift_down(0, last);
    return top;
  }

  void touch(int w) {
    auto& k = ws_[static_cast<std::size_t>(w)];
    const double dt = now_ - k.mark;
    if (dt > 0) {
      if (k.ncompute > 0) k.m.busy_seconds += dt;
      if (k.comm > 0) {
        k.m.comm_seconds += dt;
        if (k.ncompute == 0) k.m.exposed_comm_seconds += dt;
      }
    }
    k.mark = now_;
  }

  bool is_head(const Node& o) const {
    return (o.flags & kUnordered) != 0 ||
           head_[static_cast<std::size_t>(o.worker) * kStreams + o.stream] == static_cast<std::size_t>(o.pos);
  }

  void try_start_head(int w, int k) {
    if (k == 2 && !s_.workers[static_cast<std::size_t>(w)].in_order_comm) return;
    const std::size_t wk = static_cast<std::size_t>(w) * kStreams + static_cast<std::size_t>(k);
    // Posted sends (Worker::posted_sends) keep no turn: the head passes over them.
    while (head_[wk] < slots_.begin[wk + 1] &&
           (nodes_[static_cast<std::size_t>(q_[head_[wk]])].flags & kUnordered) != 0)
      ++head_[wk];
    if (head_[wk] < slots_.begin[wk + 1]) try_start(q_[head_[wk]]);
  }

  /// Host cores a compute op of worker `w` holds (Network::host_cores > 0).
  int cores_of(int w) const { return std::min(s_.workers[static_cast<std::size_t>(w)].gpus, cores_); }

  // `dequeued`: the op heads the host-core queue and its cores are free.
  void try_start(int id, bool dequeued = false) {
    Node& o = node(id);
    if (gate_[static_cast<std::size_t>(id)].deps_left > 0 || o.state != kWaiting || !is_head(o)) return;
    const bool compute = (o.flags & kComm) == 0 && o.seconds > 0;
    if (compute && cores_ > 0 && !dequeued &&
        (core_next_ < core_queue_.size() || running_compute_ + cores_of(o.worker) > cores_)) {  // wait for cores
      o.state = kQueued;
      core_queue_.push_back(id);
      return;
    }
    res_.timings[static_cast<std::size_t>(id)].start = now_;
    // Whatever follows this op in its stream is started when it ends: load its node,
    // counter and successor range now, an op's duration ahead, instead of missing on them
    // then (-10% CPU for AF-Pipe at 192k ops when it was added).
    if (o.pos >= 0 && static_cast<std::size_t>(o.pos) + 1 < q_.size()) {
      const auto next = static_cast<std::size_t>(q_[static_cast<std::size_t>(o.pos) + 1]);
      __builtin_prefetch(&nodes_[next]);
      __builtin_prefetch(&gate_[next]);
      __builtin_prefetch(&succ_start_[next]);
    }
    // Likewise the ops that depend on it: their counters are decremented, and their
    // nodes read if it was their last dependency, when it ends (-5% for AF-Pipe).
    for (int e = succ_start_[static_cast<std::size_t>(id)]; e < succ_start_[static_cast<std::size_t>(id) + 1]; ++e) {
      const auto d = static_cast<std::size_t>(succ_[static_cast<std::size_t>(e)]);
      __builtin_prefetch(&gate_[d], 1);
      __builtin_prefetch(&nodes_[d], 1);
    }
    auto& wk = ws_[static_cast<std::size_t>(o.worker)];
    wk.mem += o.alloc;
    wk.m.peak_activation_bytes = std::max(wk.m.peak_activation_bytes, wk.mem);
    if ((o.flags & kComm) == 0) {
      if (!compute) return instant(id);
      touch(o.worker);
      if (cores_ > 0) running_compute_ += cores_of(o.worker);
      // One per compute stream plus one posted op (Op::posted: a worker's are chained).
      if (wk.ncompute == kStreams)
        fail("Schedule.ops[" + std::to_string(id) + "].posted", true,
             "posted compute ops of one worker chained by dependencies (one runs at a time)");
      o.state = kRunning;
      o.left = 1;
      o.since = now_;
      wk.compute[static_cast<std::size_t>(wk.ncompute++)] = id;
      cores_ > 0 ? rerate_host() : rerate_compute(o.worker);
      return;
    }
    if (o.uses < 0) return instant(id);
    const int peer = o.peer;
    const bool sms = (o.flags & kSms) != 0, rdma = (o.flags & kRdma) != 0;
    touch(o.worker);
    ++wk.comm;
    if (sms) ++wk.sm_comm;
    if (rdma) ++wk.rdma_comm;
    if (peer != o.worker) {
      touch(peer);
      auto& pk = ws_[static_cast<std::size_t>(peer)];
      ++pk.comm;
      if (sms) ++pk.sm_comm;
      if (rdma) ++pk.rdma_comm;
    }
    if (sms || rdma) rerate_taxed(o.worker, peer);
    // Its flow begins after the latency and reads the link uses then: load them now.
    __builtin_prefetch(&uses_of(o));
    __builtin_prefetch(reinterpret_cast<const char*>(&uses_of(o)) + 64);
    o.state = kLatency;
    push(id, now_ + delay_[static_cast<std::size_t>(o.uses)]);
  }

  // Zero-cost ops finish through the event queue, not recursively, so long chains of
  // them cannot overflow the stack.
  void instant(int id) {
    node(id).state = kRunning;
    push(id, now_);
  }

  void begin_flow(int id) {
    Node& o = node(id);
    o.state = kRunning;
    if (uses_of(o).empty()) return push(id, now_);  // an overhead alone: done
    o.left = 1;
    o.since = now_;
    for (const auto& u : uses_of(o)) flows_on_[static_cast<std::size_t>(u.resource)].push_back(id);
    rerate_flows(uses_of(o));
  }

  void advance(Node& o) {
    o.left = std::max(0.0, o.left - o.rate * (now_ - o.since));
    o.since = now_;
  }

  // What the comm ops touching a worker take of its compute (GPU: a share of the SMs;
  // host: a share of a core per rank, its comm thread's).
  double comm_tax(const WorkerState& k) const {
    return (k.sm_comm > 0 ? s_.network.comm_sm_fraction : 0.0) + (k.rdma_comm > 0 ? s_.network.rdma_sm_fraction : 0.0);
  }

  // A comm op that taxes compute started or ended between `w` and `peer`.
  void rerate_taxed(int w, int peer) {
    if (cores_ > 0) return rerate_host();
    rerate_compute(w);
    if (peer != w) rerate_compute(peer);
  }

  // Host threads (file comment): the cores are shared in proportion to demand once the
  // compute ops' cores plus the comm threads' shares exceed them, so every running
  // compute op is re-rated when either changes.
  void rerate_host() {
    double demand = running_compute_;
    for (std::size_t w = 0; w < ws_.size(); ++w)
      demand += s_.workers[w].gpus * comm_tax(ws_[w]);
    host_rate_ = demand > cores_ ? cores_ / demand : 1.0;
    for (std::size_t w = 0; w < ws_.size(); ++w)
      if (ws_[w].ncompute > 0) rerate_compute(static_cast<int>(w));
  }

  void rerate_compute(int w) {
    const auto& k = ws_[static_cast<std::size_t>(w)];
    // A GPU's streams share it; host threads each have their cores (file comment).
    const double share = k.ncompute == 0 ? 0
                         : cores_ > 0  ? static_cast<double>(cores_of(w)) / s_.workers[static_cast<std::size_t>(w)].gpus
                                       : 1.0 / static_cast<double>(k.ncompute);
    // (GPU: in this order, as the reference simulator rounds it.)
    const double slow = cores_ > 0 ? host_rate_
                                   : 1.0 - (k.sm_comm > 0 ? s_.network.comm_sm_fraction : 0.0) -
                                         (k.rdma_comm > 0 ? s_.network.rdma_sm_fraction : 0.0);
    for (int i = 0; i < k.ncompute; ++i) {
      const int id = k.compute[static_cast<std::size_t>(i)];
      Node& o = node(id);
      advance(o);
      const double rate = share * slow / o.seconds;
      if (rate == o.rate) continue;  // its pending event is still exact
      o.rate = rate;
      push(id, now_ + o.left / o.rate);
    }
  }

  // Re-rates every flow on the given links. A flow on two of them is visited twice; the
  // second visit changes nothing (advancing by zero time, then the same rate), and each
  // flow's update reads only link flow counts, so no de-duplication or order is needed.
  void rerate_flows(const CommUses& uses) {
    for (const auto& link : uses)
      for (int id : flows_on_[static_cast<std::size_t>(link.resource)]) {
        Node& o = node(id);
        advance(o);
        double rate = std::numeric_limits<double>::infinity();
        for (const auto& u : uses_of(o)) {
          const auto r = static_cast<std::size_t>(u.resource);
          rate = std::min(rate, cap_[r] / (static_cast<double>(flows_on_[r].size()) * u.bytes));
        }
        if (rate == o.rate) continue;  // its pending event is still exact
        o.rate = rate;
        push(id, now_ + o.left / o.rate);
      }
  }

  void finish(int id) {
    Node& o = node(id);
    o.state = kDone;
    ++done_;
    res_.timings[static_cast<std::size_t>(id)].end = now_;
    auto& wk = ws_[static_cast<std::size_t>(o.worker)];
    wk.mem -= o.release;
    if ((o.flags & kComm) == 0) {
      int i = 0;
      while (i < wk.ncompute && wk.compute[static_cast<std::size_t>(i)] != id) ++i;
      if (i < wk.ncompute) {
        touch(o.worker);
        for (; i + 1 < wk.ncompute; ++i) wk.compute[static_cast<std::size_t>(i)] = wk.compute[static_cast<std::size_t>(i) + 1];
        --wk.ncompute;
        if (cores_ > 0) {
          running_compute_ -= cores_of(o.worker);
          rerate_host();
        } else {
          rerate_compute(o.worker);
        }
        // The freed cores go to the longest waiters, in order, while the head's fit.
        while (core_next_ < core_queue_.size() && running_compute_ + cores_of(node(core_queue_[core_next_]).worker) <= cores_) {
          const int next = core_queue_[core_next_++];
          node(next).state = kWaiting;
          try_start(next, true);
        }
      }
    } else if (o.uses >= 0) {
      const int peer = o.peer;
      const bool sms = (o.flags & kSms) != 0, rdma = (o.flags & kRdma) != 0;
      touch(o.worker);
      --wk.comm;
      if (sms) --wk.sm_comm;
      if (rdma) --wk.rdma_comm;
      if (peer != o.worker) {
        touch(peer);
        auto& pk = ws_[static_cast<std::size_t>(peer)];
        --pk.comm;
        if (sms) --pk.sm_comm;
        if (rdma) --pk.rdma_comm;
      }
      for (const auto& u : uses_of(o)) {
        auto& f = flows_on_[static_cast<std::size_t>(u.resource)];
        f.erase(std::find(f.begin(), f.end(), id));
      }
      rerate_flows(uses_of(o));
      if (sms || rdma) rerate_taxed(o.worker, peer);
    }
    // Release the stream, then wake dependents.
    if ((o.flags & kUnordered) == 0) {
      ++head_[static_cast<std::size_t>(o.worker) * kStreams + o.stream];
      try_start_head(o.worker, o.stream);
    }
    for (int e = succ_start_[static_cast<std::size_t>(id)]; e < succ_start_[static_cast<std::size_t>(id) + 1]; ++e) {
      const int d = succ_[static_cast<std::size_t>(e)];
      if (--gate_[static_cast<std::size_t>(d)].deps_left == 0) try_start(d);
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
      if (node(id).state != kWaiting) return;
      Wait wt{id, {}};
      for (int d : s_.ops[static_cast<std::size_t>(id)].deps)
        if (node(d).state != kDone) wt.waiting_on.push_back(d);
      if (lines++ < 12) {
        os << "\n  " << label(id) << " waits on";
        for (int d : wt.waiting_on) os << ' ' << label(d);
        if (wt.waiting_on.empty()) os << " its stream";
      }
      res_.waits.push_back(std::move(wt));
    };
    for (std::size_t w = 0; w < s_.workers.size(); ++w)
      for (std::size_t k = 0; k < kStreams; ++k) {
        const std::size_t wk = w * kStreams + k;
        for (int id : s_.order[w][k])
          if ((node(id).flags & kUnordered) != 0) blocked(id);
        if (k == 2 && !s_.workers[w].in_order_comm) continue;
        if (head_[wk] < slots_.begin[wk + 1]) blocked(q_[head_[wk]]);
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
    for (const Node& o : nodes_) {
      if ((o.flags & kComm) == 0) ws_[static_cast<std::size_t>(o.worker)].m.compute_seconds += o.seconds;
      if (o.uses >= 0)
        for (const auto& u : uses_of(o))
          load[static_cast<std::size_t>(u.resource)] += u.bytes / cap_[static_cast<std::size_t>(u.resource)];
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
    if (cores_ > 0) {  // host threads: per stream in order; every op holds its cores for cost x g / min(g, C)
      double all = 0, slowest = 0;
      std::vector<double> stream(s_.workers.size() * kStreams, 0.0);
      for (const Node& o : nodes_)
        if ((o.flags & kComm) == 0) {
          const double g = s_.workers[static_cast<std::size_t>(o.worker)].gpus;
          all += o.seconds * g;
          auto& t = stream[static_cast<std::size_t>(o.worker) * kStreams + o.stream];
          t += o.seconds * g / cores_of(o.worker);
          slowest = std::max(slowest, t);
        }
      res_.lower_bound_seconds = std::max(slowest, all / cores_);
    }
    for (double l : load) res_.lower_bound_seconds = std::max(res_.lower_bound_seconds, l);
    if (step > 0 && !res_.deadlocked) {
      res_.tokens_per_second = s_.tokens_per_step / step;
      res_.mfu = peak > 0 ? s_.flops_per_step / (step * peak) : 0;
    }
    return std::move(res_);
  }

  // Scratch arrays, kept per thread between calls: a search simulates hundreds of
  // schedules in a row, and fresh arrays cost a page fault per 4 KiB on every call (on
  // the CI VM 3 ms per MiB: 0.45 s of a 1.4M-op simulation's 0.65 s). Released after a
  // call whose arrays exceed kKeepBytes (about 2M ops), so at most that much stays
  // allocated per thread.
  struct Buffers {
    std::vector<Node> nodes;
    std::vector<WorkerState> ws;
    std::vector<std::vector<int>> flows_on;
    std::vector<double> cap;
    std::vector<int> q;
    StreamSlots slots;
    std::vector<std::size_t> head;
    std::vector<int> succ_start, succ, fill;
    std::vector<Gate> gate;
    std::vector<CommUses> uses;
    std::vector<double> delay;  // per uses entry: its op's overhead (comm Op::seconds) + message latency
    std::vector<Entry> heap;
    [[nodiscard]] std::size_t bytes() const {
      return nodes.capacity() * sizeof(Node) + uses.capacity() * sizeof(CommUses) + delay.capacity() * sizeof(double) +
             gate.capacity() * sizeof(Gate) + heap.capacity() * sizeof(Entry) +
             (q.capacity() + slots.pos.capacity() + succ_start.capacity() + succ.capacity() + fill.capacity()) * sizeof(int);
    }
  };
  static constexpr std::size_t kKeepBytes = std::size_t{256} << 20;
  static Buffers& buffers() {
    thread_local Buffers b;
    return b;
  }
  void release_if_large() {
    if (b_.bytes() > kKeepBytes) b_ = Buffers{};
  }

  const Schedule& s_;
  Buffers& b_ = buffers();
  std::vector<Node>& nodes_ = b_.nodes;
  std::vector<WorkerState>& ws_ = b_.ws;
  std::vector<std::vector<int>>& flows_on_ = b_.flows_on;
  std::vector<double>& cap_ = b_.cap;
  std::vector<int>& q_ = b_.q;                      // stream orders, concatenated
  StreamSlots& slots_ = b_.slots;                   // per op: index in q_; per (worker, stream): first
  std::vector<std::size_t>& head_ = b_.head;        // per (worker, stream): next to run
  std::vector<int>& succ_start_ = b_.succ_start;
  std::vector<int>& succ_ = b_.succ;
  std::vector<int>& fill_ = b_.fill;
  std::vector<Gate>& gate_ = b_.gate;
  std::vector<CommUses>& uses_ = b_.uses;
  std::vector<double>& delay_ = b_.delay;
  std::vector<Entry>& heap_ = b_.heap;
  // Host-core limit (Network::host_cores; 0: unlimited): compute ops running, and the
  // ready ones waiting for a core, served from core_next_ on.
  const int cores_ = s_.network.host_cores;
  int running_compute_ = 0;
  double host_rate_ = 1;  // the rate every host compute op runs at (rerate_host)
  std::vector<int> core_queue_;
  std::size_t core_next_ = 0;
  double now_ = 0;
  std::size_t done_ = 0;
  SimResult res_;
};

}  // namespace detail

/// Simulates one step of `s` (see the file comment for the rules). Throws ConfigError
/// when `s` is malformed (validate) or a comm op needs a link of zero bandwidth; a
/// schedule that cannot finish is a value: `deadlocked` with a report, not an exception.
/// O(ops + deps + events × log(ops in flight)); events are O(ops × concurrent flows).
/// Thread-safe (each thread has its own scratch); the calling thread keeps its scratch
/// arrays (≈ 140 bytes per op) for the next call unless they exceed 256 MiB.
inline SimResult simulate(const Schedule& s) { return detail::Simulator(s).run(); }

}  // namespace disagmoe::schedule
