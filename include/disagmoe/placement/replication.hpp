// SPDX-License-Identifier: Apache-2.0
/// @file replication.hpp
/// Redundant experts for load, as DeepSeek's EPLB replicates hot experts
/// (github.com/deepseek-ai/EPLB): `slots_per_gpu` extra expert copies per GPU and layer
/// on top of a Placement, and the dispatcher that splits a replicated expert's tokens
/// between its copies. Copies are chosen as EPLB does (the expert with the largest load
/// per copy gets the next one) but placed with the coupling objective: on the GPU with
/// a free slot whose experts the copy is most often co-selected with (same-layer
/// term of objective.hpp), ties to the lighter GPU, so a copy also saves send-once rows.
/// The dispatcher serves each token-expert pair once: on the token's home GPU when it
/// holds a copy, else on a copy's GPU the token already sends to (send-once), else on
/// the copy with the least load so far (comm::serve_token, which the channel's
/// comm::ReplicaRouting runs too).
#pragma once

#include <disagmoe/comm/replica_routing.hpp>
#include <disagmoe/error.hpp>
#include <disagmoe/placement/coupling_stats.hpp>
#include <disagmoe/placement/placement.hpp>
#include <disagmoe/placement/routing_trace.hpp>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace disagmoe::placement {

/// A placement plus replicas: the GPUs holding a copy of each expert of each layer.
class ReplicatedPlacement {
 public:
  /// `base` with no replica. O(layers * E).
  explicit ReplicatedPlacement(Placement base, int slots_per_gpu = 0) : base_(std::move(base)), slots_(slots_per_gpu) {
    expect(slots_per_gpu >= 0, "slots_per_gpu", slots_per_gpu, ">= 0");
    hosts_.resize(static_cast<std::size_t>(base_.layers()) * static_cast<std::size_t>(base_.num_experts()));
    for (int l = 0; l < base_.layers(); ++l)
      for (int e = 0; e < base_.num_experts(); ++e) hosts_[idx(l, e)].push_back(base_.gpu(l, e));
  }

  const Placement& base() const noexcept { return base_; }
  int slots_per_gpu() const noexcept { return slots_; }
  /// GPUs holding expert `e` at layer `l`, its primary (base) GPU first.
  std::span<const std::int32_t> hosts(int l, int e) const noexcept { return hosts_[idx(l, e)]; }

  /// Adds a copy of expert `e` at layer `l` on `gpu`. Throws ConfigError when the GPU
  /// already holds `e` or has no free slot at that layer. O(E).
  void add_replica(int l, int e, int gpu) {
    expect(gpu >= 0 && gpu < base_.topology().gpus, "replica gpu", gpu, "0 <= gpu < " + std::to_string(base_.topology().gpus));
    const auto& h = hosts_[idx(l, e)];
    expect(std::find(h.begin(), h.end(), gpu) == h.end(), "replica gpu", gpu,
           "a GPU not yet holding expert " + std::to_string(e) + " of layer " + std::to_string(l));
    expect(replicas_on(l, gpu) < slots_, "replicas on gpu " + std::to_string(gpu), replicas_on(l, gpu) + 1,
           "at most slots_per_gpu = " + std::to_string(slots_));
    hosts_[idx(l, e)].push_back(gpu);
  }

  /// Replicas (copies beyond the primary) on `gpu` at layer `l`. O(E).
  int replicas_on(int l, int gpu) const {
    int n = 0;
    for (int e = 0; e < base_.num_experts(); ++e) {
      const auto& h = hosts_[idx(l, e)];
      n += static_cast<int>(std::count(h.begin() + 1, h.end(), gpu));
    }
    return n;
  }

 private:
  std::size_t idx(int l, int e) const noexcept {
    return static_cast<std::size_t>(l) * static_cast<std::size_t>(base_.num_experts()) + static_cast<std::size_t>(e);
  }
  Placement base_;
  int slots_;
  std::vector<std::vector<std::int32_t>> hosts_;  // [l][e]
};

/// Fills every replica slot of `p` (slots_per_gpu per GPU and layer) from the loads and
/// co-selections of `stats`: repeatedly the expert with the largest load per copy gets
/// a copy on the free GPU it is most co-selected with, ties to the GPU with the least
/// expected load (each expert's load split evenly over its copies). Throws ConfigError
/// when the shapes differ or slots_per_gpu > E / G (a GPU could then need a second
/// copy of one expert). O(layers * slots * G * E log E).
inline ReplicatedPlacement replicate_experts(const Placement& p, const CouplingStats& stats, int slots_per_gpu) {
  expect(stats.layers() == p.layers() && stats.num_experts() == p.num_experts(), "statistics shape",
         std::to_string(stats.layers()) + " layers x " + std::to_string(stats.num_experts()) + " experts",
         "the placement's (" + std::to_string(p.layers()) + " x " + std::to_string(p.num_experts()) + ")");
  const int G = p.topology().gpus, E = p.num_experts();
  expect(slots_per_gpu >= 0 && slots_per_gpu <= E / G, "slots_per_gpu", slots_per_gpu,
         "0 <= slots <= E / G (" + std::to_string(E / G) + ")");
  ReplicatedPlacement r(p, slots_per_gpu);
  std::vector<int> copies(static_cast<std::size_t>(E)), free(static_cast<std::size_t>(G));
  std::vector<double> gpu_load(static_cast<std::size_t>(G)), score(static_cast<std::size_t>(G));
  std::vector<int> order;
  for (int l = 0; l < p.layers(); ++l) {
    std::fill(copies.begin(), copies.end(), 1);
    std::fill(free.begin(), free.end(), slots_per_gpu);
    auto load_of = [&](int e) { return static_cast<double>(stats.load(l, e)) / copies[static_cast<std::size_t>(e)]; };
    for (int placed = 0; placed < slots_per_gpu * G; ++placed) {
      std::fill(gpu_load.begin(), gpu_load.end(), 0.0);
      for (int e = 0; e < E; ++e)
        for (const auto g : r.hosts(l, e)) gpu_load[static_cast<std::size_t>(g)] += load_of(e);
      // The hottest expert per copy that still has a free GPU without a copy; its copy
      // goes where its co-selections are (score[g]: co-selections with g's experts).
      int best_e = -1, best_g = -1;
      order.resize(static_cast<std::size_t>(E));
      for (int e = 0; e < E; ++e) order[static_cast<std::size_t>(e)] = e;
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return load_of(a) > load_of(b); });
      for (const int e : order) {
        std::fill(score.begin(), score.end(), 0.0);
        for (int a = 0; a < E; ++a)
          if (a != e)
            for (const auto g : r.hosts(l, a)) score[static_cast<std::size_t>(g)] += static_cast<double>(stats.co_selection(l, e, a));
        // Only GPUs below the mean load are candidates (a copy on a loaded GPU, however
        // coupled, moves load the wrong way); the least loaded when none is.
        const auto h = r.hosts(l, e);
        double mean = 0;
        for (const double x : gpu_load) mean += x / G;
        for (int pass = 0; pass < 2 && best_g < 0; ++pass)
          for (int g = 0; g < G; ++g) {
            const auto ug = static_cast<std::size_t>(g);
            if (free[ug] == 0 || std::find(h.begin(), h.end(), g) != h.end()) continue;
            if (pass == 0 && !(gpu_load[ug] < mean)) continue;
            const double key = pass == 0 ? score[ug] : -gpu_load[ug];
            const double best_key = best_g < 0 ? 0 : (pass == 0 ? score[static_cast<std::size_t>(best_g)] : -gpu_load[static_cast<std::size_t>(best_g)]);
            if (best_g < 0 || key > best_key || (key == best_key && gpu_load[ug] < gpu_load[static_cast<std::size_t>(best_g)])) best_g = g;
          }
        if (best_g >= 0) {
          best_e = e;
          break;
        }
      }
      if (best_e < 0) break;  // every free slot sits on GPUs holding every candidate
      r.add_replica(l, best_e, best_g);
      ++copies[static_cast<std::size_t>(best_e)];
      --free[static_cast<std::size_t>(best_g)];
    }
  }
  return r;
}

/// Where each token-expert pair is served, and what that costs.
struct ReplicaDispatch {
  std::vector<std::int32_t> gpu;  ///< [layer][token][slot]: the GPU serving that pair (per layer, make_dispatch_plan's expert_gpu)
  std::int64_t rows_naive = 0;    ///< tokens * layers * k
  std::int64_t rows_dedup = 0;    ///< distinct serving GPUs summed over token-layers
  double max_load_over_mean = 0;  ///< max over layers and GPUs of pairs served / mean
};

/// Serves every token-expert pair of `trace` exactly once on a GPU holding the expert,
/// for token homes `home` ([layer][token]): home if it holds a copy, else a copy on a
/// GPU the token already sends to, else the copy with the least load so far (pairs of
/// single-copy experts are placed first, so their GPUs count as already sent to).
/// Throws ConfigError on mismatched shapes or a home out of range. O(T * L * k * (k + copies)).
inline ReplicaDispatch dispatch_replicas(const RoutingTrace& trace, const ReplicatedPlacement& rp, std::span<const std::int32_t> home) {
  const Placement& p = rp.base();
  expect(trace.layers() == p.layers() && trace.num_experts() == p.num_experts(), "trace shape",
         std::to_string(trace.layers()) + " layers x " + std::to_string(trace.num_experts()) + " experts",
         "the placement's (" + std::to_string(p.layers()) + " x " + std::to_string(p.num_experts()) + ")");
  const std::int64_t T = trace.tokens();
  const int L = p.layers(), k = trace.top_k(), G = p.topology().gpus;
  expect(home.size() == static_cast<std::size_t>(T) * static_cast<std::size_t>(L), "home.size()", home.size(),
         "layers * tokens (" + std::to_string(static_cast<std::int64_t>(L) * T) + ")");
  ReplicaDispatch d;
  d.gpu.assign(static_cast<std::size_t>(T) * static_cast<std::size_t>(L) * static_cast<std::size_t>(k), -1);
  d.rows_naive = T * L * k;
  std::vector<std::int64_t> load(static_cast<std::size_t>(G));
  std::vector<char> sends(static_cast<std::size_t>(G));
  for (int l = 0; l < L; ++l) {
    std::fill(load.begin(), load.end(), 0);
    for (std::int64_t t = 0; t < T; ++t) {
      const int h = home[static_cast<std::size_t>(l) * static_cast<std::size_t>(T) + static_cast<std::size_t>(t)];
      expect(h >= 0 && h < G, "home of token " + std::to_string(t) + " at layer " + std::to_string(l), h,
             "0 <= gpu < " + std::to_string(G));
      const auto experts = trace.experts(t, l);
      std::int32_t* out = d.gpu.data() + (static_cast<std::size_t>(l) * static_cast<std::size_t>(T) + static_cast<std::size_t>(t)) * static_cast<std::size_t>(k);
      d.rows_dedup += comm::serve_token([&](int s) { return rp.hosts(l, experts[static_cast<std::size_t>(s)]); }, k, h,
                                        load, sends, out);
    }
    const double mean = static_cast<double>(T) * k / G;
    if (mean > 0)
      d.max_load_over_mean = std::max(d.max_load_over_mean, static_cast<double>(*std::max_element(load.begin(), load.end())) / mean);
  }
  return d;
}

}  // namespace disagmoe::placement
