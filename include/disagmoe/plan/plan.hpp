// SPDX-License-Identifier: Apache-2.0
/// @file plan.hpp
/// `Plan`: what the allocator decided and why — group sizes, NIC split, layer
/// assignment, predicted step time and memory, roofline, and how the search went.
/// A plain value; JSON in plan_json.hpp.
#pragma once

#include <disagmoe/plan/analytic_model.hpp>
#include <disagmoe/plan/binding.hpp>
#include <disagmoe/plan/layer_assignment.hpp>
#include <disagmoe/plan/local_search.hpp>
#include <disagmoe/plan/roofline.hpp>

#include <sstream>
#include <string>
#include <vector>

namespace disagmoe::plan {

/// A second local search, from the first search's choice, with another step-time
/// oracle (disagmoe-plan: the simulator, schedule/plan_oracle.hpp). The analytic model
/// that seeds it is fast but blind to what only a timeline shows (fill and drain,
/// links shared by many transfers, lock-step ping-pong groups), so its choice is
/// checked, and moved where the second oracle finds a faster neighbour.
struct Refinement {
  bool ran = false;               ///< a second search was run
  Allocation from;                ///< the first search's choice, where it started
  double from_step_seconds = 0;   ///< second oracle at `from` (+inf: it cannot run there)
  double step_seconds = 0;        ///< second oracle at the plan's allocation
  long evaluations = 0;           ///< second-oracle calls
  bool budget_exhausted = false;  ///< stopped by its evaluation budget, not a local optimum
  std::string skipped;            ///< why no second search ran where one was asked for, else ""
  /// from_step_seconds / step_seconds (>= 1; 1 when `from` is locally optimal).
  [[nodiscard]] double gain() const { return step_seconds > 0 ? from_step_seconds / step_seconds : 1.0; }
};

/// A planned deployment of one model on one cluster.
struct Plan {
  ModelSpec model;                            ///< the model planned for
  ClusterSpec cluster;                        ///< the cluster planned on
  int seq_len = 0;                            ///< tokens per sequence
  int micro_batch = 0;                        ///< sequences per micro-batch
  int global_batch = 0;                       ///< sequences per step
  double optimizer_bytes = kDefaultMemory.optimizer_bytes;  ///< per parameter, as the memory model assumed
  bool embedding_head = false;  ///< the embedding and head priced as ops (PlanOptions::embedding_head)
  Allocation allocation;                      ///< the chosen allocation
  int attention_gpus = 0;                     ///< A GPUs in the cluster
  int attention_nics = 0;                     ///< A NICs in the cluster
  int ffn_gpus = 0;                           ///< F GPUs in the cluster
  int ffn_nics = 0;                           ///< F NICs in the cluster
  int idle_gpus = 0;                          ///< GPUs of the cluster in neither side
  Binding binding;                            ///< the constraint that binds the allocation
  /// Link bandwidth per A GPU, bytes/s (peak): the A NICs of a node × NIC bandwidth /
  /// the A GPUs of the node (of a mixed node under a mixed split, where they share the
  /// NICs one more way); on one node each GPU's intra-node link bandwidth.
  double attention_bandwidth_per_gpu = 0;
  double ffn_bandwidth_per_gpu = 0;           ///< the same for an F GPU
  int attention_group_size = 0;               ///< GPUs per A group
  int ffn_group_size = 0;                     ///< GPUs per F group (expert-parallel size)
  std::vector<std::vector<int>> layer_groups; ///< layers of each pair (interleaved)
  StepEstimate predicted;                     ///< analytic prediction of the chosen allocation
  RooflinePoint attention_roofline;           ///< attention on its roof
  RooflinePoint ffn_roofline;                 ///< FFN on its roof
  double turning_point = 0;                   ///< hardware Î of the cluster (FLOP/byte)
  Allocation seed;                            ///< MILP seed
  double seed_bound_seconds = 0;              ///< MILP objective at the seed (s per micro-batch)
  double seed_step_seconds = 0;               ///< oracle's step time at the seed
  double step_seconds = 0;                    ///< oracle's step time at its choice (refinement.from if refined)
  long evaluations = 0;                       ///< oracle calls of the local search
  long milp_nodes = 0;                        ///< branch-and-bound nodes of the seed
  bool budget_exhausted = false;              ///< the local search ran out of evaluations
  Refinement refinement;                      ///< the second search, if any (it chose `allocation`)

  /// seed_step_seconds / step_seconds (>= 1).
  [[nodiscard]] double gain() const { return step_seconds > 0 ? seed_step_seconds / step_seconds : 1.0; }

  /// One sentence on what bounds the step and why.
  [[nodiscard]] std::string explanation() const {
    std::ostringstream s;
    s.precision(3);
    const StepEstimate& e = predicted;
    const double ms = 1e3;
    s << "The step is bound by ";
    switch (e.bottleneck) {
      case Bottleneck::kAttention:
        s << "attention compute: each of the " << attention_gpus << " attention GPUs spends "
          << e.attention_compute_seconds * ms << " ms per micro-batch against " << e.ffn_compute_seconds * ms
          << " ms on the FFN side and " << std::max(e.attention_link_seconds, e.ffn_link_seconds) * ms
          << " ms on the links";
        break;
      case Bottleneck::kFfn:
        s << "FFN compute: " << e.ffn_compute_seconds * ms << " ms per micro-batch on the " << ffn_gpus
          << " FFN GPUs against " << e.attention_compute_seconds * ms << " ms of attention and "
          << std::max(e.attention_link_seconds, e.ffn_link_seconds) * ms << " ms on the links";
        break;
      default: {
        const bool f_side = e.ffn_link_seconds >= e.attention_link_seconds;
        s << "the network on the " << (f_side ? "FFN" : "attention")
          << " side: " << std::max(e.attention_link_seconds, e.ffn_link_seconds) * ms
          << " ms per micro-batch over " << (f_side ? ffn_nics : attention_nics) << " NICs against "
          << e.attention_compute_seconds * ms << " ms of attention and " << e.ffn_compute_seconds * ms
          << " ms of FFN compute";
      }
    }
    s << "; attention intensity " << attention_roofline.intensity << " FLOP/B is "
      << (attention_roofline.network_bound() ? "below" : "above") << " its turning point "
      << attention_roofline.turning_point() << ", FFN intensity " << ffn_roofline.intensity << " FLOP/B is "
      << (ffn_roofline.network_bound() ? "below" : "above") << " its " << ffn_roofline.turning_point();
    s << "; each FFN GPU has " << ffn_bandwidth_per_gpu / 1e9 << " GB/s of network bandwidth against "
      << attention_bandwidth_per_gpu / 1e9 << " GB/s per attention GPU (" << ffn_bandwidth_per_gpu / attention_bandwidth_per_gpu
      << "x";
    if (allocation.attention_nics_per_node + allocation.ffn_nics_per_node > 0) {
      s << ": a node's NICs split " << allocation.attention_nics_per_node << " + " << allocation.ffn_nics_per_node
        << " between " << allocation.attention_gpus_per_node << " attention and " << allocation.ffn_gpus_per_node
        << " FFN GPUs";
      if (allocation.mixed_nodes > 0)
        s << ", or " << allocation.attention_gpus_per_node + 1 << " and " << allocation.ffn_gpus_per_node - 1
          << " on " << allocation.mixed_nodes << " mixed nodes";
    }
    s << ")";
    if (e.ring_bound) {  // the ping-pong window bounds the waves in flight, whatever the step's count
      const double in_flight = af_in_flight(allocation.groups, e.waves, allocation.group_factor);
      s << "; only " << in_flight;
      if (in_flight < e.waves) s << " of the step's " << e.waves;
      s << " waves of micro-batches circulate at once through the " << layer_groups.size()
        << "-pair ring, too few to hide its round trip (stretched by the waves sharing each resource), "
           "so the step is latency-bound";
    }
    s << ".";
    return s.str();
  }
};

/// Assembles a Plan for allocation `x` found by search `r` (seed MILP objective
/// `seed_bound`, `milp_nodes` branch-and-bound nodes). O(layers · k).
inline Plan make_plan(const AnalyticModel& model, const Allocation& x, const SearchResult& r, double seed_bound,
                      long milp_nodes) {
  const ModelSpec& m = model.model();
  const ClusterSpec& c = model.cluster();
  Plan p;
  p.model = m;
  p.cluster = c;
  p.seq_len = m.seq_len;
  p.micro_batch = m.micro_batch;
  p.global_batch = model.options().global_batch;
  p.optimizer_bytes = model.options().memory.optimizer_bytes;
  p.embedding_head = model.options().embedding_head;
  p.allocation = x;
  p.attention_gpus = attention_gpus(x, c);
  p.attention_nics = attention_nics(x, c);
  p.ffn_gpus = ffn_gpus(x, c);
  p.ffn_nics = ffn_nics(x, c);
  p.idle_gpus = c.gpus() - p.attention_gpus - p.ffn_gpus;
  p.binding = binding_constraint(model, x);
  p.attention_group_size = model.attention_group_size(x);
  p.ffn_group_size = model.ffn_group_size(x);
  // Per GPU on the nodes where a side's GPUs share its NICs most ways (AnalyticModel::
  // attention_bandwidth): a mixed node's A GPUs, and the F GPUs of the other nodes.
  const auto per_gpu = [&](int nics, int gpus) {
    return c.nodes == 1 ? c.intra_node_bandwidth : double(nics) * c.nic_bandwidth / gpus;
  };
  p.attention_bandwidth_per_gpu =
      per_gpu(x.attention_nics_per_node, x.attention_gpus_per_node + (x.mixed_nodes > 0 ? 1 : 0));
  p.ffn_bandwidth_per_gpu = per_gpu(x.ffn_nics_per_node, x.ffn_gpus_per_node);
  p.layer_groups = interleaved_groups(m.layers, x.groups);
  p.predicted = model.estimate(x);
  const RooflineModel roof(model, x);
  p.attention_roofline = roof.attention();
  p.ffn_roofline = roof.ffn();
  p.turning_point = roof.turning_point();
  p.seed = r.seed;
  p.seed_bound_seconds = seed_bound;
  p.seed_step_seconds = r.seed_step_seconds;
  p.step_seconds = r.best_step_seconds;
  p.evaluations = r.evaluations;
  p.milp_nodes = milp_nodes;
  p.budget_exhausted = r.budget_exhausted;
  return p;
}

}  // namespace disagmoe::plan
