// SPDX-License-Identifier: Apache-2.0
/// @file stage_options.hpp
/// Run-time knobs shared by `AttentionStage` and `ExpertStage`.
#pragma once

#include <cstdint>

namespace disagmoe::runtime {

/// Options of a stage.
struct StageOptions {
  /// Seed of the initial weights. Every tensor is drawn from its own stream derived from
  /// (seed, layer, expert), so any split of the model over stages starts identical.
  std::uint64_t seed = 1;
  /// Keep only a layer's input after forward and recompute the rest in backward
  /// (activation checkpointing, Chen et al. 2016): less memory, one more forward.
  bool recompute = false;
};

/// Stream ids for `model::derive_seed` (the first word after the seed).
enum class SeedStream : std::uint64_t { kEdges = 1, kAttentionLayer = 2, kExpert = 3 };

}  // namespace disagmoe::runtime
