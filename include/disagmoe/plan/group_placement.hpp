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
/// same number of its GPUs on each, except under a mixed split (Allocation::mixed_nodes),
/// where the first `mixed` of its nodes hold `mixed_gpus` of its GPUs each and the
/// others an equal share of the rest.
struct GroupNodes {
  int first_node = 0;  ///< first node the group occupies
  int nodes = 1;       ///< nodes it spans
  int gpus = 1;        ///< GPUs of the group
  int mixed = 0;       ///< its first nodes that hold `mixed_gpus` GPUs of it each (0: none)
  int mixed_gpus = 0;  ///< GPUs of the group on each of those
  /// GPUs of the group on each of its nodes that are not mixed.
  [[nodiscard]] constexpr int gpus_per_node() const {
    return nodes > mixed ? (gpus - mixed * mixed_gpus) / (nodes - mixed) : 0;
  }
  /// GPUs of the group on `node` (0 outside its nodes).
  [[nodiscard]] constexpr int gpus_on(int node) const {
    if (node < first_node || node >= first_node + nodes) return 0;
    return node - first_node < mixed ? mixed_gpus : gpus_per_node();
  }
};

/// Group i of `size` GPUs when every node gives `per_node` GPUs to this role: groups
/// fill the nodes in order, and a group spread over several nodes takes
/// gcd(size, per_node) GPUs on each (an even spread). O(log size).
constexpr GroupNodes group_nodes(int i, int size, int per_node) {
  const int per = std::gcd(size, per_node);
  return {per_node > 0 ? (i * size) / per_node : 0, per > 0 ? size / per : 1, size};
}

/// Group i of p under a mixed split: the role has `per_node` GPUs on most nodes and
/// `mixed_per_node` on `mixed_nodes` of the `nodes` (p divides both counts of nodes).
/// Pair i takes the i-th block of nodes / p whole nodes, the first mixed_nodes / p of
/// them mixed, so that every group has the same GPUs. O(1).
constexpr GroupNodes mixed_group_nodes(int i, int p, int nodes, int per_node, int mixed_nodes,
                                       int mixed_per_node) {
  const int block = nodes / p, mixed = mixed_nodes / p;
  return {i * block, block, mixed * mixed_per_node + (block - mixed) * per_node, mixed, mixed_per_node};
}

/// Share of the bytes a GPU of `from` sends when they spread evenly over the GPUs of
/// `to` that land on a GPU of its own node: Σ over shared nodes of the sender's share of
/// GPUs there times the receiver's. 1 when both groups sit on one and the same node, 0
/// when they share none. O(shared nodes) under a mixed split, else O(1).
constexpr double same_node_share(const GroupNodes& from, const GroupNodes& to) {
  const int lo = std::max(from.first_node, to.first_node);
  const int hi = std::min(from.first_node + from.nodes, to.first_node + to.nodes);
  if (hi <= lo || from.nodes <= 0 || to.gpus <= 0) return 0.0;
  if (from.mixed == 0 && to.mixed == 0) return double(hi - lo) / from.nodes * to.gpus_per_node() / to.gpus;
  double pairs = 0;
  for (int n = lo; n < hi; ++n) pairs += double(from.gpus_on(n)) * to.gpus_on(n);
  return pairs / (double(from.gpus) * to.gpus);
}

/// Shares of a group's bytes sent evenly to all of its own GPUs (an all-to-all or ring
/// over the group) that cross the NICs and that stay on a node's NVLink: the own GPU's
/// share moves nowhere. O(nodes) under a mixed split, else O(1).
struct OwnGroupShares {
  double nic = 0, nvlink = 0;
};
constexpr OwnGroupShares own_group_shares(const GroupNodes& g) {
  if (g.gpus <= 0) return {};
  if (g.mixed == 0) {
    const int per = g.gpus_per_node();
    return {double(g.gpus - per) / g.gpus, double(per - 1) / g.gpus};
  }
  double nic = 0, nvl = 0;
  for (int n = g.first_node; n < g.first_node + g.nodes; ++n) {
    const double c = g.gpus_on(n);
    nic += c * (g.gpus - c);
    nvl += c * (c - 1);
  }
  const double g2 = double(g.gpus) * g.gpus;
  return {nic / g2, nvl / g2};
}

}  // namespace disagmoe::plan
