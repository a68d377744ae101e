// SPDX-License-Identifier: Apache-2.0
/// @file plan_options.hpp
/// The planner's knobs (PlanOptions) and the defaults the planner, the simulator and the
/// programs share: the global batch and AF-Pipe's ping-pong group and in-flight window.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/plan/cost_model.hpp>
#include <disagmoe/spec/model_spec.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

namespace disagmoe::plan {

/// Whether activations are recomputed (Korthikanti et al. 2022, full recomputation),
/// applied to each side on its own (Recompute).
enum class RecomputePolicy {
  kAuto,  ///< plan each side both ways, keep the fastest plan that fits
  kOff,   ///< never recompute
  kOn,    ///< always recompute on both sides (one extra forward pass: compute × 4/3)
};

/// Knobs of the planner. All explicit; defaults documented per field.
struct PlanOptions {
  /// Sequences per optimizer step; 0 = kDefaultBatchTokens / seq_len rounded down to a
  /// multiple of micro_batch (at least one micro-batch).
  int global_batch = 0;
  Efficiency efficiency{};                       ///< achievable fractions of peak (cost_model.hpp)
  MemoryOptions memory = kDefaultMemory;         ///< state format (ZeRO-1 on, as Megatron's distributed optimizer); `recompute` is set per allocation
  RecomputePolicy recompute = RecomputePolicy::kAuto;
  bool dedup = true;                             ///< send each token once per destination F GPU
  double memory_fraction = kDefaultMemoryFraction;  ///< usable share of HBM (allocator workspace, fragmentation)
  /// The M2N/N2M transport between A and F workers: true = GPU kernels (NCCL / NVSHMEM,
  /// DeepEP-like: ClusterSpec::kernel_comm_sm_fraction of the SMs on both ends while a
  /// transfer is active), false = an RDMA engine (ClusterSpec::rdma_comm_sm_fraction).
  /// Pipeline hand-offs and gradient all-reduces are NCCL kernels either way.
  bool m2n_uses_sms = true;
  int max_groups = 0;                            ///< upper bound on p; 0 = layers
  /// Context parallelism inside the A groups (plan::context_parallel_ring_seconds): each
  /// micro-batch's sequences split over this many GPUs of one node, which divides the A
  /// GPUs per node and the A group size. 1: none. 0 (auto): AdaptiveAllocator plans at
  /// the fastest of context_parallel_degrees (resolve_automatic); AnalyticModel
  /// needs it resolved.
  int context_parallel = 1;
  /// AF-Pipe's ping-pong group in micro-batch waves per pair (af_group_size): 2 (each
  /// worker of the ring busy) or 1 (half the activations in flight, for memory-bound
  /// settings). 0 (auto): resolved with context_parallel (resolve_automatic).
  int group_factor = 2;
  /// Price the input embedding and the output head as the simulator schedules them
  /// (schedule::CostOptions::embedding_head): the embedding on pair 0, the head
  /// vocabulary-parallel over the p A groups (1/p of its passes on each, the last layer's
  /// output and the head's input gradient passed around the ring of A groups: one row
  /// per token in and out per direction). false: their FLOPs are not scheduled.
  bool embedding_head = false;
  /// Let nodes split unlike each other (Allocation::mixed_nodes), so that the A:F ratio
  /// can sit between two integer splits per node. Off by default: they need context
  /// parallelism off; of 48 bench settings (bench_mixed_splits) the one analytic plan
  /// that mixes simulates 0.980x; no refined plan of the bench grid's 30 ends mixed
  /// (plan_grid.sh --mixed-splits); and they lengthen planning 1.37x on that grid
  /// (bench/RESULTS.md, sessions 26 and 28).
  bool mixed_splits = false;
};

/// Tokens per step when PlanOptions::global_batch is 0: 4 Mi, the batch of GPT-3's
/// larger models (Brown et al. 2020, Table 2.1: 3.2M tokens) rounded to a power of two.
inline constexpr std::int64_t kDefaultBatchTokens = std::int64_t{1} << 22;

/// The default sequences per step of model `m` (its seq_len and micro_batch):
/// kDefaultBatchTokens / seq_len rounded down to a multiple of micro_batch, at least one
/// micro-batch. The one default of the planner, the simulator (schedule::CostOptions)
/// and both programs. O(1).
inline int default_global_batch(const ModelSpec& m) {
  const std::int64_t seqs = kDefaultBatchTokens / std::max(1, m.seq_len);
  const std::int64_t mb = std::max(1, m.micro_batch);
  return int(std::max<std::int64_t>(mb, seqs / mb * mb));
}

/// Sequences per step: o.global_batch, or default_global_batch(m).
inline int global_batch_of(const PlanOptions& o, const ModelSpec& m) {
  return o.global_batch != 0 ? o.global_batch : default_global_batch(m);
}

/// AF-Pipe's ping-pong group (micro-batches per group, schedule::AFPipe::group_size) for
/// p pairs, `waves` pipeline micro-batches per step (one micro-batch on every GPU of an
/// A group each) and group factor k (PlanOptions::group_factor): min(waves, k·p). The
/// default k = 2 gives each of the 2p workers of the ring a micro-batch while the
/// others' are in flight (MegaScale-Infer's ping-pong, DisagMoE AF-Pipe); k = 1 keeps
/// half as many activations at the price of a ring that is half busy. The planner's
/// memory model and the simulated schedule both use it. O(1).
constexpr int af_group_size(int p, int waves, int k = 2) { return std::max(1, std::min(waves, k * p)); }

/// Pipeline micro-batches AF-Pipe keeps alive at once (schedule::AFPipe::max_in_flight):
/// two groups, so that one group's forward overlaps the previous group's backward,
/// at most `waves`: min(waves, 2 · af_group_size) = min(waves, 2kp). Each holds its
/// activations on every layer of a worker until its weight gradient. O(1).
constexpr double af_in_flight(int p, double waves, int k = 2) {
  return std::min(waves, 2.0 * af_group_size(p, int(std::max(1.0, std::floor(waves))), k));
}

/// Throws ConfigError naming the first bad field.
inline void validate(const PlanOptions& o, const ModelSpec& m) {
  expect(o.global_batch >= 0, "global_batch", o.global_batch, "a positive number of sequences (0 = default)");
  expect(global_batch_of(o, m) % m.micro_batch == 0, "global_batch", o.global_batch,
         "a multiple of micro_batch (" + std::to_string(m.micro_batch) + ")");
  validate(o.efficiency);
  expect(std::isfinite(o.memory_fraction) && o.memory_fraction > 0 && o.memory_fraction <= 1, "memory_fraction",
         o.memory_fraction, "a fraction in (0, 1]");
  expect(o.max_groups >= 0, "max_groups", o.max_groups, "an integer >= 0 (0 = layers)");
  expect(std::isfinite(o.memory.optimizer_bytes) && o.memory.optimizer_bytes >= 0, "memory.optimizer_bytes",
         o.memory.optimizer_bytes, "finite bytes >= 0");
  expect(std::isfinite(o.memory.grad_bytes) && o.memory.grad_bytes >= 0, "memory.grad_bytes",
         o.memory.grad_bytes, "finite bytes >= 0 (0 = the model's dtype)");
  expect(o.context_parallel >= 0 && o.context_parallel <= 1024, "context_parallel", o.context_parallel,
         "a degree in [1, 1024], or 0 (auto)");
  expect_context_parallel_fits("context_parallel", o.context_parallel, m);
  expect(o.group_factor >= 0 && o.group_factor <= 2, "group_factor", o.group_factor, "1, 2, or 0 (auto)");
}

}  // namespace disagmoe::plan
