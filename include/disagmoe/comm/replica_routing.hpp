// SPDX-License-Identifier: Apache-2.0
/// @file replica_routing.hpp
/// Redundant experts through the channel (DeepSeek's EPLB replicates hot experts,
/// github.com/deepseek-ai/EPLB): every copy of an expert is an expert id of its own, so
/// the channel's send-once layout, fan-out and combine serve replicas unchanged. The
/// primary copy of expert e keeps id e; the replicas get ids E, E+1, ... in expert
/// order. Before dispatch, each token's expert ids are rewritten to the ids of the
/// copies that serve them (`route`); after receiving, an F-rank computes copy v with
/// the weights of `expert_of(v)`.
///
/// The serving rule (`serve_token`, the one implementation; placement's
/// `dispatch_replicas` calls it too): every token-expert pair is served once, on the
/// token's home rank when it holds a copy, else on a copy whose rank the token already
/// sends to (send-once: no extra row), else on the copy with the least load so far;
/// single-copy experts are served first, so their ranks count as already sent to.
#pragma once

#include <disagmoe/error.hpp>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace disagmoe::comm {

/// Serves the `k` pairs of one token: `hosts(s)` gives the ranks holding slot s's expert
/// (primary first), `home` the rank the token sits on (-1: none). Writes the serving rank
/// of each slot to `out[0..k)`, adds each pair to `load[rank]`, and returns the distinct
/// ranks served (the token's send-once rows). `sent` (one flag per rank, all 0) is left
/// all 0. O(k * copies).
template <class Hosts>
int serve_token(Hosts&& hosts, int k, int home, std::span<std::int64_t> load, std::span<char> sent, std::int32_t* out) {
  int rows = 0;
  auto serve = [&](int s, std::int32_t g) {
    out[s] = g;
    ++load[static_cast<std::size_t>(g)];
    rows += sent[static_cast<std::size_t>(g)] == 0;
    sent[static_cast<std::size_t>(g)] = 1;
  };
  for (int pass = 0; pass < 2; ++pass)
    for (int s = 0; s < k; ++s) {
      const std::span<const std::int32_t> h = hosts(s);
      if ((h.size() == 1) != (pass == 0)) continue;
      std::int32_t g = -1;
      for (const auto c : h)
        if (c == home) g = c;
      for (const auto c : h)
        if (g < 0 && sent[static_cast<std::size_t>(c)]) g = c;
      if (g < 0) {
        g = h[0];
        for (const auto c : h)
          if (load[static_cast<std::size_t>(c)] < load[static_cast<std::size_t>(g)]) g = c;
      }
      serve(s, g);
    }
  for (int s = 0; s < k; ++s) sent[static_cast<std::size_t>(out[s])] = 0;
  return rows;
}

/// One layer's copies of its experts as channel expert ids, and the dispatcher that
/// rewrites routed ids to them.
class ReplicaRouting {
 public:
  /// `hosts[e]`: the distinct ranks in [0, ranks) holding a copy of expert e, its primary
  /// first. Throws ConfigError naming the first bad entry. O(E * copies).
  ReplicaRouting(std::vector<std::vector<std::int32_t>> hosts, int ranks) : hosts_(std::move(hosts)), ranks_(ranks) {
    expect(ranks >= 1, "ReplicaRouting ranks", ranks, ">= 1");
    expect(!hosts_.empty(), "ReplicaRouting hosts.size()", 0, ">= 1 expert");
    const int experts = static_cast<int>(hosts_.size());
    std::vector<char> seen(static_cast<std::size_t>(ranks));
    for (int e = 0; e < experts; ++e) {
      const auto& h = hosts_[static_cast<std::size_t>(e)];
      const std::string field = "ReplicaRouting hosts[" + std::to_string(e) + "]";
      expect(!h.empty(), field + ".size()", 0, ">= 1 (the primary copy)");
      std::fill(seen.begin(), seen.end(), 0);
      for (const auto g : h) {
        expect(g >= 0 && g < ranks, field, g, "a rank in [0, " + std::to_string(ranks) + ")");
        expect(!seen[static_cast<std::size_t>(g)], field, g, "distinct ranks (one copy per rank)");
        seen[static_cast<std::size_t>(g)] = 1;
      }
    }
    copy_ids_.resize(hosts_.size());
    for (int e = 0; e < experts; ++e) {
      expert_rank_.push_back(hosts_[static_cast<std::size_t>(e)][0]);
      expert_of_.push_back(e);
      copy_ids_[static_cast<std::size_t>(e)].push_back(e);
    }
    for (int e = 0; e < experts; ++e) {
      const auto& h = hosts_[static_cast<std::size_t>(e)];
      for (std::size_t c = 1; c < h.size(); ++c) {
        copy_ids_[static_cast<std::size_t>(e)].push_back(static_cast<std::int32_t>(expert_rank_.size()));
        expert_rank_.push_back(h[c]);
        expert_of_.push_back(e);
      }
    }
  }

  /// Routed experts E.
  [[nodiscard]] int experts() const noexcept { return static_cast<int>(hosts_.size()); }
  /// Channel expert ids: every copy of every expert.
  [[nodiscard]] int copies() const noexcept { return static_cast<int>(expert_rank_.size()); }
  /// Rank of every copy id: the channel's `ChannelConfig::expert_rank`.
  [[nodiscard]] std::span<const std::int32_t> expert_rank() const noexcept { return expert_rank_; }
  /// The expert whose weights copy id `v` computes.
  [[nodiscard]] int expert_of(int v) const {
    expect(v >= 0 && v < copies(), "ReplicaRouting copy id", v, "in [0, " + std::to_string(copies()) + ")");
    return expert_of_[static_cast<std::size_t>(v)];
  }
  /// The ranks holding expert `e`, its primary first.
  [[nodiscard]] std::span<const std::int32_t> hosts(int e) const { return hosts_.at(static_cast<std::size_t>(e)); }

  /// Rewrites the routed ids [tokens x k] to the ids of the copies serving them
  /// (file comment); `home[t]` is token t's rank (empty: tokens sit on no F-rank, as
  /// AF-Pipe's A-ranks). Loads start at 0 on every call. Returns the send-once rows.
  /// Throws ConfigError naming the first bad id or home. O(tokens * k * copies).
  std::int64_t route(std::span<const std::int32_t> ids, int k, std::span<const std::int32_t> home,
                     std::span<std::int32_t> out) {
    expect(k >= 1 && ids.size() % static_cast<std::size_t>(k) == 0, "ReplicaRouting ids.size()", ids.size(),
           "a multiple of top_k = " + std::to_string(k));
    expect(out.size() == ids.size(), "ReplicaRouting out.size()", out.size(), "ids.size() = " + std::to_string(ids.size()));
    const std::size_t tokens = ids.size() / static_cast<std::size_t>(k);
    expect(home.empty() || home.size() == tokens, "ReplicaRouting home.size()", home.size(),
           "0 or tokens = " + std::to_string(tokens));
    for (const auto e : ids) expect(e >= 0 && e < experts(), "ReplicaRouting expert id", e, "in [0, " + std::to_string(experts()) + ")");
    load_.assign(static_cast<std::size_t>(ranks_), 0);
    sent_.assign(static_cast<std::size_t>(ranks_), 0);
    std::int64_t rows = 0;
    for (std::size_t t = 0; t < tokens; ++t) {
      const std::int32_t* slot = ids.data() + t * static_cast<std::size_t>(k);
      std::int32_t* dest = out.data() + t * static_cast<std::size_t>(k);
      const int h = home.empty() ? -1 : home[t];
      expect(h >= -1 && h < ranks_, "ReplicaRouting home[" + std::to_string(t) + "]", h,
             "-1 or a rank in [0, " + std::to_string(ranks_) + ")");
      rows += serve_token([&](int s) { return hosts(slot[s]); }, k, h, load_, sent_, dest);
      for (int s = 0; s < k; ++s) dest[s] = copy_on(slot[s], dest[s]);  // rank -> copy id
    }
    return rows;
  }

  /// Pairs each rank served in the last `route`.
  [[nodiscard]] std::span<const std::int64_t> load() const noexcept { return load_; }

 private:
  std::int32_t copy_on(int e, std::int32_t rank) const {
    const auto& h = hosts_[static_cast<std::size_t>(e)];
    for (std::size_t c = 0; c < h.size(); ++c)
      if (h[c] == rank) return copy_ids_[static_cast<std::size_t>(e)][c];
    fail("ReplicaRouting serving rank", rank, "a rank holding expert " + std::to_string(e));
  }

  std::vector<std::vector<std::int32_t>> hosts_;     // [expert] ranks, primary first
  std::vector<std::vector<std::int32_t>> copy_ids_;  // [expert] copy ids, as hosts_
  std::vector<std::int32_t> expert_rank_, expert_of_;  // [copy id]
  std::vector<std::int64_t> load_;
  std::vector<char> sent_;
  int ranks_ = 1;
};

}  // namespace disagmoe::comm
