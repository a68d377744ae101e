// SPDX-License-Identifier: Apache-2.0
/// @file timeline_cost.hpp
/// What one simulated timeline costs before it is built: an upper bound on the ops a
/// shipped policy emits for a model and batch, and the memory they take, checked
/// against the work and memory budgets of limits.hpp (`--max-ops`, `--max-memory`), so
/// that an accepted configuration can always be simulated. simulate_best applies the
/// check to the schedule it searches; programs call it first to name their options.
#pragma once

#include <disagmoe/limits.hpp>
#include <disagmoe/schedule/afpipe.hpp>
#include <disagmoe/schedule/baselines.hpp>
#include <disagmoe/schedule/cost_adapter.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

namespace disagmoe::schedule {

/// Bytes of one op with its dependency list and the simulator's per-op state
/// (measured: ~400 on the presets of bench/RESULTS.md).
inline constexpr double kBytesPerOp = 512;

/// Upper bound on the timeline of one schedule.
struct TimelineCost {
  std::int64_t micro_batches = 0;  ///< the most micro-batches any layout of the batch has
  std::int64_t ops = 0;            ///< bound on Schedule::ops.size() over every layout
  double bytes = 0;                ///< ops × kBytesPerOp
};

/// Ops of one micro-batch on one layer, at most, when each MoE layer is split into
/// `chunks`: forward attention, then per chunk dispatch, experts and combine; backward
/// per chunk the combine gradient, experts' input and weight gradients and the dispatch
/// gradient, then attention's input and weight gradients (schedule/pipeline.hpp; AF-Pipe,
/// schedule/afpipe.hpp, has chunks = 1 and a dispatch/return pair each way instead of the
/// all-to-alls); plus a pipeline send each way (at most one hand-off per layer).
constexpr std::int64_t ops_per_layer(std::int64_t chunks) { return 5 + 7 * chunks; }

/// The same for Comet's fused kernels (CometOverlap), whatever their tiles: attention
/// and two fused kernels of four ops forward; two fused kernels, the experts' weight
/// gradient and attention's two gradients backward; a pipeline send each way.
inline constexpr std::int64_t kFusedOpsPerLayer = 1 + 8 + 8 + 1 + 2 + 2;

/// Ops of one micro-batch outside the layers: the embedding's forward and weight
/// gradient, the output head's forward, input and weight gradients (Problem::embedding_head).
inline constexpr std::int64_t kEmbeddingHeadOps = 5;

/// Ops AF-Pipe's vocabulary-parallel head (schedule/afpipe.hpp) adds per micro-batch
/// beyond kEmbeddingHeadOps with p pairs: three passes on each further A group and the
/// ring's three sends per neighbour (output, merged gradient, statistics).
constexpr std::int64_t head_ring_ops(std::int64_t p) { return 6 * (p - 1); }

/// Upper bound on the timeline `schedule` (a kScheduleNames entry; `chunks`: the chunked
/// policy's per MoE layer) builds for `m` under `o`, over every layout simulate_best tries: micro-batches are
/// at most global_batch / micro_batch × context_parallel (1 when 0: the degree a search always runs;
/// simulate_best skips larger degrees whose timelines exceed the budgets; a layout's data-parallel
/// width only divides them), each layer of each micro-batch emits at most
/// ops_per_layer ops (kFusedOpsPerLayer for comet, whatever its tiles; plus
/// kEmbeddingHeadOps per micro-batch, and with CostOptions::embedding_head for AF-Pipe
/// head_ring_ops at its most pairs, one per layer), and every layer adds at most four gradient
/// all-reduces. O(1); checked 64-bit arithmetic (ConfigError naming the micro-batches or chunks on overflow).
inline TimelineCost timeline_cost(std::string_view schedule, const ModelSpec& m, const CostOptions& o,
                                  int chunks = 1) {
  TimelineCost t;
  const std::int64_t batch = global_batch_of(m, o);
  t.micro_batches = std::max<std::int64_t>(
      1, o.micro_batches > 0 ? o.micro_batches
                             : checked_mul(batch / std::max(1, m.micro_batch),
                                           std::max(1, o.context_parallel), "context_parallel"));
  const std::int64_t nc = schedule == ChunkedOverlap::kName ? std::max(1, chunks) : 1;
  const std::int64_t per_layer = schedule == CometOverlap::kName ? kFusedOpsPerLayer : ops_per_layer(nc);
  const std::int64_t head =
      kEmbeddingHeadOps + (o.embedding_head && schedule == AFPipe::kName ? head_ring_ops(m.layers) : 0);
  const std::int64_t per_mb = checked_add(checked_mul(m.layers, per_layer, "chunks"), head, "chunks");
  t.ops = checked_add(checked_mul(t.micro_batches, per_mb, "micro_batches"), 4 * std::int64_t{m.layers},
                      "micro_batches");
  t.bytes = kBytesPerOp * static_cast<double>(t.ops);
  return t;
}

/// True when a timeline of cost `c` fits the work budget (limits().max_ops) and the
/// memory budget (limits().max_memory_bytes).
inline bool within_budgets(const TimelineCost& c) {
  return c.ops <= limits().max_ops && c.bytes <= static_cast<double>(limits().max_memory_bytes);
}

/// The names expect_timeline_fits reports (a program passes its option names).
struct TimelineFields {
  std::string_view global_batch = "global_batch";
  std::string_view micro_batches = "micro_batches";
  std::string_view chunks = "chunks";
};

/// ConfigError unless the timeline of `schedule` fits the work budget (limits().max_ops)
/// and the memory budget (limits().max_memory_bytes). It names the chunks when the
/// timeline would fit with one chunk per layer, else the micro-batches when given, else
/// the global batch.
inline void expect_timeline_fits(std::string_view schedule, const ModelSpec& m, const CostOptions& o, int chunks = 1,
                                 const TimelineFields& f = {}) {
  auto named = [&]() -> std::pair<std::string_view, long long> {
    if (schedule == ChunkedOverlap::kName && chunks > 1 && within_budgets(timeline_cost(schedule, m, o, 1)))
      return {f.chunks, chunks};
    if (o.micro_batches > 0) return {f.micro_batches, o.micro_batches};
    return {f.global_batch, global_batch_of(m, o)};
  };
  TimelineCost c;
  try {
    c = timeline_cost(schedule, m, o, chunks);
  } catch (const ConfigError&) {  // beyond 64 bits: name the input, not the product
    const auto [field, value] = named();
    fail(field, value, "a size whose simulated timeline fits 64-bit op counts");
  }
  if (within_budgets(c)) return;
  const auto [field, value] = named();
  const std::string what = "simulated timeline of " + std::string(schedule);
  expect_memory(field, value, c.bytes, what + " (" + std::to_string(c.ops) + " ops)");
  expect_work(field, value, c.ops, what);
}

}  // namespace disagmoe::schedule
