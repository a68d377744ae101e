// SPDX-License-Identifier: Apache-2.0
/// @file synthetic.hpp
/// Seeded synthetic routing traces with planted coupling structure, for tests and
/// benchmarks where no open per-token trace exists (see shared research notes).
///
/// Generative model (a hidden Markov chain over co-selection groups):
///  * popularity: expert e at layer l has weight (r+1)^-s, r its rank in a random
///    per-layer permutation (Zipf law with exponent `popularity_skew`);
///  * groups: each layer's experts are split (random permutation, consecutive chunks of
///    `group_size`) into co-selection groups; a token carries a hidden group per layer;
///  * layer 0 draws the group with probability proportional to its total popularity;
///    at layer l+1 the group is the planted successor of the layer-l group with
///    probability `transition_prob` (successors are a random bijection), otherwise drawn
///    afresh;
///  * with probability `group_prob` the token's k experts are drawn (by popularity,
///    without replacement) inside its group (topped up from the whole layer when the
///    group is smaller than k), otherwise from the whole layer.
/// At top-2 with group_size 2 and E=128, 0.8% of the pairs (the 64 groups) are chosen
/// together by about `group_prob` of the tokens: the paper's "0.8% of pairs, 42%".
/// Every token draws from its own random stream (seed, token), so any chunking of the
/// token range gives identical tokens, and a disjoint range of the same generator
/// (generate(T, T2)) is a second, independent trace of the same model: fit on one,
/// evaluate on the other.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/limits.hpp>
#include <disagmoe/placement/routing_trace.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

namespace disagmoe::placement {

/// Parameters of the synthetic generator (see the file comment for the model).
struct SyntheticTraceSpec {
  std::int64_t tokens = 4096;     ///< tokens to generate (generate_all)
  int layers = 4;                 ///< MoE layers
  int num_experts = 64;           ///< experts per layer
  int top_k = 2;                  ///< experts per token per layer
  double popularity_skew = 0.0;   ///< Zipf exponent s >= 0 of expert popularity (0: uniform)
  int group_size = 0;             ///< experts per co-selection group; 0 means top_k
  double group_prob = 0.4;        ///< P(token picks inside its group), in [0, 1]
  double transition_prob = 0.5;   ///< P(group at l+1 = planted successor), in [0, 1]
  bool gates = false;             ///< also generate gate weights (descending, summing to 1)
  std::uint64_t seed = 1;         ///< seed of both the planted structure and the tokens

  /// Throws ConfigError naming the first invalid field.
  void validate() const {
    RoutingTrace::check_dimensions(tokens, layers, top_k, num_experts);
    expect(popularity_skew >= 0.0 && popularity_skew <= 10.0, "SyntheticTraceSpec.popularity_skew", popularity_skew,
           "0 <= skew <= 10");
    expect(group_size >= 0 && group_size <= num_experts, "SyntheticTraceSpec.group_size", group_size,
           "0 <= group_size <= num_experts (" + std::to_string(num_experts) + ")");
    expect(group_prob >= 0.0 && group_prob <= 1.0, "SyntheticTraceSpec.group_prob", group_prob, "a probability in [0, 1]");
    expect(transition_prob >= 0.0 && transition_prob <= 1.0, "SyntheticTraceSpec.transition_prob", transition_prob,
           "a probability in [0, 1]");
  }
};

namespace detail {

/// splitmix64 (Steele, Lea, Flood 2014): a tiny, well-mixed generator; one instance per
/// token keeps generation independent of chunking and thread count.
struct SplitMix64 {
  std::uint64_t state;
  std::uint64_t next() noexcept {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double uniform() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  std::size_t below(std::size_t n) noexcept { return static_cast<std::size_t>(uniform() * static_cast<double>(n)) % n; }
};

inline std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t stream) noexcept {
  SplitMix64 g{seed ^ (stream * 0xd1b54a32d192ed03ULL)};
  g.next();
  return g.next();
}

/// Walker/Vose alias table: O(n) build, O(1) weighted draws (Vose 1991).
class AliasTable {
 public:
  AliasTable() = default;
  explicit AliasTable(const std::vector<double>& w) : prob_(w.size()), alias_(w.size()) {
    const double total = std::accumulate(w.begin(), w.end(), 0.0);
    const auto n = w.size();
    std::vector<double> scaled(n);
    std::vector<std::size_t> small, large;
    for (std::size_t i = 0; i < n; ++i) {
      scaled[i] = w[i] * static_cast<double>(n) / total;
      (scaled[i] < 1.0 ? small : large).push_back(i);
    }
    while (!small.empty() && !large.empty()) {
      const auto s = small.back(), l = large.back();
      small.pop_back();
      prob_[s] = scaled[s];
      alias_[s] = l;
      scaled[l] -= 1.0 - scaled[s];
      if (scaled[l] < 1.0) {
        large.pop_back();
        small.push_back(l);
      }
    }
    for (const auto i : small) prob_[i] = 1.0, alias_[i] = i;
    for (const auto i : large) prob_[i] = 1.0, alias_[i] = i;
  }
  std::size_t draw(SplitMix64& g) const noexcept {
    const std::size_t i = g.below(prob_.size());
    return g.uniform() < prob_[i] ? i : alias_[i];
  }

 private:
  std::vector<double> prob_;
  std::vector<std::size_t> alias_;
};

}  // namespace detail

/// The structure a generator planted: what a placement should recover.
struct PlantedStructure {
  std::vector<std::vector<double>> popularity;          ///< [layer][expert] weight (sums to 1 per layer)
  std::vector<std::vector<std::vector<int>>> groups;    ///< [layer][group] -> expert ids
  std::vector<std::vector<int>> group_of_expert;        ///< [layer][expert] -> group
  std::vector<std::vector<int>> successor;              ///< [layer][group] -> group at layer+1 (layers-1 rows)
};

/// Generates synthetic traces; deterministic in (spec, token index).
class SyntheticTraceGenerator {
 public:
  /// Builds the planted structure. Throws ConfigError on an invalid spec. O(layers * E).
  explicit SyntheticTraceGenerator(const SyntheticTraceSpec& spec) : spec_(spec) {
    spec_.validate();
    if (spec_.group_size == 0) spec_.group_size = spec_.top_k;
    const int E = spec_.num_experts, L = spec_.layers;
    // Per layer and expert: popularity and its alias entry (8 + 16 bytes), group id and
    // member (8); per group: the members' vector and its heap block, weight, alias entry
    // and successor (about 80).
    const double groups_per_layer = std::ceil(static_cast<double>(E) / spec_.group_size);
    expect_memory("SyntheticTraceSpec.layers", L, static_cast<double>(L) * (32.0 * E + 80.0 * groups_per_layer),
                  "planted structure (layers x experts)");
    detail::SplitMix64 g{detail::mix_seed(spec_.seed, ~std::uint64_t{0})};
    auto shuffled = [&](int n) {
      std::vector<int> p(static_cast<std::size_t>(n));
      std::iota(p.begin(), p.end(), 0);
      for (std::size_t i = p.size(); i > 1; --i) std::swap(p[i - 1], p[g.below(i)]);
      return p;
    };
    const int groups = (E + spec_.group_size - 1) / spec_.group_size;
    for (int l = 0; l < L; ++l) {
      std::vector<double> w(static_cast<std::size_t>(E));
      const auto rank = shuffled(E);
      for (int e = 0; e < E; ++e) w[static_cast<std::size_t>(e)] = std::pow(rank[static_cast<std::size_t>(e)] + 1.0, -spec_.popularity_skew);
      const double total = std::accumulate(w.begin(), w.end(), 0.0);
      for (auto& x : w) x /= total;
      const auto order = shuffled(E);
      std::vector<std::vector<int>> grp(static_cast<std::size_t>(groups));
      std::vector<int> gof(static_cast<std::size_t>(E));
      std::vector<double> gw(static_cast<std::size_t>(groups), 0.0);
      for (int i = 0; i < E; ++i) {
        const int e = order[static_cast<std::size_t>(i)], k = i / spec_.group_size;
        grp[static_cast<std::size_t>(k)].push_back(e);
        gof[static_cast<std::size_t>(e)] = k;
        gw[static_cast<std::size_t>(k)] += w[static_cast<std::size_t>(e)];
      }
      expert_alias_.emplace_back(w);
      group_alias_.emplace_back(gw);
      planted_.popularity.push_back(std::move(w));
      planted_.groups.push_back(std::move(grp));
      planted_.group_of_expert.push_back(std::move(gof));
      if (l + 1 < L) planted_.successor.push_back(shuffled(groups));
    }
  }

  const SyntheticTraceSpec& spec() const noexcept { return spec_; }
  const PlantedStructure& planted() const noexcept { return planted_; }

  /// Tokens [first, first + count) of the infinite token stream of this spec (count
  /// need not respect spec.tokens). Complexity: O(count * layers * top_k) expected.
  RoutingTrace generate(std::int64_t first, std::int64_t count) const {
    expect(first >= 0, "SyntheticTraceGenerator.generate first", first, ">= 0");
    expect(count >= 0, "SyntheticTraceGenerator.generate count", count, ">= 0");
    const int L = spec_.layers, k = spec_.top_k;
    const std::size_t n = static_cast<std::size_t>(count) * static_cast<std::size_t>(L) * static_cast<std::size_t>(k);
    std::vector<ExpertId> ids(n);
    std::vector<float> gates(spec_.gates ? n : 0);
    std::vector<char> used(static_cast<std::size_t>(spec_.num_experts), 0);
    std::vector<double> gw;
    for (std::int64_t t = 0; t < count; ++t) {
      detail::SplitMix64 g{detail::mix_seed(spec_.seed, static_cast<std::uint64_t>(first + t))};
      int group = 0;
      for (int l = 0; l < L; ++l) {
        const auto ul = static_cast<std::size_t>(l);
        if (l > 0 && g.uniform() < spec_.transition_prob) {
          group = planted_.successor[ul - 1][static_cast<std::size_t>(group)];
        } else {
          group = static_cast<int>(group_alias_[ul].draw(g));
        }
        ExpertId* out = ids.data() + (static_cast<std::size_t>(t) * static_cast<std::size_t>(L) + ul) * static_cast<std::size_t>(k);
        int filled = 0;
        if (g.uniform() < spec_.group_prob) {
          // Weighted draws without replacement inside the (small) group.
          const auto& members = planted_.groups[ul][static_cast<std::size_t>(group)];
          gw.assign(members.size(), 0.0);
          double total = 0.0;
          for (std::size_t i = 0; i < members.size(); ++i) total += gw[i] = planted_.popularity[ul][static_cast<std::size_t>(members[i])];
          for (; filled < k && filled < static_cast<int>(members.size()); ++filled) {
            double u = g.uniform() * total;
            std::size_t pick = 0;
            for (std::size_t i = 0; i < members.size(); ++i) {
              if (gw[i] == 0.0) continue;  // already drawn
              pick = i;                    // the last positive weight absorbs rounding
              if (u < gw[i]) break;
              u -= gw[i];
            }
            total -= gw[pick];
            gw[pick] = 0.0;
            out[filled] = static_cast<ExpertId>(members[pick]);
            used[static_cast<std::size_t>(members[pick])] = 1;
          }
        }
        for (int tries = 0; filled < k; ++tries) {
          // Rejection of repeats keeps the popularity law; after many rejections (extreme
          // skew) fall back to the lowest unused id so generation always terminates.
          std::size_t e = expert_alias_[ul].draw(g);
          if (tries > 64 * k) {
            e = 0;
            while (used[e]) ++e;
          }
          if (used[e]) continue;
          used[e] = 1;
          out[filled++] = static_cast<ExpertId>(e);
        }
        for (int s = 0; s < k; ++s) used[out[s]] = 0;
        if (spec_.gates) {
          float* gt = gates.data() + (out - ids.data());
          float sum = 0.0f;
          for (int s = 0; s < k; ++s) sum += gt[s] = static_cast<float>(0.05 + g.uniform());
          std::sort(gt, gt + k, [](float a, float b) { return a > b; });
          for (int s = 0; s < k; ++s) gt[s] /= sum;
        }
      }
    }
    return RoutingTrace(count, L, k, spec_.num_experts, std::move(ids), std::move(gates));
  }

  /// The first spec().tokens tokens.
  RoutingTrace generate_all() const { return generate(0, spec_.tokens); }

 private:
  SyntheticTraceSpec spec_;
  PlantedStructure planted_;
  std::vector<detail::AliasTable> expert_alias_;
  std::vector<detail::AliasTable> group_alias_;
};

}  // namespace disagmoe::placement
