// SPDX-License-Identifier: Apache-2.0
/// @file layout.hpp
/// Send-once dispatch layouts, independent of any transport.
///
/// `SendOnceLayout` (sender side): given the expert -> rank map and each token's
/// top-k expert ids, every token row goes once to each destination rank that holds
/// any of its experts (not once per expert; cf. DeepEP "normal" dispatch and Expert
/// Coupling, arXiv 2610.09372). Rows are grouped by destination (ascending), tokens
/// ascending inside a destination.
///
/// `ArrivalLayout` (receiver side): given the rows that arrived (concatenated in
/// source order) and their top-k slots, the per-expert fan-out on this rank: local
/// experts ascending by global id, rows ascending inside an expert.
#pragma once

#include <disagmoe/comm/send_once.hpp>
#include <disagmoe/error.hpp>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace disagmoe::comm {

/// One top-k slot of a token as it travels with the row: expert id and gate weight.
struct RoutingSlot {
  std::int32_t expert = 0;
  float gate = 0;
};

namespace detail {
template <class V>
void grow(V& v, std::size_t n) {
  // resize never gives memory back, so buffers reach a steady capacity.
  if (v.size() < n) v.resize(n);
}
}  // namespace detail

/// Sender-side send-once layout. Rebuild with `build()` every step; storage is reused.
class SendOnceLayout {
 public:
  /// Builds the layout for `tokens = topk_ids.size() / top_k` tokens.
  /// `expert_rank[e]` in [0, num_ranks) is the rank holding expert e. Throws
  /// ConfigError naming the first bad expert id or rank. O(tokens * top_k^2 + ranks).
  void build(std::span<const std::int32_t> expert_rank, int num_ranks,
             std::span<const std::int32_t> topk_ids, int top_k) {
    expect(top_k >= 1, "SendOnceLayout top_k", top_k, ">= 1");
    expect(num_ranks >= 1, "SendOnceLayout num_ranks", num_ranks, ">= 1");
    expect(topk_ids.size() % static_cast<std::size_t>(top_k) == 0, "SendOnceLayout topk_ids.size()",
           topk_ids.size(), "a multiple of top_k");
    const auto k = static_cast<std::size_t>(top_k);
    tokens_ = topk_ids.size() / k;
    ranks_ = num_ranks;
    const auto experts = static_cast<std::int64_t>(expert_rank.size());
    detail::grow(dest_of_slot_, topk_ids.size());
    detail::grow(token_dest_, topk_ids.size());
    counts_.assign(static_cast<std::size_t>(num_ranks), 0);
    token_offsets_.resize(tokens_ + 1);
    token_offsets_[0] = 0;
    // Pass 1: the destination of every slot; each token's distinct destinations, counted.
    for (std::size_t t = 0; t < tokens_; ++t) {
      for (std::size_t j = 0; j < k; ++j) {
        const std::int64_t e = topk_ids[t * k + j];
        if (e < 0 || e >= experts) fail("topk_ids[token * top_k + slot]", e, "an expert id in [0, experts)");
        const std::int32_t d = expert_rank[static_cast<std::size_t>(e)];
        if (d < 0 || d >= num_ranks) fail("expert_rank[expert]", d, "a rank in [0, num_ranks)");
        dest_of_slot_[t * k + j] = d;
      }
      const auto q = static_cast<std::size_t>(token_offsets_[t]);
      const int degree = distinct_destinations(dest_of_slot_.data() + t * k, top_k, token_dest_.data() + q);
      for (int i = 0; i < degree; ++i) ++counts_[static_cast<std::size_t>(token_dest_[q + static_cast<std::size_t>(i)])];
      token_offsets_[t + 1] = token_offsets_[t] + degree;
    }
    offsets_.resize(static_cast<std::size_t>(num_ranks) + 1);
    offsets_[0] = 0;
    for (int d = 0; d < num_ranks; ++d)
      offsets_[static_cast<std::size_t>(d) + 1] = offsets_[static_cast<std::size_t>(d)] + counts_[static_cast<std::size_t>(d)];
    // Pass 2: a counting sort by destination, stable in token order.
    detail::grow(row_token_, static_cast<std::size_t>(offsets_.back()));
    detail::grow(token_rows_, static_cast<std::size_t>(token_offsets_.back()));
    // Destinations ascend within a token and rows are numbered destination-major, so a
    // token's rows come out ascending.
    cursor_.assign(offsets_.begin(), offsets_.end() - 1);
    for (std::size_t t = 0; t < tokens_; ++t) {
      for (auto q = static_cast<std::size_t>(token_offsets_[t]); q < static_cast<std::size_t>(token_offsets_[t + 1]); ++q) {
        const auto row = cursor_[static_cast<std::size_t>(token_dest_[q])]++;
        row_token_[static_cast<std::size_t>(row)] = static_cast<std::int64_t>(t);
        token_rows_[q] = row;
      }
    }
  }

  /// Number of tokens of the last build.
  std::size_t tokens() const { return tokens_; }
  /// Rows sent to destination d.
  std::int64_t count(int d) const { return counts_[static_cast<std::size_t>(d)]; }
  /// First row of destination d in the destination-major row order; offset(ranks) = total.
  std::int64_t offset(int d) const { return offsets_[static_cast<std::size_t>(d)]; }
  /// Total rows sent (sum over tokens of their distinct destinations).
  std::int64_t total_rows() const { return offsets_.back(); }
  /// Token of every row, destination-major: size total_rows().
  std::span<const std::int64_t> row_token() const {
    return {row_token_.data(), static_cast<std::size_t>(total_rows())};
  }
  /// Per-token segments into token_rows(): size tokens() + 1.
  std::span<const std::int64_t> token_offsets() const { return {token_offsets_.data(), tokens_ + 1}; }
  /// For each token, its rows in ascending destination order.
  std::span<const std::int64_t> token_rows() const {
    return {token_rows_.data(), static_cast<std::size_t>(token_offsets_[tokens_])};
  }
  /// Destination rank of slot j of token t.
  std::int32_t dest_of_slot(std::size_t t, std::size_t j, int top_k) const {
    return dest_of_slot_[t * static_cast<std::size_t>(top_k) + j];
  }
  /// Destination of a row (binary search over the offsets). O(log ranks).
  int dest_of_row(std::int64_t row) const {
    auto it = std::upper_bound(offsets_.begin(), offsets_.end(), row);
    return static_cast<int>(it - offsets_.begin()) - 1;
  }

 private:
  std::size_t tokens_ = 0;
  int ranks_ = 0;
  std::vector<std::int32_t> dest_of_slot_, token_dest_;  // token_dest_: segments as token_rows_
  std::vector<std::int64_t> counts_, offsets_, cursor_;
  std::vector<std::int64_t> token_offsets_, token_rows_, row_token_;
};

/// Receiver-side fan-out of arrived rows to this rank's experts.
class ArrivalLayout {
 public:
  /// Sets the experts of rank `me`: those e with expert_rank[e] == me, ascending.
  void set_placement(std::span<const std::int32_t> expert_rank, int me) {
    local_of_expert_.assign(expert_rank.size(), -1);
    local_experts_.clear();
    for (std::size_t e = 0; e < expert_rank.size(); ++e) {
      if (expert_rank[e] == me) {
        local_of_expert_[e] = static_cast<std::int32_t>(local_experts_.size());
        local_experts_.push_back(static_cast<std::int32_t>(e));
      }
    }
  }

  /// Builds the fan-out for `rows = slots.size() / top_k` arrived rows. Throws IoError
  /// (a corrupted or mis-addressed message) naming the row when an expert id is out
  /// of range or a row holds none of this rank's experts. O(rows * top_k + experts).
  void build(std::span<const RoutingSlot> slots, int top_k) {
    const auto k = static_cast<std::size_t>(top_k);
    rows_ = slots.size() / k;
    const auto local = local_experts_.size();
    expert_offsets_.assign(local + 1, 0);
    row_seg_.resize(rows_ + 1);
    row_seg_[0] = 0;
    for (std::size_t r = 0; r < rows_; ++r) {
      std::int64_t degree = 0;
      for (std::size_t j = 0; j < k; ++j) {
        const auto le = local_index(slots[r * k + j].expert, r);
        if (le >= 0) {
          ++expert_offsets_[static_cast<std::size_t>(le) + 1];
          ++degree;
        }
      }
      if (degree == 0) fail<IoError>("arrived row", r, "at least one expert held by this rank");
      row_seg_[r + 1] = row_seg_[r] + degree;
    }
    for (std::size_t le = 0; le < local; ++le) expert_offsets_[le + 1] += expert_offsets_[le];
    const auto slots_here = static_cast<std::size_t>(row_seg_[rows_]);
    detail::grow(expert_row_, slots_here);
    detail::grow(expert_gate_, slots_here);
    detail::grow(row_pos_, slots_here);
    detail::grow(row_gate_, slots_here);
    detail::grow(row_slot_, slots_here);
    cursor_.assign(expert_offsets_.begin(), expert_offsets_.end() - 1);
    std::size_t q = 0;
    for (std::size_t r = 0; r < rows_; ++r) {
      for (std::size_t j = 0; j < k; ++j) {
        const auto& s = slots[r * k + j];
        const auto le = local_of_expert_[static_cast<std::size_t>(s.expert)];
        if (le < 0) continue;
        const auto p = cursor_[static_cast<std::size_t>(le)]++;
        expert_row_[static_cast<std::size_t>(p)] = static_cast<std::int64_t>(r);
        expert_gate_[static_cast<std::size_t>(p)] = s.gate;
        row_pos_[q] = p;
        row_gate_[q] = s.gate;
        row_slot_[q] = static_cast<std::int32_t>(j);
        ++q;
      }
    }
  }

  /// Number of local experts.
  std::size_t local_experts() const { return local_experts_.size(); }
  /// Global id of local expert le.
  std::int32_t expert_id(std::size_t le) const { return local_experts_[le]; }
  /// Number of arrived rows of the last build.
  std::size_t rows() const { return rows_; }
  /// Fan-out positions [expert_offset(le), expert_offset(le + 1)) belong to expert le.
  std::int64_t expert_offset(std::size_t le) const { return expert_offsets_[le]; }
  /// Total (row, local expert) pairs.
  std::int64_t total_slots() const { return row_seg_[rows_]; }
  /// Arrived row of every fan-out position.
  std::span<const std::int64_t> expert_row() const { return {expert_row_.data(), slots()}; }
  /// Gate of every fan-out position.
  std::span<const float> expert_gate() const { return {expert_gate_.data(), slots()}; }
  /// Per-row segments into row_pos()/row_gate()/row_slot(): size rows() + 1.
  std::span<const std::int64_t> row_seg() const { return {row_seg_.data(), rows_ + 1}; }
  /// For each row, the fan-out positions of its local slots in slot order.
  std::span<const std::int64_t> row_pos() const { return {row_pos_.data(), slots()}; }
  /// The gates matching row_pos().
  std::span<const float> row_gate() const { return {row_gate_.data(), slots()}; }
  /// The top-k slot index matching row_pos().
  std::span<const std::int32_t> row_slot() const { return {row_slot_.data(), slots()}; }

 private:
  std::size_t slots() const { return static_cast<std::size_t>(row_seg_[rows_]); }
  std::int32_t local_index(std::int32_t e, std::size_t row) const {
    if (e < 0 || static_cast<std::size_t>(e) >= local_of_expert_.size())
      fail<IoError>("arrived row expert id (row " + std::to_string(row) + ")", e,
                    "an expert id in [0, experts)");
    return local_of_expert_[static_cast<std::size_t>(e)];
  }

  std::size_t rows_ = 0;
  std::vector<std::int32_t> local_of_expert_, local_experts_;
  std::vector<std::int64_t> expert_offsets_, cursor_, row_seg_, expert_row_, row_pos_;
  std::vector<float> expert_gate_, row_gate_;
  std::vector<std::int32_t> row_slot_;
};

/// Rows keyed by token, as the hand-off A-rank receives them: groups the rows
/// (sources concatenated in ascending order) by token, so that a token's rows are
/// listed, and combined, in ascending source order.
class TokenGather {
 public:
  /// `row_tokens[r]`: the token of row r. Throws IoError naming the first row whose
  /// token lies outside [0, tokens). O(rows + tokens).
  void build(std::span<const std::int64_t> row_tokens, std::size_t tokens) {
    tokens_ = tokens;
    offsets_.assign(tokens + 1, 0);
    for (std::size_t r = 0; r < row_tokens.size(); ++r) {
      const auto t = row_tokens[r];
      if (t < 0 || static_cast<std::size_t>(t) >= tokens)
        fail<IoError>("returned row token (row " + std::to_string(r) + ")", t,
                      "a token in [0, tokens = " + std::to_string(tokens) + ")");
      ++offsets_[static_cast<std::size_t>(t) + 1];
    }
    for (std::size_t t = 0; t < tokens; ++t) offsets_[t + 1] += offsets_[t];
    cursor_.assign(offsets_.begin(), offsets_.end() - 1);
    detail::grow(rows_, row_tokens.size());
    for (std::size_t r = 0; r < row_tokens.size(); ++r)
      rows_[static_cast<std::size_t>(cursor_[static_cast<std::size_t>(row_tokens[r])]++)] = static_cast<std::int64_t>(r);
  }
  /// Per-token segments into token_rows(): size tokens + 1.
  std::span<const std::int64_t> token_offsets() const { return {offsets_.data(), tokens_ + 1}; }
  /// For each token, its rows in ascending row (= source) order.
  std::span<const std::int64_t> token_rows() const {
    return {rows_.data(), static_cast<std::size_t>(offsets_[tokens_])};
  }

 private:
  std::size_t tokens_ = 0;
  std::vector<std::int64_t> offsets_, cursor_, rows_;
};

}  // namespace disagmoe::comm
