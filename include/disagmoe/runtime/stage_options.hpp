// SPDX-License-Identifier: Apache-2.0
/// @file stage_options.hpp
/// Run-time knobs shared by `AttentionStage` and `ExpertStage`.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/plan/recompute.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace disagmoe::runtime {

/// Options of a stage.
struct StageOptions {
  /// Seed of the initial weights. Every tensor is drawn from its own stream derived from
  /// (seed, layer, expert), so any split of the model over stages starts identical.
  std::uint64_t seed = 1;
  /// Keep only a layer's input after forward and recompute the rest in backward
  /// (activation checkpointing, Chen et al. 2016): less memory, one more forward.
  /// Per side, as a plan decides it: AttentionStage follows `attention`, ExpertStage `ffn`.
  plan::Recompute recompute{};
};

/// Stream ids for `model::derive_seed` (the first word after the seed).
enum class SeedStream : std::uint64_t { kEdges = 1, kAttentionLayer = 2, kExpert = 3 };

namespace detail {

/// Checks that `layers` ascends without repeats and that each layer passes `ok`.
template <class Ok>
void check_stage_layers(const std::vector<int>& layers, const std::string& field, Ok&& ok, std::string_view expected) {
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const std::string f = field + "[" + std::to_string(i) + "]";
    expect(ok(layers[i]), f, layers[i], expected);
    expect(i == 0 || layers[i - 1] < layers[i], f, layers[i], "ascending, without repeats");
  }
}

/// Position of `layer` in a stage's ascending `layers`; ConfigError naming `stage` if absent.
inline std::size_t stage_layer_index(const std::vector<int>& layers, int layer, const char* stage) {
  const auto it = std::lower_bound(layers.begin(), layers.end(), layer);
  if (it == layers.end() || *it != layer) fail(std::string(stage) + " layer", layer, "a layer this stage holds");
  return static_cast<std::size_t>(it - layers.begin());
}

}  // namespace detail

}  // namespace disagmoe::runtime
