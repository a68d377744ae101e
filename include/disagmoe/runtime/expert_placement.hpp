// SPDX-License-Identifier: Apache-2.0
/// @file expert_placement.hpp
/// An expert placement for a disaggregated run, fitted to the model's own routing:
/// Expert Coupling (arXiv 2610.09372) places experts that routers choose together on the
/// same F-rank, so that a send-once dispatch (one row per token per destination rank)
/// moves fewer rows. The routing comes from `ColocatedTrainer::routing` on sample
/// batches; the result is `DisaggregatedOptions::expert_rank`, one map per layer, and
/// (DeepSeek's EPLB) redundant copies of the hot experts, `DisaggregatedOptions::expert_replicas`.
#pragma once

#include <disagmoe/comm/replica_routing.hpp>
#include <disagmoe/error.hpp>
#include <disagmoe/placement/correlated.hpp>
#include <disagmoe/placement/metrics.hpp>
#include <disagmoe/placement/placement.hpp>
#include <disagmoe/placement/replication.hpp>
#include <disagmoe/placement/routing_trace.hpp>
#include <disagmoe/spec/model_spec.hpp>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace disagmoe::runtime {

/// A fitted placement and what it saves on the routing it was fitted to.
struct FittedPlacement {
  /// F-rank of every routed expert of every layer, [layer][expert] (a dense layer's row is
  /// contiguous and unused): `DisaggregatedOptions::expert_rank`.
  std::vector<int> expert_rank;
  double rows_per_token_contiguous = 0;  ///< send-once rows per token and MoE layer, contiguous blocks
  double rows_per_token_fitted = 0;      ///< the same under the fitted placement
};

namespace detail {

/// `routing` ([token][MoE layer][slot], as `ColocatedTrainer::routing` returns it) as a
/// trace over the model's MoE layers (`layers`: their model indices). ConfigError on a
/// routing of the wrong size or with an id out of range.
struct ModelRouting {
  std::vector<int> layers;
  placement::RoutingTrace trace;
};
inline ModelRouting model_routing(const ModelSpec& spec, std::span<const std::int32_t> routing) {
  std::vector<int> moe_layers;
  for (int l = 0; l < spec.layers; ++l)
    if (spec.is_moe_layer(l)) moe_layers.push_back(l);
  const auto layers = static_cast<int>(moe_layers.size());
  const auto per_token = static_cast<std::size_t>(layers) * static_cast<std::size_t>(spec.top_k);
  expect(!routing.empty() && routing.size() % per_token == 0, "routing.size()", routing.size(),
         "a positive multiple of MoE layers x top_k (" + std::to_string(per_token) + ")");
  std::vector<placement::ExpertId> ids(routing.size());
  for (std::size_t i = 0; i < routing.size(); ++i) {
    expect(routing[i] >= 0 && routing[i] < spec.experts, "routing[" + std::to_string(i) + "]", routing[i],
           "an expert id in [0, " + std::to_string(spec.experts) + ")");
    ids[i] = static_cast<placement::ExpertId>(routing[i]);
  }
  const auto tokens = static_cast<std::int64_t>(routing.size() / per_token);
  return {std::move(moe_layers), placement::RoutingTrace(tokens, layers, spec.top_k, spec.experts, std::move(ids))};
}

}  // namespace detail

/// Fits `spec`'s routed experts onto `ffn_ranks` F-ranks (each holding E / ffn_ranks of
/// them) to `routing`, flattened [token][MoE layer][slot] as `ColocatedTrainer::routing`
/// returns it. ConfigError when `ffn_ranks` does not divide the experts, on a routing of
/// the wrong size or with an id out of range. O(tokens x MoE layers x k^2) plus the
/// placement search.
[[nodiscard]] inline FittedPlacement fit_expert_placement(const ModelSpec& spec, std::span<const std::int32_t> routing,
                                                          int ffn_ranks,
                                                          const placement::CorrelatedPlacementOptions& options = {}) {
  expect(ffn_ranks >= 1 && spec.experts % ffn_ranks == 0, "ffn ranks", ffn_ranks,
         "a divisor of the routed experts (" + std::to_string(spec.experts) + "): every F-rank holds as many");
  FittedPlacement out;
  for (int l = 0; l < spec.layers; ++l)  // contiguous blocks, as the run's default
    for (int e = 0; e < spec.experts; ++e)
      out.expert_rank.push_back(static_cast<int>(static_cast<std::int64_t>(e) * ffn_ranks / spec.experts));
  if (spec.moe_layers() == 0) return out;
  const detail::ModelRouting r = detail::model_routing(spec, routing);
  const int layers = r.trace.layers();
  const std::int64_t tokens = r.trace.tokens();
  const placement::Topology topo{ffn_ranks, ffn_ranks};  // the F-ranks of one worker: one node
  const placement::Placement fitted =
      placement::CorrelatedPlacement(options).fit(placement::CouplingStats::of(r.trace, options.threads), topo);
  for (int i = 0; i < layers; ++i) {
    const auto row = fitted.layer(i);
    for (int e = 0; e < spec.experts; ++e)
      out.expert_rank[static_cast<std::size_t>(r.layers[static_cast<std::size_t>(i)]) *
                          static_cast<std::size_t>(spec.experts) +
                      static_cast<std::size_t>(e)] = row[static_cast<std::size_t>(e)];
  }
  const auto homes = placement::contiguous_homes(tokens, layers, ffn_ranks);  // rows do not depend on homes
  const double pairs = static_cast<double>(tokens) * layers;
  out.rows_per_token_contiguous =
      static_cast<double>(
          placement::evaluate_placement(r.trace, placement::contiguous_placement(layers, spec.experts, topo), homes)
              .rows_dedup) /
      pairs;
  out.rows_per_token_fitted =
      static_cast<double>(placement::evaluate_placement(r.trace, fitted, homes).rows_dedup) / pairs;
  return out;
}

/// Redundant experts fitted to the model's own routing, and what they do to the load.
struct FittedReplicas {
  /// F-ranks holding a copy of each routed expert besides its primary, [layer][expert]
  /// (a dense layer's lists are empty): `DisaggregatedOptions::expert_replicas`.
  std::vector<std::vector<int>> expert_replicas;
  /// Token-expert pairs of the busiest F-rank over the mean, at the worst MoE layer, on the
  /// routing fitted to: every pair on its expert's primary, and served by the copies
  /// (comm::ReplicaRouting's rule, tokens on no F-rank, as AF-Pipe's A-ranks send them).
  double max_load_over_mean_without = 0, max_load_over_mean = 0;
};

/// Fills `slots` replica slots per F-rank and MoE layer (DeepSeek's EPLB: the expert with
/// the largest load per copy gets the next copy, placed with the coupling objective;
/// `placement::replicate_experts`) on top of the primaries `expert_rank` ([layer][expert]
/// F-ranks, `FittedPlacement::expert_rank`) of `ffn_ranks` F-ranks, fitted to `routing`
/// ([token][MoE layer][slot], `ColocatedTrainer::routing`). ConfigError when `ffn_ranks`
/// does not divide the experts, `slots` is outside [0, E / ffn_ranks], or on a bad
/// routing or placement. O(tokens x MoE layers x k^2) plus the replication.
[[nodiscard]] inline FittedReplicas fit_expert_replicas(const ModelSpec& spec, std::span<const std::int32_t> routing,
                                                        std::span<const int> expert_rank, int ffn_ranks, int slots,
                                                        int threads = 1) {
  expect(ffn_ranks >= 1 && spec.experts % ffn_ranks == 0, "ffn ranks", ffn_ranks,
         "a divisor of the routed experts (" + std::to_string(spec.experts) + "): every F-rank holds as many");
  const auto per_layer = static_cast<std::size_t>(spec.layers) * static_cast<std::size_t>(spec.experts);
  expect(expert_rank.size() == per_layer, "expert_rank.size()", expert_rank.size(),
         "layers x routed experts (" + std::to_string(per_layer) + ")");
  FittedReplicas out;
  out.expert_replicas.resize(per_layer);
  if (spec.moe_layers() == 0) return out;
  const detail::ModelRouting r = detail::model_routing(spec, routing);
  const int layers = r.trace.layers(), k = spec.top_k;
  const placement::Topology topo{ffn_ranks, ffn_ranks};
  std::vector<std::int32_t> primaries;
  for (const int l : r.layers)
    for (int e = 0; e < spec.experts; ++e)
      primaries.push_back(expert_rank[static_cast<std::size_t>(l) * static_cast<std::size_t>(spec.experts) +
                                      static_cast<std::size_t>(e)]);
  const placement::ReplicatedPlacement copies = placement::replicate_experts(
      placement::Placement(layers, spec.experts, topo, std::move(primaries)),
      placement::CouplingStats::of(r.trace, threads), slots);
  std::vector<std::int32_t> ids, served;
  for (int i = 0; i < layers; ++i) {
    std::vector<std::vector<std::int32_t>> hosts, alone;
    for (int e = 0; e < spec.experts; ++e) {
      const auto h = copies.hosts(i, e);
      hosts.emplace_back(h.begin(), h.end());
      alone.push_back({h[0]});
      out.expert_replicas[static_cast<std::size_t>(r.layers[static_cast<std::size_t>(i)]) *
                              static_cast<std::size_t>(spec.experts) +
                          static_cast<std::size_t>(e)]
          .assign(h.begin() + 1, h.end());
    }
    ids.clear();
    for (std::int64_t t = 0; t < r.trace.tokens(); ++t) {
      const auto x = r.trace.experts(t, i);
      ids.insert(ids.end(), x.begin(), x.end());
    }
    served.resize(ids.size());
    const double mean = static_cast<double>(ids.size()) / ffn_ranks;
    auto max_over_mean = [&](std::vector<std::vector<std::int32_t>> h) {
      comm::ReplicaRouting routing_of_layer(std::move(h), ffn_ranks);
      (void)routing_of_layer.route(ids, k, {}, served);
      const auto load = routing_of_layer.load();
      return static_cast<double>(*std::max_element(load.begin(), load.end())) / mean;
    };
    out.max_load_over_mean_without = std::max(out.max_load_over_mean_without, max_over_mean(std::move(alone)));
    out.max_load_over_mean = std::max(out.max_load_over_mean, max_over_mean(std::move(hosts)));
  }
  return out;
}

}  // namespace disagmoe::runtime
