// SPDX-License-Identifier: Apache-2.0
/// @file network_model.hpp
/// An emulated network for the loopback transport, so that communication costs wall
/// time on one CPU and overlap of compute with communication becomes measurable.
///
/// Model (a fluid, processor-sharing network, as the schedule simulator's): ranks live on
/// emulated nodes; every node has one egress and one ingress NIC shared by its ranks. A
/// message from node u to node v (u != v) is a flow from the moment it is matched: the
/// flows on a NIC (and on the u -> v link) share its bandwidth equally, a flow moves at
/// its scarcest share, and its message is delivered `latency` after its last byte leaves
/// the wire. Messages between one pair of ranks keep their order, one on the wire at a
/// time (a connection, or queue pair, is first-in first-out); messages of different pairs
/// interleave on the NICs they share, so the sends of an all-to-all reach every peer at
/// about the same time, not one peer after another. Messages inside one node use
/// `intra_node_bandwidth`, without contention, and no NIC.
#pragma once

#include <disagmoe/error.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace disagmoe::host {

/// Parameters of the emulated network. Bandwidths in bytes/second, latency in seconds.
/// A bandwidth of 0 means "infinitely fast" (no serialisation delay).
struct NetworkConfig {
  /// Emulated node of every world rank; empty = every rank on its own node.
  std::vector<int> node_of_rank;
  /// Bandwidth of one NIC (per direction), shared by all ranks of a node.
  double nic_bandwidth = 0;
  /// Bandwidth of one point-to-point link between two nodes.
  double link_bandwidth = 0;
  /// Bandwidth between two ranks of the same node.
  double intra_node_bandwidth = 0;
  /// One-way latency between two nodes.
  double latency = 0;
  /// One-way latency inside a node.
  double intra_node_latency = 0;
};

/// Thread-safe fluid model of the messages in flight. A flow starts when its message is
/// matched and is advanced lazily, whenever someone asks about any flow: O(flows in
/// flight) per change of rates (a change is some flow finishing).
class NetworkModel {
 public:
  using Clock = std::chrono::steady_clock;
  /// A message in flight (an index into the model's flows).
  using Flow = std::int32_t;

  /// Whether a flow's message has been delivered by the time asked about, and if not,
  /// when to ask again: its delivery at the current rates, or the next time the rates
  /// change because another flow finishes, whichever is first (a flow that starts later
  /// only slows it, and its start wakes the ranks it touches anyway).
  struct Delivery {
    bool delivered = false;
    Clock::time_point at;  ///< the delivery time when delivered; else when to ask again
  };

  /// Validates `config` for a world of `world_size` ranks.
  NetworkModel(NetworkConfig config, int world_size) : config_(std::move(config)) {
    auto& n = config_.node_of_rank;
    if (n.empty()) {
      for (int r = 0; r < world_size; ++r) n.push_back(r);
    }
    expect(static_cast<int>(n.size()) == world_size, "NetworkConfig.node_of_rank.size()",
           n.size(), "one node per world rank");
    int nodes = 0;
    for (int v : n) {
      expect(v >= 0, "NetworkConfig.node_of_rank[i]", v, ">= 0");
      nodes = std::max(nodes, v + 1);
    }
    for (double x : {config_.nic_bandwidth, config_.link_bandwidth, config_.intra_node_bandwidth,
                     config_.latency, config_.intra_node_latency}) {
      expect(x >= 0, "NetworkConfig bandwidth/latency", x, ">= 0");
    }
    egress_flows_.assign(static_cast<std::size_t>(nodes), 0);
    ingress_flows_ = egress_flows_;
    sent_ = std::make_unique<std::atomic<std::uint64_t>[]>(static_cast<std::size_t>(world_size));
  }

  /// Starts the flow of a matched message of `bytes` from world rank `src` to `dst` at
  /// `now`; both its ends hold it until they `release` it.
  Flow start(int src, int dst, std::size_t bytes, Clock::time_point now) {
    sent_[static_cast<std::size_t>(src)].fetch_add(bytes, std::memory_order_relaxed);
    const int u = config_.node_of_rank[static_cast<std::size_t>(src)];
    const int v = config_.node_of_rank[static_cast<std::size_t>(dst)];
    std::lock_guard lock(mu_);
    const double t = seconds_since_epoch(now);
    advance(t);
    FlowState f;
    f.src = src;
    f.dst = dst;
    f.u = u;
    f.v = v;
    f.holders = 2;
    const double bw = u == v ? config_.intra_node_bandwidth : wire_bandwidth();
    f.latency = u == v ? config_.intra_node_latency : config_.latency;
    f.remaining = static_cast<double>(bytes);
    const bool pair_busy = u != v && std::any_of(active_.begin(), active_.end(), [&](Flow g) {
                             const FlowState& y = flows_[static_cast<std::size_t>(g)];
                             return y.src == src && y.dst == dst;
                           });
    if (u == v || bw <= 0 || (bytes == 0 && !pair_busy)) {  // no shared NIC, nothing ahead of it
      f.done = true;
      f.finished = std::max(t, t_) + (u == v && bw > 0 ? static_cast<double>(bytes) / bw : 0.0);
    }
    const Flow id = allocate(f);
    if (f.done) return id;
    if (pair_busy) queued_.push_back(id);
    else activate(id);
    return id;
  }

  /// Where flow `f` stands at `now`.
  Delivery poll(Flow f, Clock::time_point now) {
    std::lock_guard lock(mu_);
    advance(seconds_since_epoch(now));
    const FlowState& x = flows_.at(static_cast<std::size_t>(f));
    if (x.done) {
      const auto at = time_at(x.finished + x.latency);
      return {at <= now, at};
    }
    const bool queued = std::find(queued_.begin(), queued_.end(), f) != queued_.end();
    const double next_change = t_ + next_finish_in(f);
    if (queued) return {false, time_at(next_change)};
    return {false, time_at(std::min(t_ + x.remaining / rate(x) + x.latency, next_change))};
  }

  /// One end of flow `f` is done with it; its slot is reused once both ends are and its
  /// bytes have left the wire.
  void release(Flow f) {
    std::lock_guard lock(mu_);
    FlowState& x = flows_.at(static_cast<std::size_t>(f));
    --x.holders;
    if (x.holders == 0 && x.done) free_.push_back(f);
  }

  /// The validated configuration.
  const NetworkConfig& config() const { return config_; }

  /// Bytes world rank `rank` has sent so far (every destination), for recounts of what
  /// a run moved against what a model of it assumes.
  std::uint64_t sent_bytes(int rank) const {
    expect(rank >= 0 && static_cast<std::size_t>(rank) < config_.node_of_rank.size(), "NetworkModel rank", rank,
           "a world rank");
    return sent_[static_cast<std::size_t>(rank)].load(std::memory_order_relaxed);
  }

 private:
  struct FlowState {
    int src = 0, dst = 0;     // world ranks
    int u = 0, v = 0;         // nodes
    int holders = 0;          // ends that have not released it
    double remaining = 0;     // bytes still on the wire
    bool done = false;        // its last byte has left the wire
    double finished = 0;      // when (seconds since the epoch), once done
    double latency = 0;
  };

  bool same_pair(Flow a, Flow b) const {
    const FlowState &x = flows_[static_cast<std::size_t>(a)], &y = flows_[static_cast<std::size_t>(b)];
    return x.src == y.src && x.dst == y.dst;
  }

  std::int64_t link(const FlowState& x) const {
    return static_cast<std::int64_t>(x.u) * static_cast<std::int64_t>(egress_flows_.size()) + x.v;
  }

  /// Puts flow `f` on the wire.
  void activate(Flow f) {
    const FlowState& x = flows_[static_cast<std::size_t>(f)];
    ++egress_flows_[static_cast<std::size_t>(x.u)];
    ++ingress_flows_[static_cast<std::size_t>(x.v)];
    if (config_.link_bandwidth > 0) ++link_flows_[link(x)];
    active_.push_back(f);
  }

  double wire_bandwidth() const { return min_positive(config_.nic_bandwidth, config_.link_bandwidth); }

  /// The rate of an active flow: each NIC (and link) shared equally by the flows on it,
  /// at its scarcest resource's share (the simulator's rule).
  double rate(const FlowState& x) const {
    double r = std::numeric_limits<double>::infinity();
    if (config_.nic_bandwidth > 0)
      r = std::min({r, config_.nic_bandwidth / egress_flows_[static_cast<std::size_t>(x.u)],
                    config_.nic_bandwidth / ingress_flows_[static_cast<std::size_t>(x.v)]});
    if (config_.link_bandwidth > 0) r = std::min(r, config_.link_bandwidth / link_flows_.at(link(x)));
    return r;
  }

  /// Seconds until the first active flow other than `except` finishes at the current
  /// rates (inf: none).
  double next_finish_in(Flow except = -1) const {
    double dt = std::numeric_limits<double>::infinity();
    for (Flow g : active_) {
      if (g == except) continue;
      const FlowState& y = flows_[static_cast<std::size_t>(g)];
      dt = std::min(dt, y.remaining / rate(y));
    }
    return dt;
  }

  /// Moves the fluid model on to `t`: flows drain at their rates, and the rates change
  /// whenever one finishes and the next message of its pair, if any, takes its place.
  void advance(double t) {
    while (!active_.empty() && t_ < t) {
      const double dt = std::min(next_finish_in(), t - t_);
      rates_.clear();
      for (Flow g : active_) rates_.push_back(rate(flows_[static_cast<std::size_t>(g)]));
      t_ += dt;
      std::size_t keep = 0;
      for (std::size_t i = 0; i < active_.size(); ++i) {
        FlowState& y = flows_[static_cast<std::size_t>(active_[i])];
        y.remaining -= rates_[i] * dt;
        if (y.remaining > 1e-9 * std::max(1.0, rates_[i] * dt)) {
          active_[keep++] = active_[i];
          continue;
        }
        y.remaining = 0;
        y.done = true;
        y.finished = t_;
        --egress_flows_[static_cast<std::size_t>(y.u)];
        --ingress_flows_[static_cast<std::size_t>(y.v)];
        if (config_.link_bandwidth > 0 && --link_flows_[link(y)] == 0) link_flows_.erase(link(y));
        done_.push_back(active_[i]);
        if (y.holders == 0) free_.push_back(active_[i]);
      }
      active_.resize(keep);
      for (Flow d : done_) {
        const auto next = std::find_if(queued_.begin(), queued_.end(), [&](Flow q) { return same_pair(q, d); });
        if (next == queued_.end()) continue;
        activate(*next);
        queued_.erase(next);
      }
      done_.clear();
    }
    t_ = std::max(t_, t);
  }

  Flow allocate(const FlowState& f) {
    if (!free_.empty()) {
      const Flow id = free_.back();
      free_.pop_back();
      flows_[static_cast<std::size_t>(id)] = f;
      return id;
    }
    flows_.push_back(f);
    return static_cast<Flow>(flows_.size() - 1);
  }

  // Seconds since the clock's epoch (the steady clock's: never negative in practice).
  static double seconds_since_epoch(Clock::time_point t) {
    return std::max(0.0, std::chrono::duration<double>(t.time_since_epoch()).count());
  }
  // The time point `s` seconds after the epoch, saturated far beyond any deadline.
  static Clock::time_point time_at(double s) {
    constexpr double kFar = 1e9;  // seconds (~32 years): below the clock's int64 range
    if (!(s < kFar)) return Clock::time_point::max();
    return Clock::time_point(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)));
  }
  static double min_positive(double a, double b) {
    if (a <= 0) return b;
    if (b <= 0) return a;
    return std::min(a, b);
  }

  NetworkConfig config_;
  std::mutex mu_;
  double t_ = 0;                    // seconds since the epoch the flows have been advanced to
  std::vector<FlowState> flows_;    // slots, reused through free_
  std::vector<Flow> free_;
  std::vector<Flow> active_;        // flows with bytes on the wire
  std::vector<Flow> queued_;        // flows behind an earlier one of their pair, in order
  std::vector<Flow> done_;          // scratch of advance()
  std::vector<double> rates_;       // scratch of advance()
  std::vector<int> egress_flows_;   // [node] active flows leaving it
  std::vector<int> ingress_flows_;  // [node] active flows entering it
  std::unordered_map<std::int64_t, int> link_flows_;  // [u * nodes + v] active flows on the link (with link_bandwidth)
  std::unique_ptr<std::atomic<std::uint64_t>[]> sent_;  // [world rank]
};

}  // namespace disagmoe::host
