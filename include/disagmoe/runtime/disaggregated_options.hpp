// SPDX-License-Identifier: Apache-2.0
/// @file disaggregated_options.hpp
/// How a disaggregated AF-Pipe run is laid out (pairs, ranks per worker, the exchange, the
/// expert placement) and scheduled, its validation, and the schedule problem the trainer
/// builds from it (runtime/disaggregated_trainer.hpp). The same options run the colocated
/// expert-parallel baselines (1F1B, Megatron's A2A overlap) on the same runtime, so that
/// real AF-Pipe and real colocated EP are compared on the same kernels.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/plan/cost_model.hpp>
#include <disagmoe/runtime/worker_executor.hpp>
#include <disagmoe/schedule/afpipe.hpp>
#include <disagmoe/schedule/baselines.hpp>
#include <disagmoe/schedule/problem.hpp>
#include <disagmoe/spec/model_spec.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace disagmoe::runtime {

/// How tokens move between an attention worker and its FFN worker.
enum class Exchange : std::uint8_t {
  kAuto,     ///< direct with one rank per worker, else channel
  kDirect,   ///< one message per schedule transfer, one rank per worker (stage alignment allowed)
  kChannel,  ///< comm::M2NChannel between the M ranks of A_i and the N ranks of F_i
};

/// Which schedule the workers run.
enum class ScheduleKind : std::uint8_t {
  kAfPipe,      ///< AF-Pipe: p attention workers and p FFN workers, disjoint (DisagMoE)
  kOneFOneB,    ///< colocated EP under 1F1B: p pipeline stages, each both attention and experts
  kA2AOverlap,  ///< colocated EP under Megatron's A2A overlap (interleaved, F&B steps overlapped)
};

/// Short name ("afpipe", "1f1b", "a2a-overlap"), as `disagmoe-train --schedule` spells it.
constexpr std::string_view to_string(ScheduleKind k) {
  return k == ScheduleKind::kAfPipe ? "afpipe" : k == ScheduleKind::kOneFOneB ? "1f1b" : "a2a-overlap";
}

/// How the disaggregated run is laid out and scheduled.
///
/// Colocated baselines (`schedule` other than kAfPipe): `pairs` is the number of pipeline
/// stages p and every stage is one worker of `attention_ranks` = `ffn_ranks` = G ranks that
/// run attention data-parallel and the experts expert-parallel (all-to-all dispatch and
/// combine inside the stage, through the M2NChannel's dual-role view); world size p * G.
struct DisaggregatedOptions {
  ScheduleKind schedule = ScheduleKind::kAfPipe;
  int pairs = 1;                  ///< p: attention workers = FFN workers = p (colocated: stages)
  int attention_ranks = 1;        ///< M: ranks per attention worker (data parallel over a micro-batch)
  int ffn_ranks = 1;              ///< N: ranks per FFN worker (its experts split over them)
  /// F-rank in [0, N) of every routed expert: E entries (one map for every layer) or
  /// layers x E entries, [layer][expert] (a placement per layer, e.g. Expert Coupling's
  /// `placement::CorrelatedPlacement`; a dense layer's entries are not used); empty:
  /// contiguous blocks. Shared expert s lives on F-rank s mod N.
  std::vector<int> expert_rank;
  /// Redundant experts (DeepSeek's EPLB replicates hot experts, github.com/deepseek-ai/EPLB):
  /// the F-ranks holding a copy of a routed expert besides its primary (`expert_rank`),
  /// distinct and other than the primary's. E lists (one for every layer) or layers x E,
  /// [layer][expert] (e.g. from `placement::replicate_experts`); empty: none. Each
  /// token-expert pair is served by one copy (comm::ReplicaRouting's rule) and the
  /// copies' gradients are summed after the backward, so they stay identical.
  std::vector<std::vector<int>> expert_replicas;
  Exchange exchange = Exchange::kAuto;
  schedule::AFPipe policy{};      ///< ping-pong group, in-flight window, stage alignment
  schedule::A2AOverlap a2a_overlap{};  ///< model chunks per stage of the A2A-overlap baseline
  ExecutorOptions executor{};     ///< fault deadline
  /// Rates the schedule's op costs assume (they fix the agreed comm order and the
  /// simulated prediction, never the arithmetic).
  double flops_per_second = 5e10;
  double bytes_per_second = 1e10;
  double latency_seconds = 0;  ///< per message between workers
};

/// Where every world rank sits: the attention workers' ranks first (A_i owns M of them),
/// then the FFN workers' (F_i owns N); schedule worker w < p is A_w, else F_{w-p}.
/// Colocated baselines: p workers of attention_ranks ranks each, nothing else.
struct RankLayout {
  int pairs = 1, attention_ranks = 1, ffn_ranks = 1;
  bool colocated = false;  ///< a baseline: every worker is both attention and FFN

  explicit RankLayout(const DisaggregatedOptions& o)
      : pairs(o.pairs), attention_ranks(o.attention_ranks), ffn_ranks(o.ffn_ranks),
        colocated(o.schedule != ScheduleKind::kAfPipe) {}
  /// Schedule workers: 2p (AF-Pipe) or p (colocated).
  [[nodiscard]] int workers() const { return colocated ? pairs : 2 * pairs; }
  /// World rank of rank `index` of schedule worker `worker`.
  [[nodiscard]] int world_rank(int worker, int index) const {
    return worker < pairs ? worker * attention_ranks + index
                          : pairs * attention_ranks + (worker - pairs) * ffn_ranks + index;
  }
  /// Schedule worker of world rank `rank`.
  [[nodiscard]] int worker_of(int rank) const {
    return rank < pairs * attention_ranks ? rank / attention_ranks
                                          : pairs + (rank - pairs * attention_ranks) / ffn_ranks;
  }
  /// Index of world rank `rank` among its worker's ranks.
  [[nodiscard]] int index_of(int rank) const {
    return rank < pairs * attention_ranks ? rank % attention_ranks : (rank - pairs * attention_ranks) % ffn_ranks;
  }
};

/// World ranks a run under `o` needs: p (M + N) for AF-Pipe, p G for a colocated baseline.
[[nodiscard]] inline int world_size(const DisaggregatedOptions& o) {
  return o.schedule == ScheduleKind::kAfPipe ? o.pairs * (o.attention_ranks + o.ffn_ranks)
                                             : o.pairs * o.attention_ranks;
}

/// F-rank of expert `e` (routed, then shared) at layer `layer` under `o` (its primary
/// copy): the placement, contiguous blocks without one, shared expert s on s mod N.
[[nodiscard]] inline int expert_rank_of(const DisaggregatedOptions& o, const ModelSpec& spec, int layer, int e) {
  const int n = o.ffn_ranks;
  if (e >= spec.experts) return (e - spec.experts) % n;
  if (o.expert_rank.empty()) return static_cast<int>(static_cast<std::int64_t>(e) * n / spec.experts);
  const std::size_t row = o.expert_rank.size() == static_cast<std::size_t>(spec.experts) ? 0 : static_cast<std::size_t>(layer);
  return o.expert_rank[row * static_cast<std::size_t>(spec.experts) + static_cast<std::size_t>(e)];
}

/// Index of the list of `o.expert_replicas` that holds the copies of routed expert `e` at
/// `layer` (one list per expert for every layer, or one per layer and expert).
[[nodiscard]] inline std::size_t replica_row(const DisaggregatedOptions& o, const ModelSpec& spec, int layer, int e) {
  const std::size_t row = o.expert_replicas.size() == static_cast<std::size_t>(spec.experts) ? 0 : static_cast<std::size_t>(layer);
  return row * static_cast<std::size_t>(spec.experts) + static_cast<std::size_t>(e);
}

/// The F-ranks holding a copy of every expert (routed, then shared) of `layer`, the
/// primary first, then the replicas of `o.expert_replicas`: what comm::ReplicaRouting
/// serves the layer's tokens from.
[[nodiscard]] inline std::vector<std::vector<std::int32_t>> expert_hosts(const DisaggregatedOptions& o,
                                                                         const ModelSpec& spec, int layer) {
  std::vector<std::vector<std::int32_t>> hosts;
  for (int e = 0; e < spec.experts + spec.shared_experts; ++e) {
    hosts.push_back({expert_rank_of(o, spec, layer, e)});
    if (e < spec.experts && !o.expert_replicas.empty())
      for (const int r : o.expert_replicas[replica_row(o, spec, layer, e)]) hosts.back().push_back(r);
  }
  return hosts;
}

/// True when some expert has a replica.
[[nodiscard]] inline bool has_replicas(const DisaggregatedOptions& o) {
  return std::any_of(o.expert_replicas.begin(), o.expert_replicas.end(), [](const auto& r) { return !r.empty(); });
}

/// Throws ConfigError naming the first field that cannot run `spec` on a world of
/// `world_size` ranks.
inline void validate(const DisaggregatedOptions& o, const ModelSpec& spec, int world_size) {
  expect(o.pairs >= 1, "DisaggregatedOptions.pairs", o.pairs, "a positive integer");
  expect(o.pairs <= spec.layers, "DisaggregatedOptions.pairs", o.pairs,
         "at most the model's layers (" + std::to_string(spec.layers) + "): pair i holds layers i, i + p, ...");
  expect(o.attention_ranks >= 1, "DisaggregatedOptions.attention_ranks", o.attention_ranks, "a positive integer");
  expect(o.ffn_ranks >= 1, "DisaggregatedOptions.ffn_ranks", o.ffn_ranks, "a positive integer");
  const bool colocated = o.schedule != ScheduleKind::kAfPipe;
  if (colocated) {
    expect(o.ffn_ranks == o.attention_ranks, "DisaggregatedOptions.ffn_ranks", o.ffn_ranks,
           "attention_ranks (" + std::to_string(o.attention_ranks) + "): a colocated stage's ranks run both "
           "attention and experts");
    expect(o.pairs * o.attention_ranks == world_size, "world size", world_size,
           "pairs * attention_ranks = " + std::to_string(o.pairs * o.attention_ranks) + " (" +
               std::string(to_string(o.schedule)) + ": pipeline stages of attention_ranks ranks each)");
    expect(o.exchange != Exchange::kDirect, "DisaggregatedOptions.exchange", "direct",
           std::string("auto or channel for ") + std::string(to_string(o.schedule)) +
               " (the all-to-all runs through the M2NChannel)");
    expect(o.a2a_overlap.virtual_stages >= 1, "DisaggregatedOptions.a2a_overlap.virtual_stages",
           o.a2a_overlap.virtual_stages, "a positive integer");
    const int hops = o.pairs * (o.schedule == ScheduleKind::kA2AOverlap ? o.a2a_overlap.virtual_stages : 1);
    expect(hops <= spec.layers, "pipeline stages x model chunks", hops,
           "at most the model's layers (" + std::to_string(spec.layers) + ")");
  } else {
    const int size = o.pairs * (o.attention_ranks + o.ffn_ranks);
    expect(world_size == size, "world size", world_size,
           "pairs * (attention_ranks + ffn_ranks) = " + std::to_string(size) +
               " (ranks: the attention workers' first, then the FFN workers')");
    const bool one = o.attention_ranks == 1 && o.ffn_ranks == 1;
    expect(o.exchange != Exchange::kDirect || one, "DisaggregatedOptions.exchange", "direct",
           "channel for workers of several ranks");
  }
  const auto per_layer = static_cast<std::size_t>(spec.layers) * static_cast<std::size_t>(spec.experts);
  expect(o.expert_rank.empty() || o.expert_rank.size() == static_cast<std::size_t>(spec.experts) ||
             o.expert_rank.size() == per_layer,
         "DisaggregatedOptions.expert_rank.size()", o.expert_rank.size(),
         "0 (contiguous), one F-rank per routed expert (" + std::to_string(spec.experts) +
             ") or one per layer and routed expert (" + std::to_string(per_layer) + ")");
  for (std::size_t e = 0; e < o.expert_rank.size(); ++e)
    expect(o.expert_rank[e] >= 0 && o.expert_rank[e] < o.ffn_ranks,
           "DisaggregatedOptions.expert_rank[" + std::to_string(e) + "]", o.expert_rank[e],
           "an F-rank in [0, ffn_ranks = " + std::to_string(o.ffn_ranks) + ")");
  expect(o.expert_replicas.empty() || o.expert_replicas.size() == static_cast<std::size_t>(spec.experts) ||
             o.expert_replicas.size() == per_layer,
         "DisaggregatedOptions.expert_replicas.size()", o.expert_replicas.size(),
         "0 (no replicas), one list per routed expert (" + std::to_string(spec.experts) +
             ") or one per layer and routed expert (" + std::to_string(per_layer) + ")");
  for (int l = 0; l < spec.layers && !o.expert_replicas.empty(); ++l) {
    if (!spec.is_moe_layer(l)) continue;
    const auto layer_hosts = expert_hosts(o, spec, l);
    for (int e = 0; e < spec.experts; ++e) {
      const auto& hosts = layer_hosts[static_cast<std::size_t>(e)];
      for (std::size_t c = 1; c < hosts.size(); ++c)
        expect(hosts[c] >= 0 && hosts[c] < o.ffn_ranks &&
                   std::find(hosts.begin(), hosts.begin() + static_cast<std::ptrdiff_t>(c), hosts[c]) ==
                       hosts.begin() + static_cast<std::ptrdiff_t>(c),
               "DisaggregatedOptions.expert_replicas[" + std::to_string(replica_row(o, spec, l, e)) + "]", hosts[c],
               "an F-rank in [0, ffn_ranks = " + std::to_string(o.ffn_ranks) + ") holding no other copy of expert " +
                   std::to_string(e) + " of layer " + std::to_string(l) + " (its primary is F-rank " +
                   std::to_string(hosts[0]) + ")");
    }
  }
  expect(o.policy.group_size >= 0, "DisaggregatedOptions.policy.group_size", o.policy.group_size,
         "an integer >= 0 (0: the policy's default)");
  expect(o.policy.max_in_flight >= 0, "DisaggregatedOptions.policy.max_in_flight", o.policy.max_in_flight,
         "an integer >= 0 (0: the policy's default)");
  expect(o.flops_per_second > 0, "DisaggregatedOptions.flops_per_second", o.flops_per_second, "a positive rate");
  expect(o.bytes_per_second > 0, "DisaggregatedOptions.bytes_per_second", o.bytes_per_second, "a positive rate");
  expect(o.latency_seconds >= 0 && o.latency_seconds < 1e3, "DisaggregatedOptions.latency_seconds", o.latency_seconds,
         "a latency in [0, 1000) s");
  expect(o.executor.timeout.count() > 0, "DisaggregatedOptions.executor.timeout (ms)", o.executor.timeout.count(),
         "a positive deadline");
}

/// True when tokens move through comm::M2NChannel (groups of ranks, a colocated stage's
/// all-to-all, or asked for), false for direct messages (one rank per worker).
[[nodiscard]] inline bool uses_channel(const DisaggregatedOptions& o) {
  return o.schedule != ScheduleKind::kAfPipe || o.exchange == Exchange::kChannel || o.attention_ranks > 1 ||
         o.ffn_ranks > 1;
}

/// The schedule problem of `spec` (micro-batches of `spec.micro_batch` sequences) under
/// `o`: AF-Pipe's 2p workers (A_i of M ranks, F_i of N ranks) or the colocated baselines'
/// p stages of G ranks. Layer costs from plan::layer_cost at o's rates, per GPU: an A-rank
/// computes the attention of T / M tokens, an F-rank 1/N of the experts; a token's rows go
/// to at most min(k + shared, N) ranks (send-once; a colocated rank's own share stays local,
/// which the simulator's all-to-all model accounts for). The bytes are those of the
/// messages listed in runtime/disaggregated_trainer.hpp.
inline schedule::Problem schedule_problem(const ModelSpec& spec, const DisaggregatedOptions& o, int micro_batches,
                                          std::size_t element_bytes = 4) {
  const int pairs = o.pairs;
  const bool colocated = o.schedule != ScheduleKind::kAfPipe;
  const double flops_per_second = o.flops_per_second, bytes_per_second = o.bytes_per_second;
  schedule::Problem pb;
  pb.network.nic_latency = pb.network.nvlink_latency = o.latency_seconds;
  for (int side = 0; side < (colocated ? 1 : 2); ++side)
    for (int i = 0; i < pairs; ++i) {
      schedule::Worker w;
      w.name.assign(1, colocated ? 'S' : side == 0 ? 'A' : 'F');  // (not "S" + to_string: g++ 12 -Wrestrict)
      w.name += std::to_string(i);
      w.role = colocated ? schedule::Role::kColocated : side == 0 ? schedule::Role::kAttention : schedule::Role::kFfn;
      w.gpus = side == 0 ? o.attention_ranks : o.ffn_ranks;
      w.first_node = side * pairs + i;
      w.nic_bandwidth = w.nvlink_bandwidth = bytes_per_second;
      w.peak_flops = flops_per_second;
      pb.workers.push_back(w);
    }
  pb.micro_batches = micro_batches;
  const double t = double(spec.tokens_per_micro_batch()), d = spec.hidden, e = double(element_bytes);
  const double ta = t / o.attention_ranks, n = o.ffn_ranks;
  const double slots = spec.top_k + spec.shared_experts;
  const double dest = std::min<double>(slots, n);  // an all-to-all's own share: the simulator keeps it local
  pb.tokens_per_micro_batch = colocated ? t : t * pairs;
  for (int l = 0; l < spec.layers; ++l) {
    const auto c = plan::layer_cost(spec, l);
    const auto a = c.attention_side() + c.dense_ffn, f = c.experts + c.shared_experts;
    schedule::LayerCost lc;
    lc.moe = c.moe;
    const double am = o.attention_ranks * flops_per_second, fn = n * flops_per_second;
    lc.attn_fwd = a.forward / am;
    lc.attn_bwd = a.backward_input / am;
    lc.attn_wgrad = a.backward_weight / am;
    lc.expert_fwd = f.forward / fn;
    lc.expert_bwd = f.backward_input / fn;
    lc.expert_wgrad = f.backward_weight / fn;
    lc.dispatch_bytes = ta * dest * (d * e + slots * 8.0);
    lc.combine_bytes = colocated ? ta * dest * d * e : t * dest * d * e / n;
    lc.hidden_bytes = ta * d * e;
    // Stage alignment: direct messages carry the residual with the dispatch (and dL/dy
    // with the return). The channel's hand-off sends it beside, from A_l to A_{l+1} on
    // the same egress NIC, with the routing (ids and gates) that A_{l+1} combines by. One
    // pair keeps both local (A_{l+1} = A_l), either way.
    if (!colocated && c.moe && l + 1 < spec.layers && o.policy.fuse_combine_dispatch && pairs > 1)
      lc.dispatch_bytes += uses_channel(o) ? ta * (d * e + slots * 8.0) : ta * d * e;
    pb.flops_per_micro_batch += c.total().total();
    pb.layers.push_back(lc);
  }
  return pb;
}

/// The schedule `o` runs for `spec` (micro-batches of `spec.micro_batch` sequences).
/// ConfigError where the policy cannot run it (e.g. A2A overlap's interleaving needs the
/// micro-batches to be a multiple of the stages).
inline schedule::Schedule build_schedule(const ModelSpec& spec, const DisaggregatedOptions& o, int micro_batches,
                                         std::size_t element_bytes = 4) {
  const schedule::Problem pb = schedule_problem(spec, o, micro_batches, element_bytes);
  switch (o.schedule) {
    case ScheduleKind::kAfPipe: return o.policy.build(pb);
    case ScheduleKind::kOneFOneB: return schedule::OneFOneB{}.build(pb);
    case ScheduleKind::kA2AOverlap: return o.a2a_overlap.build(pb);
  }
  fail("DisaggregatedOptions.schedule", static_cast<int>(o.schedule), "afpipe, 1f1b or a2a-overlap");
}

}  // namespace disagmoe::runtime
