// SPDX-License-Identifier: Apache-2.0
/// @file step_shuffle.hpp
/// `StepShuffle`: the token shuffle of token_shuffle.hpp for one micro-batch at a time,
/// the form a training step calls between the router of layer l-1 and the
/// reduce-scatter of layer l (paper §4.2, arXiv 2610.09372). It reads only the
/// micro-batch's layer-(l-1) expert ids (causal by construction), scores each token per
/// GPU with the fitted predictor, and solves the exactly balanced assignment with the
/// fast greedy-plus-repair method (fast_assignment.hpp), reusing its buffers across
/// calls. The interface takes flat spans (ids [token][slot], homes [token]) so a device
/// implementation can offer the same call.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/placement/fast_assignment.hpp>
#include <disagmoe/placement/metrics.hpp>
#include <disagmoe/placement/routing_trace.hpp>
#include <disagmoe/placement/token_shuffle.hpp>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace disagmoe::placement {

/// Outcome of one micro-batch: the assignment's value, its certificate and the repair.
struct StepShuffleResult {
  double score = 0;        ///< total predicted local experts of the chosen homes
  double score_bound = 0;  ///< upper bound on that total for any balanced homes (+inf if not certified)
  FastAssignmentReport report{};
};

/// Per-micro-batch shuffle over a fitted TokenShuffle (which it references: keep the
/// predictor alive). Not thread-safe (one per thread: it owns the solver's buffers).
/// With `warm_start`, each layer keeps the optimal bin prices of its last micro-batch
/// solved to optimality and the next micro-batch's greedy starts from them
/// (micro-batches of one layer are draws from one distribution, so earlier optimal
/// prices are nearly today's); the first micro-batch of a layer is solved to the
/// optimum whatever FastAssignmentOptions::max_cycles says, to obtain them.
class StepShuffle {
 public:
  /// Uses `predictor`'s placement and predictions; `options` tunes the fast solver.
  explicit StepShuffle(const TokenShuffle& predictor, FastAssignmentOptions options = {}, bool warm_start = true)
      : predictor_(predictor), solver_(options), warm_start_(warm_start),
        prices_(static_cast<std::size_t>(predictor.placement().layers()) * static_cast<std::size_t>(predictor.placement().topology().gpus), 0.0),
        valid_(static_cast<std::size_t>(predictor.placement().layers()), 0) {}

  /// A temporary predictor would dangle: bind a named one.
  StepShuffle(TokenShuffle&&, FastAssignmentOptions = {}, bool = true) = delete;

  /// Forgets the warm prices (e.g. after the placement or the routing changed). O(layers).
  void reset_prices() { std::fill(valid_.begin(), valid_.end(), 0); }

  /// Homes at layer `l` (1 <= l < layers) of the n tokens whose layer-(l-1) experts are
  /// `prev` (n * top_k ids, [token][slot], top_k the trace's), with exactly
  /// capacity[g] tokens on GPU g (size G, summing to n). Writes `home` (size n).
  /// Throws ConfigError on a bad layer, sizes, capacities or an id >= num_experts.
  /// Complexity: O(n k G + n log n + repair) (see FastAssigner::assign).
  StepShuffleResult homes(int l, std::span<const ExpertId> prev, int top_k, std::span<const std::int64_t> capacity,
                          std::span<std::int32_t> home) {
    const Placement& p = predictor_.placement();
    const int G = p.topology().gpus;
    expect(l >= 1 && l < p.layers(), "layer", l, "1 <= layer < " + std::to_string(p.layers()) + " (layer 0 keeps its shard)");
    expect(top_k >= 1, "top_k", top_k, ">= 1");
    expect(prev.size() % static_cast<std::size_t>(top_k) == 0, "prev.size()", prev.size(),
           "a multiple of top_k (" + std::to_string(top_k) + ")");
    const std::size_t n = prev.size() / static_cast<std::size_t>(top_k);
    expect(home.size() == n, "home.size()", home.size(), "the token count (" + std::to_string(n) + ")");
    expect(capacity.size() == static_cast<std::size_t>(G), "capacity.size()", capacity.size(),
           "the GPU count (" + std::to_string(G) + ")");
    for (std::size_t i = 0; i < prev.size(); ++i)
      if (prev[i] >= p.num_experts())  // checked before the message is built: this loop is hot
        fail("expert id of token " + std::to_string(i / static_cast<std::size_t>(top_k)), prev[i],
             "0 <= id < " + std::to_string(p.num_experts()));
    score_.resize(n * static_cast<std::size_t>(G));
    for (std::size_t i = 0; i < n; ++i) {  // each row zeroed just before its sum: no separate pass over the matrix
      double* row = score_.data() + i * static_cast<std::size_t>(G);
      std::fill(row, row + G, 0.0);
      predictor_.add_scores(l, prev.subspan(i * static_cast<std::size_t>(top_k), static_cast<std::size_t>(top_k)), row);
    }
    StepShuffleResult r;
    const auto ul = static_cast<std::size_t>(l);
    std::span<double> warm(prices_.data() + ul * static_cast<std::size_t>(G), static_cast<std::size_t>(G));
    if (!warm_start_) {
      r.report = solver_.assign(score_, capacity, home, r.score, r.score_bound);
      return r;
    }
    bool valid = valid_[ul] != 0;
    r.report = solver_.assign(score_, capacity, home, r.score, r.score_bound, warm, valid);
    valid_[ul] = valid;
    return r;
  }

  /// As above with the contiguous shard sizes as capacities (every GPU keeps its share
  /// of the micro-batch, metrics.hpp's shard_size).
  StepShuffleResult homes(int l, std::span<const ExpertId> prev, int top_k, std::span<std::int32_t> home) {
    const int G = predictor_.placement().topology().gpus;
    expect(top_k >= 1, "top_k", top_k, ">= 1");
    cap_.resize(static_cast<std::size_t>(G));
    const auto n = static_cast<std::int64_t>(prev.size() / static_cast<std::size_t>(top_k));
    for (int g = 0; g < G; ++g) cap_[static_cast<std::size_t>(g)] = shard_size(n, G, g);
    return homes(l, prev, top_k, cap_, home);
  }

 private:
  const TokenShuffle& predictor_;
  FastAssigner solver_;
  bool warm_start_;
  std::vector<double> prices_;  // [layer][gpu], optimal for the layer's last micro-batch
  std::vector<char> valid_;     // [layer]: prices_ usable
  std::vector<double> score_;
  std::vector<std::int64_t> cap_;
};

}  // namespace disagmoe::placement
