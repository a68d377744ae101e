// SPDX-License-Identifier: Apache-2.0
/// @file metrics.hpp
/// What a placement (and a token-home assignment) does on a routing trace: rows of a
/// send-once dispatch against per-expert dispatch, the share of token-expert work
/// served on the token's own GPU, rows crossing nodes and GPU load balance; plus the
/// per-trace bounds the benchmark compares against.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/placement/dispatch_plan.hpp>
#include <disagmoe/placement/placement.hpp>
#include <disagmoe/placement/routing_trace.hpp>

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace disagmoe::placement {

/// Metrics of a placement on a trace (the keys of `disagmoe-place --json`).
struct PlacementMetrics {
  std::int64_t rows_naive = 0;         ///< tokens * layers * k (one row per token-expert pair)
  std::int64_t rows_dedup = 0;         ///< sum over tokens and layers of distinct destination GPUs
  double rows_removed_fraction = 0;    ///< 1 - rows_dedup / rows_naive
  double local_share = 0;              ///< share of token-expert pairs whose expert is on the token's home GPU
  std::int64_t cross_node_rows = 0;    ///< dedup rows whose GPU is on another node than the home
  double max_load_over_mean = 0;       ///< max over layers and GPUs of token-expert pairs / mean
  std::vector<double> local_share_per_layer;    ///< per layer
  std::vector<double> rows_removed_per_layer;   ///< per layer
  std::vector<double> load_over_mean_per_layer; ///< per layer
};

/// Tokens of an n-token batch that the contiguous shard puts on GPU g of G: positions
/// i with floor(i * G / n) = g, i.e. ceil((g+1) n / G) - ceil(g n / G). O(1).
inline std::int64_t shard_size(std::int64_t n, int gpus, int g) {
  auto ceil_div = [](std::int64_t a, std::int64_t b) { return (a + b - 1) / b; };
  return ceil_div((g + 1) * n, gpus) - ceil_div(static_cast<std::int64_t>(g) * n, gpus);
}

/// Contiguous sequence-parallel shards in batches of `batch_tokens` (0: one batch):
/// position i of an n-token batch lives on GPU floor(i * G / n) at every layer (the
/// home without token shuffling). Returns [layer][token]. O(L * T).
inline std::vector<std::int32_t> contiguous_homes(std::int64_t tokens, int layers, int gpus, std::int64_t batch_tokens = 0) {
  expect(batch_tokens >= 0, "batch_tokens", batch_tokens, ">= 0 (0: the whole trace)");
  const std::int64_t batch = batch_tokens > 0 ? batch_tokens : std::max<std::int64_t>(tokens, 1);
  std::vector<std::int32_t> home(static_cast<std::size_t>(tokens) * static_cast<std::size_t>(layers));
  for (std::int64_t t = 0; t < tokens; ++t) {
    const std::int64_t first = t / batch * batch, n = std::min(batch, tokens - first);
    const auto g = static_cast<std::int32_t>((t - first) * gpus / n);
    for (int l = 0; l < layers; ++l) home[static_cast<std::size_t>(l) * static_cast<std::size_t>(tokens) + static_cast<std::size_t>(t)] = g;
  }
  return home;
}

/// Evaluates `p` on `trace` with token homes `home` ([layer][token]). Throws
/// ConfigError on mismatched shapes or a home out of range. O(T * L * k^2).
inline PlacementMetrics evaluate_placement(const RoutingTrace& trace, const Placement& p,
                                           std::span<const std::int32_t> home) {
  expect(trace.layers() == p.layers(), "trace layers", trace.layers(), "the placement's layers (" + std::to_string(p.layers()) + ")");
  expect(trace.num_experts() == p.num_experts(), "trace experts", trace.num_experts(),
         "the placement's experts (" + std::to_string(p.num_experts()) + ")");
  const std::int64_t T = trace.tokens();
  const int L = trace.layers(), k = trace.top_k(), G = p.topology().gpus, K = p.topology().gpus_per_node;
  expect(home.size() == static_cast<std::size_t>(T) * static_cast<std::size_t>(L), "home.size()", home.size(),
         "layers * tokens = " + std::to_string(T * L));
  PlacementMetrics m;
  std::vector<std::int32_t> gpu(static_cast<std::size_t>(k)), dst(static_cast<std::size_t>(k));
  std::vector<std::int64_t> load(static_cast<std::size_t>(G));
  for (int l = 0; l < L; ++l) {
    const auto map = p.layer(l);
    std::int64_t local = 0, dedup = 0;
    std::fill(load.begin(), load.end(), 0);
    for (std::int64_t t = 0; t < T; ++t) {
      const std::int32_t h = home[static_cast<std::size_t>(l) * static_cast<std::size_t>(T) + static_cast<std::size_t>(t)];
      expect(h >= 0 && h < G, "home of token " + std::to_string(t) + " at layer " + std::to_string(l), h,
             "0 <= home < " + std::to_string(G));
      const auto e = trace.experts(t, l);
      for (int s = 0; s < k; ++s) {
        gpu[static_cast<std::size_t>(s)] = map[e[static_cast<std::size_t>(s)]];
        ++load[static_cast<std::size_t>(gpu[static_cast<std::size_t>(s)])];
        local += gpu[static_cast<std::size_t>(s)] == h;
      }
      const int n = comm::distinct_destinations(gpu.data(), k, dst.data());
      dedup += n;
      for (int i = 0; i < n; ++i) m.cross_node_rows += dst[static_cast<std::size_t>(i)] / K != h / K;
    }
    const double naive = static_cast<double>(T) * k;
    m.rows_dedup += dedup;
    m.local_share += static_cast<double>(local);
    m.local_share_per_layer.push_back(T ? static_cast<double>(local) / naive : 0.0);
    m.rows_removed_per_layer.push_back(T ? 1.0 - static_cast<double>(dedup) / naive : 0.0);
    m.load_over_mean_per_layer.push_back(T ? static_cast<double>(*std::max_element(load.begin(), load.end())) * G / naive : 0.0);
  }
  m.rows_naive = T * L * k;
  if (m.rows_naive > 0) {
    m.rows_removed_fraction = 1.0 - static_cast<double>(m.rows_dedup) / static_cast<double>(m.rows_naive);
    m.local_share /= static_cast<double>(m.rows_naive);
  } else {
    m.local_share = 0;
  }
  for (const double r : m.load_over_mean_per_layer) m.max_load_over_mean = std::max(m.max_load_over_mean, r);
  return m;
}

/// Upper bound on local share for placement `p` on `trace` over every home assignment
/// (balanced or not, causal or not): each token at each layer on the GPU holding most
/// of its experts. O(T * L * k).
inline double local_share_bound(const RoutingTrace& trace, const Placement& p) {
  const int k = trace.top_k();
  std::vector<int> count(static_cast<std::size_t>(p.topology().gpus), 0);
  std::int64_t best = 0;
  for (std::int64_t t = 0; t < trace.tokens(); ++t)
    for (int l = 0; l < trace.layers(); ++l) {
      int m = 0;
      const auto e = trace.experts(t, l);
      for (const auto x : e) m = std::max(m, ++count[static_cast<std::size_t>(p.gpu(l, x))]);
      for (const auto x : e) count[static_cast<std::size_t>(p.gpu(l, x))] = 0;
      best += m;
    }
  const double naive = static_cast<double>(trace.tokens()) * trace.layers() * k;
  return naive > 0 ? static_cast<double>(best) / naive : 0.0;
}

/// Upper bound on rows removed by any balanced placement of E experts on G GPUs at
/// top-k: a token needs at least ceil(k / (E/G)) GPUs. O(1).
inline double rows_removed_bound(int num_experts, int gpus, int top_k) {
  const int per = num_experts / gpus;
  return 1.0 - static_cast<double>((top_k + per - 1) / per) / top_k;
}

}  // namespace disagmoe::placement
