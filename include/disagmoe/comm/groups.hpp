// SPDX-License-Identifier: Apache-2.0
/// @file groups.hpp
/// The three groups AF-Pipe needs from a world (DisagMoE, arXiv 2605.11005,
/// "disaggregated placement"): the attention group (A-ranks), the FFN group
/// (F-ranks), and the pair group over which an M2NChannel runs (A-ranks first).
#pragma once

#include <disagmoe/comm/transport.hpp>
#include <disagmoe/error.hpp>

#include <algorithm>
#include <optional>
#include <span>
#include <vector>

namespace disagmoe::comm {

/// A rank's view of its groups: each is std::nullopt where this rank is not a member.
template <transport T>
struct AfGroups {
  std::optional<T> attention;  ///< ranks `attention_ranks`, in that order
  std::optional<T> ffn;        ///< ranks `ffn_ranks`, in that order
  std::optional<T> pair;       ///< attention_ranks then ffn_ranks
};

/// Collective over `world` (every rank calls it with the same lists): splits the A-,
/// F- and pair groups. Throws ConfigError when a list is empty or the lists overlap.
/// O(world size) plus three collective splits.
template <transport T>
AfGroups<T> make_af_groups(T& world, std::span<const int> attention_ranks, std::span<const int> ffn_ranks) {
  expect(!attention_ranks.empty(), "make_af_groups attention_ranks.size()", 0, ">= 1");
  expect(!ffn_ranks.empty(), "make_af_groups ffn_ranks.size()", 0, ">= 1");
  for (int r : ffn_ranks)
    expect(std::find(attention_ranks.begin(), attention_ranks.end(), r) == attention_ranks.end(),
           "make_af_groups ffn_ranks[i]", r, "a rank not in attention_ranks (the groups are disjoint)");
  std::vector<int> pair(attention_ranks.begin(), attention_ranks.end());
  pair.insert(pair.end(), ffn_ranks.begin(), ffn_ranks.end());
  AfGroups<T> g;
  g.attention = world.split(attention_ranks);
  g.ffn = world.split(ffn_ranks);
  g.pair = world.split(pair);
  return g;
}

}  // namespace disagmoe::comm
