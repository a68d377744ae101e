// SPDX-License-Identifier: Apache-2.0
/// @file online_expert_placement.hpp
/// Online re-placement of a disaggregated run's experts (Expert Coupling, arXiv
/// 2610.09372): `placement::OnlineReplacer` fed with the run's own routing
/// (`DisaggregatedTrainer::gather_routing`) and speaking the run's terms: F-ranks of every
/// layer's experts as `DisaggregatedOptions::expert_rank` holds them, a dispatch row of
/// `hidden` elements, an expert that moves with its weights and both AdamW moments. When
/// it moves experts, the run builds a trainer with the new `expert_rank` and copies the
/// state into it (`DisaggregatedTrainer::take_state`).
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/placement/online.hpp>
#include <disagmoe/placement/placement.hpp>
#include <disagmoe/runtime/expert_placement.hpp>
#include <disagmoe/spec/model_spec.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace disagmoe::runtime {

/// See the file comment. Deterministic: every rank that observes the same routing makes
/// the same decisions (the candidate's fit runs on one thread). The bytes it weighs are
/// modelled: forward dispatch rows saved against the moved experts' weights and moments.
class OnlineExpertPlacement {
 public:
  /// `expert_rank`: the run's current placement, [layer][expert] F-ranks, or one row of E
  /// for every layer, or empty (contiguous blocks), as `DisaggregatedOptions` takes it;
  /// `window_tokens`: routed tokens between refits (even); `horizon_windows`: windows over
  /// which a refit's saving is credited against the bytes it migrates; `element_bytes`: of
  /// one parameter or activation element.
  /// ConfigError when `ffn_ranks` does not divide the experts, the model has no MoE layer,
  /// or on a bad placement, window or horizon.
  OnlineExpertPlacement(const ModelSpec& spec, int ffn_ranks, std::vector<int> expert_rank, std::int64_t window_tokens,
                        double horizon_windows = 1, std::size_t element_bytes = sizeof(float))
      : spec_(spec), expert_rank_(std::move(expert_rank)),
        replacer_(initial(spec, ffn_ranks, expert_rank_), options(spec, window_tokens, horizon_windows, element_bytes)) {}

  /// Feeds one step's routing ([token][MoE layer][slot], `gather_routing`); true when a
  /// refit in it moved experts (`expert_rank` is then the new placement). ConfigError on
  /// a routing of the wrong shape.
  bool observe(std::span<const std::int32_t> routing) {
    const std::size_t before = replacer_.decisions().size();
    replacer_.observe(detail::model_routing(spec_, routing).trace);
    bool moved = false;
    for (std::size_t i = before; i < replacer_.decisions().size(); ++i) moved = moved || replacer_.decisions()[i].moved;
    if (moved) {
      const placement::Placement& p = replacer_.placement();
      int i = 0;
      for (int l = 0; l < spec_.layers; ++l) {
        if (!spec_.is_moe_layer(l)) continue;
        const auto row = p.layer(i++);
        for (int e = 0; e < spec_.experts; ++e)
          expert_rank_[static_cast<std::size_t>(l) * static_cast<std::size_t>(spec_.experts) + static_cast<std::size_t>(e)] =
              row[static_cast<std::size_t>(e)];
      }
    }
    return moved;
  }

  /// The current placement, [layer][expert] F-ranks (`DisaggregatedOptions::expert_rank`).
  [[nodiscard]] const std::vector<int>& expert_rank() const noexcept { return expert_rank_; }
  /// Every refit so far: predicted rows and bytes, experts moved.
  [[nodiscard]] const std::vector<placement::Replacement>& decisions() const noexcept { return replacer_.decisions(); }

 private:
  // The MoE layers' rows of `expert_rank` (filled with contiguous blocks when empty) as a
  // placement over one worker's F-ranks.
  static placement::Placement initial(const ModelSpec& spec, int ffn_ranks, std::vector<int>& expert_rank) {
    expect(spec.moe_layers() > 0, "online re-placement", spec.moe_layers(), "a model with MoE layers");
    expect(ffn_ranks >= 1 && spec.experts % ffn_ranks == 0, "ffn ranks", ffn_ranks,
           "a divisor of the routed experts (" + std::to_string(spec.experts) + "): every F-rank holds as many");
    const auto size = static_cast<std::size_t>(spec.layers) * static_cast<std::size_t>(spec.experts);
    if (expert_rank.empty())
      for (int e = 0; e < spec.experts; ++e)
        expert_rank.push_back(static_cast<int>(static_cast<std::int64_t>(e) * ffn_ranks / spec.experts));
    if (expert_rank.size() == static_cast<std::size_t>(spec.experts)) {  // one row for every layer
      const std::vector<int> row = expert_rank;
      for (int l = 1; l < spec.layers; ++l) expert_rank.insert(expert_rank.end(), row.begin(), row.end());
    }
    expect(expert_rank.size() == size, "expert_rank.size()", expert_rank.size(),
           "layers x routed experts (" + std::to_string(size) + ") or the routed experts");
    std::vector<std::int32_t> map;
    for (int l = 0; l < spec.layers; ++l)
      if (spec.is_moe_layer(l))
        for (int e = 0; e < spec.experts; ++e)
          map.push_back(expert_rank[static_cast<std::size_t>(l) * static_cast<std::size_t>(spec.experts) + static_cast<std::size_t>(e)]);
    const placement::Topology topo{ffn_ranks, ffn_ranks};  // the F-ranks of one worker: one node
    return placement::Placement(spec.moe_layers(), spec.experts, topo, std::move(map));
  }

  static placement::OnlineOptions options(const ModelSpec& spec, std::int64_t window_tokens, double horizon_windows,
                                          std::size_t element_bytes) {
    placement::OnlineOptions o;
    o.window_tokens = window_tokens;
    o.horizon_windows = horizon_windows;
    const auto bytes = static_cast<double>(element_bytes);
    o.row_bytes = static_cast<double>(spec.hidden) * bytes;
    // A gated FFN's three matrices, each with its two AdamW moments.
    o.expert_bytes = 3.0 * 3.0 * static_cast<double>(spec.hidden) * static_cast<double>(spec.expert_ffn) * bytes;
    o.fit.threads = 1;
    return o;
  }

  ModelSpec spec_;
  std::vector<int> expert_rank_;
  placement::OnlineReplacer replacer_;
};

}  // namespace disagmoe::runtime
