// SPDX-License-Identifier: Apache-2.0
/// @file recompute.hpp
/// `Recompute`: which side of each layer recomputes its activations, a value shared by
/// the planner's memory and time models, the simulator's costs and the training stages
/// (runtime::StageOptions).
#pragma once

#include <string>

namespace disagmoe::plan {

/// Which side of each layer recomputes its activations in the backward pass (full
/// recomputation: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
/// Transformer Models", §4, keep only the side's input and rerun its forward). The A side
/// is attention, norms and router; the F side the experts (routed and shared) or the dense
/// FFN. Disaggregated, the two sides live on different GPUs, so each recomputes only where
/// its own memory needs it; colocated, a worker may still recompute only one part (a
/// colocated dense layer's FFN runs, and recomputes, with the attention part). In training,
/// AttentionStage follows `attention` and ExpertStage `ffn` (runtime::StageOptions).
struct Recompute {
  bool attention = false;  ///< the A side keeps only its input (T·d)
  bool ffn = false;        ///< the F side keeps only the rows it received
  constexpr Recompute() = default;
  /// Both flags, A side first. No constructor from one bool: an allocation written as
  /// {…, true, …} before recomputation was per side does not compile, rather than silently
  /// meaning {true, false}.
  constexpr Recompute(bool attention_side, bool ffn_side) : attention(attention_side), ffn(ffn_side) {}
  /// Both sides alike.
  static constexpr Recompute both(bool on) { return {on, on}; }
  [[nodiscard]] constexpr bool any() const { return attention || ffn; }
  friend constexpr bool operator==(const Recompute&, const Recompute&) = default;
};

/// "off", "A", "F" or "A+F": which sides recompute, for messages and tables.
inline std::string to_string(Recompute r) {
  return r.attention ? (r.ffn ? "A+F" : "A") : (r.ffn ? "F" : "off");
}

}  // namespace disagmoe::plan
