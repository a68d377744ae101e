// SPDX-License-Identifier: Apache-2.0
/// @file baselines.hpp
/// Baseline schedules on colocated expert parallelism: every worker is one pipeline
/// stage whose GPUs run attention data-parallel and experts expert-parallel, with
/// all-to-all dispatch/combine inside the worker. Rules from
/// the published schedules (1F1B, interleaved 1F1B, Megatron's A2A overlap) and
/// the chunked FFN/all-to-all overlap of Tutel (`a2a_ffn_overlap_degree`) and Comet's
/// communication fused into the expert GEMMs.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/schedule/pipeline.hpp>
#include <disagmoe/schedule/policy.hpp>

#include <algorithm>
#include <string>
#include <vector>

namespace disagmoe::schedule {

namespace detail {

// Routes of a looped pipeline with p workers and v chunks each: hop h runs layer chunk h
// on worker h % p (Megatron: chunk c on rank r is global stage c·p + r).
inline std::vector<std::vector<Stage>> looped_routes(const Problem& pb, int v) {
  const int p = static_cast<int>(pb.workers.size());
  const auto parts = split_layers(static_cast<int>(pb.layers.size()), p * v, v > 1 ? "virtual stages" : "stages");
  std::vector<Stage> route;
  for (int h = 0; h < p * v; ++h)
    route.push_back({h % p, parts[static_cast<std::size_t>(h)].first, parts[static_cast<std::size_t>(h)].second});
  return std::vector<std::vector<Stage>>(static_cast<std::size_t>(pb.micro_batches), route);
}

// Per-rank F/B sequence of 1F1B (v == 1, B1) or Megatron's interleaved schedule table
// with group size N = p (B2). `extra_warmup` adds forwards before the steady state
// (B3: one more for the A2A-overlap pairing); `pair` turns each steady [F, B] into one
// overlapped F&B action.
inline std::vector<std::vector<Action>> one_f_one_b_actions(int p, int m, int v, int extra_warmup, bool pair) {
  if (v > 1)
    expect(m % p == 0, "micro_batches", m,
           "a multiple of the pipeline stages (" + std::to_string(p) + ") for interleaved 1F1B (Megatron's table)");
  const int total = m * v;
  auto fwd = [&](int k, int r) {
    const int group = k / (p * v), within = k % (p * v);
    return Action{ActionKind::kForward, group * p + within % p, (within / p) * p + r};
  };
  auto bwd = [&](int k, int r) {
    const int group = k / (p * v), within = k % (p * v);
    const int chunk = v - 1 - within / p;
    return Action{ActionKind::kBackward, group * p + within % p, chunk * p + r};
  };
  std::vector<std::vector<Action>> acts(static_cast<std::size_t>(p));
  for (int r = 0; r < p; ++r) {
    const int base = v == 1 ? p - r - 1 : 2 * (p - r - 1) + (v - 1) * p;
    const int warm = std::min(base + extra_warmup, total);
    auto& a = acts[static_cast<std::size_t>(r)];
    for (int k = 0; k < warm; ++k) a.push_back(fwd(k, r));
    for (int k = 0; k < total - warm; ++k) {
      const Action f = fwd(warm + k, r), b = bwd(k, r);
      if (pair) {
        a.push_back(Action{ActionKind::kForwardBackward, f.mb, f.hop, b.mb, b.hop});
      } else {
        a.push_back(f);
        a.push_back(b);
      }
    }
    for (int k = total - warm; k < total; ++k) a.push_back(bwd(k, r));
  }
  return acts;
}

/// The looped 1F1B family shared by the baselines below: `v` chunks per worker,
/// `extra_warmup` extra warmup forwards, steady-state [F, B] fused when `pair`, MoE
/// layers split into `chunks` pieces.
inline Schedule build_looped_1f1b(const Problem& pb, std::string_view name, int v, int extra_warmup,
                                  bool pair, int chunks = 1, bool fused = false) {
  validate(pb);
  expect(chunks >= 1, "chunks", chunks, "a positive integer");
  expect(v >= 1, "virtual_stages", v, "a positive integer");
  const int p = static_cast<int>(pb.workers.size());
  PipelinePlan plan{looped_routes(pb, v), one_f_one_b_actions(p, pb.micro_batches, v, extra_warmup, pair), chunks};
  plan.fused = fused;
  return build_pipeline(pb, plan, std::string(name));
}

}  // namespace detail

/// 1F1B (PipeDream-Flush, Megatron without interleaving): one contiguous stage per
/// worker; warmup min(p − r − 1, m) forwards, then [F, B], then backwards.
/// Bubble (p − 1)(F + B_full) per step under uniform costs.
struct OneFOneB {
  using policy_concept = schedule_policy_tag;
  static constexpr std::string_view kName = "1f1b";
  [[nodiscard]] Schedule build(const Problem& pb) const { return detail::build_looped_1f1b(pb, kName, 1, 0, false); }
};

/// Interleaved 1F1B (Narayanan et al. SC'21, Megatron's schedule table with N = p):
/// `virtual_stages` chunks per worker, looped placement. Needs m % p == 0 when v > 1.
/// Bubble (p − 1)(F + B_full)/v under uniform costs (F, B_full of a whole worker).
struct Interleaved1F1B {
  using policy_concept = schedule_policy_tag;
  static constexpr std::string_view kName = "interleaved";
  int virtual_stages = 2;  ///< model chunks per worker (v >= 1)
  [[nodiscard]] Schedule build(const Problem& pb) const {
    return detail::build_looped_1f1b(pb, kName, virtual_stages, 0, false);
  }
};

/// Megatron's EP all-to-all overlap ("combined 1F1B", `--overlap-moe-expert-parallel-comm`,
/// B3): the interleaved schedule with one extra warmup forward, and every steady-state
/// [F, B] run as one step in which the forward (fwd stream) and the backward (bwd
/// stream) of different micro-batches overlap layer by layer, so each all-to-all of one
/// hides behind compute of the other.
struct A2AOverlap {
  using policy_concept = schedule_policy_tag;
  static constexpr std::string_view kName = "a2a-overlap";
  int virtual_stages = 2;  ///< model chunks per worker (v >= 1)
  [[nodiscard]] Schedule build(const Problem& pb) const {
    return detail::build_looped_1f1b(pb, kName, virtual_stages, 1, true);
  }
};

/// Operator-level overlap as Tutel runs it (`a2a_ffn_overlap_degree`, Hwang et al.
/// 2023, arXiv 2206.03382): every MoE layer's dispatch, expert compute and combine split
/// into `chunks` pieces pipelined against each other (NCCL kernels on SMs), on top of
/// interleaved 1F1B. 7 ops per chunk and layer, so many chunks make long timelines.
struct ChunkedOverlap {
  using policy_concept = schedule_policy_tag;
  static constexpr std::string_view kName = "chunked";
  int chunks = 4;          ///< pieces per MoE layer (>= 1)
  int virtual_stages = 2;  ///< model chunks per worker of the underlying interleaved 1F1B
  [[nodiscard]] Schedule build(const Problem& pb) const {
    return detail::build_looped_1f1b(pb, kName, virtual_stages, 0, false, chunks);
  }
};

/// Comet's fine-grained overlap (Zhang et al., MLSys'25, arXiv 2502.19811, on Flux's
/// fused GEMM kernels): the dispatch runs inside the experts' gate/up GEMM and the
/// combine inside their down GEMM, tile by tile (comm thread blocks on SMs), backward
/// alike, on top of interleaved 1F1B. Each fused kernel is four ops whatever `tiles`
/// (PipelinePlan::fused): its time is the two-stage pipeline's over `tiles` tiles, so
/// tile-level overlap costs no more ops than one chunk.
struct CometOverlap {
  using policy_concept = schedule_policy_tag;
  static constexpr std::string_view kName = "comet";
  int tiles = 16;          ///< tiles each fused kernel pipelines (>= 1; 1: no overlap)
  int virtual_stages = 2;  ///< model chunks per worker of the underlying interleaved 1F1B
  [[nodiscard]] Schedule build(const Problem& pb) const {
    expect(tiles >= 1, "tiles", tiles, "a positive integer");
    return detail::build_looped_1f1b(pb, kName, virtual_stages, 0, false, tiles, true);
  }
};

static_assert(schedule_policy<OneFOneB>);
static_assert(schedule_policy<Interleaved1F1B>);
static_assert(schedule_policy<A2AOverlap>);
static_assert(schedule_policy<ChunkedOverlap>);
static_assert(schedule_policy<CometOverlap>);

}  // namespace disagmoe::schedule
