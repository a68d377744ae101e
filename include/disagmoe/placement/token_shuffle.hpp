// SPDX-License-Identifier: Apache-2.0
/// @file token_shuffle.hpp
/// `TokenShuffle` (paper §4.2): under sequence parallelism every GPU of the group holds
/// a shard of the tokens; in the reduce-scatter after attention of layer l, each token
/// can be sent to any GPU instead of its contiguous shard. Choose the GPU predicted to
/// hold most of its layer-l experts, from what is known then (its experts at layer
/// l-1 and the fitted l-1 -> l transitions), keeping every GPU's share exactly equal.
///
/// Prediction: M_l[a][g] = sum_{b on g at layer l} T_{l-1}[a][b] / load_{l-1}(a), the
/// expected number of a token's layer-l experts on GPU g per layer-(l-1) expert a;
/// score(t, g) = sum_{a in experts_{l-1}(t)} M_l[a][g]. Homes per batch maximise the
/// total score under equal shares (balanced_assignment.hpp). Layer 0 has no earlier
/// routing and keeps the contiguous shard. Causal: homes at layer l read only layers < l.
/// The assignment is the auction (exact within its tolerance, the oracle) or the fast
/// greedy-plus-repair method of fast_assignment.hpp; step_shuffle.hpp serves one
/// micro-batch at a time for the runtime.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/placement/balanced_assignment.hpp>
#include <disagmoe/placement/coupling_stats.hpp>
#include <disagmoe/placement/fast_assignment.hpp>
#include <disagmoe/placement/metrics.hpp>
#include <disagmoe/placement/placement.hpp>
#include <disagmoe/placement/routing_trace.hpp>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace disagmoe::placement {

/// How the per-batch balanced assignment is solved.
enum class ShuffleMethod {
  kAuction,  ///< epsilon-scaling auction (balanced_assignment.hpp): the reference
  kFast,     ///< greedy by regret + cycle-cancelling repair (fast_assignment.hpp)
};

/// Knobs of the token shuffle.
struct TokenShuffleOptions {
  std::int64_t batch_tokens = 0;  ///< tokens sharded together (one micro-batch); 0: the whole trace
  /// Optimality tolerance of the balanced assignment, relative to the score range; the
  /// achieved gap is reported in ShuffleResult (1e-4 costs half the bids of 1e-7 and
  /// leaves gaps around 1e-5 of the total score on DeepSeek-V3-shaped traces).
  double final_epsilon = 1e-4;
  ShuffleMethod method = ShuffleMethod::kAuction;  ///< assignment solver
  FastAssignmentOptions fast{};                    ///< knobs of ShuffleMethod::kFast
};

/// Homes of every token at every layer, with the assignment's optimality certificate.
struct ShuffleResult {
  std::vector<std::int32_t> home;  ///< [layer][token] -> GPU
  double score = 0;                ///< total predicted local experts (sum of assignment values)
  double score_bound = 0;          ///< upper bound on that total for balanced homes (LP dual)
};

/// Predicts homes from fitted transitions and a placement; see the file comment.
class TokenShuffle {
 public:
  /// Builds M_l for l = 1..L-1 from `fit` (statistics of the fit trace) and `placement`.
  /// Throws ConfigError on mismatched shapes. O(L * E^2).
  TokenShuffle(const CouplingStats& fit, const Placement& placement, TokenShuffleOptions options = {})
      : placement_(placement), options_(options) {
    expect(fit.layers() == placement.layers(), "statistics layers", fit.layers(), "the placement's layers (" + std::to_string(placement.layers()) + ")");
    expect(fit.num_experts() == placement.num_experts(), "statistics experts", fit.num_experts(),
           "the placement's experts (" + std::to_string(placement.num_experts()) + ")");
    expect(options.batch_tokens >= 0, "batch_tokens", options.batch_tokens, ">= 0 (0: the whole trace)");
    const int L = fit.layers(), E = fit.num_experts(), G = placement.topology().gpus;
    predict_.assign(static_cast<std::size_t>(L) * static_cast<std::size_t>(E) * static_cast<std::size_t>(G), 0.0);
    for (int l = 1; l < L; ++l)
      for (int a = 0; a < E; ++a) {
        const double n = static_cast<double>(fit.load(l - 1, a));
        if (n == 0) continue;  // never seen at fit time: no prediction
        double* row = row_of(l, a);
        for (int b = 0; b < E; ++b) row[placement.gpu(l, b)] += static_cast<double>(fit.transition(l - 1, a, b)) / n;
      }
  }

  /// Homes for every token of `eval` (same layers and experts as the fit).
  /// Complexity: O(L * T * (k * G + assignment)).
  ShuffleResult assign(const RoutingTrace& eval) const {
    expect(eval.layers() == placement_.layers(), "trace layers", eval.layers(), "the placement's layers (" + std::to_string(placement_.layers()) + ")");
    expect(eval.num_experts() == placement_.num_experts(), "trace experts", eval.num_experts(),
           "the placement's experts (" + std::to_string(placement_.num_experts()) + ")");
    const std::int64_t T = eval.tokens();
    const int L = eval.layers(), G = placement_.topology().gpus;
    ShuffleResult r;
    r.home = contiguous_homes(T, L, G, options_.batch_tokens);
    const std::int64_t batch = options_.batch_tokens > 0 ? options_.batch_tokens : std::max<std::int64_t>(T, 1);
    std::vector<double> score;
    std::vector<std::int64_t> cap(static_cast<std::size_t>(G));
    FastAssigner fast(options_.fast);
    std::vector<std::int32_t> bin;
    std::vector<double> warm(static_cast<std::size_t>(G));  // as StepShuffle: each layer's last optimal prices
    for (int l = 1; l < L; ++l) {
      bool warm_valid = false;
      for (std::int64_t first = 0; first < T; first += batch) {
        const std::int64_t n = std::min(batch, T - first);
        // Capacities equal the contiguous shard sizes: every GPU keeps its share.
        for (int g = 0; g < G; ++g) cap[static_cast<std::size_t>(g)] = shard_size(n, G, g);
        score.assign(static_cast<std::size_t>(n) * static_cast<std::size_t>(G), 0.0);
        for (std::int64_t i = 0; i < n; ++i)
          add_scores(l, eval.experts(first + i, l - 1), score.data() + static_cast<std::size_t>(i) * static_cast<std::size_t>(G));
        double value = 0, bound = 0;
        if (options_.method == ShuffleMethod::kFast) {
          bin.resize(static_cast<std::size_t>(n));
          fast.assign(score, cap, bin, value, bound, warm, warm_valid);
        } else {
          auto a = balanced_assignment(score, cap, options_.final_epsilon);
          bin = std::move(a.bin);
          value = a.value;
          bound = a.upper_bound;
        }
        r.score += value;
        r.score_bound += bound;
        for (std::int64_t i = 0; i < n; ++i)
          r.home[static_cast<std::size_t>(l) * static_cast<std::size_t>(T) + static_cast<std::size_t>(first + i)] = bin[static_cast<std::size_t>(i)];
      }
    }
    return r;
  }

  /// Adds the scores of one token at layer l to `s` (size G): s[g] += M_l[a][g] for
  /// each of its layer-(l-1) experts `a` (unchecked ids; 1 <= l < layers). O(k G).
  void add_scores(int l, std::span<const ExpertId> experts, double* s) const noexcept {
    const int G = placement_.topology().gpus;
    for (const auto a : experts) {
      const double* m = row_of(l, a);
      for (int g = 0; g < G; ++g) s[g] += m[g];
    }
  }

  const Placement& placement() const noexcept { return placement_; }
  const TokenShuffleOptions& options() const noexcept { return options_; }

  /// Predicted local experts per layer-(l-1) expert `a` on each GPU at layer l (size G).
  std::span<const double> prediction(int l, int a) const noexcept {
    return {row_of(l, a), static_cast<std::size_t>(placement_.topology().gpus)};
  }

 private:
  double* row_of(int l, int a) noexcept { return predict_.data() + offset(l, a); }
  const double* row_of(int l, int a) const noexcept { return predict_.data() + offset(l, a); }
  std::size_t offset(int l, int a) const noexcept {
    return (static_cast<std::size_t>(l) * static_cast<std::size_t>(placement_.num_experts()) + static_cast<std::size_t>(a)) *
           static_cast<std::size_t>(placement_.topology().gpus);
  }

  Placement placement_;
  TokenShuffleOptions options_;
  std::vector<double> predict_;  // [l][a][g]
};

}  // namespace disagmoe::placement
