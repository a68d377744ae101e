// SPDX-License-Identifier: Apache-2.0
/// @file coupling_stats.hpp
/// Expert-coupling statistics of a routing trace (paper: "Expert Coupling in MoE
/// Pretraining", arXiv 2610.09372, §3): per-layer expert load, within-layer
/// co-selection counts, layer l -> l+1 transition counts, and the summaries built on
/// them ("x% of pairs cover y% of co-selections", next-layer predictability).
/// Accumulates chunk by chunk, so traces larger than memory can be streamed.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/limits.hpp>
#include <disagmoe/placement/routing_trace.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <span>
#include <thread>
#include <vector>

namespace disagmoe::placement {

/// Counts gathered over all tokens added so far.
/// Memory: 2 * layers * E^2 * 4 bytes (E=256, 32 layers: 16 MiB), plus 4 * E^2 bytes
/// of scratch per counting thread during add().
class CouplingStats {
 public:
  /// Empty statistics for traces of this shape. Throws ConfigError on bad dimensions.
  CouplingStats(int layers, int num_experts, int top_k)
      : layers_(layers), experts_(num_experts), top_k_(top_k) {
    RoutingTrace::check_dimensions(0, layers, top_k, num_experts);
    // Two experts x experts count matrices per layer: costed before they are allocated.
    expect_memory("CouplingStats.num_experts", num_experts,
                  8.0 * layers * static_cast<double>(num_experts) * num_experts,
                  "coupling statistics (2 x layers x experts^2 x 4 bytes)");
    const auto ee = static_cast<std::size_t>(num_experts) * static_cast<std::size_t>(num_experts);
    load_.assign(static_cast<std::size_t>(layers) * static_cast<std::size_t>(num_experts), 0);
    co_.assign(static_cast<std::size_t>(layers) * ee, 0);
    trans_.assign(static_cast<std::size_t>(layers > 1 ? layers - 1 : 0) * ee, 0);
  }

  /// Statistics of a whole trace.
  static CouplingStats of(const RoutingTrace& trace, int threads = 0) {
    CouplingStats s(trace.layers(), trace.num_experts(), trace.top_k());
    s.add(trace, threads);
    return s;
  }

  /// Adds the tokens of `chunk` (same layers, experts and top_k). `threads` = 0 uses
  /// the hardware concurrency; layers are split over threads (each owns its counts, so
  /// results do not depend on the thread count). Throws ConfigError on a shape mismatch
  /// or when more than 2^32-1 tokens would be counted.
  /// Complexity: O(tokens * layers * k^2) increments plus O(layers * E^2) per 65535
  /// tokens of a chunk.
  void add(const RoutingTrace& chunk, int threads = 0) {
    expect(chunk.layers() == layers_, "CouplingStats.add chunk.layers()", chunk.layers(), "the statistics' layers (" + std::to_string(layers_) + ")");
    expect(chunk.num_experts() == experts_, "CouplingStats.add chunk.num_experts()", chunk.num_experts(), "the statistics' experts (" + std::to_string(experts_) + ")");
    expect(chunk.top_k() == top_k_, "CouplingStats.add chunk.top_k()", chunk.top_k(), "the statistics' top_k (" + std::to_string(top_k_) + ")");
    expect(static_cast<std::uint64_t>(tokens_) + static_cast<std::uint64_t>(chunk.tokens()) <=
               std::numeric_limits<std::uint32_t>::max(),
           "CouplingStats tokens", tokens_ + chunk.tokens(), "at most 2^32-1 tokens (32-bit counters)");
    int t = threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    t = std::min(t, layers_);
    if (t <= 1) {
      count_layers(chunk, 0, 1);
    } else {
      std::vector<std::thread> pool;
      for (int i = 0; i < t; ++i) pool.emplace_back([this, &chunk, i, t] { count_layers(chunk, i, t); });
      for (auto& th : pool) th.join();
    }
    tokens_ += chunk.tokens();
  }

  std::int64_t tokens() const noexcept { return tokens_; }
  int layers() const noexcept { return layers_; }
  int num_experts() const noexcept { return experts_; }
  int top_k() const noexcept { return top_k_; }

  /// Tokens that chose expert `e` at layer `l`.
  std::uint64_t load(int l, int e) const noexcept { return load_[idx(l, e)]; }
  /// Loads of all experts at layer `l`.
  std::span<const std::uint64_t> loads(int l) const noexcept {
    return {load_.data() + idx(l, 0), static_cast<std::size_t>(experts_)};
  }
  /// Tokens that chose both `a` and `b` (a != b) at layer `l`; symmetric.
  std::uint64_t co_selection(int l, int a, int b) const noexcept {
    if (a == b) return 0;
    return co_[pair(l, std::min(a, b), std::max(a, b))];
  }
  /// Token-level transitions: tokens with `a` among their experts at layer l and `b`
  /// among them at layer l+1. Precondition 0 <= l < layers-1.
  std::uint64_t transition(int l, int a, int b) const noexcept { return trans_[pair(l, a, b)]; }

  /// max/mean expert load at layer `l` (1 for perfectly even load; 0 without tokens).
  double max_load_over_mean(int l) const {
    const auto ld = loads(l);
    const double total = static_cast<double>(std::accumulate(ld.begin(), ld.end(), std::uint64_t{0}));
    return total == 0 ? 0.0 : static_cast<double>(*std::max_element(ld.begin(), ld.end())) * experts_ / total;
  }

  /// Share of the co-selection events of layer `l` (a token choosing a pair; each token
  /// gives C(k,2)) that fall on the `pair_fraction` most frequent of the E(E-1)/2 pairs.
  /// At top-2 every token has one pair, so this is the share of tokens: the paper's
  /// "0.8% of pairs are chosen together by 42% of tokens". O(E^2) expected.
  double pair_coverage(int l, double pair_fraction) const {
    expect(pair_fraction >= 0 && pair_fraction <= 1, "pair_fraction", pair_fraction, "in [0, 1]");
    check_layer(l, layers_);
    auto counts = pair_counts(l);
    const auto take = static_cast<std::size_t>(std::ceil(pair_fraction * static_cast<double>(counts.size()) - 1e-9));
    const double total = events();
    if (total == 0 || take == 0) return 0.0;
    std::nth_element(counts.begin(), counts.begin() + static_cast<std::ptrdiff_t>(take - 1), counts.end(), std::greater<>());
    double covered = 0;
    for (std::size_t i = 0; i < take; ++i) covered += static_cast<double>(counts[i]);
    return covered / total;
  }

  /// Smallest share of pairs whose co-selection events cover at least `target` of all
  /// events at layer `l` (the inverse of pair_coverage). O(E^2 log E).
  double pairs_for_coverage(int l, double target) const {
    expect(target >= 0 && target <= 1, "target", target, "in [0, 1]");
    check_layer(l, layers_);
    auto counts = pair_counts(l);
    std::sort(counts.begin(), counts.end(), std::greater<>());
    const double total = events();
    if (total == 0 || counts.empty()) return 0.0;
    double covered = 0;
    for (std::size_t i = 0; i < counts.size(); ++i) {
      if (covered >= target * total) return static_cast<double>(i) / static_cast<double>(counts.size());
      covered += static_cast<double>(counts[i]);
    }
    return 1.0;
  }

  /// Next-layer predictability at l -> l+1: the share of token-expert assignments (t, a)
  /// at layer l for which a's most frequent successor argmax_b transition(l, a, b) is
  /// among t's experts at l+1 (in-sample; Lina, ATC'23, uses the same signal). Under
  /// independent uniform routing it is about k/E. O(E^2).
  double next_layer_predictability(int l) const {
    check_layer(l, layers_ - 1);
    if (tokens_ == 0) return 0.0;
    double hit = 0;
    for (int a = 0; a < experts_; ++a) {
      std::uint64_t best = 0;
      for (int b = 0; b < experts_; ++b) best = std::max(best, transition(l, a, b));
      hit += static_cast<double>(best);
    }
    return hit / (static_cast<double>(tokens_) * top_k_);
  }

 private:
  static void check_layer(int l, int bound) {
    expect(l >= 0 && l < bound, "layer", l, "0 <= layer < " + std::to_string(bound));
  }
  double events() const { return static_cast<double>(tokens_) * top_k_ * (top_k_ - 1) / 2.0; }
  std::vector<std::uint32_t> pair_counts(int l) const {
    std::vector<std::uint32_t> out;
    out.reserve(static_cast<std::size_t>(experts_) * static_cast<std::size_t>(experts_ - 1) / 2);
    for (int a = 0; a < experts_; ++a)
      for (int b = a + 1; b < experts_; ++b) out.push_back(co_[pair(l, a, b)]);
    return out;
  }
  std::size_t idx(int l, int e) const noexcept {
    return static_cast<std::size_t>(l) * static_cast<std::size_t>(experts_) + static_cast<std::size_t>(e);
  }
  std::size_t pair(int l, int a, int b) const noexcept {
    return (static_cast<std::size_t>(l) * static_cast<std::size_t>(experts_) + static_cast<std::size_t>(a)) *
               static_cast<std::size_t>(experts_) + static_cast<std::size_t>(b);
  }

  // Tokens per pass into the 16-bit scratch counters: one token adds at most 1 to an
  // entry (its k ids are distinct), so 65535 tokens cannot overflow.
  static constexpr std::int64_t kScratchTokens = 65535;

  // One layer, tokens [t0, t1), into `co` and `tr` (null at the last layer). Scratch
  // form (Direct false): 16-bit counters, pairs counted unordered at [e_i][e_j] and
  // folded onto the upper triangle at flush (no per-token sort or min/max: the sort
  // was half the time). Direct form: the 32-bit counters, upper triangle by min/max.
  template <int K, bool Direct, class C>
  void count_block(const RoutingTrace& chunk, int l, std::int64_t t0, std::int64_t t1, C* co, C* tr) {
    const int k = K > 0 ? K : top_k_;
    const auto E = static_cast<std::size_t>(experts_);
    std::uint64_t* load = load_.data() + idx(l, 0);
    for (std::int64_t t = t0; t < t1; ++t) {
      const ExpertId* e = chunk.experts(t, l).data();
      for (int i = 0; i < k; ++i) {
        ++load[e[i]];
        C* row = co + e[i] * E;
        for (int j = i + 1; j < k; ++j) {
          if constexpr (Direct) ++co[std::min(e[i], e[j]) * E + std::max(e[i], e[j])];
          else ++row[e[j]];
        }
      }
      if (tr != nullptr) {
        const ExpertId* n = chunk.experts(t, l + 1).data();
        for (int i = 0; i < k; ++i) {
          C* row = tr + e[i] * E;
          for (int j = 0; j < k; ++j) ++row[n[j]];
        }
      }
    }
  }

  template <bool Direct, class C>
  void count_dispatch(const RoutingTrace& chunk, int l, std::int64_t t0, std::int64_t t1, C* co, C* tr) {
    // Fixed k for the common router widths lets the compiler unroll the pair loops.
    switch (top_k_) {
      case 2: return count_block<2, Direct>(chunk, l, t0, t1, co, tr);
      case 4: return count_block<4, Direct>(chunk, l, t0, t1, co, tr);
      case 6: return count_block<6, Direct>(chunk, l, t0, t1, co, tr);
      case 8: return count_block<8, Direct>(chunk, l, t0, t1, co, tr);
      default: return count_block<0, Direct>(chunk, l, t0, t1, co, tr);
    }
  }

  // Counts layers l = first, first + stride, ... one layer at a time over the whole
  // chunk, so a layer's counters stay in cache for its pass (the old token-block order
  // reloaded every layer's 2 x E^2 counters per 1024 tokens). Passes of up to 65535
  // tokens go through 16-bit scratch counters (half the cache footprint), flushed in
  // O(E^2); passes too short to repay the flush (n k^2 < E^2 / 4) count directly.
  void count_layers(const RoutingTrace& chunk, int first, int stride) {
    const auto E = static_cast<std::size_t>(experts_);
    std::vector<std::uint16_t> co16, tr16;
    for (int l = first; l < layers_; l += stride) {
      std::uint32_t* co = co_.data() + pair(l, 0, 0);
      std::uint32_t* tr = l + 1 < layers_ ? trans_.data() + pair(l, 0, 0) : nullptr;
      for (std::int64_t t0 = 0; t0 < chunk.tokens(); t0 += kScratchTokens) {
        const std::int64_t t1 = std::min(chunk.tokens(), t0 + kScratchTokens);
        if (static_cast<double>(t1 - t0) * top_k_ * top_k_ * 4 < static_cast<double>(E * E)) {
          count_dispatch<true>(chunk, l, t0, t1, co, tr);
          continue;
        }
        co16.assign(E * E, 0);
        tr16.assign(tr != nullptr ? E * E : 0, 0);
        count_dispatch<false>(chunk, l, t0, t1, co16.data(), tr != nullptr ? tr16.data() : nullptr);
        for (std::size_t a = 0; a < E; ++a)
          for (std::size_t b = a + 1; b < E; ++b) co[a * E + b] += static_cast<std::uint32_t>(co16[a * E + b]) + co16[b * E + a];
        if (tr != nullptr)
          for (std::size_t i = 0; i < E * E; ++i) tr[i] += tr16[i];
      }
    }
  }

  int layers_;
  int experts_;
  int top_k_;
  std::int64_t tokens_ = 0;
  std::vector<std::uint64_t> load_;
  std::vector<std::uint32_t> co_;
  std::vector<std::uint32_t> trans_;
};

}  // namespace disagmoe::placement
