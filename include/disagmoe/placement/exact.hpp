// SPDX-License-Identifier: Apache-2.0
/// @file exact.hpp
/// Exact maximiser of the coupling objective (objective.hpp) for small instances, the
/// oracle the heuristic is tested against. The objective is a chain over layers (each
/// term couples layer l with itself or with l+1), so dynamic programming over layers
/// (Viterbi) with one state per balanced labelled expert -> GPU map of a layer is exact:
///   V_0(s) = co_0(s),  V_l(s) = co_l(s) + max_{s'} [V_{l-1}(s') + cross_{l-1}(s', s)].
/// States per layer: S = E! / ((E/G)!)^G (E=8, G=4: 2520). Work O(L * S^2 * E).
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/placement/objective.hpp>
#include <disagmoe/placement/placement.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <vector>

namespace disagmoe::placement {

/// Default bound on the work of exact_placement, about 10 s on one core.
inline constexpr double kExactMaxWork = 3e9;

namespace detail {
inline void enumerate_balanced(int e, int E, int G, int cap, std::vector<int>& count, std::vector<std::int8_t>& cur,
                               std::vector<std::int8_t>& out) {
  if (e == E) {
    out.insert(out.end(), cur.begin(), cur.end());
    return;
  }
  for (int g = 0; g < G; ++g) {
    if (count[static_cast<std::size_t>(g)] == cap) continue;
    ++count[static_cast<std::size_t>(g)];
    cur[static_cast<std::size_t>(e)] = static_cast<std::int8_t>(g);
    enumerate_balanced(e + 1, E, G, cap, count, cur, out);
    --count[static_cast<std::size_t>(g)];
  }
}
}  // namespace detail

/// Balanced labelled maps of one layer: E!/((E/G)!)^G (as a double, may be huge).
inline double balanced_map_count(int experts, int gpus) {
  return std::exp(std::lgamma(experts + 1.0) - gpus * std::lgamma(experts / gpus + 1.0));
}

/// The placement maximising f (objective.hpp, node weight `node_weight`) among balanced
/// placements whose per-layer GPU load is within (1 + load_tolerance) of the mean (when
/// some map of that layer is; otherwise the least-loaded maps are allowed).
/// Throws ConfigError when the instance needs more than `max_work` operations (use
/// CorrelatedPlacement then), naming experts, GPUs and the state count.
inline Placement exact_placement(const CouplingWeights& w, Topology topo, double node_weight,
                                 double load_tolerance = std::numeric_limits<double>::infinity(),
                                 double max_work = kExactMaxWork) {
  topo.validate(w.experts);
  const int L = w.layers, E = w.experts, G = topo.gpus;
  const double states = balanced_map_count(E, G);
  const double work = states * states * E * (L - 1) + states * E * E * L;
  if (!(E <= 64 && G <= 64 && work <= max_work)) {
    std::ostringstream os;
    os << "at most " << max_work << " operations for the exact method (E = " << E << ", G = " << G << " gives "
       << states << " balanced maps per layer); use the correlated heuristic";
    fail("experts", E, os.str());
  }
  std::vector<std::int8_t> all;
  {
    std::vector<int> count(static_cast<std::size_t>(G), 0);
    std::vector<std::int8_t> cur(static_cast<std::size_t>(E));
    detail::enumerate_balanced(0, E, G, E / G, count, cur, all);
  }
  const std::size_t S = all.size() / static_cast<std::size_t>(E);
  auto map_of = [&](std::size_t s) { return all.data() + s * static_cast<std::size_t>(E); };
  auto same = [&](int ga, int gb) { return (ga == gb) + node_weight * (topo.node_of(ga) == topo.node_of(gb)); };

  // Allowed states per layer (load filter) and their within-layer value.
  std::vector<std::vector<std::size_t>> allowed(static_cast<std::size_t>(L));
  std::vector<std::vector<double>> co(static_cast<std::size_t>(L), std::vector<double>(S, 0.0));
  std::vector<double> gl(static_cast<std::size_t>(G));
  for (int l = 0; l < L; ++l) {
    std::vector<double> peak(S);
    double total = 0;
    for (int e = 0; e < E; ++e) total += w.load[static_cast<std::size_t>(l * E + e)];
    for (std::size_t s = 0; s < S; ++s) {
      const auto* m = map_of(s);
      std::fill(gl.begin(), gl.end(), 0.0);
      for (int a = 0; a < E; ++a) {
        gl[static_cast<std::size_t>(m[a])] += w.load[static_cast<std::size_t>(l * E + a)];
        const double* c = w.co_row(l, a);
        for (int b = a + 1; b < E; ++b) co[static_cast<std::size_t>(l)][s] += c[b] * same(m[a], m[b]);
      }
      peak[s] = *std::max_element(gl.begin(), gl.end());
    }
    const double cap = (1.0 + load_tolerance) * total / G + 1e-9 * total;
    const double least = *std::min_element(peak.begin(), peak.end());
    for (std::size_t s = 0; s < S; ++s)
      if (peak[s] <= std::max(cap, least)) allowed[static_cast<std::size_t>(l)].push_back(s);
  }

  // Viterbi over layers.
  std::vector<double> value(S, -std::numeric_limits<double>::infinity());
  for (const auto s : allowed[0]) value[s] = co[0][s];
  std::vector<std::vector<std::uint32_t>> back(static_cast<std::size_t>(L), std::vector<std::uint32_t>(S, 0));
  std::vector<double> m(static_cast<std::size_t>(E) * static_cast<std::size_t>(G));
  for (int l = 1; l < L; ++l) {
    std::vector<double> next(S, -std::numeric_limits<double>::infinity());
    for (const auto sp : allowed[static_cast<std::size_t>(l - 1)]) {
      // M[b][g] = sum_a T[a][b] * same(s'(a), g): cross(s', s) = sum_b M[b][s(b)].
      const auto* prev = map_of(sp);
      std::fill(m.begin(), m.end(), 0.0);
      for (int a = 0; a < E; ++a) {
        const double* t = w.trans_row(l - 1, a);
        for (int b = 0; b < E; ++b)
          for (int g = 0; g < G; ++g) m[static_cast<std::size_t>(b * G + g)] += t[b] * same(prev[a], g);
      }
      for (const auto s : allowed[static_cast<std::size_t>(l)]) {
        const auto* cur = map_of(s);
        double v = value[sp];
        for (int b = 0; b < E; ++b) v += m[static_cast<std::size_t>(b * G + cur[b])];
        if (v > next[s]) next[s] = v, back[static_cast<std::size_t>(l)][s] = static_cast<std::uint32_t>(sp);
      }
    }
    for (const auto s : allowed[static_cast<std::size_t>(l)]) next[s] += co[static_cast<std::size_t>(l)][s];
    value.swap(next);
  }
  std::size_t s = static_cast<std::size_t>(std::max_element(value.begin(), value.end()) - value.begin());
  std::vector<std::int32_t> map(static_cast<std::size_t>(L) * static_cast<std::size_t>(E));
  for (int l = L - 1; l >= 0; --l) {
    for (int e = 0; e < E; ++e) map[static_cast<std::size_t>(l * E + e)] = map_of(s)[e];
    s = back[static_cast<std::size_t>(l)][s];
  }
  return Placement(L, E, topo, std::move(map));
}

}  // namespace disagmoe::placement
