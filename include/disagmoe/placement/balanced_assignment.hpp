// SPDX-License-Identifier: Apache-2.0
/// @file balanced_assignment.hpp
/// Balanced assignment (a transportation problem with unit supplies): give each of n
/// items one of G bins, bin g exactly capacity[g] items, maximising the total score.
/// Solved by the auction algorithm with epsilon-scaling (Bertsekas 1988, "The auction
/// algorithm: a distributed relaxation method for the assignment problem"; slots of one
/// bin are identical objects, Bertsekas & Castanon 1989). The result is exactly
/// balanced and epsilon-optimal (value >= OPT - n*eps); a Lagrangian dual bound from
/// the final prices is returned with it, so the remaining gap is known.
#pragma once

#include <disagmoe/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <vector>

namespace disagmoe::placement {

/// An assignment with its value and a proven upper bound on the optimum.
struct BalancedAssignment {
  std::vector<std::int32_t> bin;  ///< bin of each item
  double value = 0;               ///< sum of score[i][bin[i]]
  double upper_bound = 0;         ///< >= the optimal value (LP duality); gap = upper_bound - value
};

namespace detail {
/// Min-heap of slot prices of one bin; each slot remembers its holder (-1: free).
class SlotHeap {
 public:
  void init(std::int64_t slots) {
    price_.assign(static_cast<std::size_t>(slots), 0.0);
    holder_.assign(static_cast<std::size_t>(slots), -1);
  }
  bool empty() const noexcept { return price_.empty(); }
  double cheapest() const noexcept { return price_[0]; }
  /// Second-cheapest slot price (+inf with one slot): the better child of the root.
  double second() const noexcept {
    const std::size_t n = price_.size();
    if (n < 2) return std::numeric_limits<double>::infinity();
    return n == 2 ? price_[1] : std::min(price_[1], price_[2]);
  }
  /// Gives the cheapest slot to `item` at `new_price`; returns the evicted holder.
  std::int64_t take(std::int64_t item, double new_price) {
    const std::int64_t old = holder_[0];
    price_[0] = new_price;
    holder_[0] = item;
    sift_down();
    return old;
  }
  void release_all() { std::fill(holder_.begin(), holder_.end(), -1); }
  std::span<const double> prices() const noexcept { return price_; }
  std::span<const std::int64_t> holders() const noexcept { return holder_; }

 private:
  void sift_down() {
    std::size_t i = 0;
    const std::size_t n = price_.size();
    while (true) {
      std::size_t m = i;
      const std::size_t l = 2 * i + 1, r = l + 1;
      if (l < n && price_[l] < price_[m]) m = l;
      if (r < n && price_[r] < price_[m]) m = r;
      if (m == i) return;
      std::swap(price_[i], price_[m]);
      std::swap(holder_[i], holder_[m]);
      i = m;
    }
  }
  std::vector<double> price_;
  std::vector<std::int64_t> holder_;
};

/// Weak duality: for any bin prices pi, OPT <= sum_i max_g (s_ig - pi_g) + sum_g cap_g pi_g.
/// Tries the cheapest, the dearest and the mean slot price of each bin; keeps the
/// lowest. O(n * G).
inline double dual_bound(const std::vector<SlotHeap>& heap, std::span<const double> score,
                         std::span<const std::int64_t> capacity) {
  const std::size_t G = capacity.size(), n = score.size() / G;
  double best = std::numeric_limits<double>::infinity();
  std::vector<double> pi(G, 0.0);
  for (int which = 0; which < 3; ++which) {
    for (std::size_t g = 0; g < G; ++g) {
      const auto p = heap[g].prices();
      if (p.empty()) continue;  // bins without capacity are excluded below
      pi[g] = which == 0 ? *std::min_element(p.begin(), p.end())
              : which == 1 ? *std::max_element(p.begin(), p.end())
                           : std::accumulate(p.begin(), p.end(), 0.0) / static_cast<double>(p.size());
    }
    double ub = 0;
    for (std::size_t g = 0; g < G; ++g)
      if (capacity[g] > 0) ub += static_cast<double>(capacity[g]) * pi[g];
    for (std::size_t i = 0; i < n; ++i) {
      double m = -std::numeric_limits<double>::infinity();
      for (std::size_t g = 0; g < G; ++g)
        if (capacity[g] > 0) m = std::max(m, score[i * G + g] - pi[g]);
      ub += m;
    }
    best = std::min(best, ub);
  }
  return best;
}
}  // namespace detail

namespace detail {
inline void read_assignment(const std::vector<SlotHeap>& heap, std::span<const double> score, std::size_t G,
                            BalancedAssignment& r) {
  for (std::size_t g = 0; g < G; ++g)
    for (const auto item : heap[g].holders()) r.bin[static_cast<std::size_t>(item)] = static_cast<std::int32_t>(g);
  r.value = 0;
  for (std::size_t i = 0; i < r.bin.size(); ++i) r.value += score[i * G + static_cast<std::size_t>(r.bin[i])];
}
}  // namespace detail

/// Maximises sum_i score[i*G + bin_i] subject to exactly capacity[g] items per bin.
/// `score` is n x G row-major (finite); capacities are >= 0 and sum to n.
/// `final_epsilon` (relative to the score range) sets the optimality tolerance; the
/// scaling stops early once the dual bound is within that tolerance.
/// Throws ConfigError on bad sizes, capacities or non-finite scores.
/// Complexity: O(phases * bids * (G + log n)); memory O(n + G).
inline BalancedAssignment balanced_assignment(std::span<const double> score, std::span<const std::int64_t> capacity,
                                              double final_epsilon = 1e-7) {
  const auto G = capacity.size();
  expect(G >= 1, "capacity.size()", G, ">= 1 bin");
  expect(score.size() % G == 0, "score.size()", score.size(), "a multiple of the bin count (" + std::to_string(G) + ")");
  const std::size_t n = score.size() / G;
  std::int64_t total = 0;
  for (std::size_t g = 0; g < G; ++g) {
    expect(capacity[g] >= 0, "capacity[" + std::to_string(g) + "]", capacity[g], ">= 0");
    total += capacity[g];
  }
  expect(total == static_cast<std::int64_t>(n), "sum of capacities", total, "the item count (" + std::to_string(n) + ")");
  expect(final_epsilon > 0 && final_epsilon < 1, "final_epsilon", final_epsilon, "in (0, 1)");
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (std::size_t i = 0; i < score.size(); ++i) {
    expect(std::isfinite(score[i]), "score of item " + std::to_string(i / G) + " bin " + std::to_string(i % G), score[i],
           "a finite number");
    lo = std::min(lo, score[i]);
    hi = std::max(hi, score[i]);
  }
  BalancedAssignment r;
  r.bin.assign(n, 0);
  if (n == 0) return r;
  const double range = std::max(hi - lo, 1e-300);
  std::vector<detail::SlotHeap> heap(G);
  for (std::size_t g = 0; g < G; ++g) heap[g].init(capacity[g]);
  std::deque<std::int64_t> queue;
  const double eps_end = final_epsilon * range;
  for (double eps = range / 4; ; eps = std::max(eps / 8, eps_end)) {
    for (auto& h : heap) h.release_all();
    queue.resize(n);
    std::iota(queue.begin(), queue.end(), 0);
    while (!queue.empty()) {
      const std::int64_t i = queue.front();
      queue.pop_front();
      const double* s = score.data() + static_cast<std::size_t>(i) * G;
      std::size_t best = G;
      double v1 = -std::numeric_limits<double>::infinity(), v2 = v1;
      for (std::size_t g = 0; g < G; ++g) {
        if (heap[g].empty()) continue;
        const double v = s[g] - heap[g].cheapest();
        if (v > v1) v2 = v1, v1 = v, best = g;
        else if (v > v2) v2 = v;
      }
      v2 = std::max(v2, s[best] - heap[best].second());  // the bin's own next slot competes too
      const double bid = heap[best].cheapest() + (std::isfinite(v2) ? v1 - v2 : 0.0) + eps;
      const std::int64_t evicted = heap[best].take(i, bid);
      if (evicted >= 0) queue.push_back(evicted);
    }
    // Stop as soon as the dual bound proves the assignment optimal within the tolerance:
    // later phases would only shave a gap that is already negligible.
    detail::read_assignment(heap, score, G, r);
    r.upper_bound = std::max(detail::dual_bound(heap, score, capacity), r.value);  // max: rounding guard
    if (eps <= eps_end || r.upper_bound - r.value <= final_epsilon * (std::abs(r.upper_bound) + range)) break;
  }
  return r;
}

}  // namespace disagmoe::placement
