// SPDX-License-Identifier: Apache-2.0
/// @file dualpipe.hpp
/// DualPipe (DeepSeek-V3 report §3.2.1; deepseek-ai/DualPipe `dualpipe.py`, `DualPipe.step`)
/// and DualPipeV (Sea AI Lab "cut-in-half"; `dualpipev.py`, PyTorch `ScheduleDualPipeV`)
/// on colocated expert-parallel workers. The eight-step per-rank orders are those of
/// the DualPipe paper (DeepSeek-V3, arXiv 2412.19437, Fig. 5); F&B pairs overlap the forward (fwd stream) of one
/// micro-batch with the backward (bwd stream) of another so each all-to-all hides behind
/// the other's compute; deferred weight gradients go through a FIFO (`WeightGradStore`).
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/schedule/pipeline.hpp>
#include <disagmoe/schedule/policy.hpp>

#include <array>
#include <string>
#include <vector>

namespace disagmoe::schedule {

namespace detail {

// Emits the eight DualPipe steps for one rank. `hop[ph]` is the rank's hop in the route
// of phase ph, `first_mb[ph]`/`count` the micro-batches that phase serves; `half` is the
// DualPipe half-rank (DualPipeV: the rank), `halves` P = p/2 (DualPipeV: p), `pairs` the
// number of step-4 iterations and `middle` whether the first step-4 pair runs unoverlapped.
struct DualPipeRank {
  std::array<int, 2> hop{};
  std::array<int, 2> first_mb{};
  int half = 0, halves = 0, pairs = 0;
  bool middle = false;
  std::array<int, 2> nf{}, nb{};
  std::vector<Action> out;

  Action f(int ph) { return {ActionKind::kForward, first_mb[ph] + nf[ph]++, hop[ph]}; }
  Action b(int ph, bool defer = false) {
    Action a{ActionKind::kBackward, first_mb[ph] + nb[ph]++, hop[ph]};
    a.defer_weight = defer;
    return a;
  }
  void fb(int ph_f, int ph_b) {
    const Action x = f(ph_f), y = b(ph_b);
    out.push_back({ActionKind::kForwardBackward, x.mb, x.hop, y.mb, y.hop});
  }
  void w() { out.push_back({ActionKind::kWeight}); }

  std::vector<Action> build() {
    const int h = half, P = halves;
    for (int i = 0; i < 2 * (P - h - 1); ++i) out.push_back(f(0));  // 1: nF0
    for (int i = 0; i < h + 1; ++i) {                                 // 2: nF0F1
      out.push_back(f(0));
      out.push_back(f(1));
    }
    for (int i = 0; i < P - h - 1; ++i) {                             // 3: nB1W1F1
      out.push_back(b(1, true));
      w();
      out.push_back(f(1));
    }
    for (int i = 0; i < pairs; ++i) {                                 // 4: nF0B1F1B0
      if (i == 0 && middle) {
        out.push_back(f(0));
        out.push_back(b(1));
      } else {
        fb(0, 1);
      }
      fb(1, 0);
    }
    for (int i = 0; i < P - h - 1; ++i) {                             // 5: nB1F1B0
      out.push_back(b(1));
      fb(1, 0);
    }
    bool zb = false;                                                  // 6: nB1B0
    for (int i = 0; i < h + 1; ++i) {
      if (i == (h + 1) / 2 && h % 2 == 1) zb = true;
      out.push_back(b(1, zb));
      if (i == (h + 1) / 2 && h % 2 == 0) zb = true;
      out.push_back(b(0, zb));
    }
    for (int i = 0; i < P - h - 1; ++i) {                             // 7: nWB0
      w();
      out.push_back(b(0, true));
    }
    for (int i = 0; i < h + 1; ++i) w();                              // 8: nW
    return out;
  }
};

}  // namespace detail

/// DualPipe: p workers (even), m micro-batches (even, >= 2p); half the micro-batches
/// enter at worker 0 and half at worker p − 1; worker r holds layer chunk r for the
/// first direction and chunk p − 1 − r for the second (2× parameters).
/// Bubble (p/2 − 1)(F&B + B_full − 3W) under uniform costs (DualPipe README).
struct DualPipe {
  using policy_concept = schedule_policy_tag;
  static constexpr std::string_view kName = "dualpipe";
  [[nodiscard]] Schedule build(const Problem& pb) const {
    validate(pb);
    const int p = static_cast<int>(pb.workers.size()), m = pb.micro_batches;
    expect(p % 2 == 0, "workers", p, "an even number of pipeline workers for DualPipe");
    expect(m % 2 == 0 && m >= 2 * p, "micro_batches", m,
           "an even number >= 2 x workers (" + std::to_string(2 * p) + ") for DualPipe");
    const auto parts = split_layers(static_cast<int>(pb.layers.size()), p);
    PipelinePlan plan;
    for (int j = 0; j < m; ++j) {
      std::vector<Stage> route;
      for (int h = 0; h < p; ++h) {
        const int w = j < m / 2 ? h : p - 1 - h;
        route.push_back({w, parts[static_cast<std::size_t>(h)].first, parts[static_cast<std::size_t>(h)].second});
      }
      plan.routes.push_back(std::move(route));
    }
    for (int r = 0; r < p; ++r) {
      detail::DualPipeRank k;
      const bool second = r >= p / 2;
      k.half = std::min(r, p - 1 - r);
      k.halves = p / 2;
      k.pairs = m / 2 - p + k.half + 1;
      k.middle = r == p / 2 - 1 || r == p / 2;
      for (int ph = 0; ph < 2; ++ph) {
        const int dir = ph ^ (second ? 1 : 0);  // direction 0 enters at worker 0
        k.hop[static_cast<std::size_t>(ph)] = dir == 0 ? r : p - 1 - r;
        k.first_mb[static_cast<std::size_t>(ph)] = dir == 0 ? 0 : m / 2;
      }
      plan.actions.push_back(k.build());
    }
    return build_pipeline(pb, plan, std::string(kName));
  }
};

/// DualPipeV: p workers, 2p layer chunks in a V (worker r holds chunks r and 2p − 1 − r),
/// every micro-batch goes down and back up; m >= 2p. Bubble (p − 1)(F&B + B_full − 3W)
/// with F, B, W per chunk (half a worker's layers).
struct DualPipeV {
  using policy_concept = schedule_policy_tag;
  static constexpr std::string_view kName = "dualpipev";
  [[nodiscard]] Schedule build(const Problem& pb) const {
    validate(pb);
    const int p = static_cast<int>(pb.workers.size()), m = pb.micro_batches;
    expect(m >= 2 * p, "micro_batches", m, "at least 2 x workers (" + std::to_string(2 * p) + ") for DualPipeV");
    const auto parts = split_layers(static_cast<int>(pb.layers.size()), 2 * p, "chunks");
    PipelinePlan plan;
    std::vector<Stage> route;
    for (int h = 0; h < 2 * p; ++h)
      route.push_back({h < p ? h : 2 * p - 1 - h, parts[static_cast<std::size_t>(h)].first,
                       parts[static_cast<std::size_t>(h)].second});
    plan.routes.assign(static_cast<std::size_t>(m), route);
    for (int r = 0; r < p; ++r) {
      detail::DualPipeRank k;
      k.half = r;
      k.halves = p;
      k.pairs = m - 2 * p + r + 1;
      k.middle = r == p - 1;
      k.hop = {r, 2 * p - 1 - r};
      k.first_mb = {0, 0};
      plan.actions.push_back(k.build());
    }
    return build_pipeline(pb, plan, std::string(kName));
  }
};

static_assert(schedule_policy<DualPipe>);
static_assert(schedule_policy<DualPipeV>);

}  // namespace disagmoe::schedule
