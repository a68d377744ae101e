// SPDX-License-Identifier: Apache-2.0
/// @file online.hpp
/// Online re-placement: watch the routing a training run produces and move experts only
/// when it pays. Every `window_tokens` tokens the window is split in two halves: a
/// candidate placement is fitted on the first (CorrelatedPlacement) and both it and
/// the current placement are evaluated on the second, so the predicted saving is
/// out-of-sample (a candidate judged on its own fitting data always looks better). The
/// candidate's GPU labels are matched per layer to the current ones (greedy maximum
/// overlap; send-once rows do not depend on the labels) so only experts that really
/// change GPU count as migrations. It is adopted when the send-once rows it saves over
/// the next `horizon_windows` windows, times `row_bytes`, exceed the migrated experts
/// times `expert_bytes`. Every decision is reported.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/placement/correlated.hpp>
#include <disagmoe/placement/metrics.hpp>
#include <disagmoe/placement/routing_trace.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace disagmoe::placement {

/// Knobs of online re-placement.
struct OnlineOptions {
  std::int64_t window_tokens = 65536;  ///< tokens between refits (N steps of routing), even
  double row_bytes = 14336;            ///< bytes of one dispatch row (hidden x dtype size)
  double expert_bytes = 88e6;          ///< bytes moved per migrated expert (its weights and optimizer state)
  double horizon_windows = 1;          ///< windows over which the saving is credited
  CorrelatedPlacementOptions fit{};    ///< the candidate's fitter
};

/// One refit: what was predicted and whether experts moved.
struct Replacement {
  std::int64_t at_token = 0;      ///< tokens seen when the refit ran
  std::int64_t rows_current = 0;  ///< send-once rows of the current placement on the window's second half
  std::int64_t rows_candidate = 0;
  std::int64_t experts_moved = 0;  ///< (layer, expert) pairs on another GPU in the candidate
  double saving_bytes = 0;         ///< predicted over the horizon
  double migration_bytes = 0;
  bool moved = false;
};

/// Streams routing through refits. Not thread-safe.
class OnlineReplacer {
 public:
  /// Starts from `initial`. Throws ConfigError on a bad window, bytes or horizon.
  OnlineReplacer(Placement initial, OnlineOptions options) : current_(std::move(initial)), options_(options) {
    expect(options.window_tokens >= 2 && options.window_tokens % 2 == 0, "window_tokens", options.window_tokens, "an even count >= 2");
    expect(options.row_bytes > 0, "row_bytes", options.row_bytes, "> 0");
    expect(options.expert_bytes >= 0, "expert_bytes", options.expert_bytes, ">= 0");
    expect(options.horizon_windows > 0, "horizon_windows", options.horizon_windows, "> 0");
  }

  /// Feeds `chunk` (the placement's layers and experts); refits each time the window
  /// fills. Throws ConfigError on a shape mismatch. O(tokens * L * k) plus, per refit,
  /// a CorrelatedPlacement fit and two evaluations of half a window.
  void observe(const RoutingTrace& chunk) {
    expect(chunk.layers() == current_.layers() && chunk.num_experts() == current_.num_experts(), "chunk shape",
           std::to_string(chunk.layers()) + " layers x " + std::to_string(chunk.num_experts()) + " experts",
           "the placement's (" + std::to_string(current_.layers()) + " x " + std::to_string(current_.num_experts()) + ")");
    expect(top_k_ == 0 || chunk.top_k() == top_k_, "chunk top_k", chunk.top_k(), "the stream's (" + std::to_string(top_k_) + ")");
    top_k_ = chunk.top_k();
    const auto per_token = static_cast<std::size_t>(current_.layers()) * static_cast<std::size_t>(top_k_);
    const auto ids = chunk.ids();
    for (std::int64_t t = 0; t < chunk.tokens(); ++t) {
      window_.insert(window_.end(), ids.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(t) * per_token),
                     ids.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(t + 1) * per_token));
      ++seen_;
      if (static_cast<std::int64_t>(window_.size() / per_token) == options_.window_tokens) refit(per_token);
    }
  }

  const Placement& placement() const noexcept { return current_; }
  const std::vector<Replacement>& decisions() const noexcept { return decisions_; }

 private:
  void refit(std::size_t per_token) {
    const std::int64_t half = options_.window_tokens / 2;
    const int L = current_.layers(), E = current_.num_experts();
    const auto mid = window_.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(half) * per_token);
    const RoutingTrace first(half, L, top_k_, E, std::vector<ExpertId>(window_.begin(), mid));
    const RoutingTrace second(half, L, top_k_, E, std::vector<ExpertId>(mid, window_.end()));
    window_.clear();
    const auto candidate = match_labels(CorrelatedPlacement(options_.fit).fit(CouplingStats::of(first, 1), current_.topology()));
    const auto homes = contiguous_homes(half, L, current_.topology().gpus);
    Replacement r;
    r.at_token = seen_;
    r.rows_current = evaluate_placement(second, current_, homes).rows_dedup;
    r.rows_candidate = evaluate_placement(second, candidate, homes).rows_dedup;
    for (std::size_t i = 0; i < candidate.map().size(); ++i) r.experts_moved += candidate.map()[i] != current_.map()[i];
    // Rows scale with tokens: half a window measured, horizon_windows windows credited.
    r.saving_bytes = static_cast<double>(r.rows_current - r.rows_candidate) * 2 * options_.horizon_windows * options_.row_bytes;
    r.migration_bytes = static_cast<double>(r.experts_moved) * options_.expert_bytes;
    r.moved = r.experts_moved > 0 && r.saving_bytes > r.migration_bytes;
    if (r.moved) current_ = candidate;
    decisions_.push_back(r);
  }

  // Relabels the candidate's GPUs per layer to keep as many experts in place as a
  // greedy maximum-overlap matching of (new GPU, old GPU) pairs allows. O(L (E + G^2 log G)).
  Placement match_labels(const Placement& cand) const {
    const int L = cand.layers(), E = cand.num_experts(), G = cand.topology().gpus;
    std::vector<std::int32_t> map(cand.map().begin(), cand.map().end());
    std::vector<std::int64_t> overlap(static_cast<std::size_t>(G) * static_cast<std::size_t>(G));
    std::vector<std::pair<std::int64_t, int>> pairs;
    std::vector<int> to(static_cast<std::size_t>(G)), taken(static_cast<std::size_t>(G));
    for (int l = 0; l < L; ++l) {
      std::fill(overlap.begin(), overlap.end(), 0);
      for (int e = 0; e < E; ++e) ++overlap[static_cast<std::size_t>(cand.gpu(l, e)) * static_cast<std::size_t>(G) + static_cast<std::size_t>(current_.gpu(l, e))];
      pairs.clear();
      for (int i = 0; i < G * G; ++i) pairs.emplace_back(-overlap[static_cast<std::size_t>(i)], i);
      std::sort(pairs.begin(), pairs.end());
      std::fill(to.begin(), to.end(), -1);
      std::fill(taken.begin(), taken.end(), 0);
      for (const auto& pr : pairs) {
        const int from = pr.second / G, old = pr.second % G;
        if (to[static_cast<std::size_t>(from)] < 0 && !taken[static_cast<std::size_t>(old)])
          to[static_cast<std::size_t>(from)] = old, taken[static_cast<std::size_t>(old)] = 1;
      }
      for (int e = 0; e < E; ++e) {
        auto& g = map[static_cast<std::size_t>(l) * static_cast<std::size_t>(E) + static_cast<std::size_t>(e)];
        g = to[static_cast<std::size_t>(g)];
      }
    }
    return Placement(L, E, cand.topology(), std::move(map));
  }

  Placement current_;
  OnlineOptions options_;
  int top_k_ = 0;
  std::int64_t seen_ = 0;
  std::vector<ExpertId> window_;
  std::vector<Replacement> decisions_;
};

}  // namespace disagmoe::placement
