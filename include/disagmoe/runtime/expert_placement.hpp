// SPDX-License-Identifier: Apache-2.0
/// @file expert_placement.hpp
/// An expert placement for a disaggregated run, fitted to the model's own routing:
/// Expert Coupling (arXiv 2610.09372) places experts that routers choose together on the
/// same F-rank, so that a send-once dispatch (one row per token per destination rank)
/// moves fewer rows. The routing comes from `ColocatedTrainer::routing` on sample
/// batches; the result is `DisaggregatedOptions::expert_rank`, one map per layer.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/placement/correlated.hpp>
#include <disagmoe/placement/metrics.hpp>
#include <disagmoe/placement/placement.hpp>
#include <disagmoe/placement/routing_trace.hpp>
#include <disagmoe/spec/model_spec.hpp>

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
  std::vector<int> moe_layers;
  for (int l = 0; l < spec.layers; ++l)
    if (spec.is_moe_layer(l)) moe_layers.push_back(l);
  const int layers = static_cast<int>(moe_layers.size());
  const auto per_token = static_cast<std::size_t>(layers) * static_cast<std::size_t>(spec.top_k);
  FittedPlacement out;
  for (int l = 0; l < spec.layers; ++l)  // contiguous blocks, as the run's default
    for (int e = 0; e < spec.experts; ++e)
      out.expert_rank.push_back(static_cast<int>(static_cast<std::int64_t>(e) * ffn_ranks / spec.experts));
  if (layers == 0) return out;
  expect(!routing.empty() && routing.size() % per_token == 0, "routing.size()", routing.size(),
         "a positive multiple of MoE layers x top_k (" + std::to_string(per_token) + ")");
  std::vector<placement::ExpertId> ids(routing.size());
  for (std::size_t i = 0; i < routing.size(); ++i) {
    expect(routing[i] >= 0 && routing[i] < spec.experts, "routing[" + std::to_string(i) + "]", routing[i],
           "an expert id in [0, " + std::to_string(spec.experts) + ")");
    ids[i] = static_cast<placement::ExpertId>(routing[i]);
  }
  const auto tokens = static_cast<std::int64_t>(routing.size() / per_token);
  const placement::RoutingTrace trace(tokens, layers, spec.top_k, spec.experts, std::move(ids));
  const placement::Topology topo{ffn_ranks, ffn_ranks};  // the F-ranks of one worker: one node
  const placement::Placement fitted =
      placement::CorrelatedPlacement(options).fit(placement::CouplingStats::of(trace, options.threads), topo);
  for (int i = 0; i < layers; ++i) {
    const auto row = fitted.layer(i);
    for (int e = 0; e < spec.experts; ++e)
      out.expert_rank[static_cast<std::size_t>(moe_layers[static_cast<std::size_t>(i)]) *
                          static_cast<std::size_t>(spec.experts) +
                      static_cast<std::size_t>(e)] = row[static_cast<std::size_t>(e)];
  }
  const auto homes = placement::contiguous_homes(tokens, layers, ffn_ranks);  // rows do not depend on homes
  const double pairs = static_cast<double>(tokens) * layers;
  out.rows_per_token_contiguous =
      static_cast<double>(
          placement::evaluate_placement(trace, placement::contiguous_placement(layers, spec.experts, topo), homes)
              .rows_dedup) /
      pairs;
  out.rows_per_token_fitted = static_cast<double>(placement::evaluate_placement(trace, fitted, homes).rows_dedup) / pairs;
  return out;
}

}  // namespace disagmoe::runtime
