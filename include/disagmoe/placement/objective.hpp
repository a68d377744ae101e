// SPDX-License-Identifier: Apache-2.0
/// @file objective.hpp
/// The coupling objective every placement method maximises, and the dense weights it
/// is computed from. For a placement P with GPU g_l(e) and node n_l(e):
///
///   f(P) = sum_l sum_{a<b} C_l[a][b] * ([g_l(a)=g_l(b)] + nu*[n_l(a)=n_l(b)])
///        + lambda * sum_{l<L-1} sum_{a,b} T_l[a][b] * ([g_l(a)=g_{l+1}(b)] + nu*[n_l(a)=n_{l+1}(b)])
///
/// C_l = co-selection counts (pairs kept on one GPU need one dispatched row, not two:
/// the send-once dispatcher of the paper, §4.1), T_l = l -> l+1 transitions (a token
/// whose layer-l expert a sits on the GPU of its layer-(l+1) expert b can be homed
/// there: cross-layer alignment, ExFlow's affinity, IPDPS'24). nu weighs the node
/// level (rows that stay inside a node avoid the slower inter-node network).
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/placement/coupling_stats.hpp>
#include <disagmoe/placement/placement.hpp>

#include <cstdint>
#include <vector>

namespace disagmoe::placement {

/// Weights of the objective terms.
struct ObjectiveWeights {
  double cross_layer = 1.0;  ///< lambda >= 0: weight of cross-layer alignment against co-selection
  double node = 1.0;         ///< nu >= 0: weight of keeping pairs on one node (multi-node only)

  /// Throws ConfigError on a negative or non-finite weight.
  void validate() const {
    expect(cross_layer >= 0 && cross_layer < 1e12, "cross_layer", cross_layer, "a finite weight >= 0");
    expect(node >= 0 && node < 1e12, "node_weight", node, "a finite weight >= 0");
  }
};

/// Dense per-layer matrices of the objective, in doubles: `co` symmetric with a zero
/// diagonal, `trans` [l][a][b] already multiplied by lambda, `load` per expert.
/// Memory: (2L-1) * E^2 * 8 bytes.
struct CouplingWeights {
  int layers = 0;
  int experts = 0;
  std::vector<double> co;     ///< [l][a][b], symmetric
  std::vector<double> trans;  ///< [l][a][b] for l < layers-1, times lambda
  std::vector<double> load;   ///< [l][e] token-expert assignments

  /// Builds the weights from statistics. O(L * E^2).
  static CouplingWeights from(const CouplingStats& s, double cross_layer) {
    CouplingWeights w;
    w.layers = s.layers();
    w.experts = s.num_experts();
    const auto E = static_cast<std::size_t>(w.experts), L = static_cast<std::size_t>(w.layers);
    w.co.assign(L * E * E, 0.0);
    w.trans.assign((L - 1) * E * E, 0.0);
    w.load.assign(L * E, 0.0);
    for (int l = 0; l < w.layers; ++l)
      for (int a = 0; a < w.experts; ++a) {
        w.load[l * E + static_cast<std::size_t>(a)] = static_cast<double>(s.load(l, a));
        for (int b = 0; b < w.experts; ++b) {
          w.co[(l * E + static_cast<std::size_t>(a)) * E + static_cast<std::size_t>(b)] = static_cast<double>(s.co_selection(l, a, b));
          if (l + 1 < w.layers)
            w.trans[(l * E + static_cast<std::size_t>(a)) * E + static_cast<std::size_t>(b)] = cross_layer * static_cast<double>(s.transition(l, a, b));
        }
      }
    return w;
  }
  const double* co_row(int l, int a) const noexcept { return co.data() + (static_cast<std::size_t>(l) * static_cast<std::size_t>(experts) + static_cast<std::size_t>(a)) * static_cast<std::size_t>(experts); }
  const double* trans_row(int l, int a) const noexcept { return trans.data() + (static_cast<std::size_t>(l) * static_cast<std::size_t>(experts) + static_cast<std::size_t>(a)) * static_cast<std::size_t>(experts); }
};

/// f(P) of the file comment for weights built with the same lambda. O(L * E^2).
inline double coupling_objective(const CouplingWeights& w, const Placement& p, double node_weight) {
  expect(p.layers() == w.layers && p.num_experts() == w.experts, "placement shape", p.layers(),
         "the statistics' layers and experts");
  const Topology& t = p.topology();
  double f = 0;
  for (int l = 0; l < w.layers; ++l)
    for (int a = 0; a < w.experts; ++a) {
      const int ga = p.gpu(l, a);
      const double* co = w.co_row(l, a);
      for (int b = a + 1; b < w.experts; ++b) {
        const int gb = p.gpu(l, b);
        f += co[b] * ((ga == gb) + node_weight * (t.node_of(ga) == t.node_of(gb)));
      }
      if (l + 1 < w.layers) {
        const double* tr = w.trans_row(l, a);
        for (int b = 0; b < w.experts; ++b) {
          const int gb = p.gpu(l + 1, b);
          f += tr[b] * ((ga == gb) + node_weight * (t.node_of(ga) == t.node_of(gb)));
        }
      }
    }
  return f;
}

/// Max over layers and GPUs of (token-expert load on the GPU) / (mean GPU load), from
/// the fitted loads in `w`. O(L * E).
inline double placement_load_ratio(const CouplingWeights& w, const Placement& p) {
  const int G = p.topology().gpus;
  double worst = 0;
  std::vector<double> load(static_cast<std::size_t>(G));
  for (int l = 0; l < w.layers; ++l) {
    std::fill(load.begin(), load.end(), 0.0);
    double total = 0;
    for (int e = 0; e < w.experts; ++e) {
      const double x = w.load[static_cast<std::size_t>(l) * static_cast<std::size_t>(w.experts) + static_cast<std::size_t>(e)];
      load[static_cast<std::size_t>(p.gpu(l, e))] += x;
      total += x;
    }
    if (total > 0) worst = std::max(worst, *std::max_element(load.begin(), load.end()) * G / total);
  }
  return worst;
}

}  // namespace disagmoe::placement
