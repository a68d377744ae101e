// SPDX-License-Identifier: Apache-2.0
/// @file cost_adapter.hpp
/// Turns ModelSpec + ClusterSpec + a layout into a schedule Problem, with every cost
/// taken from the planner's analytic cost model (plan/cost_model.hpp): FLOPs by pass
/// at explicit efficiency factors, A→F / F→A / all-to-all bytes, DP all-reduce bytes
/// and activation bytes. Two layouts: colocated expert parallelism (the baselines)
/// and disaggregated A/F groups (AF-Pipe), the latter with the planner's per-node
/// split of GPUs and NICs (plan/allocation.hpp's layout).
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/plan/allocation.hpp>
#include <disagmoe/plan/cost_model.hpp>
#include <disagmoe/plan/group_placement.hpp>
#include <disagmoe/plan/layer_assignment.hpp>
#include <disagmoe/plan/plan_options.hpp>
#include <disagmoe/schedule/problem.hpp>
#include <disagmoe/spec/cluster_spec.hpp>
#include <disagmoe/spec/model_size.hpp>
#include <disagmoe/spec/model_spec.hpp>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

namespace disagmoe::schedule {

/// Knobs of the cost adapter; every factor explicit.
/// The defaults are the planner's (plan::PlanOptions): the same batch, training state
/// and usable HBM, so a plan and its simulation price the same step. The SMs comm
/// kernels take are the cluster's (ClusterSpec::kernel_comm_sm_fraction and
/// rdma_comm_sm_fraction), as in the planner.
struct CostOptions {
  plan::Efficiency efficiency{};              ///< fractions of peak FLOP/s and link bandwidth
  plan::MemoryOptions memory = plan::kDefaultMemory;  ///< gradient/optimizer bytes, ZeRO-1, recomputation
  bool dedup = true;                          ///< send each token once per destination GPU
  /// Sequences per optimizer step; 0: plan::default_global_batch (4 Mi tokens / seq_len).
  int global_batch = 0;
  int micro_batches = 0;                      ///< pipeline micro-batches per step; 0: derived from global_batch
  double memory_fraction = plan::kDefaultMemoryFraction;  ///< usable share of HBM when judging whether a layout fits
  /// Schedule the embedding and the output head as ops (Problem::embedding_head): the
  /// baselines on their first and last stage (as Megatron places them), AF-Pipe its
  /// embedding on the first A group and its head vocabulary-parallel over all p of them
  /// (schedule/afpipe.hpp), which the planner prices (plan::PlanOptions::embedding_head).
  /// Off by default, as in the planner; off, MFU counts neither their time nor their
  /// FLOPs (it stays the FLOP rate of what is simulated).
  bool embedding_head = false;
  /// Context parallelism of the attention (data-parallel) GPUs: each micro-batch's
  /// sequences split over this many GPUs of one node, exchanging keys and values in a
  /// ring (plan::context_parallel_ring_seconds). It divides the A GPUs per node and the
  /// A group size (AF-Pipe) or the GPUs per stage and per node (colocated). 1: none.
  /// 0: simulate_best tries each of plan::context_parallel_degrees and keeps the best
  /// (the problems themselves need a degree).
  int context_parallel = 1;
};

/// Sequences per step under `o` for model `m`: o.global_batch, or the planner's default.
inline int global_batch_of(const ModelSpec& m, const CostOptions& o) {
  return o.global_batch != 0 ? o.global_batch : plan::default_global_batch(m);
}

/// The simulated machine's latencies and SM shares of comm kernels, from the cluster.
inline Network network_of(const ClusterSpec& c) {
  Network n;
  n.nic_latency = c.nic_latency;
  n.nvlink_latency = c.intra_node_latency;
  n.comm_sm_fraction = c.kernel_comm_sm_fraction;
  n.rdma_sm_fraction = c.rdma_comm_sm_fraction;
  return n;
}

/// Colocated expert parallelism with Megatron-Core's parallel folding (Liu et al. 2025,
/// "MoE Parallel Folding", arXiv 2504.14960): `stages` pipeline stages, each a worker of
/// D = gpus / stages GPUs that run attention data-parallel over all D and the experts
/// as D / ep expert-parallel groups of `ep` consecutive GPUs (expert data parallelism
/// EDP = D / ep). Optimizer states are sharded over each parameter's data-parallel group
/// when CostOptions::memory.zero1 is set (the distributed optimizer).
struct ColocatedLayout {
  int stages = 4;
  /// Expert-parallel degree; it divides D and the experts. 0: min(D, experts), the
  /// expert parallelism tied to pipeline depth.
  int ep = 0;
  /// DeepEP's internode dispatch: a token crosses the NIC once per destination node
  /// (to the GPU of its own local rank there) and is forwarded over NVLink to the GPUs
  /// of its experts; false: once per destination GPU. Needs CostOptions::dedup.
  bool node_dedup = false;
};

/// Rows (hidden-size vectors) per token of one all-to-all over an expert-parallel group
/// of `ep` GPUs placed `per_node` to a node (consecutive ranks), experts spread evenly
/// (ep divides them), routing uniform over k-subsets. Without `dedup`: one row per
/// chosen expert. With it, one per distinct destination GPU (DeepEP's intranode
/// dispatch); `node_dedup` in addition sends one row per distinct remote node over the
/// NIC, which the receiving GPU forwards over NVLink to the other GPUs hit on its node.
struct AllToAllRows {
  double rows = 0;         ///< rows per token (own GPU included): the op's bytes
  double nic_rows = 0;     ///< of them, rows leaving each GPU's node over the NIC
  double nvlink_rows = 0;  ///< rows each GPU sends over NVLink (same-node destinations + forwarding)
};

/// AllToAllRows of `m` (see there). With G = ep, q = per_node GPUs per node, n = G / q
/// nodes, a GPU is hit with probability h = rows/G and a node with probability h_n:
/// per GPU, the NIC carries (G − q)·h rows, or (n − 1)·h_n with node dedup, and NVLink
/// (q − 1)·h, or n·(q − 1)·h with node dedup (each GPU also relays, on average, as many
/// rows as its own tokens make others relay). ConfigError unless ep divides the experts
/// and per_node divides ep. O(top_k).
inline AllToAllRows all_to_all_rows(const ModelSpec& m, int ep, int per_node, bool dedup, bool node_dedup) {
  expect(ep >= 1 && m.experts % ep == 0, "ep", ep,
         "a positive divisor of the experts (" + std::to_string(m.experts) + ")");
  expect(per_node >= 1 && ep % per_node == 0, "gpus_per_node", per_node,
         "a positive divisor of the expert-parallel degree (" + std::to_string(ep) + ")");
  const int n = ep / per_node;
  AllToAllRows r;
  r.rows = dedup ? plan::expected_distinct_gpus(m.experts, m.top_k, ep) : double(m.top_k);
  const double h = r.rows / ep;
  if (dedup && node_dedup) {
    r.nic_rows = (n - 1) * plan::expected_distinct_gpus(m.experts, m.top_k, n) / n;
    r.nvlink_rows = n * (per_node - 1) * h;
  } else {
    r.nic_rows = (ep - per_node) * h;
    r.nvlink_rows = (per_node - 1) * h;
  }
  return r;
}

/// Disaggregated layout (plan::Allocation's fields): every node gives
/// `attention_gpus_per_node` GPUs and `attention_nics_per_node` NICs to A workers and
/// the `ffn_*` counts to F workers, but `mixed_nodes` of them move one GPU from F to A
/// (plan::Allocation::mixed_nodes); the A GPUs form `groups` equal groups, as do the F GPUs.
struct AfLayout {
  int groups = 1;
  int attention_gpus_per_node = 4;
  int ffn_gpus_per_node = 4;
  int attention_nics_per_node = 4;
  int ffn_nics_per_node = 4;
  int mixed_nodes = 0;
};

namespace detail {

// A group placed at `at` (plan::group_nodes, as the planner places it), its role holding
// `per_node` GPUs and `nics_per_node` NICs of each of its nodes (the most GPUs of its
// nodes under a mixed split: those GPUs share the NICs most ways and set the rate).
inline Worker place_group(const ClusterSpec& c, const plan::GroupNodes& at, int per_node, int nics_per_node,
                          double eff) {
  Worker w;
  w.gpus = at.gpus;
  w.nodes = at.nodes;
  w.first_node = at.first_node;
  w.mixed_nodes = at.mixed;
  w.mixed_gpus = at.mixed_gpus;
  const double nic_total = double(nics_per_node) * c.nic_bandwidth * eff;
  w.nic_bandwidth = per_node > 0 ? nic_total / per_node : 0;
  w.nvlink_bandwidth = c.intra_node_bandwidth * eff;
  w.peak_flops = c.gpu.peak_flops_bf16;
  return w;
}

inline double flops_seconds(double flops, const ClusterSpec& c, DType t, double eff) {
  return plan::compute_seconds(flops, c, t, eff);
}

// Micro-batches per step: ⌊global_batch / (micro_batch × data-parallel width)⌋, so that
// layouts whose width does not divide the batch still run (tokens/s stays comparable).
inline int derive_micro_batches(const ModelSpec& m, const CostOptions& o, int dp, std::string_view what) {
  if (o.micro_batches > 0) return o.micro_batches;
  const int batch = global_batch_of(m, o);
  expect(batch >= 1, "global_batch", batch, "a positive number of sequences");
  const long per = long(m.micro_batch) * dp;
  expect(batch / per >= 1, "global_batch", batch,
         "at least micro_batch (" + std::to_string(m.micro_batch) + ") x " + std::string(what) + " (" +
             std::to_string(dp) + ") = " + std::to_string(per) + " sequences");
  return static_cast<int>(batch / per);
}

// Context parallelism of degree cp (CostOptions::context_parallel): a GPU's micro-batch
// holds T / cp tokens, so every per-micro-batch cost and byte count is 1/cp of the whole
// micro-batch's, except that an attention pass lasts at least its key/value ring (ring
// attention overlaps the two). Weights, their gradients and state do not change.
// Before add_recompute, so that a recomputed forward pays its ring again.
inline void apply_context_parallel(LayerCost& x, int cp, const plan::RingAttentionSeconds& ring) {
  if (cp == 1) return;
  const double s = 1.0 / cp;
  x.attn_fwd = std::max(x.attn_fwd * s, ring.forward);
  x.attn_bwd = std::max(x.attn_bwd * s, ring.backward);
  for (double* v : {&x.attn_wgrad, &x.expert_fwd, &x.expert_bwd, &x.expert_wgrad, &x.dispatch_bytes,
                    &x.combine_bytes, &x.hidden_bytes, &x.attn_activation_bytes, &x.expert_activation_bytes})
    *v *= s;
}

// ConfigError unless cp divides the `group` GPUs of a group and the `per_node` GPUs its
// role has on each node: then each ring of cp consecutive ranks stays inside one group
// and one node (its key/value traffic runs over NVLink); and unless no GPU gets less
// than a token of each sequence of `m`.
inline void expect_context_parallel(int cp, int group, int per_node, std::string_view what, const ModelSpec& m) {
  expect(cp >= 1 && group % cp == 0 && per_node % cp == 0, "context_parallel", cp,
         "a positive divisor of the " + std::string(what) + " (" + std::to_string(group) +
             ") and of the GPUs per node (" + std::to_string(per_node) + ")");
  plan::expect_context_parallel_fits("context_parallel", cp, m);
}

// Full recomputation reruns each forward right before its backward (Korthikanti et al.
// 2022 §5; the planner's "compute × 4/3"), on the critical path of the input gradient,
// on each side that recomputes.
inline void add_recompute(LayerCost& x, const CostOptions& o) {
  if (o.memory.recompute.attention) x.attn_bwd += x.attn_fwd;
  if (o.memory.recompute.ffn) x.expert_bwd += x.expert_fwd;
}

// The busiest GPU of an F group of `g` when the E experts of a layer do not split
// evenly: it holds ceil(E / g) of them (plan/analytic_model.hpp's rule). Under uniform
// routing its token-expert pairs, hence its expert FLOPs, are ceil(E/g)/E of the layer's
// (`compute` is that over the even share 1/g), and its A↔F rows are
// plan::ffn_busiest_rows times the mean. Both are exactly 1 when g divides E.
struct FfnShare {
  int experts = 1;       ///< ceil(E / g)
  double compute = 1;    ///< busiest GPU's expert work over the mean
  double rows = 1;       ///< busiest GPU's rows over the mean (plan::ffn_busiest_rows)
  FfnShare(const ModelSpec& m, int g, bool dedup)
      : experts((m.experts + g - 1) / g), compute(plan::ffn_busiest_share(m, g)), rows(plan::ffn_busiest_rows(m, g, dedup)) {}
};

// The FLOPs MFU counts per GPU micro-batch: every layer, and the output head where it
// runs as ops (CostOptions::embedding_head; the embedding lookup has no FLOPs).
inline double model_flops_per_sequence_batch(const ModelSpec& m, bool head) {
  return plan::model_layer_flops(m).total() + (head ? plan::head_flops(m).total() : 0);
}

// The embedding and the output head of one micro-batch on one GPU, whole
// (plan::embedding_head_seconds: the planner prices the same seconds).
inline EmbeddingHeadCost embedding_head_cost(const ModelSpec& m, const ClusterSpec& c, const CostOptions& o,
                                             int cp = 1) {
  const double gb = o.memory.grad_bytes > 0 ? o.memory.grad_bytes : bytes_of(m.dtype);
  const plan::EmbeddingHeadSeconds s = plan::embedding_head_seconds(m, c, o.efficiency.attention, gb, cp);
  return {s.embed_fwd, s.embed_wgrad, s.head_fwd, s.head_bwd, s.head_wgrad};
}

}  // namespace detail

/// The Problem of colocated EP on `c`: stage s = worker s with D = gpus/stages GPUs;
/// per GPU and micro-batch (micro_batch × seq_len tokens): attention (+ router, + dense
/// FFN on dense layers) at efficiency.attention, experts (+ shared) at efficiency.ffn,
/// an all-to-all of dispatch_bytes per GPU over the expert-parallel group of ep GPUs
/// (all_to_all_rows: its NIC and NVLink loads), DP all-reduce (ring bytes) of the
/// attention and shared weights over D and of the routed experts over EDP = D / ep.
/// State per GPU: E / ep routed experts, the rest replicated; ZeRO-1 shards each
/// optimizer state over its data-parallel group. Micro-batches per step:
/// ⌊global_batch / (micro_batch × D)⌋. Throws ConfigError for a layout that does not
/// divide the cluster or an ep that does not divide D and the experts. O(layers).
inline Problem colocated_problem(const ModelSpec& m, const ClusterSpec& c, ColocatedLayout lay,
                                 const CostOptions& o = {}) {
  validate(m);
  validate(c);
  plan::validate(o.efficiency);
  expect(lay.stages >= 1 && c.gpus() % lay.stages == 0, "stages", lay.stages,
         "a positive divisor of the cluster's GPUs (" + std::to_string(c.gpus()) + ")");
  const int g = c.gpus() / lay.stages;
  const int ep = lay.ep > 0 ? lay.ep : std::gcd(g, m.experts);
  expect(g % ep == 0 && m.experts % ep == 0, "ep", lay.ep,
         "a divisor of both the GPUs per stage (" + std::to_string(g) + ") and the experts (" +
             std::to_string(m.experts) + ")");
  const int per_node = std::min(g, c.gpus_per_node), cp = o.context_parallel;
  detail::expect_context_parallel(cp, g, c.gpus_per_node, "GPUs per stage", m);
  const AllToAllRows rows = all_to_all_rows(m, ep, std::gcd(ep, per_node), o.dedup, lay.node_dedup);
  Problem p;
  for (int s = 0; s < lay.stages; ++s) {
    Worker w = detail::place_group(c, plan::group_nodes(s, g, per_node), per_node,
                                   c.nics_per_node * per_node / c.gpus_per_node, o.efficiency.network);
    w.first_node = s * g / c.gpus_per_node;
    w.name = "S" + std::to_string(s);
    w.role = Role::kColocated;
    w.a2a_nic_share = rows.nic_rows / rows.rows;
    w.a2a_nvlink_share = rows.nvlink_rows / rows.rows;
    // Megatron posts pipeline sends on the pipeline group's communicator, which PyTorch's
    // ProcessGroupNCCL serves on its own CUDA stream: an expert-parallel all-to-all (its
    // own group, its own stream) never queues behind one.
    w.posted_sends = true;
    p.workers.push_back(w);
  }
  p.network = network_of(c);
  p.micro_batches = detail::derive_micro_batches(
      m, o, g / cp, cp > 1 ? "GPUs per stage / context_parallel" : "GPUs per stage");
  const plan::DispatchOptions d{ep, o.dedup, 0};
  const double eb = bytes_of(m.dtype), t = double(m.tokens_per_micro_batch());
  const double gb = o.memory.grad_bytes > 0 ? o.memory.grad_bytes : eb;
  const int edp = g / ep;
  for (int l = 0; l < m.layers; ++l) {
    const plan::LayerCost lc = plan::layer_cost(m, l, d);
    LayerCost x;
    x.moe = lc.moe;
    plan::PassFlops a = lc.attention_side(), f = lc.experts + lc.shared_experts;
    if (!lc.moe) a += lc.dense_ffn;  // a dense layer's FFN runs locally, no all-to-all
    x.attn_fwd = detail::flops_seconds(a.forward, c, m.dtype, o.efficiency.attention);
    x.attn_bwd = detail::flops_seconds(a.backward_input, c, m.dtype, o.efficiency.attention);
    x.attn_wgrad = detail::flops_seconds(a.backward_weight, c, m.dtype, o.efficiency.attention);
    x.expert_fwd = detail::flops_seconds(f.forward, c, m.dtype, o.efficiency.ffn);
    x.expert_bwd = detail::flops_seconds(f.backward_input, c, m.dtype, o.efficiency.ffn);
    x.expert_wgrad = detail::flops_seconds(f.backward_weight, c, m.dtype, o.efficiency.ffn);
    x.dispatch_bytes = lc.moe ? lc.dispatch_bytes : 0;  // t × rows.rows rows
    x.combine_bytes = lc.moe ? lc.return_bytes : 0;
    x.hidden_bytes = t * m.hidden * eb;
    x.attn_grad_bytes = plan::attention_grad_all_reduce_bytes(m, l, g, o.memory.grad_bytes);
    const double routed = lc.moe ? double(m.experts) * double(expert_params(m)) : 0;
    const double replicated = double(plan::ffn_side_params(m, l)) - routed;  // shared experts or dense FFN
    (lc.moe ? x.expert_grad_bytes : x.attn_grad_bytes) += plan::ring_all_reduce_bytes(replicated * gb, g);
    x.expert_grad_bytes += plan::ring_all_reduce_bytes(routed / ep * gb, edp);
    const plan::MemoryBytes as = plan::state_bytes(m, double(plan::attention_side_params(m, l)), g, o.memory);
    const plan::MemoryBytes rs = plan::state_bytes(m, routed / ep, edp, o.memory);
    const plan::MemoryBytes fs = plan::state_bytes(m, replicated, g, o.memory);
    x.attn_state_bytes = as.parameters + as.gradients + as.optimizer;
    x.expert_state_bytes = rs.parameters + rs.gradients + rs.optimizer + fs.parameters + fs.gradients + fs.optimizer;
    // A dense layer's FFN runs with the attention part (above), so it recomputes, and
    // keeps its activations, as the attention part does.
    plan::MemoryOptions dense = o.memory;
    dense.recompute.ffn = o.memory.recompute.attention;
    x.attn_activation_bytes = plan::attention_activation_bytes(m, l, o.memory) +
                              (lc.moe ? 0 : plan::ffn_activation_bytes(m, l, dense, d));
    x.expert_activation_bytes = lc.moe ? plan::ffn_activation_bytes(m, l, o.memory, d) : 0;
    detail::apply_context_parallel(x, cp,
                                   plan::context_parallel_ring_seconds(m, l, cp, c, o.efficiency.network));
    detail::add_recompute(x, o);
    p.layers.push_back(x);
  }
  if (o.embedding_head) p.embedding_head = detail::embedding_head_cost(m, c, o, cp);
  p.tokens_per_micro_batch = t * g / cp;
  p.flops_per_micro_batch = detail::model_flops_per_sequence_batch(m, o.embedding_head) * g / cp;
  return p;
}

/// The Problem of AF-Pipe on `c` with layout `lay`: workers A0..A{p-1}, F0..F{p-1};
/// one pipeline micro-batch is one micro-batch on every GPU of an A group (the
/// planner's "wave"), so per-F-GPU expert work and per-F-GPU return bytes scale with
/// M/N (A group size over F group size). Dense layers' FFN runs on the F side
/// (plan/cost_model.hpp's split), reached by a one-row dispatch. The F group size need
/// not divide the experts: as in plan::Allocation the busiest F GPU holds ceil(E / gf)
/// of them and stands for its group — its expert time, state, activations and the rows
/// it receives and returns follow that share (LayerCost::ffn_imbalance). Throws
/// ConfigError for a layout that does not split the cluster evenly or has more F GPUs
/// per group than experts. O(layers).
inline Problem af_problem(const ModelSpec& m, const ClusterSpec& c, AfLayout lay, const CostOptions& o = {}) {
  validate(m);
  validate(c);
  plan::validate(o.efficiency);
  const int a = lay.attention_gpus_per_node, f = lay.ffn_gpus_per_node, pg = lay.groups, k = lay.mixed_nodes;
  expect(a >= 1 && f >= 1 && a + f <= c.gpus_per_node, "attention_gpus_per_node", a,
         "a >= 1, f >= 1 and a + f <= gpus_per_node (" + std::to_string(c.gpus_per_node) + ")");
  const int a_total = c.nodes * a + k, f_total = c.nodes * f - k;
  if (k != 0) {
    expect(k > 0 && k < c.nodes && f >= 2, "mixed_nodes", k,
           "0, or fewer than the nodes (" + std::to_string(c.nodes) + ") with at least 2 F GPUs per node");
    expect(pg >= 1 && c.nodes % pg == 0 && k % pg == 0, "groups", pg,
           "a divisor of the nodes (" + std::to_string(c.nodes) + ") and of mixed_nodes (" +
               std::to_string(k) + "): each pair takes whole nodes, as many of them mixed");
    expect(o.context_parallel == 1, "context_parallel", o.context_parallel,
           "1 under a mixed split (the A GPUs per node differ)");
  }
  expect(pg >= 1 && a_total % pg == 0 && f_total % pg == 0, "groups", pg,
         "a positive divisor of both A GPUs (" + std::to_string(a_total) + ") and F GPUs (" +
             std::to_string(f_total) + ")");
  const int ga = a_total / pg, gf = f_total / pg, cp = o.context_parallel;
  detail::expect_context_parallel(cp, ga, a, "A group size", m);
  expect(gf <= m.experts, "ffn_gpus_per_node", f,
         "an F group size (" + std::to_string(gf) + ") of at most experts (" + std::to_string(m.experts) + ")");
  if (c.nodes > 1) {  // each side's count by its own name, then the sum
    expect(lay.attention_nics_per_node >= 1, "attention_nics_per_node", lay.attention_nics_per_node,
           "at least one NIC per side");
    expect(lay.ffn_nics_per_node >= 1, "ffn_nics_per_node", lay.ffn_nics_per_node,
           "at least one NIC per side");
    expect(lay.attention_nics_per_node + lay.ffn_nics_per_node <= c.nics_per_node, "ffn_nics_per_node",
           lay.ffn_nics_per_node,
           "at most nics_per_node (" + std::to_string(c.nics_per_node) +
               ") together with attention_nics_per_node (" + std::to_string(lay.attention_nics_per_node) +
               ")");
  }
  Problem p;
  for (int i = 0; i < pg; ++i) {
    const plan::GroupNodes at =
        k == 0 ? plan::group_nodes(i, ga, a) : plan::mixed_group_nodes(i, pg, c.nodes, a, k, a + 1);
    Worker w =
        detail::place_group(c, at, k == 0 ? a : a + 1, lay.attention_nics_per_node, o.efficiency.network);
    w.name = "A" + std::to_string(i);
    w.role = Role::kAttention;
    p.workers.push_back(w);
  }
  for (int i = 0; i < pg; ++i) {
    const plan::GroupNodes at =
        k == 0 ? plan::group_nodes(i, gf, f) : plan::mixed_group_nodes(i, pg, c.nodes, f, k, f - 1);
    Worker w = detail::place_group(c, at, f, lay.ffn_nics_per_node, o.efficiency.network);
    w.name = "F" + std::to_string(i);
    w.role = Role::kFfn;
    p.workers.push_back(w);
  }
  if (c.nodes == 1)  // one node: A↔F traffic over NVLink only (Worker NICs unused)
    for (auto& w : p.workers) w.nic_bandwidth = 0;
  p.network = network_of(c);
  p.micro_batches = detail::derive_micro_batches(m, o, ga / cp,
                                                 cp > 1 ? "A group size / context_parallel" : "A group size");
  const plan::DispatchOptions d{gf, o.dedup, 0};
  const double eb = bytes_of(m.dtype), t = double(m.tokens_per_micro_batch());
  const double gb = o.memory.grad_bytes > 0 ? o.memory.grad_bytes : eb;
  const double scale = double(ga) / gf;  // F work per F GPU per A-GPU micro-batch
  const detail::FfnShare busiest(m, gf, o.dedup);
  for (int l = 0; l < m.layers; ++l) {
    const plan::LayerCost lc = plan::layer_cost(m, l, d);
    LayerCost x;
    x.moe = true;  // every layer has an F part (experts or the dense FFN)
    const plan::PassFlops as = lc.attention_side(), rs = lc.experts, os = lc.shared_experts + lc.dense_ffn;
    x.attn_fwd = detail::flops_seconds(as.forward, c, m.dtype, o.efficiency.attention);
    x.attn_bwd = detail::flops_seconds(as.backward_input, c, m.dtype, o.efficiency.attention);
    x.attn_wgrad = detail::flops_seconds(as.backward_weight, c, m.dtype, o.efficiency.attention);
    // The busiest F GPU: routed experts × ga·ceil(E/gf)/E, shared/dense FFN × ga/gf.
    const double routed = scale * busiest.compute;
    x.expert_fwd = detail::flops_seconds(rs.forward * routed + os.forward * scale, c, m.dtype, o.efficiency.ffn);
    x.expert_bwd =
        detail::flops_seconds(rs.backward_input * routed + os.backward_input * scale, c, m.dtype, o.efficiency.ffn);
    x.expert_wgrad = detail::flops_seconds(rs.backward_weight * routed + os.backward_weight * scale, c,
                                           m.dtype, o.efficiency.ffn);
    x.ffn_imbalance = lc.moe ? busiest.rows : 1.0;
    x.dispatch_bytes = lc.dispatch_bytes;
    x.combine_bytes = lc.return_bytes * scale * x.ffn_imbalance;
    x.hidden_bytes = t * m.hidden * eb;
    // A-side weights of this layer, plus the input embedding on layer 0, the final norm
    // on the last layer and, on each pair's last layer, the pair's vocabulary shard of
    // the output head (AFPipe's head is vocabulary-parallel; pair 0's shard is part of
    // the embedding when tied): replicated over the A group, so all-reduced and
    // ZeRO-1-sharded there. plan::head_shard_params is the planner's same rule.
    double a_params = double(plan::attention_side_params(m, l));
    if (l == 0) a_params += double(m.vocab) * m.hidden;
    if (l + 1 == m.layers) a_params += m.hidden;
    if (l + pg >= m.layers) a_params += plan::head_shard_params(m, pg, l % pg);
    x.attn_grad_bytes = plan::ring_all_reduce_bytes(a_params * gb, ga);
    double replicated = lc.moe ? double(m.shared_experts) * double(gated_ffn_params(m, m.shared_expert_ffn))
                               : double(plan::ffn_side_params(m, l));
    x.expert_grad_bytes = plan::ring_all_reduce_bytes(replicated * gb, gf);
    {
      // The planner's memory model (plan/layer_assignment.hpp), layer by layer, so that a
      // worker's state here is exactly attention_worker_memory / ffn_worker_memory of its
      // pair: the A side replicates attention, norms and router over ga GPUs (ZeRO-1 over
      // them), plus the input embedding on layer 0's pair and the final norm and output
      // head on the last layer's (one matrix when tied and both are on the same pair);
      // the busiest F GPU owns ceil(E / gf) experts (not replicated: no ZeRO sharding) and
      // replicates shared experts / the dense FFN over gf.
      const plan::MemoryBytes as = plan::state_bytes(m, a_params, ga, o.memory);
      plan::MemoryBytes fs = plan::state_bytes(m, lc.moe ? double(busiest.experts) * double(expert_params(m)) : 0, 1,
                                               o.memory);
      const double replicated_f = lc.moe ? double(m.shared_experts) * double(gated_ffn_params(m, m.shared_expert_ffn))
                                         : double(gated_ffn_params(m, m.dense_ffn));
      fs += plan::state_bytes(m, replicated_f, gf, o.memory);
      x.attn_state_bytes = as.parameters + as.gradients + as.optimizer;
      x.expert_state_bytes = fs.parameters + fs.gradients + fs.optimizer;
    }
    x.attn_activation_bytes = plan::attention_activation_bytes(m, l, o.memory);
    // Activations follow the busiest GPU's routed token-expert pairs (conservatively
    // applied to shared experts as well; factor 1 when gf divides E), as in
    // plan::ffn_worker_memory.
    x.expert_activation_bytes =
        plan::ffn_activation_bytes(m, l, o.memory, d) * scale * (lc.moe ? plan::ffn_busiest_share(m, gf) : 1.0);
    detail::apply_context_parallel(x, cp,
                                   plan::context_parallel_ring_seconds(m, l, cp, c, o.efficiency.network));
    detail::add_recompute(x, o);
    p.layers.push_back(x);
  }
  if (o.embedding_head) p.embedding_head = detail::embedding_head_cost(m, c, o, cp);
  p.tokens_per_micro_batch = t * ga / cp;
  p.flops_per_micro_batch = detail::model_flops_per_sequence_batch(m, o.embedding_head) * ga / cp;
  return p;
}

}  // namespace disagmoe::schedule
