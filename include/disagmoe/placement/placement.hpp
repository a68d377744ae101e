// SPDX-License-Identifier: Apache-2.0
/// @file placement.hpp
/// `Topology` (the expert-parallel GPUs, grouped into nodes) and `Placement` (which GPU
/// holds each expert of each MoE layer), with the baseline placements every method is
/// compared against: contiguous (Megatron-LM's default), random, load-balanced
/// (EPLB-style balanced packing, node then GPU, without replicas), and the placement a
/// synthetic generator planted.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/placement/coupling_stats.hpp>
#include <disagmoe/placement/synthetic.hpp>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace disagmoe::placement {

/// The expert-parallel group: `gpus` GPUs, `gpus_per_node` of them per node, numbered
/// node-major (GPU g is on node g / gpus_per_node).
struct Topology {
  int gpus = 8;           ///< GPUs in the expert-parallel group
  int gpus_per_node = 8;  ///< GPUs per node; must divide gpus

  int nodes() const noexcept { return gpus / gpus_per_node; }
  int node_of(int gpu) const noexcept { return gpu / gpus_per_node; }

  /// Throws ConfigError unless 1 <= gpus_per_node, gpus_per_node divides gpus, and
  /// gpus divides `num_experts` (every GPU holds the same number of experts).
  void validate(int num_experts) const {
    expect(gpus >= 1 && gpus <= 65536, "gpus", gpus, "1 <= gpus <= 65536");
    expect(gpus_per_node >= 1 && gpus % gpus_per_node == 0, "gpus_per_node", gpus_per_node,
           "a divisor of gpus (" + std::to_string(gpus) + ")");
    expect(num_experts % gpus == 0, "experts", num_experts,
           "a multiple of gpus (" + std::to_string(gpus) + ") so every GPU holds as many experts");
  }
};

/// Expert -> GPU map of every layer, stored [layer][expert].
class Placement {
 public:
  Placement() = default;
  /// Takes `gpu_of` (size layers * num_experts). Throws ConfigError on a bad topology,
  /// a size mismatch or a GPU id out of range. O(layers * E).
  Placement(int layers, int num_experts, Topology topology, std::vector<std::int32_t> gpu_of)
      : layers_(layers), experts_(num_experts), topology_(topology), gpu_of_(std::move(gpu_of)) {
    expect(layers >= 1, "Placement.layers", layers, ">= 1");
    expect(num_experts >= 1 && num_experts <= kMaxExperts, "Placement.num_experts", num_experts, "1 <= E <= 65536");
    topology_.validate(num_experts);
    expect(gpu_of_.size() == static_cast<std::size_t>(layers) * static_cast<std::size_t>(num_experts),
           "Placement gpu_of.size()", gpu_of_.size(), "layers * experts");
    for (std::size_t i = 0; i < gpu_of_.size(); ++i)
      expect(gpu_of_[i] >= 0 && gpu_of_[i] < topology_.gpus,
             "Placement layer " + std::to_string(i / static_cast<std::size_t>(num_experts)) + " expert " +
                 std::to_string(i % static_cast<std::size_t>(num_experts)) + " gpu",
             gpu_of_[i], "0 <= gpu < " + std::to_string(topology_.gpus));
  }

  int layers() const noexcept { return layers_; }
  int num_experts() const noexcept { return experts_; }
  const Topology& topology() const noexcept { return topology_; }
  /// GPU of expert `e` at layer `l` (unchecked). O(1).
  int gpu(int l, int e) const noexcept { return gpu_of_[static_cast<std::size_t>(l) * static_cast<std::size_t>(experts_) + static_cast<std::size_t>(e)]; }
  /// The map of layer `l`, indexed by expert.
  std::span<const std::int32_t> layer(int l) const noexcept {
    return {gpu_of_.data() + static_cast<std::size_t>(l) * static_cast<std::size_t>(experts_), static_cast<std::size_t>(experts_)};
  }
  /// The whole map, [layer][expert].
  std::span<const std::int32_t> map() const noexcept { return gpu_of_; }

  /// True when every GPU holds exactly E/G experts at every layer. O(layers * E).
  bool balanced() const {
    std::vector<int> count(static_cast<std::size_t>(topology_.gpus));
    for (int l = 0; l < layers_; ++l) {
      std::fill(count.begin(), count.end(), 0);
      for (const auto g : layer(l)) ++count[static_cast<std::size_t>(g)];
      for (const int c : count)
        if (c != experts_ / topology_.gpus) return false;
    }
    return true;
  }

 private:
  int layers_ = 0;
  int experts_ = 0;
  Topology topology_{};
  std::vector<std::int32_t> gpu_of_;
};

/// Megatron-LM's default: expert e on GPU e / (E/G) at every layer. O(layers * E).
inline Placement contiguous_placement(int layers, int num_experts, Topology topo) {
  topo.validate(num_experts);
  std::vector<std::int32_t> map(static_cast<std::size_t>(layers) * static_cast<std::size_t>(num_experts));
  const int per = num_experts / topo.gpus;
  for (std::size_t i = 0; i < map.size(); ++i) map[i] = static_cast<std::int32_t>(static_cast<int>(i % static_cast<std::size_t>(num_experts)) / per);
  return Placement(layers, num_experts, topo, std::move(map));
}

/// A uniformly random balanced placement per layer (seeded). O(layers * E).
inline Placement random_placement(int layers, int num_experts, Topology topo, std::uint64_t seed) {
  topo.validate(num_experts);
  detail::SplitMix64 g{detail::mix_seed(seed, 0x5eed)};
  std::vector<std::int32_t> map(static_cast<std::size_t>(layers) * static_cast<std::size_t>(num_experts));
  const int per = num_experts / topo.gpus;
  std::vector<int> perm(static_cast<std::size_t>(num_experts));
  for (int l = 0; l < layers; ++l) {
    std::iota(perm.begin(), perm.end(), 0);
    for (std::size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[g.below(i)]);
    for (int i = 0; i < num_experts; ++i)
      map[static_cast<std::size_t>(l * num_experts + perm[static_cast<std::size_t>(i)])] = static_cast<std::int32_t>(i / per);
  }
  return Placement(layers, num_experts, topo, std::move(map));
}

/// The placement a synthetic generator planted (synthetic.hpp): every co-selection group
/// whole on one GPU, groups dealt to GPUs in order at layer 0, and each layer-(l+1)
/// group on the GPU of its planted predecessor (so the planted successor chain stays
/// local). The reference a coupling placement should recover; it ignores load.
/// Throws ConfigError unless the group count is a multiple of the GPU count and all
/// groups have the same size. O(layers * E).
inline Placement planted_placement(const PlantedStructure& planted, Topology topo) {
  const int L = static_cast<int>(planted.groups.size());
  expect(L >= 1, "planted layers", L, ">= 1");
  const int groups = static_cast<int>(planted.groups[0].size());
  const int E = static_cast<int>(planted.group_of_expert[0].size());
  topo.validate(E);
  expect(groups % topo.gpus == 0, "planted groups", groups, "a multiple of gpus (" + std::to_string(topo.gpus) + ")");
  for (const auto& layer : planted.groups)
    for (const auto& g : layer)
      expect(g.size() == layer[0].size(), "planted group size", g.size(), "equal sizes (" + std::to_string(layer[0].size()) + ")");
  const int per = groups / topo.gpus;
  std::vector<int> gpu_of_group(static_cast<std::size_t>(groups));
  for (int g = 0; g < groups; ++g) gpu_of_group[static_cast<std::size_t>(g)] = g / per;
  std::vector<std::int32_t> map(static_cast<std::size_t>(L) * static_cast<std::size_t>(E));
  std::vector<int> next(static_cast<std::size_t>(groups));
  for (int l = 0; l < L; ++l) {
    const auto ul = static_cast<std::size_t>(l);
    for (int g = 0; g < groups; ++g)
      for (const int e : planted.groups[ul][static_cast<std::size_t>(g)])
        map[ul * static_cast<std::size_t>(E) + static_cast<std::size_t>(e)] = gpu_of_group[static_cast<std::size_t>(g)];
    if (l + 1 < L) {
      for (int g = 0; g < groups; ++g) next[static_cast<std::size_t>(planted.successor[ul][static_cast<std::size_t>(g)])] = gpu_of_group[static_cast<std::size_t>(g)];
      gpu_of_group.swap(next);
    }
  }
  return Placement(L, E, topo, std::move(map));
}

namespace detail {
/// EPLB's `balanced_packing` (deepseek-ai/EPLB, eplb.py): items by descending weight,
/// each into the lightest pack that still has room; every pack gets n/m items.
/// Returns pack index per item. O(n log n + n m).
inline std::vector<int> balanced_packing(std::span<const double> weight, int packs) {
  const auto n = weight.size();
  const auto per = n / static_cast<std::size_t>(packs);
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return weight[a] > weight[b]; });
  std::vector<double> load(static_cast<std::size_t>(packs), 0.0);
  std::vector<std::size_t> count(static_cast<std::size_t>(packs), 0);
  std::vector<int> pack(n, 0);
  for (const auto i : order) {
    int best = -1;
    for (int p = 0; p < packs; ++p)
      if (count[static_cast<std::size_t>(p)] < per && (best < 0 || load[static_cast<std::size_t>(p)] < load[static_cast<std::size_t>(best)])) best = p;
    pack[i] = best;
    load[static_cast<std::size_t>(best)] += weight[i];
    ++count[static_cast<std::size_t>(best)];
  }
  return pack;
}
}  // namespace detail

/// Load-only balancing in the style of DeepSeek's EPLB hierarchical policy, without
/// redundant experts: per layer, pack experts onto nodes by load, then each node's
/// experts onto its GPUs. Ignores co-selection. O(layers * E * G).
inline Placement load_balanced_placement(const CouplingStats& stats, Topology topo) {
  const int E = stats.num_experts(), L = stats.layers();
  topo.validate(E);
  const int nodes = topo.nodes(), K = topo.gpus_per_node;
  std::vector<std::int32_t> map(static_cast<std::size_t>(L) * static_cast<std::size_t>(E));
  for (int l = 0; l < L; ++l) {
    std::vector<double> w(static_cast<std::size_t>(E));
    for (int e = 0; e < E; ++e) w[static_cast<std::size_t>(e)] = static_cast<double>(stats.load(l, e));
    const auto node = detail::balanced_packing(w, nodes);
    for (int n = 0; n < nodes; ++n) {
      std::vector<int> members;
      std::vector<double> mw;
      for (int e = 0; e < E; ++e)
        if (node[static_cast<std::size_t>(e)] == n) members.push_back(e), mw.push_back(w[static_cast<std::size_t>(e)]);
      const auto gpu = detail::balanced_packing(mw, K);
      for (std::size_t i = 0; i < members.size(); ++i)
        map[static_cast<std::size_t>(l * E + members[i])] = static_cast<std::int32_t>(n * K + gpu[i]);
    }
  }
  return Placement(L, E, topo, std::move(map));
}

}  // namespace disagmoe::placement
