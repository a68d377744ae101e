// SPDX-License-Identifier: Apache-2.0
/// @file fast_assignment.hpp
/// Fast balanced assignment for many items and few bins (the token shuffle's inner
/// problem, run per micro-batch): give each of n items one of G bins, bin g exactly
/// capacity[g] items, maximising the total score. Same problem and result type as
/// balanced_assignment.hpp (whose auction stays the oracle in the tests), solved in two
/// stages that cost O(n G) each instead of the auction's many bids:
///  0. bin prices pi by a few sweeps of exact coordinate descent on the LP dual
///     D(pi) = sum_i max_g (s_ig - pi_g) + sum_g cap_g pi_g: pi_g is set so that exactly
///     cap_g items prefer g at the other bins' prices (a median-like order statistic;
///     the dual of the transportation problem, Bertsekas 1998, "Network Optimization", §7);
///  1. greedy by regret on the reduced scores s_ig - pi_g (which changes every
///     assignment's value by the same constant): items in decreasing order of (best -
///     second best), each into its best bin that still has room (Vogel's approximation
///     for transportation problems, Reinfeld & Vogel 1958, without its re-ranking),
///     ordered by a linear-time radix sort of the float regrets;
///     near-optimal prices leave few items whose best bin is full;
///  2. repair by cycle cancelling on the bins (Klein 1967): with
///     d[p][q] = max over items i in p of (s_iq - s_ip), moving the arg-max item of every
///     edge around a bin cycle p -> q -> ... -> p keeps every bin's count and raises the
///     total by the cycle's weight; a two-bin cycle swaps every gaining pair at once
///     (the bins' rows are re-scanned once per cycle, the repair's main cost). The assignment is optimal exactly when no cycle has
///     positive weight (the residual-graph condition of min-cost flow; Ahuja, Magnanti &
///     Orlin 1993, §9), so the repair stops at a proven optimum unless it is bounded.
/// The longest-path distances of the final bin graph are bin prices pi; weak duality
/// gives OPT <= sum_i max_g (s_ig - pi_g) + sum_g cap_g pi_g (equal to the value at the
/// optimum), returned as the certificate, as the auction does.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/placement/balanced_assignment.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <vector>

namespace disagmoe::placement {

/// Knobs of the fast assignment.
struct FastAssignmentOptions {
  /// Improving bin cycles applied at most (-1: until none is left, i.e. optimal; 0: the
  /// greedy alone, without the repair's O(n G) set-up). A pair exchange (any number of
  /// items swapped between two bins) costs O(n) (two bins' rows re-scanned, best
  /// partners updated), a longer cycle a Bellman–Ford search, O(G^3) at most; each
  /// raises the value strictly. Per-step settings measured in bench_place --shuffle:
  /// G <= 16, 0 with warm prices (within 0.1%); G = 64, 2 G cold (within 0.5%).
  std::int64_t max_cycles = -1;
  /// Compute the weak-duality certificate (one more O(n G) pass); off: upper_bound = +inf.
  bool certify = true;
  /// Dual coordinate-descent sweeps before the greedy, which then runs on reduced
  /// scores (0: plain greedy; -1: 2 sweeps when G <= 16, none above, where they stalled
  /// and gave a worse start than the plain greedy in bench_place --shuffle). Prices come
  /// from an even sample of at most 1024 items; each sweep costs G order statistics.
  int price_sweeps = -1;
};

/// What the fast assignment did, beside the assignment itself.
struct FastAssignmentReport {
  std::int64_t cycles = 0;   ///< improving bin cycles applied by the repair
  bool optimal = false;      ///< no improving cycle was left (the assignment is optimal)
  double greedy_value = 0;   ///< value after the greedy stage, before the repair
};

/// Reusable solver: keeps its buffers between calls, so a per-micro-batch caller does
/// not allocate once the sizes have been seen. Not thread-safe; one per thread.
class FastAssigner {
 public:
  explicit FastAssigner(FastAssignmentOptions options = {}) : options_(options) {
    expect(options.max_cycles >= -1, "max_cycles", options.max_cycles, ">= -1 (-1: until optimal)");
    expect(options.price_sweeps >= -1 && options.price_sweeps <= 1000, "price_sweeps", options.price_sweeps,
           "-1 (auto) or 0 <= sweeps <= 1000");
  }

  /// Maximises sum_i score[i*G + bin[i]] with exactly capacity[g] items in bin g:
  /// writes `bin` (size n), `value` (that sum) and `upper_bound` (the weak-duality
  /// certificate; +inf without `certify`). `score` is n x G row-major and finite;
  /// capacities are >= 0 and sum to n. Throws ConfigError on bad sizes or capacities.
  /// Complexity: O(n G + cycles * (n + G^2) + G^3 per cycle search beyond pair exchanges);
  /// memory O(n + G^2).
  FastAssignmentReport assign(std::span<const double> score, std::span<const std::int64_t> capacity,
                              std::span<std::int32_t> bin, double& value, double& upper_bound) {
    return assign_impl(score, capacity, bin, value, upper_bound, {});
  }

  /// As above, with `warm` (size G): bin prices to start the greedy from instead of the
  /// price sweeps when `warm_valid`. Without valid prices the repair runs to the optimum
  /// whatever max_cycles says, to obtain them. When the repair ends at a proven optimum
  /// the buffer is overwritten with its optimal prices (the longest-path distances) and
  /// warm_valid set; a bounded repair that stops early leaves valid prices as they were.
  /// A caller solving a stream of similar batches (the micro-batches of one layer)
  /// passes the same buffer each time: the next greedy starts from prices that were
  /// optimal for an earlier batch. Throws ConfigError also on a warm size != G.
  FastAssignmentReport assign(std::span<const double> score, std::span<const std::int64_t> capacity,
                              std::span<std::int32_t> bin, double& value, double& upper_bound, std::span<double> warm,
                              bool& warm_valid) {
    expect(warm.size() == capacity.size(), "warm.size()", warm.size(), "the bin count (" + std::to_string(capacity.size()) + ")");
    const std::int64_t bound = options_.max_cycles;
    if (!warm_valid) options_.max_cycles = -1;
    FastAssignmentReport rep;
    try {
      rep = assign_impl(score, capacity, bin, value, upper_bound, warm_valid ? warm : std::span<double>{});
    } catch (...) {
      options_.max_cycles = bound;
      throw;
    }
    options_.max_cycles = bound;
    if (rep.optimal && dist_.size() == capacity.size()) {
      std::copy(dist_.begin(), dist_.end(), warm.begin());
      warm_valid = true;
    }
    return rep;
  }

 private:
  FastAssignmentReport assign_impl(std::span<const double> score, std::span<const std::int64_t> capacity,
                                   std::span<std::int32_t> bin, double& value, double& upper_bound,
                                   std::span<const double> warm) {
    const std::size_t G = capacity.size();
    expect(G >= 1, "capacity.size()", G, ">= 1 bin");
    expect(score.size() % G == 0, "score.size()", score.size(), "a multiple of the bin count (" + std::to_string(G) + ")");
    const std::size_t n = score.size() / G;
    expect(bin.size() == n, "bin.size()", bin.size(), "the item count (" + std::to_string(n) + ")");
    std::int64_t total = 0;
    for (std::size_t g = 0; g < G; ++g) {
      if (capacity[g] < 0) fail("capacity[" + std::to_string(g) + "]", capacity[g], ">= 0");
      total += capacity[g];
    }
    expect(total == static_cast<std::int64_t>(n), "sum of capacities", total, "the item count (" + std::to_string(n) + ")");
    FastAssignmentReport rep;
    value = 0;
    upper_bound = 0;
    if (n == 0) {
      rep.optimal = true;
      return rep;
    }
    // Coordinate descent stalls on the non-smooth dual with many bins (G = 64: the
    // priced greedy was worse than the plain one on DeepSeek-V3-shaped batches), hence
    // no prices there by default; below, it was the better start every time.
    const int sweeps = options_.price_sweeps >= 0 ? options_.price_sweeps : (G <= 16 ? 2 : 0);
    pi_.assign(G, 0.0);
    if (!warm.empty()) std::copy(warm.begin(), warm.end(), pi_.begin());
    else if (sweeps > 0) prices(score, capacity, sweeps);
    greedy(score, capacity, bin);
    value = 0;
    for (std::size_t i = 0; i < n; ++i) value += score[i * G + static_cast<std::size_t>(bin[i])];
    rep.greedy_value = value;
    if (options_.max_cycles == 0) dist_.assign(G, 0.0);  // no cycle may be applied: skip the repair's O(n G) set-up
    else repair(score, capacity, bin, value, rep);
    upper_bound = options_.certify ? std::max(bound(score, capacity), value) : std::numeric_limits<double>::infinity();
    return rep;
  }

 public:
  /// As above, returning a BalancedAssignment like balanced_assignment().
  BalancedAssignment assign(std::span<const double> score, std::span<const std::int64_t> capacity,
                            FastAssignmentReport* report = nullptr) {
    BalancedAssignment r;
    r.bin.assign(capacity.empty() ? 0 : score.size() / capacity.size(), 0);
    const auto rep = assign(score, capacity, r.bin, r.value, r.upper_bound);
    if (report != nullptr) *report = rep;
    return r;
  }

 private:
  // The best and second-best reduced score of item i, over bins with capacity. O(G).
  void top2(const double* s, std::span<const std::int64_t> capacity, std::size_t i) {
    const std::size_t G = capacity.size();
    double v1 = -std::numeric_limits<double>::infinity(), v2 = v1;
    std::int32_t b1 = -1, b2 = -1;
    for (std::size_t g = 0; g < G; ++g) {
      if (capacity[g] == 0) continue;
      const double v = s[g] - pi_[g];
      if (v > v1) v2 = v1, b2 = b1, v1 = v, b1 = static_cast<std::int32_t>(g);
      else if (v > v2) v2 = v, b2 = static_cast<std::int32_t>(g);
    }
    v1_[i] = v1, v2_[i] = v2, b1_[i] = b1, b2_[i] = b2;
  }

  // Stage 0: exact minimisation of the dual along one bin's price at a time. Item i
  // prefers g iff s_ig - pi_g >= m_i (its best reduced score elsewhere), i.e. iff
  // pi_g <= r_i = s_ig - m_i; pi_g midway between the cap_g-th and (cap_g+1)-th largest
  // r_i gives g exactly cap_g takers (ties aside). Top-2 lists are kept incrementally.
  void prices(std::span<const double> score, std::span<const std::int64_t> capacity, int sweeps) {
    const std::size_t G = capacity.size(), n = score.size() / G;
    pi_.assign(G, 0.0);
    std::size_t open = 0;
    for (std::size_t g = 0; g < G; ++g) open += capacity[g] > 0;
    if (open < 2) return;
    // Prices are a property of the score distribution, not of single items: an evenly
    // strided sample of at most kPriceSample items with proportional capacities gives
    // nearly the same prices at a fraction of the cost (the repair makes up the rest).
    const std::size_t stride = (n + kPriceSample - 1) / kPriceSample, m = (n + stride - 1) / stride;
    v1_.resize(m), v2_.resize(m), b1_.resize(m), b2_.resize(m), r_.resize(m);
    for (std::size_t j = 0; j < m; ++j) top2(score.data() + j * stride * G, capacity, j);
    for (int sweep = 0; sweep < sweeps; ++sweep)
      for (std::size_t g = 0; g < G; ++g) {
        if (capacity[g] == 0 || capacity[g] == static_cast<std::int64_t>(n)) continue;
        const auto want = static_cast<double>(capacity[g]) * static_cast<double>(m) / static_cast<double>(n);
        const auto cap = std::clamp<std::size_t>(static_cast<std::size_t>(std::llround(want)), 1, m - 1);
        for (std::size_t j = 0; j < m; ++j)
          r_[j] = score[j * stride * G + g] - (b1_[j] == static_cast<std::int32_t>(g) ? v2_[j] : v1_[j]);
        std::nth_element(r_.begin(), r_.begin() + static_cast<std::ptrdiff_t>(cap - 1), r_.end(), std::greater<>());
        const double a = r_[cap - 1], b = *std::max_element(r_.begin() + static_cast<std::ptrdiff_t>(cap), r_.end());
        const double old = pi_[g];
        pi_[g] = 0.5 * (a + b);
        const auto gi = static_cast<std::int32_t>(g);
        for (std::size_t j = 0; j < m; ++j) {
          const double* s = score.data() + j * stride * G;
          const double nv = s[g] - pi_[g];
          if (b1_[j] == gi) {
            if (nv >= v2_[j]) v1_[j] = nv;
            else top2(s, capacity, j);
          } else if (b2_[j] == gi) {
            if (nv > v1_[j]) b2_[j] = b1_[j], v2_[j] = v1_[j], b1_[j] = gi, v1_[j] = nv;
            else if (pi_[g] <= old) v2_[j] = nv;  // rose: still second
            else top2(s, capacity, j);            // fell: a third bin may overtake
          } else if (nv > v1_[j]) {
            b2_[j] = b1_[j], v2_[j] = v1_[j], b1_[j] = gi, v1_[j] = nv;
          } else if (nv > v2_[j]) {
            b2_[j] = gi, v2_[j] = nv;
          }
        }
      }
  }

  // Stage 1: items by decreasing regret into their best open bin. The sort key packs
  // the regret's float bits (monotone for non-negative floats) over the item index.
  void greedy(std::span<const double> score, std::span<const std::int64_t> capacity, std::span<std::int32_t> bin) {
    const std::size_t G = capacity.size(), n = bin.size();
    key_.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      const double* s = score.data() + i * G;
      double v1 = -std::numeric_limits<double>::infinity(), v2 = v1;
      std::size_t b1 = 0;
      for (std::size_t g = 0; g < G; ++g) {
        if (capacity[g] == 0) continue;
        const double v = s[g] - pi_[g];
        if (v > v1) v2 = v1, v1 = v, b1 = g;
        else if (v > v2) v2 = v;
      }
      bin[i] = static_cast<std::int32_t>(b1);
      const float regret = std::isfinite(v2) ? static_cast<float>(v1 - v2) : std::numeric_limits<float>::max();
      key_[i] = (static_cast<std::uint64_t>(std::bit_cast<std::uint32_t>(regret)) << 32) | static_cast<std::uint64_t>(i);
    }
    radix_sort_keys();
    left_.assign(capacity.begin(), capacity.end());
    for (auto it = key_.rbegin(); it != key_.rend(); ++it) {  // decreasing key
      const auto k = *it;
      const auto i = static_cast<std::size_t>(k & 0xffffffffu);
      auto b = static_cast<std::size_t>(bin[i]);
      if (left_[b] == 0) {  // best bin full: best bin with room left
        const double* s = score.data() + i * G;
        double v = -std::numeric_limits<double>::infinity();
        for (std::size_t g = 0; g < G; ++g)
          if (left_[g] > 0 && s[g] - pi_[g] > v) v = s[g] - pi_[g], b = g;
        bin[i] = static_cast<std::int32_t>(b);
      }
      --left_[b];
    }
  }

  // Sorts key_ ascending by its upper 32 bits (the regret), stably, so equal regrets
  // keep increasing item order (read backwards: decreasing, as a descending sort of the
  // whole key gives). LSD radix sort in three 11-bit passes: O(n + 2^11) each instead
  // of the comparison sort's O(n log n), a quarter of the greedy's time at G = 8.
  void radix_sort_keys() {
    constexpr int kBits = 11;
    constexpr std::size_t kBuckets = std::size_t{1} << kBits;
    tmp_.resize(key_.size());
    count_.resize(kBuckets);
    for (int shift = 32; shift < 64; shift += kBits) {
      std::fill(count_.begin(), count_.end(), 0);
      for (const auto k : key_) ++count_[(k >> shift) & (kBuckets - 1)];
      std::size_t sum = 0;
      for (auto& c : count_) {
        const std::size_t here = c;
        c = sum;
        sum += here;
      }
      for (const auto k : key_) tmp_[count_[(k >> shift) & (kBuckets - 1)]++] = k;
      key_.swap(tmp_);
    }
  }

  // d[p][q] for one bin p, without the arg-max item (a branch-free max the compiler
  // vectorises; the item is looked up only for the edges of an applied cycle). O(|p| G).
  void scan_row(std::span<const double> score, std::size_t G, std::size_t p) {
    double* d = d_.data() + p * G;
    std::fill(d, d + G, -std::numeric_limits<double>::infinity());
    for (const auto i : members_[p]) {
      const double* s = score.data() + static_cast<std::size_t>(i) * G;
      const double own = s[p];
      for (std::size_t q = 0; q < G; ++q) d[q] = std::max(d[q], s[q] - own);
    }
    d[p] = -std::numeric_limits<double>::infinity();
  }

  // The first member of bin p attaining d[p][q]. O(|p|).
  std::int32_t arg_max(std::span<const double> score, std::size_t G, std::size_t p, std::size_t q) const {
    double best = -std::numeric_limits<double>::infinity();
    std::int32_t arg = -1;
    for (const auto i : members_[p]) {
      const double* s = score.data() + static_cast<std::size_t>(i) * G;
      if (s[q] - s[p] > best) best = s[q] - s[p], arg = i;
    }
    return arg;
  }

  // Stage 2: cancel improving bin cycles; leaves prices in dist_ (longest paths).
  void repair(std::span<const double> score, std::span<const std::int64_t> capacity, std::span<std::int32_t> bin,
              double& value, FastAssignmentReport& rep) {
    const std::size_t G = capacity.size(), n = bin.size();
    members_.resize(G);
    for (auto& m : members_) m.clear();
    pos_.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      auto& m = members_[static_cast<std::size_t>(bin[i])];
      pos_[i] = static_cast<std::int32_t>(m.size());
      m.push_back(static_cast<std::int32_t>(i));
    }
    // Score range in eight lanes: element-wise min/max vectorise where a scalar
    // reduction does not (it was an eighth of the bounded repair at G = 64).
    constexpr std::size_t kLanes = 8;
    std::array<double, kLanes> lo8, hi8;
    lo8.fill(std::numeric_limits<double>::infinity());
    hi8.fill(-std::numeric_limits<double>::infinity());
    std::size_t k = 0;
    for (; k + kLanes <= score.size(); k += kLanes)
      for (std::size_t j = 0; j < kLanes; ++j) lo8[j] = std::min(lo8[j], score[k + j]), hi8[j] = std::max(hi8[j], score[k + j]);
    for (; k < score.size(); ++k) lo8[0] = std::min(lo8[0], score[k]), hi8[0] = std::max(hi8[0], score[k]);
    const double lo = *std::min_element(lo8.begin(), lo8.end()), hi = *std::max_element(hi8.begin(), hi8.end());
    // Gains below this are rounding: without the floor, cycles of zero true weight
    // could be "improved" forever.
    const double tol = 1e-9 * std::max(hi - lo, 1e-300);
    d_.resize(G * G);
    for (std::size_t p = 0; p < G; ++p) scan_row(score, G, p);
    pair_w_.resize(G);
    pair_q_.resize(G);
    for (std::size_t p = 0; p < G; ++p) best_pair(G, p);
    dist_.assign(G, 0.0);  // prices for the bound until Bellman-Ford sets better ones
    pred_.resize(G);
    while (true) {
      cycle_.clear();
      // The cheapest check first: the best improving pair exchange (O(G) from each
      // bin's best partner, kept up to date by update_pairs).
      double best = tol;
      for (std::size_t p = 0; p < G; ++p)
        if (pair_w_[p] > best) best = pair_w_[p], cycle_.assign({p, pair_q_[p]});
      if (cycle_.empty() && !find_cycle(G, tol)) {
        rep.optimal = true;
        return;
      }
      if (options_.max_cycles >= 0 && rep.cycles >= options_.max_cycles) return;  // bounded: prices still valid for the bound
      // Apply. A longer cycle moves the arg-max item of every edge on (distinct bins,
      // so distinct items). A pair exchange p <-> q swaps as many items as still gain:
      // the m-th best mover of p to q with the m-th best of q to p while their sum is
      // positive (the best m-for-m swap between two bins), one row re-scan for all.
      moves_.clear();
      double gain = 0;
      if (cycle_.size() == 2) {
        const std::size_t p = cycle_[0], q = cycle_[1];
        // Only items that could pair with the other side's best mover are sorted (a few,
        // where sorting whole bins of n / G items made G = 8 slower).
        auto movers = [&](std::size_t from, std::size_t to, std::vector<std::pair<double, std::int32_t>>& out) {
          out.clear();
          const double need = tol - d_[to * G + from];
          for (const auto i : members_[from]) {
            const double* s = score.data() + static_cast<std::size_t>(i) * G;
            if (s[to] - s[from] > need) out.emplace_back(s[to] - s[from], i);
          }
          std::sort(out.begin(), out.end(), std::greater<>());
        };
        movers(p, q, to_q_);
        movers(q, p, to_p_);
        for (std::size_t m = 0; m < std::min(to_q_.size(), to_p_.size()); ++m) {
          const double w = to_q_[m].first + to_p_[m].first;
          if (!(w > tol)) break;
          gain += w;
          moves_.push_back({to_q_[m].second, p, q});
          moves_.push_back({to_p_[m].second, q, p});
        }
      } else {
        for (std::size_t j = 0; j < cycle_.size(); ++j) {
          const std::size_t p = cycle_[j], q = cycle_[(j + 1) % cycle_.size()];
          const auto i = arg_max(score, G, p, q);
          gain += score[static_cast<std::size_t>(i) * G + q] - score[static_cast<std::size_t>(i) * G + p];
          moves_.push_back({i, p, q});
        }
      }
      if (!(gain > tol)) {  // rounding made a cycle look improving: stop, do not cycle
        rep.optimal = true;
        return;
      }
      for (const auto& mv : moves_) {
        const auto i = mv.item;
        auto& from = members_[mv.from];
        const auto at = static_cast<std::size_t>(pos_[static_cast<std::size_t>(i)]);
        from[at] = from.back();
        pos_[static_cast<std::size_t>(from[at])] = static_cast<std::int32_t>(at);
        from.pop_back();
        pos_[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(members_[mv.to].size());
        members_[mv.to].push_back(i);
        bin[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(mv.to);
      }
      value += gain;
      ++rep.cycles;
      for (const auto p : cycle_) scan_row(score, G, p);
      update_pairs(G);
    }
  }

  // Bin p's best exchange partner: max over q of d[p][q] + d[q][p]. O(G).
  void best_pair(std::size_t G, std::size_t p) {
    double w = -std::numeric_limits<double>::infinity();
    std::size_t with = p;
    for (std::size_t q = 0; q < G; ++q) {
      const double x = d_[p * G + q] + d_[q * G + p];
      if (x > w) w = x, with = q;
    }
    pair_w_[p] = w, pair_q_[p] = with;
  }

  // After the rows of the cycle's bins were rescanned, only pairs touching them
  // changed: a bin whose best partner was in the cycle is recomputed, any other only
  // compares its pairs with the cycle's bins. O(G |cycle|) plus the recomputed rows,
  // instead of O(G^2) for a fresh search per cycle.
  void update_pairs(std::size_t G) {
    in_cycle_.assign(G, 0);
    for (const auto c : cycle_) in_cycle_[c] = 1;
    for (std::size_t r = 0; r < G; ++r) {
      if (in_cycle_[r] || in_cycle_[pair_q_[r]]) {
        best_pair(G, r);
        continue;
      }
      for (const auto c : cycle_) {
        const double x = d_[r * G + c] + d_[c * G + r];
        if (x > pair_w_[r]) pair_w_[r] = x, pair_q_[r] = c;
      }
    }
  }

  // Bellman–Ford for longest paths from a virtual source (all dist 0). Any cycle in the
  // predecessor graph has positive weight (every link was a strict improvement), so
  // it is looked for after every round ("walk to root", Cherkassky & Goldberg 1999,
  // "Negative-cycle detection algorithms"), not only after the G-th: on the shuffle's
  // bin graphs a cycle shows within a few rounds. Without one, dist_ are feasible
  // prices: dist[q] >= dist[p] + d[p][q] - tol. O(G^2) per round, G rounds at most.
  bool find_cycle(std::size_t G, double tol) {
    std::fill(dist_.begin(), dist_.end(), 0.0);
    std::fill(pred_.begin(), pred_.end(), -1);
    for (std::size_t round = 0; round < G; ++round) {
      bool relaxed = false;
      for (std::size_t p = 0; p < G; ++p)
        for (std::size_t q = 0; q < G; ++q) {
          const double w = d_[p * G + q];
          if (dist_[p] + w > dist_[q] + tol) dist_[q] = dist_[p] + w, pred_[q] = static_cast<int>(p), relaxed = true;
        }
      if (!relaxed) return false;
      if (pred_cycle(G)) return true;
    }
    return pred_cycle(G);
  }

  // A cycle of the predecessor graph into cycle_ (in edge order p -> q), if any. O(G).
  bool pred_cycle(std::size_t G) {
    mark_.assign(G, -1);
    for (std::size_t s = 0; s < G; ++s) {
      std::size_t v = s;
      while (pred_[v] >= 0 && mark_[v] < 0) {
        mark_[v] = static_cast<int>(s);
        v = static_cast<std::size_t>(pred_[v]);
      }
      if (mark_[v] != static_cast<int>(s)) continue;  // reached a root or an earlier walk
      if (pred_[v] < 0) continue;
      cycle_.clear();
      std::size_t u = v;
      do {
        cycle_.push_back(u);
        u = static_cast<std::size_t>(pred_[u]);
      } while (u != v);
      std::reverse(cycle_.begin(), cycle_.end());  // predecessors run backwards
      return cycle_.size() >= 2;
    }
    return false;
  }

  // Weak duality with prices pi = dist_ (from the last find_cycle; zero when the repair
  // ended on pair exchanges, which is still a valid, looser bound). Bins without
  // capacity are left out, as in balanced_assignment.hpp. O(n G).
  double bound(std::span<const double> score, std::span<const std::int64_t> capacity) {
    const std::size_t G = capacity.size(), n = score.size() / G;
    double ub = 0;
    for (std::size_t g = 0; g < G; ++g)
      if (capacity[g] > 0) ub += static_cast<double>(capacity[g]) * dist_[g];
    for (std::size_t i = 0; i < n; ++i) {
      const double* s = score.data() + i * G;
      double m = -std::numeric_limits<double>::infinity();
      for (std::size_t g = 0; g < G; ++g)
        if (capacity[g] > 0) m = std::max(m, s[g] - dist_[g]);
      ub += m;
    }
    return ub;
  }

  static constexpr std::size_t kPriceSample = 1024;

  FastAssignmentOptions options_;
  std::vector<std::uint64_t> key_, tmp_;
  std::vector<std::size_t> count_;
  std::vector<std::int64_t> left_;
  std::vector<std::vector<std::int32_t>> members_;
  struct Move {
    std::int32_t item;
    std::size_t from, to;
  };
  std::vector<Move> moves_;
  std::vector<std::pair<double, std::int32_t>> to_q_, to_p_;
  std::vector<std::int32_t> pos_;
  std::vector<double> d_, dist_, pi_, v1_, v2_, r_;
  std::vector<std::int32_t> b1_, b2_;
  std::vector<int> pred_, mark_;
  std::vector<std::size_t> cycle_, pair_q_;
  std::vector<double> pair_w_;
  std::vector<char> in_cycle_;
};

/// One-shot form of FastAssigner::assign with the auction's signature.
/// Complexity: see FastAssigner::assign.
inline BalancedAssignment fast_balanced_assignment(std::span<const double> score, std::span<const std::int64_t> capacity,
                                                   FastAssignmentOptions options = {}, FastAssignmentReport* report = nullptr) {
  FastAssigner a(options);
  return a.assign(score, capacity, report);
}

}  // namespace disagmoe::placement
