// SPDX-License-Identifier: Apache-2.0
/// @file analytic_model.hpp
/// The analytic model that predicts an allocation's step time and memory
/// (AnalyticModel::estimate) and what explains it (StepEstimate).
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/plan/allocation.hpp>
#include <disagmoe/plan/cost_model.hpp>
#include <disagmoe/plan/group_placement.hpp>
#include <disagmoe/plan/layer_assignment.hpp>
#include <disagmoe/plan/plan_options.hpp>
#include <disagmoe/spec/cluster_spec.hpp>
#include <disagmoe/spec/model_spec.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace disagmoe::plan {

/// What bounds the step: A compute, F compute, or the A↔F network.
enum class Bottleneck { kAttention, kFfn, kNetwork };

/// "attention" | "ffn" | "network".
constexpr std::string_view to_string(Bottleneck b) {
  switch (b) {
    case Bottleneck::kAttention: return "attention";
    case Bottleneck::kFfn: return "ffn";
    default: return "network";
  }
}

/// Why the analytic model says what it says, for one allocation.
struct StepEstimate {
  /// Per-micro-batch busy seconds of the slowest pair, by resource: A compute, F
  /// compute, A-side links, F-side links (Mtotal × this = busy time per step).
  double attention_seconds = 0;
  double ffn_seconds = 0;
  double attention_network_seconds = 0;
  double ffn_network_seconds = 0;
  /// The MILP's objective: max over pairs of the pair's four busy times, the
  /// once-per-step gradient all-reduce included (the four fields above are those of
  /// the slowest pair, so bound_seconds = max of them). Seconds per micro-batch.
  double bound_seconds = 0;
  double stage_seconds = 0;     ///< one layer of one wave (g_a micro-batches) on the bottleneck resource
  double round_seconds = 0;  ///< one wave through every pair once (R, uncontended), incl. message latencies
  double step_seconds = 0;      ///< predicted optimizer step
  double tokens_per_second = 0; ///< global_batch × seq_len / step_seconds
  double waves = 0;             ///< W = micro-batches per step / A group size
  /// Compute slow-down of the slowest pair's A and F workers from the SMs their M2N
  /// kernels hold (comm_sm_slowdown; 1 with an RDMA engine that takes none). The step
  /// time, round trip and bottleneck use the compute seconds × these; bound_seconds and
  /// the four busy times above do not (they are the MILP's objective, kept separable).
  double attention_sm_slowdown = 1;
  double ffn_sm_slowdown = 1;
  /// Per-micro-batch busy seconds of the links of the slowest pair (after the SM share)
  /// under the allocation's fusion choice, the gradient all-reduce included, with the
  /// bytes where they really go: NVLink inside a node, the NICs across
  /// (AnalyticModel::pair_link_bytes), each side at the slower of the two. The step
  /// time, round trip and bottleneck use these; the MILP's all-NIC model is the
  /// *_network_seconds above.
  double attention_link_seconds = 0;
  double ffn_link_seconds = 0;
  /// Per-micro-batch compute seconds of the bottleneck pair (the pair whose busiest
  /// resource sets the step, after the SM slow-down: it may differ from the pair the
  /// four busy times above describe, e.g. the one holding the output head), and that
  /// pair. The bottleneck is the largest of these two and the two link times above,
  /// so they are what explains it.
  double attention_compute_seconds = 0;
  double ffn_compute_seconds = 0;
  int bottleneck_pair = 0;
  /// The ring's path (a wave's forward and backward round trips as the ping-pong groups
  /// overlap them, stretched by the waves sharing each resource) outlasts the busiest
  /// resource's time plus one fill and drain.
  bool ring_bound = false;
  Bottleneck bottleneck = Bottleneck::kAttention;
  FitReport memory;             ///< largest A and F worker
  [[nodiscard]] bool fits() const { return memory.fits(); }
};

/// Factor by which a worker's compute slows down when comm kernels hold a `fraction` of
/// its SMs while its transfers are active: 1 / (1 − fraction · u), u = the share of its
/// compute time that overlaps a transfer. In AF-Pipe's steady state a worker's
/// transfers are active `link_seconds` per micro-batch (AnalyticModel::estimate passes
/// kCommOverlap × the slower side's link time per direction) out of a period of
/// `busy_seconds` (the busiest resource's untaxed time per micro-batch, links priced
/// where their bytes go: not the MILP's all-NIC bound_seconds), so u = min(1, link /
/// busy): the simulator (schedule/simulator.hpp) applies the fraction exactly while a
/// transfer touches the worker, and this is its time average. fraction = 0 gives 1. O(1).
inline double comm_sm_slowdown(double fraction, double link_seconds, double busy_seconds) {
  if (fraction <= 0 || link_seconds <= 0 || busy_seconds <= 0) return 1;
  return 1 / (1 - fraction * std::min(1.0, link_seconds / busy_seconds));
}

/// The analytic step-time and memory model of DisagMoE allocations for one model,
/// cluster and option set. Construction precomputes per-layer costs (O(layers));
/// `estimate` is O(layers + k).
class AnalyticModel {
 public:
  /// Validates the three inputs (ConfigError naming the bad field).
  AnalyticModel(ModelSpec m, ClusterSpec c, PlanOptions o) : m_(std::move(m)), c_(std::move(c)), o_(std::move(o)) {
    validate(m_);
    validate(c_);
    validate(o_, m_);
    o_.global_batch = global_batch_of(o_, m_);
    expect(o_.context_parallel >= 1, "context_parallel", o_.context_parallel,
           "a resolved degree >= 1 (AdaptiveAllocator resolves 0, auto)");
    expect(o_.group_factor >= 1, "group_factor", o_.group_factor,
           "a resolved factor, 1 or 2 (AdaptiveAllocator resolves 0, auto)");
    const int cp = o_.context_parallel;
    const double peak = c_.gpu.peak_flops(m_.dtype);
    const DispatchOptions one{1, false, 1};
    for (int l = 0; l < m_.layers; ++l) {
      const LayerCost lc = layer_cost(m_, l);
      const RingAttentionSeconds ring = context_parallel_ring_seconds(m_, l, cp, c_, o_.efficiency.network);
      // Full recomputation reruns the forward pass before the backward one (Korthikanti
      // et al. 2022 §5: ≈ 33% more compute for 6 → 8 passes' worth of FLOPs).
      // Per GPU micro-batch of T / cp tokens: 1/cp of every FLOP; an attention pass
      // lasts at least its context-parallel ring (in FLOPs at the A side's rate).
      const PassFlops a = lc.attention_side(), r = lc.experts, o = lc.shared_experts + lc.dense_ffn;
      const double ea = peak * o_.efficiency.attention, ef = peak * o_.efficiency.ffn;
      const double af = std::max(a.forward / cp, ring.forward * ea);
      const double ab = std::max(a.backward_input / cp, ring.backward * ea), aw = a.backward_weight / cp;
      for (int rc = 0; rc < 2; ++rc) {
        attention_s_[rc].push_back((af + (ab + aw) + rc * af) / ea);
        routed_s_[rc].push_back((r.total() / cp + rc * r.forward / cp) / ef);
        other_s_[rc].push_back((o.total() / cp + rc * o.forward / cp) / ef);
        attention_backward_s_[rc].push_back((ab + rc * af) / ea);
        routed_backward_s_[rc].push_back((r.backward_input + rc * r.forward) / cp / ef);
        other_backward_s_[rc].push_back((o.backward_input + rc * o.forward) / cp / ef);
      }
      attention_forward_s_.push_back(af / ea);
      routed_forward_s_.push_back(r.forward / cp / ef);
      other_forward_s_.push_back(o.forward / cp / ef);
      row_bytes_per_token_.push_back(dispatch_bytes(m_, l, one) / double(m_.tokens_per_micro_batch()));
      attention_params_.push_back(double(attention_side_params(m_, l)));
      replicated_ffn_params_.push_back(
          m_.is_moe_layer(l) ? double(m_.shared_experts) * double(gated_ffn_params(m_, m_.shared_expert_ffn))
                             : double(gated_ffn_params(m_, m_.dense_ffn)));
    }
    const std::int64_t micro_batches = std::int64_t{o_.global_batch / m_.micro_batch} * cp;
    expect(micro_batches <= std::numeric_limits<int>::max(), "context_parallel", cp,
           "a degree whose micro-batches per step (global_batch / micro_batch x degree) fit 32 bits");
    micro_batches_ = static_cast<int>(micro_batches);
    tokens_ = double(m_.tokens_per_micro_batch()) / cp;
    capacity_ = c_.gpu.hbm_bytes * o_.memory_fraction;
    if (o_.embedding_head) head_ = embedding_head_seconds(m_, c_, o_.efficiency.attention, grad_bytes(), cp);
  }

  [[nodiscard]] const ModelSpec& model() const { return m_; }
  [[nodiscard]] const ClusterSpec& cluster() const { return c_; }
  [[nodiscard]] const PlanOptions& options() const { return o_; }
  /// Micro-batches per optimizer step (all A GPUs together), each of
  /// tokens_per_micro_batch() tokens.
  [[nodiscard]] int micro_batches() const { return micro_batches_; }
  /// Tokens of one micro-batch on one A GPU: seq_len × micro_batch / context_parallel.
  [[nodiscard]] double tokens_per_micro_batch() const { return tokens_; }
  /// The context-parallel degree of the A groups (PlanOptions::context_parallel).
  [[nodiscard]] int context_parallel() const { return o_.context_parallel; }
  /// AF-Pipe's ping-pong group in waves per pair (PlanOptions::group_factor).
  [[nodiscard]] int group_factor() const { return o_.group_factor; }
  /// Usable bytes per GPU.
  [[nodiscard]] double capacity() const { return capacity_; }
  /// Largest p considered.
  [[nodiscard]] int max_groups() const { return o_.max_groups > 0 ? std::min(o_.max_groups, m_.layers) : m_.layers; }

  /// A group size for p pairs and a A GPUs per node; 0 when the A GPUs do not split evenly.
  [[nodiscard]] int group_size(int p, int per_node) const {
    const int total = c_.nodes * per_node;
    return (p >= 1 && per_node >= 1 && total % p == 0) ? total / p : 0;
  }
  /// GPUs per A group of `x` (mixed nodes included); 0 when they do not split evenly.
  [[nodiscard]] int attention_group_size(const Allocation& x) const {
    return x.mixed_nodes == 0 ? group_size(x.groups, x.attention_gpus_per_node)
                              : mixed_group_size(x, attention_gpus(x, c_));
  }
  /// GPUs per F group of `x` (mixed nodes included); 0 when they do not split evenly.
  [[nodiscard]] int ffn_group_size(const Allocation& x) const {
    return x.mixed_nodes == 0 ? group_size(x.groups, x.ffn_gpus_per_node)
                              : mixed_group_size(x, ffn_gpus(x, c_));
  }
  /// Where A group i of `x` sits (group_nodes, or mixed_group_nodes under a mixed split).
  [[nodiscard]] GroupNodes attention_nodes(const Allocation& x, int i) const {
    return x.mixed_nodes == 0 ? group_nodes(i, attention_group_size(x), x.attention_gpus_per_node)
                              : mixed_group_nodes(i, x.groups, c_.nodes, x.attention_gpus_per_node,
                                                  x.mixed_nodes, x.attention_gpus_per_node + 1);
  }
  /// Where F group i of `x` sits.
  [[nodiscard]] GroupNodes ffn_nodes(const Allocation& x, int i) const {
    return x.mixed_nodes == 0 ? group_nodes(i, ffn_group_size(x), x.ffn_gpus_per_node)
                              : mixed_group_nodes(i, x.groups, c_.nodes, x.ffn_gpus_per_node, x.mixed_nodes,
                                                  x.ffn_gpus_per_node - 1);
  }
  /// True when (p, a) is a usable A side: even split, no A GPU without a micro-batch,
  /// and context-parallel rings that fit inside the group and a node (cp divides both).
  [[nodiscard]] bool valid_attention(int p, int a) const {
    const int g = group_size(p, a), cp = o_.context_parallel;
    return p >= 1 && p <= max_groups() && g >= 1 && g <= micro_batches_ && a % cp == 0 && g % cp == 0;
  }
  /// True when (p, f) is a usable F side: the F GPUs split evenly into p groups and
  /// every F GPU of a group holds at least one expert (g <= E). Experts need not divide
  /// evenly over g: E mod g GPUs hold ceil(E / g) experts, the rest floor(E / g), and the
  /// model charges the busiest GPU — compute ceil(E/g)/E of the routed tokens
  /// (ffn_pair_seconds), memory of ceil(E/g) experts (ffn_worker_memory) — while the
  /// shared experts, dense FFN and activations divide by g and dispatch rows use the
  /// with-replacement occupancy (expected_distinct_gpus). An uneven g is therefore
  /// chosen only where it beats the even sizes around it despite its idle expert slots
  /// (e.g. E = 64, g = 48 computes like g = 32 on the routed experts).
  [[nodiscard]] bool valid_ffn(int p, int f) const {
    const int g = group_size(p, f);
    return p >= 1 && p <= max_groups() && g >= 1 && g <= m_.experts;
  }
  /// True when the NIC counts are usable: 0 and 0 on one node, else >= 1 each.
  [[nodiscard]] bool valid_nics(int na, int nf) const {
    if (c_.nodes == 1) return na == 0 && nf == 0;
    return na >= 1 && nf >= 1 && na + nf <= c_.nics_per_node;
  }
  /// True when `k` mixed nodes are usable with p pairs, a A and f F GPUs per node
  /// (Allocation::mixed_nodes): 0, or allowed (PlanOptions::mixed_splits), 0 < k < nodes,
  /// p dividing the nodes and k, f >= 2 and no context parallelism.
  [[nodiscard]] bool valid_mixed(int p, int f, int k) const {
    if (k == 0) return true;
    return o_.mixed_splits && k > 0 && k < c_.nodes && p >= 1 && c_.nodes % p == 0 && k % p == 0 && f >= 2 &&
           o_.context_parallel == 1;
  }
  /// Structural validity of `x` (counts, divisibility, recompute policy on each side).
  [[nodiscard]] bool valid(const Allocation& x) const {
    const auto allowed = [&](bool rc) {
      return o_.recompute == RecomputePolicy::kAuto || rc == (o_.recompute == RecomputePolicy::kOn);
    };
    if (!allowed(x.recompute.attention) || !allowed(x.recompute.ffn)) return false;
    if (x.context_parallel != o_.context_parallel || x.group_factor != o_.group_factor) return false;
    if (x.attention_gpus_per_node < 1 || x.ffn_gpus_per_node < 1 ||
        x.attention_gpus_per_node + x.ffn_gpus_per_node > c_.gpus_per_node ||
        !valid_nics(x.attention_nics_per_node, x.ffn_nics_per_node))
      return false;
    if (x.mixed_nodes == 0)
      return valid_attention(x.groups, x.attention_gpus_per_node) && valid_ffn(x.groups, x.ffn_gpus_per_node);
    if (!valid_mixed(x.groups, x.ffn_gpus_per_node, x.mixed_nodes) || x.groups > max_groups()) return false;
    const int ga = attention_group_size(x), gf = ffn_group_size(x);
    return ga >= 1 && ga <= micro_batches_ && gf >= 1 && gf <= m_.experts;
  }

  /// Max over pairs of Σ A seconds (one micro-batch, one GPU) of the pair's layers.
  [[nodiscard]] double attention_pair_seconds(int p, bool rc) const { return max_pair_sum(p, attention_s_[rc]); }
  /// Max over pairs of the seconds the busiest GPU of an F group of `g` spends on one
  /// micro-batch of the pair's layers: routed experts × ceil(E/g)/E (uniform routing,
  /// the GPU with the most experts gets the most tokens) + shared/dense FFN / g.
  [[nodiscard]] double ffn_pair_seconds(int p, int g, bool rc) const {
    const double share = double((m_.experts + g - 1) / g) / m_.experts;
    double best = 0;
    for (int i = 0; i < p; ++i) {
      double s = 0;
      for (int l = i; l < m_.layers; l += p) s += routed_s_[rc][l] * share + other_s_[rc][l] / g;
      best = std::max(best, s);
    }
    return best;
  }
  /// Rows per token of an MoE layer sent to an F group of `g` (cost_model.hpp).
  [[nodiscard]] double moe_rows(int g) const {
    return o_.dedup ? expected_distinct_gpus(m_.experts, m_.top_k, g) : double(m_.top_k);
  }
  /// The busiest F GPU's rows over the mean for an F group of `g` (ffn_busiest_rows):
  /// the F side's links carry the MoE layers' A↔F bytes times this, as in the simulator.
  [[nodiscard]] double ffn_link_imbalance(int g) const { return ffn_busiest_rows(m_, g, o_.dedup); }
  /// Bytes/s of one side's links: NICs (multi-node) or the GPUs' intra-node links.
  [[nodiscard]] double side_bandwidth(int p, int gpus_per_node, int nics_per_node) const {
    if (c_.nodes == 1) return double(gpus_per_node) / p * c_.intra_node_bandwidth * o_.efficiency.network;
    return double(c_.nodes) * nics_per_node / p * c_.nic_bandwidth * o_.efficiency.network;
  }
  /// side_bandwidth of one A group of `x`. Under a mixed split its GPUs send equal bytes
  /// and those on mixed nodes share the node's A NICs a + 1 ways: the group moves its
  /// bytes at ga × that per-GPU rate.
  [[nodiscard]] double attention_bandwidth(const Allocation& x) const {
    const double b = side_bandwidth(x.groups, x.attention_gpus_per_node, x.attention_nics_per_node);
    if (x.mixed_nodes == 0) return b;
    const int a = x.attention_gpus_per_node;
    return b * (a + double(x.mixed_nodes) / c_.nodes) / (a + 1);
  }
  /// side_bandwidth of one F group of `x`: under a mixed split its mixed nodes' GPUs
  /// share the F NICs f − 1 ways, the others f ways (the slower: the group's rate).
  [[nodiscard]] double ffn_bandwidth(const Allocation& x) const {
    const double b = side_bandwidth(x.groups, x.ffn_gpus_per_node, x.ffn_nics_per_node);
    if (x.mixed_nodes == 0) return b;
    const int f = x.ffn_gpus_per_node;
    return b * (f - double(x.mixed_nodes) / c_.nodes) / f;
  }

  /// Bytes per direction that one micro-batch of pair i's layers puts on each side's
  /// NICs and NVLink under allocation `x` (groups placed by group_nodes, bytes split by
  /// same_node_share as the simulator splits them). Per layer and direction each side
  /// carries the pair's own dispatch or return (A_i ↔ F_i) and, when fused, the
  /// stage-aligned transfer between F_i and A_{i+1} (which lands on another node when
  /// the pairs sit on different nodes, at ~rows rows per token), or unfused a second
  /// A_i ↔ F_i transfer plus, on the A side, the one-row hand-offs between A_i and
  /// A_{i+1} (forward and backward); the last layer only returns. Priced in the dispatch direction (A sends, F receives):
  /// group_nodes places A_i and F_i on the same nodes, so the other direction mirrors
  /// it. The F side carries its busiest GPU's rows (ffn_link_imbalance). O(layers / p).
  struct LinkBytes {
    double attention_nic = 0, attention_nvlink = 0, ffn_nic = 0, ffn_nvlink = 0;
  };
  [[nodiscard]] LinkBytes pair_link_bytes(const Allocation& x, int i) const {
    const int p = x.groups, gf = ffn_group_size(x);
    const GroupNodes a = attention_nodes(x, i), f = ffn_nodes(x, i), next = attention_nodes(x, (i + 1) % p);
    const double own = same_node_share(a, f), fused = same_node_share(next, f), hand = same_node_share(a, next);
    const double rows = moe_rows(gf), imb = ffn_link_imbalance(gf), t = tokens_;
    LinkBytes b;
    const auto add = [](double& nic, double& nvl, double bytes, double local) {
      nvl += bytes * local;
      nic += bytes * (1 - local);
    };
    for (int l = i; l < m_.layers; l += p) {
      const bool moe = m_.is_moe_layer(l), last = l + 1 == m_.layers;
      const double da = t * row_bytes_per_token_[l] * (moe ? rows : 1), df = da * (moe ? imb : 1);
      const double second = (x.fuse && !last) ? fused : own;
      add(b.attention_nic, b.attention_nvlink, da, own);
      add(b.attention_nic, b.attention_nvlink, da, second);
      add(b.ffn_nic, b.ffn_nvlink, df, own);
      add(b.ffn_nic, b.ffn_nvlink, df, second);
      // Unfused, A workers hand the layer's output on (forward) and its gradient back
      // (backward, sent by A_{i+1}): two one-row sends per direction on the A side.
      if (!x.fuse && !last && p > 1) add(b.attention_nic, b.attention_nvlink, 2 * t * row_bytes_per_token_[l], hand);
    }
    return b;
  }

  /// Micro-batches whose activations one A worker keeps: af_in_flight(p, W, k) =
  /// min(W, 2kp) with W = micro-batches / A group size and k = group_factor() — the
  /// window of the AF-Pipe schedule the plan is simulated with (two ping-pong groups of
  /// kp), so a plan that fits here fits in the simulator.
  [[nodiscard]] double attention_in_flight(int p, int a) const {
    return in_flight_of_groups(p, group_size(p, a));
  }
  /// attention_in_flight of allocation `x` (mixed nodes included).
  [[nodiscard]] double attention_in_flight(const Allocation& x) const {
    return in_flight_of_groups(x.groups, attention_group_size(x));
  }
  /// Micro-batches in flight through a pair: A group size × attention_in_flight =
  /// min(micro-batches, 2k · nodes · a) — it depends on a only (W ≥ 1 for a valid a).
  [[nodiscard]] double pair_in_flight(int a) const {
    return std::min(double(micro_batches_), 2.0 * o_.group_factor * c_.nodes * a);
  }
  /// Largest A worker over the pairs for p pairs, a A GPUs per node, recomputing when
  /// `rc`. O(layers).
  [[nodiscard]] MemoryBytes attention_memory(int p, int a, bool rc) const {
    MemoryBytes worst;
    for (const WorkerLoad& w :
         loads(p, group_size(p, a), 1, attention_in_flight(p, a) / o_.context_parallel, 0)) {
      const MemoryBytes b = attention_worker_memory(m_, w, memory_options({rc, false}));
      if (b.total() > worst.total()) worst = b;
    }
    return worst;
  }
  /// F worker memory of pair i for p pairs, f F GPUs per node, recomputing when `rc`,
  /// as static bytes plus bytes per micro-batch in flight through the pair (it is linear
  /// in that). O(layers).
  [[nodiscard]] std::vector<std::pair<double, double>> ffn_memory_terms(int p, int f, bool rc) const {
    std::vector<std::pair<double, double>> terms;
    const MemoryOptions mo = memory_options({false, rc});
    for (const WorkerLoad& w0 : loads(p, 1, group_size(p, f), 1, 0)) {
      WorkerLoad w1 = w0;
      w1.ffn_in_flight = 1.0 / o_.context_parallel;  // one micro-batch of T / cp tokens
      const double fixed = ffn_worker_memory(m_, w0, mo).total();
      terms.emplace_back(fixed, ffn_worker_memory(m_, w1, mo).total() - fixed);
    }
    return terms;
  }

  /// Edges of a ring all-reduce over a group of `g` GPUs that load the side's links:
  /// on one node every rank sends over its own link (g); across nodes NCCL builds its
  /// rings so that the ranks of a node are adjacent (NVLink inside the node) and each
  /// ring leaves every node once (Jeaugey, "NCCL 2.0", GTC 2017; the hierarchical
  /// all-reduce of Jia et al. 2018, arXiv 1807.11205, §3.3), so min(g, nodes) edges
  /// cross the NICs, each carrying ring_all_reduce_bytes per rank-step.
  [[nodiscard]] double all_reduce_edges(int g) const { return c_.nodes == 1 ? g : std::min(g, c_.nodes); }

  /// Sums over the layers of one pair of the per-layer constants `estimate` adds up,
  /// so that the bound of an allocation with p pairs costs O(p) once the sums exist
  /// (allocation_milp.hpp prices thousands of candidates). Seconds are for one
  /// micro-batch on one GPU.
  struct PairSums {
    double attention_s[2] = {0, 0};  ///< [recompute]: A side (attention + router)
    double routed_s[2] = {0, 0};     ///< [recompute]: all routed experts
    double other_s[2] = {0, 0};      ///< [recompute]: shared experts + dense FFN
    double dense_row_bytes = 0;      ///< Σ over dense layers of one row's bytes per token
    double moe_row_bytes = 0;        ///< Σ over MoE layers of one row's bytes per token
    double attention_params = 0;     ///< replicated A-side parameters, embedding / head included
    double ffn_params = 0;           ///< replicated F-side parameters (shared experts, dense FFN)
    double head_row_bytes = 0;       ///< A side only: the head's ring, bytes of a row per token
  };
  /// PairSums of each of the p interleaved pairs. Precondition 1 <= p <= layers
  /// (ConfigError otherwise). O(layers).
  [[nodiscard]] std::vector<PairSums> pair_sums(int p) const {
    expect(p >= 1 && p <= m_.layers, "groups", p, "1 <= groups <= layers (" + std::to_string(m_.layers) + ")");
    std::vector<PairSums> v(static_cast<std::size_t>(p));
    for (int i = 0; i < p; ++i) {
      PairSums& s = v[static_cast<std::size_t>(i)];
      for (int l = i; l < m_.layers; l += p) {
        for (int rc = 0; rc < 2; ++rc) {
          s.attention_s[rc] += attention_s_[rc][l];
          s.routed_s[rc] += routed_s_[rc][l];
          s.other_s[rc] += other_s_[rc][l];
        }
        (m_.is_moe_layer(l) ? s.moe_row_bytes : s.dense_row_bytes) += row_bytes_per_token_[l];
        s.attention_params += attention_params_[l];
        s.ffn_params += replicated_ffn_params_[l];
      }
      s.attention_params += edge_params(p, i);
      for (double& a : s.attention_s) a += head_seconds(p, i);
      s.head_row_bytes = head_ring_row_bytes(p);
    }
    return v;
  }
  /// StepEstimate::bound_seconds of `x` from `sums` = pair_sums(x.groups), in O(p)
  /// (the same model as `estimate`, summed pair-first; equal up to rounding).
  /// Precondition: valid(x) (unchecked: this is the MILP builder's inner loop).
  [[nodiscard]] double bound_seconds(const Allocation& x, const std::vector<PairSums>& sums) const {
    const int ga = attention_group_size(x), gf = ffn_group_size(x);
    const double bw_a = attention_bandwidth(x), bw_f = ffn_bandwidth(x);
    const double rows = moe_rows(gf), t = tokens_, mb = micro_batches_;
    const double share = double((m_.experts + gf - 1) / gf) / m_.experts, gb = grad_bytes();
    const double ea = all_reduce_edges(ga) / bw_a / mb, ef = all_reduce_edges(gf) / bw_f / mb;
    const double imb = ffn_link_imbalance(gf);
    double bound = 0;
    for (const PairSums& s : sums) {
      const double bytes_a = 2 * t * (s.dense_row_bytes + s.moe_row_bytes * rows + s.head_row_bytes);
      const double bytes_f = 2 * t * (s.dense_row_bytes + s.moe_row_bytes * rows * imb);
      const int ra = x.recompute.attention, rf = x.recompute.ffn;
      bound = std::max({bound, s.attention_s[ra] / ga, s.routed_s[rf] * share + s.other_s[rf] / gf,
                        bytes_a / bw_a + ea * ring_all_reduce_bytes(s.attention_params * gb, ga),
                        bytes_f / bw_f + ef * ring_all_reduce_bytes(s.ffn_params * gb, gf)});
    }
    return bound;
  }

  /// Memory of the largest A and F worker of `x` (in flight as attention_in_flight).
  [[nodiscard]] FitReport memory(const Allocation& x) const {
    const int ga = attention_group_size(x), gf = ffn_group_size(x);
    // Activations scale with the T / cp tokens of a micro-batch: cp of them in flight
    // weigh as one of seq_len × micro_batch tokens (the unit of the memory model).
    const double in_flight = attention_in_flight(x) / o_.context_parallel;
    return check_fit(m_, loads(x.groups, ga, gf, in_flight, in_flight * ga), capacity_,
                     memory_options(x.recompute));
  }

  /// Predicts step time and memory of `x`. Precondition: valid(x) (ConfigError
  /// otherwise). Model: per-micro-batch busy time of each resource of each pair;
  /// the bottleneck's busy time plus one fill/drain (M·S + R − s) bounds the step, and so
  /// does the ring's path: a wave's forward and backward round trips through the pairs,
  /// `rounds` times, as the schedule's ping-pong groups overlap them, stretched by the
  /// other waves in flight met on each resource (closed queueing networks, Lazowska et
  /// al. 1984, "Quantitative System Performance"; the stretch below). The step is a
  /// smooth maximum of the two, up to 2^(1/8) times the larger where they are equal.
  [[nodiscard]] StepEstimate estimate(const Allocation& x) const {
    if (!valid(x))  // the message only when it is needed: estimate runs per candidate of the searches
      expect(false, "allocation", describe_allocation(x), "a valid allocation for " + c_.name);
    StepEstimate e;
    const int p = x.groups, ga = attention_group_size(x), gf = ffn_group_size(x);
    const auto groups = interleaved_groups(m_.layers, p);
    const double bw_a = attention_bandwidth(x), bw_f = ffn_bandwidth(x);
    const double latency = c_.nodes == 1 ? c_.intra_node_latency : c_.nic_latency;
    const double grad_bytes = this->grad_bytes();
    const double mb = micro_batches_, rows = moe_rows(gf), t = tokens_;
    const double share = double((m_.experts + gf - 1) / gf) / m_.experts, imb = ffn_link_imbalance(gf);
    // SMs the M2N kernels hold on both ends (ClusterSpec, per transport).
    const double sm = o_.m2n_uses_sms ? c_.kernel_comm_sm_fraction : c_.rdma_comm_sm_fraction;
    struct PairTimes {
      double a, f, la, lf, la_ar, lf_ar, layers;  // link seconds without / with the all-reduce
      double a_forward, f_forward, a_backward, f_backward;  // a and f on a wave's path, per pass
    };
    // NVLink of a group (on one node also its only link: side_bandwidth says the same).
    const double nvl_a = ga * c_.intra_node_bandwidth * o_.efficiency.network;
    const double nvl_f = gf * c_.intra_node_bandwidth * o_.efficiency.network;
    std::vector<PairTimes> pairs;
    pairs.reserve(static_cast<std::size_t>(p));
    double busy = 0;
    for (int i = 0; i < p; ++i) {
      double ta = head_seconds(p, i), tf = 0, bytes_a = 0, bytes_f = 0;
      double params_a = edge_params(p, i), params_f = 0;
      // On a wave's path: the embedding's lookup before the first layer; the head's
      // forward and input gradient (with the loss) where the backward starts, its p
      // vocabulary shards side by side (1/p of it, once); weight gradients off it.
      double ta_forward = i == 0 ? head_.embed_fwd : 0, tf_forward = 0, tf_backward = 0;
      double ta_backward = i == (m_.layers - 1) % p ? (head_.head_fwd + head_.head_bwd) / p : 0;
      const bool ra = x.recompute.attention, rf = x.recompute.ffn;
      for (int l : groups[i]) {
        ta += attention_s_[x.recompute.attention][l];
        tf += routed_s_[x.recompute.ffn][l] * share + other_s_[x.recompute.ffn][l] / gf;
        ta_forward += attention_forward_s_[l];
        tf_forward += routed_forward_s_[l] * share + other_forward_s_[l] / gf;
        ta_backward += attention_backward_s_[ra][l];
        tf_backward += routed_backward_s_[rf][l] * share + other_backward_s_[rf][l] / gf;
        const double moe = m_.is_moe_layer(l);
        bytes_a += 2 * t * row_bytes_per_token_[l] * (moe ? rows : 1);
        // The busiest F GPU receives and returns `imb` times the mean rows (the simulator's
        // LayerCost::ffn_imbalance), so the F side's links carry that much more.
        bytes_f += 2 * t * row_bytes_per_token_[l] * (moe ? rows * imb : 1);
        params_a += attention_params_[l];
        params_f += replicated_ffn_params_[l];
      }
      // The head's ring (its own bytes, apart from the fusion choice below).
      const double ring_a = 2 * t * head_ring_row_bytes(p) / bw_a;
      const double a = ta / ga, f = tf, na = bytes_a / bw_a, nf = bytes_f / bw_f;
      // Once per step: ring all-reduce of the replicated gradients (A: attention, norms,
      // router, embedding / head; F: shared experts, dense FFN), all_reduce_edges ring
      // edges of 2(g-1)/g of them on the side's links, amortised per micro-batch. This
      // is the only traffic that differs between the sides: every A↔F byte leaves one
      // side's NIC and enters the other's (NICs are full duplex), so dispatch + return
      // load both sides alike.
      const double ar_a = all_reduce_edges(ga) * ring_all_reduce_bytes(params_a * grad_bytes, ga) / bw_a / mb;
      const double ar_f = all_reduce_edges(gf) * ring_all_reduce_bytes(params_f * grad_bytes, gf) / bw_f / mb;
      const double pair_busy = std::max({a, f, na + ring_a + ar_a, nf + ar_f});
      if (pair_busy > busy) {
        busy = pair_busy;
        e.attention_seconds = a;
        e.ffn_seconds = f;
        e.attention_network_seconds = na + ring_a + ar_a;
        e.ffn_network_seconds = nf + ar_f;
      }
      // The links as the allocation loads them: NVLink where sender and receiver share a
      // node, the NICs across (pair_link_bytes), each side at the slower of the two.
      const LinkBytes mine = pair_link_bytes(x, i);
      const auto seconds = [](double nic, double nvl, double bw, double nv) {
        return std::max(nic / bw, nvl / nv);
      };
      const double la = seconds(mine.attention_nic, mine.attention_nvlink, bw_a, nvl_a) + ring_a;
      const double lf = seconds(mine.ffn_nic, mine.ffn_nvlink, bw_f, nvl_f);
      pairs.push_back({a, f, la, lf, la + ar_a, lf + ar_f, double(groups[i].size()), ta_forward / ga,
                       tf_forward, ta_backward / ga, tf_backward});
    }
    e.bound_seconds = busy;
    // Compute slowed by the SMs the M2N kernels hold, over the untaxed period: the
    // busiest resource with the bytes where they go (not `busy`, the MILP's all-NIC
    // objective, which with a node's NICs mostly on one side stretches the period by
    // bytes that cross NVLink and hides the tax). A one-step fixed point: the taxed
    // period is at most 1/(1 − sm) longer.
    double period = 0;
    for (const PairTimes& q : pairs) period = std::max({period, q.a, q.f, q.la_ar, q.lf_ar});
    double taxed = 0, contention = 0, forward_round = 0, backward_round = 0;
    for (std::size_t i = 0; i < pairs.size(); ++i) {
      const PairTimes& q = pairs[i];
      const double link = kCommOverlap * std::max(q.la, q.lf);
      const double sa = comm_sm_slowdown(sm, link, period), sf = comm_sm_slowdown(sm, link, period);
      const double a = q.a * sa, f = q.f * sf;
      const double pair_busy = std::max({a, f, q.la_ar, q.lf_ar});
      if (pair_busy > taxed) {
        taxed = pair_busy;
        e.attention_sm_slowdown = sa;
        e.ffn_sm_slowdown = sf;
        e.attention_link_seconds = q.la_ar;
        e.ffn_link_seconds = q.lf_ar;
        e.attention_compute_seconds = a;
        e.ffn_compute_seconds = f;
        e.bottleneck_pair = static_cast<int>(i);
        e.bottleneck = pair_busy == a ? Bottleneck::kAttention : pair_busy == f ? Bottleneck::kFfn : Bottleneck::kNetwork;
      }
      // Round trip of one wave through this pair, per layer: A, A→F, F, F→A, each of
      // demand D = ga/layers × (its per-micro-batch seconds).
      const double per_layer = double(ga) / q.layers, wire = std::max(q.la, q.lf);
      e.round_seconds += per_layer * (a + f + 2 * wire) + 2 * latency;
      // The same per pass: its compute, its bytes (a dispatch and a return) and one
      // latency (as R, per pair), weight gradients off the path.
      forward_round += per_layer * (q.a_forward * sa + q.f_forward * sf + wire) + latency;
      backward_round += per_layer * (q.a_backward * sa + q.f_backward * sf + wire) + latency;
      contention += per_layer * mb * (a * a + f * f + 2 * wire * wire);
    }
    const double rounds = std::ceil(double(m_.layers) / p);
    e.waves = mb / ga;
    // The ring's path: the W waves run in G = ceil(W / group) ping-pong groups
    // (af_group_size; a partial group's wave still makes the whole trip), each group's
    // forward overlapping the previous group's backward (schedule/afpipe.hpp), so the
    // first forward and the last backward run alone: a path of rounds × (R_f + R_b +
    // (G − 1) max(R_f, R_b)), R_f and R_b a wave's forward and backward round trips.
    // Weight gradients are off a wave's path, but the backward stream runs them in order,
    // so they load its resources: the bound and the stretch below count them. (Pricing
    // the path as W / N trips of the whole round trip R, X <= N / (rounds R), Lazowska et
    // al. 1984, "Quantitative System Performance", §5.2, erred with the trips: 5%
    // optimistic at one or two, 4% pessimistic at 32 or more; bench/RESULTS.md, session 27.)
    // The stretch is session 25's, kept as it was (approximate mean-value analysis, ibid.
    // ch. 6): under processor sharing an op of demand D that finds the resource busy the
    // share U = mb × (its seconds) / step of the step takes D (1 + U) on average, and of a
    // pair's n = N / p waves in flight (N = af_in_flight) it can meet only the n − 1
    // others (Schweitzer's (n − 1) / n taken per pair: over the whole ring's N it agrees
    // less with the simulator, bench/RESULTS.md). Summed over the W / N trips of `rounds`
    // whole round trips, K / step; path + K / step = step has the root `ring`. The
    // schedule's waves mostly take turns, so an op waits less than processor sharing's
    // D·U: kWaitShare of it.
    const double in_flight = attention_in_flight(x), per_pair = in_flight / p;
    const double whole_waves = std::max(1.0, std::floor(e.waves));
    const double group = af_group_size(p, int(whole_waves), o_.group_factor);
    // Whole groups, scaled by the fraction of a wave the planner's batch leaves over.
    const double ping_pong_groups = std::max(1.0, std::ceil(whole_waves / group) * e.waves / whole_waves);
    const double path = rounds * (forward_round + backward_round +
                                  (ping_pong_groups - 1) * std::max(forward_round, backward_round));
    const double c = e.waves / in_flight * rounds,
                 k = kWaitShare * c * contention * std::max(0.0, per_pair - 1) / per_pair;
    const double ring = (path + std::sqrt(path * path + 4 * k)) / 2;
    e.stage_seconds = taxed * ga / rounds;
    // The busiest resource: its busy time plus one fill and drain of the ring.
    const double bound = mb * taxed + std::max(0.0, e.round_seconds - e.stage_seconds);
    e.ring_bound = ring > bound;
    // Where the two bounds are close, both resources and round trips hold the waves back
    // and the step exceeds either: their 8-norm, a smooth maximum (a fitted exponent: of
    // the norms 3-12, 6 and 8 agree best with the simulator over 3144 allocations of
    // eight models and clusters, bench_plan_model; bench/RESULTS.md, session 25).
    const double hi = std::max(bound, ring), r = hi > 0 ? std::min(bound, ring) / hi : 0, r2 = r * r;
    e.step_seconds = hi * std::sqrt(std::sqrt(std::sqrt(1 + r2 * r2 * r2 * r2)));  // hi (1 + r^8)^(1/8)
    e.tokens_per_second = double(o_.global_batch) * m_.seq_len / e.step_seconds;
    e.memory = memory(x);
    return e;
  }

  /// Time a worker's SM-using transfers are active, relative to the slower side's link
  /// time per direction: the simulator taxes a worker while any of them touches it, and
  /// its outgoing and incoming transfers overlap only in part (the union of the two
  /// directions, each `link`, is 1.2 of one). Fitted with kWaitShare on the bench grid's
  /// plans and on 3144 fixed allocations (bench_plan_model), of 0.8-2.0 and 0.7-1.0: the
  /// refined plans come within 5% of the simulator on 30 of 30 settings (26 with 0.8 and
  /// 1) and the allocations on 69.0% (67.2%), while allocations whose links bind are 2-3%
  /// more optimistic than before (bench/RESULTS.md, session 28).
  static constexpr double kCommOverlap = 1.2;
  /// Share of processor sharing's wait (D·U per op, the ring's stretch) that the waves'
  /// turn-taking leaves: 0.8, fitted with kCommOverlap (above).
  static constexpr double kWaitShare = 0.8;

  /// "p=4 A=3/node(4 NIC) F=5/node(4 NIC) recompute=F fuse=on" for messages.
  [[nodiscard]] std::string describe_allocation(const Allocation& x) const {
    return "p=" + std::to_string(x.groups) + " A=" + std::to_string(x.attention_gpus_per_node) + "/node(" +
           std::to_string(x.attention_nics_per_node) + " NIC) F=" + std::to_string(x.ffn_gpus_per_node) +
           "/node(" + std::to_string(x.ffn_nics_per_node) + " NIC) recompute=" + to_string(x.recompute) +
           " fuse=" + (x.fuse ? "on" : "off") +
           (x.mixed_nodes > 0 ? " mixed=" + std::to_string(x.mixed_nodes) : std::string()) +
           (x.context_parallel > 1 ? " cp=" + std::to_string(x.context_parallel) : std::string()) +
           (x.group_factor != 2 ? " group=" + std::to_string(x.group_factor) + "p" : std::string());
  }

  /// Recompute settings the policy allows for either side, off first.
  [[nodiscard]] std::vector<bool> recompute_choices() const {
    switch (o_.recompute) {
      case RecomputePolicy::kOff: return {false};
      case RecomputePolicy::kOn: return {true};
      default: return {false, true};
    }
  }

 private:
  // Group size of `total` GPUs over x.groups under a mixed split: 0 unless it divides.
  [[nodiscard]] static int mixed_group_size(const Allocation& x, int total) {
    return (x.groups >= 1 && total >= 1 && total % x.groups == 0) ? total / x.groups : 0;
  }
  [[nodiscard]] double in_flight_of_groups(int p, int ga) const {
    return af_in_flight(p, double(micro_batches_) / ga, o_.group_factor);
  }
  [[nodiscard]] double grad_bytes() const { return o_.memory.grad_bytes > 0 ? o_.memory.grad_bytes : bytes_of(m_.dtype); }
  // A-side parameters of pair i beyond its layers: the input embedding on pair 0, the
  // final norm on the last layer's pair and the pair's vocabulary shard of the output
  // head (as attention_worker_memory).
  [[nodiscard]] double edge_params(int p, int i) const {
    double extra = i == 0 ? double(m_.vocab) * m_.hidden : 0;
    if (i == (m_.layers - 1) % p) extra += m_.hidden;
    return extra + head_shard_params(m_, p, i);
  }
  // Seconds per GPU micro-batch pair i of p spends on the embedding (pair 0) and its
  // 1/p of the vocabulary-parallel head (PlanOptions::embedding_head; 0 without).
  [[nodiscard]] double head_seconds(int p, int i) const {
    return (i == 0 ? head_.embedding() : 0) + head_.head() / p;
  }
  // Bytes per token, per direction, that the head's ring puts on each A group's links:
  // the last layer's output in (and on) forward, the partial input gradient backward —
  // one row each way. None with one pair or without the head.
  [[nodiscard]] double head_ring_row_bytes(int p) const {
    return (o_.embedding_head && p > 1) ? double(m_.hidden) * bytes_of(m_.dtype) : 0;
  }
  [[nodiscard]] MemoryOptions memory_options(Recompute rc) const {
    MemoryOptions mo = o_.memory;
    mo.recompute = rc;
    return mo;
  }
  [[nodiscard]] std::vector<WorkerLoad> loads(int p, int ga, int gf, double a_in_flight, double f_in_flight) const {
    std::vector<WorkerLoad> v;
    const auto groups = interleaved_groups(m_.layers, p);
    for (int i = 0; i < p; ++i) {
      WorkerLoad w;
      w.layers = groups[static_cast<std::size_t>(i)];
      w.attention_group_size = ga;
      w.ffn_group_size = gf;
      w.holds_embedding = i == 0;
      w.holds_head = i == (m_.layers - 1) % p;
      w.head_params = head_shard_params(m_, p, i);
      w.attention_in_flight = a_in_flight;
      w.ffn_in_flight = f_in_flight;
      v.push_back(std::move(w));
    }
    return v;
  }
  [[nodiscard]] double max_pair_sum(int p, const std::vector<double>& v) const {  // O(layers)
    double best = 0;
    for (int i = 0; i < p; ++i) {
      double s = 0;
      for (int l = i; l < m_.layers; l += p) s += v[static_cast<std::size_t>(l)];
      best = std::max(best, s);
    }
    return best;
  }

  ModelSpec m_;
  ClusterSpec c_;
  PlanOptions o_;
  // [recompute][layer]: seconds of one micro-batch on one GPU (A side, routed experts,
  // shared experts + dense FFN).
  std::vector<double> attention_s_[2], routed_s_[2], other_s_[2];
  // The same per pass on a wave's path: the forward, and the backward's input gradient
  // ([recompute]: after the recomputed forward); weight gradients are off the path.
  std::vector<double> attention_forward_s_, routed_forward_s_, other_forward_s_;
  std::vector<double> attention_backward_s_[2], routed_backward_s_[2], other_backward_s_[2];
  EmbeddingHeadSeconds head_{};                // all 0 unless PlanOptions::embedding_head
  std::vector<double> row_bytes_per_token_;    // bytes of one row per token (1 row)
  std::vector<double> attention_params_;       // A-side parameters per layer
  std::vector<double> replicated_ffn_params_;  // shared experts / dense FFN parameters per layer
  int micro_batches_ = 0;
  double tokens_ = 0;  // per A GPU micro-batch
  double capacity_ = 0;
};

}  // namespace disagmoe::plan
