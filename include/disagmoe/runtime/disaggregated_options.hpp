// SPDX-License-Identifier: Apache-2.0
/// @file disaggregated_options.hpp
/// How a disaggregated AF-Pipe run is laid out (pairs, ranks per worker, the exchange, the
/// expert placement) and scheduled, its validation, and the schedule problem the trainer
/// builds from it (runtime/disaggregated_trainer.hpp).
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/plan/cost_model.hpp>
#include <disagmoe/runtime/worker_executor.hpp>
#include <disagmoe/schedule/afpipe.hpp>
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

/// How the disaggregated run is laid out and scheduled.
struct DisaggregatedOptions {
  int pairs = 1;                  ///< p: attention workers = FFN workers = p
  int attention_ranks = 1;        ///< M: ranks per attention worker (data parallel over a micro-batch)
  int ffn_ranks = 1;              ///< N: ranks per FFN worker (its experts split over them)
  /// F-rank in [0, N) of every routed expert (the same for every layer); empty: contiguous
  /// blocks. Shared expert s lives on F-rank s mod N.
  std::vector<int> expert_rank;
  Exchange exchange = Exchange::kAuto;
  schedule::AFPipe policy{};      ///< ping-pong group, in-flight window, stage alignment
  ExecutorOptions executor{};     ///< fault deadline
  /// Rates the schedule's op costs assume (they fix the agreed comm order and the
  /// simulated prediction, never the arithmetic).
  double flops_per_second = 5e10;
  double bytes_per_second = 1e10;
  double latency_seconds = 0;  ///< per message between workers
};

/// Where every world rank sits: the attention workers' ranks first (A_i owns M of them),
/// then the FFN workers' (F_i owns N); schedule worker w < p is A_w, else F_{w-p}.
struct RankLayout {
  int pairs = 1, attention_ranks = 1, ffn_ranks = 1;

  explicit RankLayout(const DisaggregatedOptions& o)
      : pairs(o.pairs), attention_ranks(o.attention_ranks), ffn_ranks(o.ffn_ranks) {}
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

/// Throws ConfigError naming the first field that cannot run `spec` on a world of
/// `world_size` ranks.
inline void validate(const DisaggregatedOptions& o, const ModelSpec& spec, int world_size) {
  expect(o.pairs >= 1, "DisaggregatedOptions.pairs", o.pairs, "a positive integer");
  expect(o.pairs <= spec.layers, "DisaggregatedOptions.pairs", o.pairs,
         "at most the model's layers (" + std::to_string(spec.layers) + "): pair i holds layers i, i + p, ...");
  expect(o.attention_ranks >= 1, "DisaggregatedOptions.attention_ranks", o.attention_ranks, "a positive integer");
  expect(o.ffn_ranks >= 1, "DisaggregatedOptions.ffn_ranks", o.ffn_ranks, "a positive integer");
  const int size = o.pairs * (o.attention_ranks + o.ffn_ranks);
  expect(world_size == size, "world size", world_size,
         "pairs * (attention_ranks + ffn_ranks) = " + std::to_string(size) +
             " (ranks: the attention workers' first, then the FFN workers')");
  const bool one = o.attention_ranks == 1 && o.ffn_ranks == 1;
  expect(o.exchange != Exchange::kDirect || one, "DisaggregatedOptions.exchange", "direct",
         "channel for workers of several ranks");
  if (!one || o.exchange == Exchange::kChannel)
    expect(!o.policy.fuse_combine_dispatch, "DisaggregatedOptions.policy.fuse_combine_dispatch", true,
           "false with the M2NChannel exchange (stage alignment runs on one rank per worker, exchange direct)");
  expect(o.expert_rank.empty() || static_cast<int>(o.expert_rank.size()) == spec.experts,
         "DisaggregatedOptions.expert_rank.size()", o.expert_rank.size(),
         "0 (contiguous) or one F-rank per routed expert (" + std::to_string(spec.experts) + ")");
  for (std::size_t e = 0; e < o.expert_rank.size(); ++e)
    expect(o.expert_rank[e] >= 0 && o.expert_rank[e] < o.ffn_ranks,
           "DisaggregatedOptions.expert_rank[" + std::to_string(e) + "]", o.expert_rank[e],
           "an F-rank in [0, ffn_ranks = " + std::to_string(o.ffn_ranks) + ")");
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

/// The AF-Pipe problem of `spec` (micro-batches of `spec.micro_batch` sequences) on
/// `o.pairs` pairs of one-GPU workers: layer costs from plan::layer_cost at o's rates, the
/// bytes of the messages listed in the file comment.
inline schedule::Problem afpipe_problem(const ModelSpec& spec, const DisaggregatedOptions& o, int micro_batches,
                                        std::size_t element_bytes = 4) {
  const int pairs = o.pairs;
  const double flops_per_second = o.flops_per_second, bytes_per_second = o.bytes_per_second;
  schedule::Problem pb;
  pb.network.nic_latency = pb.network.nvlink_latency = o.latency_seconds;
  for (int side = 0; side < 2; ++side)
    for (int i = 0; i < pairs; ++i) {
      schedule::Worker w;
      w.name = (side == 0 ? "A" : "F") + std::to_string(i);
      w.role = side == 0 ? schedule::Role::kAttention : schedule::Role::kFfn;
      w.gpus = side == 0 ? o.attention_ranks : o.ffn_ranks;
      w.first_node = side * pairs + i;
      w.nic_bandwidth = w.nvlink_bandwidth = bytes_per_second;
      w.peak_flops = flops_per_second;
      pb.workers.push_back(w);
    }
  pb.micro_batches = micro_batches;
  // Per GPU: an A-rank holds T / M tokens of a micro-batch; an F-rank 1/N of the expert
  // work; a token goes to at most min(k + shared, N) F-ranks (send-once).
  const double t = double(spec.tokens_per_micro_batch()), d = spec.hidden, e = double(element_bytes);
  const double ta = t / o.attention_ranks, n = o.ffn_ranks;
  const double dest = std::min<double>(spec.top_k + spec.shared_experts, n);
  pb.tokens_per_micro_batch = t * pairs;
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
    lc.dispatch_bytes = ta * dest * (d * e + (spec.top_k + spec.shared_experts) * 8.0);
    lc.combine_bytes = t * dest * d * e / n;
    lc.hidden_bytes = ta * d * e;
    // Stage alignment: the residual rides with the dispatch (and dL/dy with the return).
    if (c.moe && l + 1 < spec.layers && o.policy.fuse_combine_dispatch) lc.dispatch_bytes += ta * d * e;
    pb.flops_per_micro_batch += c.total().total();
    pb.layers.push_back(lc);
  }
  return pb;
}

}  // namespace disagmoe::runtime
