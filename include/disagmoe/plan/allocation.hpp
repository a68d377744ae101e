// SPDX-License-Identifier: Apache-2.0
/// @file allocation.hpp
/// An allocation of a cluster to DisagMoE's attention (A) and FFN (F) groups.
///
/// Layout: every node gives `attention_gpus_per_node` GPUs and
/// `attention_nics_per_node` NICs to A workers and `ffn_gpus_per_node` GPUs and
/// `ffn_nics_per_node` NICs to F workers, except that under a mixed split
/// (Allocation::mixed_nodes) some nodes move one GPU from F to A; the A GPUs of the
/// cluster form `groups` (p) equal A groups and the F GPUs p equal F groups; pair i holds layers i, i+p, …
/// (layer_assignment.hpp). A groups are data parallel (each A GPU runs whole
/// micro-batches); F groups are expert parallel over the experts of their layers.
/// The analytic model puts A↔F bytes between GPUs of one node on NVLink and the rest on
/// the NICs each side owns (AnalyticModel::pair_link_bytes); the MILP's bound counts
/// every A↔F byte on the NICs.
#pragma once

#include <disagmoe/plan/recompute.hpp>
#include <disagmoe/spec/cluster_spec.hpp>

namespace disagmoe::plan {

/// One candidate allocation (see the file comment for the layout).
struct Allocation {
  int groups = 1;                   ///< p: A/F group pairs
  int attention_gpus_per_node = 1;  ///< GPUs per node given to A workers
  int ffn_gpus_per_node = 1;        ///< GPUs per node given to F workers
  int attention_nics_per_node = 0;  ///< NICs per node given to A workers (0 on one node)
  int ffn_nics_per_node = 0;        ///< NICs per node given to F workers (0 on one node)
  /// Full activation recomputation per side: an A or F worker recomputes only when its
  /// own memory needs it, and only its own compute pays the extra forward pass.
  Recompute recompute{};
  /// AF-Pipe's stage alignment: F_l returns layer l's output straight to A_{l+1}, fused
  /// with the dispatch of layer l + 1 (DisagMoE, arXiv 2605.11005, AF-Pipe "Stage
  /// alignment"); false: F_l returns to A_l over the pair's own links and A_l hands one
  /// row per token to A_{l+1}. Which is faster depends on where the groups sit
  /// (AnalyticModel::pair_link_bytes), so the search chooses it per allocation.
  bool fuse = true;
  /// Context parallelism of the A groups (PlanOptions::context_parallel, resolved): the
  /// analytic model's own degree; the simulation of the allocation uses it too.
  int context_parallel = 1;
  /// AF-Pipe's ping-pong group in waves per pair (PlanOptions::group_factor, resolved).
  int group_factor = 2;
  /// A mixed per-node split: this many nodes give one GPU more to A and one fewer to F
  /// than attention_gpus_per_node and ffn_gpus_per_node say, with the same NICs, so the
  /// A GPUs per node average a + k / nodes, between two integer splits. Each pair takes
  /// nodes / p whole nodes, k / p of them mixed (mixed_group_nodes), so p divides the
  /// nodes and k; 0 <= k < nodes, ffn_gpus_per_node >= 2, no context parallelism (its
  /// rings need the same A GPUs on every node). A mixed node's A GPUs share its A NICs
  /// one GPU more ways, so they set their group's per-GPU NIC rate. Planner and simulator
  /// both spread a group's NVLink share evenly over its GPUs; a mixed node's A GPUs, with
  /// one local F GPU fewer, send somewhat more over the NIC than that mean (0.545 of their
  /// bytes against 0.509 at p = 2 on 4 nodes, 2/6 + 2 mixed). 0: every node alike.
  int mixed_nodes = 0;
  friend bool operator==(const Allocation&, const Allocation&) = default;
};

/// A GPUs in the cluster.
constexpr int attention_gpus(const Allocation& a, const ClusterSpec& c) {
  return c.nodes * a.attention_gpus_per_node + a.mixed_nodes;
}
/// F GPUs in the cluster.
constexpr int ffn_gpus(const Allocation& a, const ClusterSpec& c) {
  return c.nodes * a.ffn_gpus_per_node - a.mixed_nodes;
}
/// A NICs in the cluster.
constexpr int attention_nics(const Allocation& a, const ClusterSpec& c) { return c.nodes * a.attention_nics_per_node; }
/// F NICs in the cluster.
constexpr int ffn_nics(const Allocation& a, const ClusterSpec& c) { return c.nodes * a.ffn_nics_per_node; }

}  // namespace disagmoe::plan
