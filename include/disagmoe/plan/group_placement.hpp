// SPDX-License-Identifier: Apache-2.0
/// @file group_placement.hpp
/// Where the GPU groups of a disaggregated layout sit on the cluster's nodes, and which
/// share of a transfer between two groups stays inside a node (NVLink) rather than
/// crossing the NICs. The planner prices AF-Pipe's transfers with it and the simulator
/// places its workers and splits their bytes with it, so both see the same locality.
#pragma once

#include <algorithm>
#include <numeric>

namespace disagmoe::plan {

/// The nodes a group of `gpus` GPUs occupies: [first_node, first_node + nodes), the
/// same number of its GPUs on each.
struct GroupNodes {
  int first_node = 0;  ///< first node the group occupies
  int nodes = 1;       ///< nodes it spans (divides gpus)
  int gpus = 1;        ///< GPUs of the group
  /// GPUs of the group on each of its nodes.
  [[nodiscard]] constexpr int gpus_per_node() const { return nodes > 0 ? gpus / nodes : 0; }
};

/// Group i of `size` GPUs when every node gives `per_node` GPUs to this role: groups
/// fill the nodes in order, and a group spread over several nodes takes
/// gcd(size, per_node) GPUs on each (an even spread). O(log size).
constexpr GroupNodes group_nodes(int i, int size, int per_node) {
  const int per = std::gcd(size, per_node);
  return {per_node > 0 ? (i * size) / per_node : 0, per > 0 ? size / per : 1, size};
}

/// Share of the bytes a GPU of `from` sends when they spread evenly over the GPUs of
/// `to` that land on a GPU of its own node: the nodes both groups occupy, over the
/// sender's nodes, times the receiver's GPUs per node over its GPUs. 1 when both
/// groups sit on one and the same node, 0 when they share none. O(1).
constexpr double same_node_share(const GroupNodes& from, const GroupNodes& to) {
  const int lo = std::max(from.first_node, to.first_node);
  const int hi = std::min(from.first_node + from.nodes, to.first_node + to.nodes);
  if (hi <= lo || from.nodes <= 0 || to.gpus <= 0) return 0.0;
  return double(hi - lo) / from.nodes * to.gpus_per_node() / to.gpus;
}

}  // namespace disagmoe::plan
