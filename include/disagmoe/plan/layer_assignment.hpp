// SPDX-License-Identifier: Apache-2.0
/// @file layer_assignment.hpp
/// Interleaved layer assignment of DisagMoE (arXiv 2605.11005, "Interleaved layer
/// assignment": with p group pairs, pair i holds layers i, i+p, i+2p, …) and the
/// memory of the attention (A) and FFN (F) workers of each pair, with a checker that
/// every worker fits its GPU.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/plan/cost_model.hpp>
#include <disagmoe/spec/cluster_spec.hpp>
#include <disagmoe/spec/model_spec.hpp>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

namespace disagmoe::plan {

/// Layers of each of `p` group pairs under interleaving: entry i is {i, i+p, i+2p, …}
/// (every layer exactly once; pair sizes differ by at most one).
/// Preconditions: 1 <= p <= layers (ConfigError otherwise). O(layers).
inline std::vector<std::vector<int>> interleaved_groups(int layers, int p) {
  expect(layers >= 1, "layers", layers, "a positive integer");
  expect(p >= 1 && p <= layers, "groups", p, "1 <= groups <= layers (" + std::to_string(layers) + ")");
  std::vector<std::vector<int>> g(static_cast<std::size_t>(p));
  for (int l = 0; l < layers; ++l) g[static_cast<std::size_t>(l % p)].push_back(l);
  return g;
}

/// What one pair's workers hold and carry, for the memory estimate.
struct WorkerLoad {
  std::vector<int> layers;           ///< layers of the pair
  int attention_group_size = 1;      ///< A workers of the pair (data parallel, replicated weights)
  int ffn_group_size = 1;            ///< F workers of the pair (expert parallel)
  bool holds_embedding = false;      ///< the pair holding layer 0 also holds the input embedding
  bool holds_head = false;           ///< the pair holding the last layer also holds the final norm
  double head_params = 0;            ///< output-head parameters it holds (head_shard_params)
  double attention_in_flight = 1;    ///< micro-batches whose activations one A worker keeps
  double ffn_in_flight = 1;          ///< micro-batches in flight through the pair (tokens spread over the F group)
};

/// Output-head parameters that pair i of p holds: AF-Pipe's head is vocabulary-parallel
/// over the p A groups (Yeung et al. 2024, "Balancing Pipeline Parallelism with
/// Vocabulary Parallelism", arXiv 2411.05288), V/p rows of d on each; pair 0's shard is
/// part of the input embedding when the two are tied. The planner and the simulator
/// (schedule/cost_adapter.hpp) both charge it. O(1).
inline double head_shard_params(const ModelSpec& m, int p, int i) {
  return (m.tied_embeddings && i == 0) ? 0.0 : double(m.vocab) * m.hidden / p;
}

/// Bytes of one A worker: replicated A-side weights of its layers (attention, norms,
/// router — cost_model.hpp attention_side_params) plus embedding, final norm and head
/// shard where held,
/// with gradients and optimizer states (ZeRO-1 over the A group), and the activations
/// of `attention_in_flight` micro-batches for each of its layers. O(layers).
inline MemoryBytes attention_worker_memory(const ModelSpec& m, const WorkerLoad& w, const MemoryOptions& o) {
  double params = 0;
  for (int l : w.layers) params += double(attention_side_params(m, l));
  const double vd = double(m.vocab) * m.hidden;
  if (w.holds_embedding) params += vd;
  if (w.holds_head) params += m.hidden;
  params += w.head_params;
  MemoryBytes b = state_bytes(m, params, w.attention_group_size, o);
  for (int l : w.layers) b.activations += attention_activation_bytes(m, l, o) * w.attention_in_flight;
  return b;
}

/// The busiest F GPU's share of an MoE layer's routed token-expert pairs over the even
/// share 1/g when the E experts are spread over g GPUs: it holds ceil(E/g) experts, so
/// under uniform routing it computes and stores ceil(E/g)·g/E times the mean (1 when g
/// divides E). The planner and the simulator (schedule/cost_adapter.hpp) both charge the
/// F side's activations by it. Precondition: g >= 1 (ConfigError otherwise). O(1).
inline double ffn_busiest_share(const ModelSpec& m, int g) {
  expect(g >= 1, "ffn_group_size", g, "a positive integer");
  return double((m.experts + g - 1) / g) * g / m.experts;
}

/// The busiest F GPU's A↔F rows of an MoE layer over the mean rows per GPU of its
/// group of g (>= 1; exactly 1 when g divides E): holding c = ceil(E/g) experts, it
/// receives a row from a token with probability 1 − C(E − c, k)/C(E, k) with
/// deduplicated dispatch (the occupancy argument of expected_distinct_gpus, for one GPU
/// of c experts), k·c/E rows without; the mean is rows_per_token / g
/// (dispatch_rows_per_token). It receives and returns that many times the mean, so the
/// planner charges the F side's links by it and the simulator scales the busiest GPU's
/// transfers by it (LayerCost::ffn_imbalance). Clamped at 1: for uneven g the mean is
/// the with-replacement approximation, which can exceed the exact busiest figure in
/// corner cases. Precondition: 1 <= g <= E (ConfigError otherwise). O(k).
inline double ffn_busiest_rows(const ModelSpec& m, int g, bool dedup) {
  expect(g >= 1 && g <= m.experts, "ffn_group_size", g, "1 <= group <= experts (" + std::to_string(m.experts) + ")");
  if (m.experts % g == 0) return 1.0;
  const int c = (m.experts + g - 1) / g;
  double hit = double(m.top_k) * c / m.experts;
  if (dedup) {
    double miss = 1;
    for (int i = 0; i < m.top_k; ++i) miss *= std::max(0, m.experts - c - i) / double(m.experts - i);
    hit = 1 - miss;
  }
  const double mean = dedup ? expected_distinct_gpus(m.experts, m.top_k, g) : double(m.top_k);
  return std::max(1.0, hit * g / mean);
}

/// Bytes of one F worker: ceil(E / group) routed experts per MoE layer (expert
/// parallel: not replicated, so ZeRO-1 cannot shard their optimizer states), the
/// shared experts and dense FFNs (replicated over the F group, ZeRO-1 over it), and
/// the activations of 1/group of the tokens of `ffn_in_flight` micro-batches (of the
/// busiest GPU's share, ffn_busiest_share, on MoE layers). O(layers).
inline MemoryBytes ffn_worker_memory(const ModelSpec& m, const WorkerLoad& w, const MemoryOptions& o) {
  const int g = w.ffn_group_size;
  expect(g >= 1, "ffn_group_size", g, "a positive integer");
  double own = 0, replicated = 0;
  for (int l : w.layers) {
    if (m.is_moe_layer(l)) {
      own += double((m.experts + g - 1) / g) * double(expert_params(m));
      replicated += double(m.shared_experts) * double(gated_ffn_params(m, m.shared_expert_ffn));
    } else {
      replicated += double(gated_ffn_params(m, m.dense_ffn));
    }
  }
  MemoryBytes b = state_bytes(m, own, 1, o);
  b += state_bytes(m, replicated, g, o);
  const DispatchOptions d{g, true, 0};
  const double busiest = ffn_busiest_share(m, g);
  for (int l : w.layers)
    b.activations += ffn_activation_bytes(m, l, o, d) * w.ffn_in_flight / g * (m.is_moe_layer(l) ? busiest : 1.0);
  return b;
}

/// Result of a memory check: the largest A and F worker over all pairs.
struct FitReport {
  MemoryBytes attention_worker;  ///< the largest A worker
  MemoryBytes ffn_worker;        ///< the largest F worker
  double capacity = 0;           ///< usable bytes per GPU
  [[nodiscard]] bool attention_fits() const { return attention_worker.total() <= capacity; }
  [[nodiscard]] bool ffn_fits() const { return ffn_worker.total() <= capacity; }
  [[nodiscard]] bool fits() const { return attention_fits() && ffn_fits(); }
};

/// Checks every pair's workers against `capacity` bytes. `loads[i]` is pair i. O(layers).
inline FitReport check_fit(const ModelSpec& m, const std::vector<WorkerLoad>& loads, double capacity,
                           const MemoryOptions& o) {
  FitReport r;
  r.capacity = capacity;
  for (const WorkerLoad& w : loads) {
    const MemoryBytes a = attention_worker_memory(m, w, o), f = ffn_worker_memory(m, w, o);
    if (a.total() > r.attention_worker.total()) r.attention_worker = a;
    if (f.total() > r.ffn_worker.total()) r.ffn_worker = f;
  }
  return r;
}

namespace detail {
inline std::string gigabytes(double bytes) {
  std::ostringstream os;
  os.precision(4);
  os << bytes / 1e9 << " GB";
  return os.str();
}
}  // namespace detail

/// Throws ConfigError naming the worker type, the bytes it needs and the bytes
/// available unless `r.fits()`, e.g. "memory_bytes.attention_worker = 9.1e+10:
/// expected at most 7.2e+10 bytes available per GPU (attention worker needs 91 GB …)".
inline void require_fit(const FitReport& r, std::string_view context = "") {
  auto check = [&](bool ok, const char* kind, const MemoryBytes& b) {
    if (ok) return;
    std::ostringstream what;
    what.precision(6);
    what << "at most " << r.capacity << " bytes available per GPU (" << kind << " worker needs "
         << detail::gigabytes(b.total()) << " = parameters " << detail::gigabytes(b.parameters) << " + gradients "
         << detail::gigabytes(b.gradients) << " + optimizer " << detail::gigabytes(b.optimizer)
         << " + activations " << detail::gigabytes(b.activations) << ", available "
         << detail::gigabytes(r.capacity) << ")" << context;
    fail(std::string("memory_bytes.") + kind + "_worker", b.total(), what.str());
  };
  check(r.attention_fits(), "attention", r.attention_worker);
  check(r.ffn_fits(), "ffn", r.ffn_worker);
}

}  // namespace disagmoe::plan
