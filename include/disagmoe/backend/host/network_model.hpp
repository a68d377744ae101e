// SPDX-License-Identifier: Apache-2.0
/// @file network_model.hpp
/// An emulated network for the loopback transport, so that communication costs wall
/// time on one CPU and overlap of compute with communication becomes measurable.
///
/// Model (a store-and-forward "LogGP without o/g" reservation model, cf. Alexandrov et
/// al., "LogGP", SPAA 1995): ranks live on emulated nodes; every node has one egress
/// and one ingress NIC shared by its ranks. A message of b bytes from node u to node
/// v (u != v) occupies u's egress and v's ingress NIC, both first-come first-served,
/// for b / min(link, nic) seconds, and is delivered `latency` after it leaves the
/// wire. Messages inside one node use `intra_node_bandwidth` and no NIC.
#pragma once

#include <disagmoe/error.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
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

/// Thread-safe reservation of NIC time. O(1) per message.
class NetworkModel {
 public:
  using Clock = std::chrono::steady_clock;

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
    egress_free_.assign(static_cast<std::size_t>(nodes), Clock::time_point{});
    ingress_free_ = egress_free_;
    sent_ = std::make_unique<std::atomic<std::uint64_t>[]>(static_cast<std::size_t>(world_size));
  }

  /// Reserves the wire for `bytes` from world rank `src` to `dst` starting no earlier
  /// than `now`; returns the time the message is delivered.
  Clock::time_point reserve(int src, int dst, std::size_t bytes, Clock::time_point now) {
    sent_[static_cast<std::size_t>(src)].fetch_add(bytes, std::memory_order_relaxed);
    const int u = config_.node_of_rank[static_cast<std::size_t>(src)];
    const int v = config_.node_of_rank[static_cast<std::size_t>(dst)];
    if (u == v) {
      return now + seconds(serialise(bytes, config_.intra_node_bandwidth) + config_.intra_node_latency);
    }
    const double bw = min_positive(config_.nic_bandwidth, config_.link_bandwidth);
    std::lock_guard lock(mu_);
    auto& eg = egress_free_[static_cast<std::size_t>(u)];
    auto& in = ingress_free_[static_cast<std::size_t>(v)];
    const auto start = std::max({now, eg, in});
    const auto done = start + seconds(serialise(bytes, bw));
    eg = done;
    in = done;
    return done + seconds(config_.latency);
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
  static double serialise(std::size_t bytes, double bandwidth) {
    return bandwidth > 0 ? static_cast<double>(bytes) / bandwidth : 0.0;
  }
  static double min_positive(double a, double b) {
    if (a <= 0) return b;
    if (b <= 0) return a;
    return std::min(a, b);
  }
  static Clock::duration seconds(double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }

  NetworkConfig config_;
  std::mutex mu_;
  std::vector<Clock::time_point> egress_free_;
  std::vector<Clock::time_point> ingress_free_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> sent_;  // [world rank]
};

}  // namespace disagmoe::host
