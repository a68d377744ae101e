// SPDX-License-Identifier: Apache-2.0
/// @file exact.hpp
/// Exact maximiser of the coupling objective (objective.hpp) for small instances, the
/// oracle the heuristic is tested against. The objective is a chain over layers (each
/// term couples layer l with itself or with l+1), so dynamic programming over layers
/// (Viterbi) over the balanced labelled expert -> GPU maps s of each layer is exact:
///   V_0(s) = co_0(s),  V_l(s) = co_l(s) + max_{s'} [V_{l-1}(s') + cross_{l-1}(s', s)].
/// Renaming GPUs by a symmetry of the topology (GPUs permuted within a node, nodes
/// permuted) changes neither co, cross (applied to both layers) nor the load filter, so
/// V_l(sigma s) = V_l(s): V is computed for one map per orbit (the pairings, for two
/// experts per GPU) and maximised over every labelled predecessor, which covers each
/// relative labelling of the two layers. E=8 on 4 GPUs: 2520 maps, 105 orbits; E=8 on 8
/// GPUs: 40320 maps, 1 orbit. Work O(L * S * (E^2 + E*G + R*E)) for S maps and R orbits.
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

/// Canonical form of the balanced map `m` under the topology's symmetries: nodes
/// renumbered by first appearance over the experts, and GPUs within a node likewise. Maps
/// of one orbit share it (first appearance commutes with renaming). `to_actual[c]` is
/// the GPU of `m` that canonical GPU c stands for: m[e] = to_actual[canon[e]].
inline void canonical_map(const std::int8_t* m, int E, const Topology& topo, std::int8_t* canon, std::int8_t* to_actual) {
  const int K = topo.gpus_per_node;
  std::int8_t gpu_label[64], node_label[64], next_local[64];
  std::fill(gpu_label, gpu_label + topo.gpus, std::int8_t{-1});
  std::fill(node_label, node_label + topo.nodes(), std::int8_t{-1});
  std::fill(next_local, next_local + topo.nodes(), std::int8_t{0});
  std::int8_t next_node = 0;
  for (int e = 0; e < E; ++e) {
    const int g = m[e], n = g / K;
    if (gpu_label[g] < 0) {
      if (node_label[n] < 0) node_label[n] = next_node++;
      gpu_label[g] = static_cast<std::int8_t>(node_label[n] * K + next_local[n]++);
      to_actual[gpu_label[g]] = static_cast<std::int8_t>(g);
    }
    canon[e] = gpu_label[g];
  }
}
}  // namespace detail

/// Balanced labelled maps of one layer: E!/((E/G)!)^G (as a double, may be huge).
inline double balanced_map_count(int experts, int gpus) {
  return std::exp(std::lgamma(experts + 1.0) - gpus * std::lgamma(experts / gpus + 1.0));
}

/// Orbits of those maps under the topology's symmetries, whose N!(K!)^N elements (N
/// nodes of K GPUs) act freely because a balanced map uses every GPU.
inline double balanced_map_orbits(int experts, const Topology& topo) {
  const int N = topo.nodes(), K = topo.gpus_per_node;
  return balanced_map_count(experts, topo.gpus) / std::exp(std::lgamma(N + 1.0) + N * std::lgamma(K + 1.0));
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
  const int L = w.layers, E = w.experts, G = topo.gpus, K = topo.gpus_per_node;
  const double states = balanced_map_count(E, G), orbits = std::round(balanced_map_orbits(E, topo));
  const double work = states * (E + (L - 1) * (E * E + E * G + orbits * E)) + orbits * E * E * L;
  if (!(E <= 64 && G <= 64 && work <= max_work)) {
    std::ostringstream os;
    os << "at most " << max_work << " operations for the exact method (E = " << E << ", G = " << G << " gives "
       << states << " balanced maps per layer in " << orbits << " orbits); use the correlated heuristic";
    fail("experts", E, os.str());
  }
  const auto Eu = static_cast<std::size_t>(E), Gu = static_cast<std::size_t>(G);
  std::vector<std::int8_t> all;
  {
    std::vector<int> count(Gu, 0);
    std::vector<std::int8_t> cur(Eu);
    detail::enumerate_balanced(0, E, G, E / G, count, cur, all);
  }
  const std::size_t S = all.size() / Eu;
  auto map_of = [&](std::size_t s) { return all.data() + s * Eu; };

  // Orbit representatives (the maps equal to their canonical form; `all` is in
  // lexicographic order, so `reps` is too) and each map's orbit.
  std::vector<std::size_t> reps;
  std::vector<std::int8_t> canon(Eu), to_actual(Gu);
  for (std::size_t s = 0; s < S; ++s) {
    detail::canonical_map(map_of(s), E, topo, canon.data(), to_actual.data());
    if (std::equal(canon.begin(), canon.end(), map_of(s))) reps.push_back(s);
  }
  const std::size_t R = reps.size();
  auto orbit_of_map = [&](const std::int8_t* m) {  // index into reps; canonicalises into `canon`, `to_actual`
    detail::canonical_map(m, E, topo, canon.data(), to_actual.data());
    return static_cast<std::size_t>(std::lower_bound(reps.begin(), reps.end(), canon,
                                                     [&](std::size_t r, const std::vector<std::int8_t>& c) {
                                                       return std::lexicographical_compare(map_of(r), map_of(r) + E, c.begin(), c.end());
                                                     }) - reps.begin());
  };
  std::vector<std::uint32_t> orbit(S);
  for (std::size_t s = 0; s < S; ++s) orbit[s] = static_cast<std::uint32_t>(orbit_of_map(map_of(s)));
  auto same = [&](int ga, int gb) { return (ga == gb) + node_weight * (topo.node_of(ga) == topo.node_of(gb)); };

  // Per layer and orbit: allowed by the load filter, and the within-layer value.
  std::vector<std::vector<char>> allowed(static_cast<std::size_t>(L), std::vector<char>(R, 0));
  std::vector<std::vector<double>> co(static_cast<std::size_t>(L), std::vector<double>(R, 0.0));
  std::vector<double> gl(Gu), peak(R);
  for (int l = 0; l < L; ++l) {
    const auto lu = static_cast<std::size_t>(l);
    double total = 0;
    for (int e = 0; e < E; ++e) total += w.load[lu * Eu + static_cast<std::size_t>(e)];
    for (std::size_t r = 0; r < R; ++r) {
      const auto* m = map_of(reps[r]);
      std::fill(gl.begin(), gl.end(), 0.0);
      for (int a = 0; a < E; ++a) {
        gl[static_cast<std::size_t>(m[a])] += w.load[lu * Eu + static_cast<std::size_t>(a)];
        const double* c = w.co_row(l, a);
        for (int b = a + 1; b < E; ++b) co[lu][r] += c[b] * same(m[a], m[b]);
      }
      peak[r] = *std::max_element(gl.begin(), gl.end());
    }
    const double cap = (1.0 + load_tolerance) * total / G + 1e-9 * total;
    const double least = *std::min_element(peak.begin(), peak.end());
    for (std::size_t r = 0; r < R; ++r) allowed[lu][r] = peak[r] <= std::max(cap, least);
  }

  // Viterbi over layers: value[r] for orbits, maximised over every labelled predecessor.
  constexpr double kNone = -std::numeric_limits<double>::infinity();
  std::vector<double> value(R, kNone);
  for (std::size_t r = 0; r < R; ++r)
    if (allowed[0][r]) value[r] = co[0][r];
  std::vector<std::vector<std::uint32_t>> back(static_cast<std::size_t>(L), std::vector<std::uint32_t>(R, 0));
  std::vector<double> p(Eu * Gu), m(Eu * Gu), nodes(Eu * static_cast<std::size_t>(topo.nodes()));
  for (int l = 1; l < L; ++l) {
    const auto lu = static_cast<std::size_t>(l);
    std::vector<double> next(R, kNone);
    for (std::size_t sp = 0; sp < S; ++sp) {
      const double v0 = value[orbit[sp]];
      if (v0 == kNone) continue;
      // P[b][g] = sum_{a on g} T[a][b]; M[b][g] = P[b][g] + nu * (P[b] summed over g's
      // node): cross(s', s) = sum_b M[b][s(b)].
      const auto* prev = map_of(sp);
      std::fill(p.begin(), p.end(), 0.0);
      std::fill(nodes.begin(), nodes.end(), 0.0);
      for (int a = 0; a < E; ++a) {
        const double* t = w.trans_row(l - 1, a);
        const auto g = static_cast<std::size_t>(prev[a]);
        for (std::size_t b = 0; b < Eu; ++b) p[b * Gu + g] += t[b];
      }
      for (std::size_t b = 0; b < Eu; ++b)
        for (std::size_t g = 0; g < Gu; ++g) nodes[b * static_cast<std::size_t>(topo.nodes()) + g / static_cast<std::size_t>(K)] += p[b * Gu + g];
      for (std::size_t b = 0; b < Eu; ++b)
        for (std::size_t g = 0; g < Gu; ++g)
          m[b * Gu + g] = p[b * Gu + g] + node_weight * nodes[b * static_cast<std::size_t>(topo.nodes()) + g / static_cast<std::size_t>(K)];
      for (std::size_t r = 0; r < R; ++r) {
        if (!allowed[lu][r]) continue;
        const auto* cur = map_of(reps[r]);
        double v = v0;
        for (std::size_t b = 0; b < Eu; ++b) v += m[b * Gu + static_cast<std::size_t>(cur[b])];
        if (v > next[r]) next[r] = v, back[lu][r] = static_cast<std::uint32_t>(sp);
      }
    }
    for (std::size_t r = 0; r < R; ++r)
      if (next[r] != kNone) next[r] += co[lu][r];
    value.swap(next);
  }

  // Back-track in labelled maps: layer l's map x = sigma(rep) has the predecessor
  // sigma(back[rep]) (the same value, by the symmetry), whose own orbit and sigma follow.
  std::size_t r = static_cast<std::size_t>(std::max_element(value.begin(), value.end()) - value.begin());
  std::vector<std::int8_t> sigma(Gu), x(map_of(reps[r]), map_of(reps[r]) + E);
  for (std::size_t g = 0; g < Gu; ++g) sigma[g] = static_cast<std::int8_t>(g);
  std::vector<std::int32_t> map(static_cast<std::size_t>(L) * Eu);
  for (int l = L - 1; l >= 0; --l) {
    std::copy(x.begin(), x.end(), map.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(l) * Eu));
    if (l == 0) break;
    const auto* pred = map_of(back[static_cast<std::size_t>(l)][r]);
    for (std::size_t e = 0; e < Eu; ++e) x[e] = sigma[static_cast<std::size_t>(pred[e])];
    r = orbit_of_map(x.data());
    sigma = to_actual;
  }
  return Placement(L, E, topo, std::move(map));
}

}  // namespace disagmoe::placement
