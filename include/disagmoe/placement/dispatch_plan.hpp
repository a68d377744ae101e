// SPDX-License-Identifier: Apache-2.0
/// @file dispatch_plan.hpp
/// Send-once dispatch plan of one MoE layer: each token is sent to each GPU that holds
/// at least one of its top-k experts exactly once (not once per expert; paper §4.1,
/// also Occult's per-device deduplication and DeepEP's dispatch). A plain layout with
/// no dependency beyond the standard library, so the M2N channel can consume it.
#pragma once

#include <disagmoe/comm/send_once.hpp>
#include <disagmoe/error.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace disagmoe::placement {

/// Where one layer's tokens go. Row = one token's hidden vector sent to one GPU.
/// Rows to the token's own (home) GPU are local: counted but never on the network.
struct DispatchPlan {
  std::int32_t gpus = 0;                 ///< GPUs in the group
  std::int32_t gpus_per_node = 0;        ///< GPUs per node (node of g = g / gpus_per_node)
  std::int32_t top_k = 0;                ///< experts per token
  std::int64_t tokens = 0;               ///< tokens in the batch
  std::int64_t bytes_per_row = 0;        ///< bytes of one row (hidden size * element size)
  std::vector<std::int64_t> token_offset;  ///< tokens + 1 offsets into `dest` (CSR)
  std::vector<std::int32_t> dest;          ///< distinct destination GPUs per token, ascending
  std::vector<std::int32_t> source;        ///< home GPU of each token
  std::vector<std::int64_t> rows;          ///< [src][dst] row counts, gpus * gpus
  std::int64_t rows_naive = 0;       ///< tokens * top_k (per-expert dispatch)
  std::int64_t rows_dedup = 0;       ///< sum over tokens of distinct destinations
  std::int64_t rows_local = 0;       ///< dedup rows with dst == home
  std::int64_t rows_intra_node = 0;  ///< dedup rows to another GPU of the home's node
  std::int64_t rows_inter_node = 0;  ///< dedup rows to another node

  /// Destinations of token `t`.
  std::span<const std::int32_t> destinations(std::int64_t t) const noexcept {
    return {dest.data() + token_offset[static_cast<std::size_t>(t)],
            static_cast<std::size_t>(token_offset[static_cast<std::size_t>(t) + 1] - token_offset[static_cast<std::size_t>(t)])};
  }
  /// Rows GPU `g` receives from all sources (local included).
  std::int64_t rows_to(std::int32_t g) const noexcept {
    std::int64_t n = 0;
    for (std::int32_t s = 0; s < gpus; ++s) n += rows[static_cast<std::size_t>(s) * static_cast<std::size_t>(gpus) + static_cast<std::size_t>(g)];
    return n;
  }
  std::int64_t bytes_intra_node() const noexcept { return rows_intra_node * bytes_per_row; }  ///< bytes over NVLink-class links
  std::int64_t bytes_inter_node() const noexcept { return rows_inter_node * bytes_per_row; }  ///< bytes over the inter-node network
};


/// Builds the plan from `expert_gpu` ([token][slot]: the GPU of each chosen expert),
/// `home` (GPU of each token before dispatch) and the topology. Throws ConfigError on
/// a bad size or a GPU id out of range (naming token and slot). O(tokens * k^2).
inline DispatchPlan make_dispatch_plan(std::span<const std::int32_t> expert_gpu, std::int32_t top_k,
                                       std::span<const std::int32_t> home, std::int32_t gpus,
                                       std::int32_t gpus_per_node, std::int64_t bytes_per_row) {
  expect(gpus >= 1, "DispatchPlan.gpus", gpus, ">= 1");
  expect(gpus_per_node >= 1 && gpus % gpus_per_node == 0, "DispatchPlan.gpus_per_node", gpus_per_node,
         "a divisor of gpus (" + std::to_string(gpus) + ")");
  expect(top_k >= 1 && top_k <= 1024, "DispatchPlan.top_k", top_k, "1 <= top_k <= 1024");
  expect(bytes_per_row >= 0, "DispatchPlan.bytes_per_row", bytes_per_row, ">= 0");
  expect(expert_gpu.size() == home.size() * static_cast<std::size_t>(top_k), "DispatchPlan expert_gpu.size()",
         expert_gpu.size(), "home.size() * top_k = " + std::to_string(home.size() * static_cast<std::size_t>(top_k)));
  DispatchPlan p;
  p.gpus = gpus;
  p.gpus_per_node = gpus_per_node;
  p.top_k = top_k;
  p.tokens = static_cast<std::int64_t>(home.size());
  p.bytes_per_row = bytes_per_row;
  p.source.assign(home.begin(), home.end());
  p.rows.assign(static_cast<std::size_t>(gpus) * static_cast<std::size_t>(gpus), 0);
  p.token_offset.reserve(home.size() + 1);
  p.token_offset.push_back(0);
  p.rows_naive = static_cast<std::int64_t>(expert_gpu.size());
  std::vector<std::int32_t> buf(static_cast<std::size_t>(top_k));
  for (std::size_t t = 0; t < home.size(); ++t) {
    const std::int32_t* g = expert_gpu.data() + t * static_cast<std::size_t>(top_k);
    for (std::int32_t s = 0; s < top_k; ++s)
      expect(g[s] >= 0 && g[s] < gpus, "DispatchPlan token " + std::to_string(t) + " slot " + std::to_string(s) + " gpu",
             g[s], "0 <= gpu < " + std::to_string(gpus));
    const std::int32_t h = home[t];
    expect(h >= 0 && h < gpus, "DispatchPlan token " + std::to_string(t) + " home", h, "0 <= home < " + std::to_string(gpus));
    const int n = comm::distinct_destinations(g, top_k, buf.data());
    for (int i = 0; i < n; ++i) {
      const std::int32_t d = buf[static_cast<std::size_t>(i)];
      p.dest.push_back(d);
      ++p.rows[static_cast<std::size_t>(h) * static_cast<std::size_t>(gpus) + static_cast<std::size_t>(d)];
      if (d == h) ++p.rows_local;
      else if (d / gpus_per_node == h / gpus_per_node) ++p.rows_intra_node;
      else ++p.rows_inter_node;
    }
    p.rows_dedup += n;
    p.token_offset.push_back(static_cast<std::int64_t>(p.dest.size()));
  }
  return p;
}

}  // namespace disagmoe::placement
