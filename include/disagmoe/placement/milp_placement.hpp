// SPDX-License-Identifier: Apache-2.0
/// @file milp_placement.hpp
/// The coupling objective (objective.hpp) as a mixed-integer linear program, solved by
/// the library's branch and bound (disagmoe::milp): the `exact` method of
/// disagmoe-place. Formulation (maximise):
///   x[l][e][g] in {0,1}           expert e of layer l on GPU g
///   sum_g x[l][e][g] = 1          every expert placed once
///   sum_e x[l][e][g] = E/G        equal expert count per GPU
///   sum_e load[l][e] x[l][e][g] <= (1 + tol) * mean load      (when tol is finite)
///   y <= x[l][a][g], y <= x[l'][b][g]   same-GPU indicator per weighted pair and GPU
///   u <= sum_{g in n} x[l][a][g], u <= sum_{g in n} x[l'][b][g]   same-node indicator
///   objective: sum C_l[a][b] (y + nu u) + sum T_l[a][b] (y + nu u) over the pairs
/// (the standard linearisation of a product of binaries; ExFlow's ILP, IPDPS'24, uses the
/// same form for top-1 transitions). Expert 0 of layer 0 is fixed on GPU 0 (labels are
/// symmetric). The LP relaxation is weak, so this is for small instances only.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/milp/branch_and_bound.hpp>
#include <disagmoe/milp/problem.hpp>
#include <disagmoe/placement/objective.hpp>
#include <disagmoe/placement/placement.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace disagmoe::placement {

/// Largest MILP the exact method builds: binaries (layers * E * G) and all variables.
/// Branch and bound on this weak formulation grows exponentially with the binaries.
inline constexpr int kMilpMaxBinaries = 256;
inline constexpr int kMilpMaxVars = 20000;

/// A placement from the MILP with the solver's verdict.
struct MilpPlacement {
  Placement placement;          ///< best placement found (empty map when none)
  milp::Status status{};        ///< kOptimal when proven optimal
  double objective = 0;         ///< f of the placement
  double bound = 0;             ///< proven upper bound on f
  double gap = 0;               ///< relative gap reported by the solver
};

/// Builds and solves the MILP (`options.time_limit` bounds the search; a non-optimal
/// status comes back with the solver's bound and gap). Throws ConfigError when the
/// model would exceed kMilpMaxBinaries / kMilpMaxVars, or when no placement was found
/// within the time or node limit or meets `load_tolerance`; SolverError when the solver
/// finds none otherwise (naming the status).
inline MilpPlacement milp_placement(const CouplingWeights& w, Topology topo, double node_weight,
                                    double load_tolerance = std::numeric_limits<double>::infinity(),
                                    milp::Options options = {}) {
  topo.validate(w.experts);
  const int L = w.layers, E = w.experts, G = topo.gpus, N = topo.nodes(), K = topo.gpus_per_node;
  const bool nodes = N > 1 && node_weight > 0;
  // Count the model before building it, so a large instance fails fast and clearly.
  long pairs = 0;
  for (int l = 0; l < L; ++l)
    for (int a = 0; a < E; ++a)
      for (int b = 0; b < E; ++b) {
        if (b > a && w.co_row(l, a)[b] > 0) ++pairs;
        if (l + 1 < L && w.trans_row(l, a)[b] > 0) ++pairs;
      }
  const long vars = static_cast<long>(L) * E * G + pairs * (G + (nodes ? N : 0));
  const long binaries = static_cast<long>(L) * E * G;
  if (vars > kMilpMaxVars || binaries > kMilpMaxBinaries)
    fail("experts", E, "an instance of at most " + std::to_string(kMilpMaxBinaries) + " binaries and " +
                           std::to_string(kMilpMaxVars) + " MILP variables (E = " + std::to_string(E) + ", G = " +
                           std::to_string(G) + ", " + std::to_string(L) + " layers need " + std::to_string(binaries) +
                           " and " + std::to_string(vars) + "); use the correlated heuristic");
  milp::Problem p;
  p.set_sense(milp::Sense::kMaximize);
  // On one node (or nu = 0) the node terms are the constant nu * sum of all weights.
  if (!nodes && node_weight > 0) {
    double all = 0;
    for (int l = 0; l < L; ++l)
      for (int a = 0; a < E; ++a)
        for (int b = 0; b < E; ++b) all += (b > a ? w.co_row(l, a)[b] : 0.0) + (l + 1 < L ? w.trans_row(l, a)[b] : 0.0);
    p.set_objective_offset(node_weight * all);
  }
  auto x = [&](int l, int e, int g) { return (l * E + e) * G + g; };
  for (int l = 0; l < L; ++l)
    for (int e = 0; e < E; ++e)
      for (int g = 0; g < G; ++g) {
        const bool fixed_off = l == 0 && e == 0 && g != 0;  // symmetry breaking
        p.add_var(0, fixed_off ? 0 : 1, 0, milp::VarType::kBinary);
      }
  std::vector<int> idx;
  std::vector<double> val;
  for (int l = 0; l < L; ++l) {
    double total = 0;
    for (int e = 0; e < E; ++e) total += w.load[static_cast<std::size_t>(l * E + e)];
    for (int e = 0; e < E; ++e) {
      idx.clear(), val.clear();
      for (int g = 0; g < G; ++g) idx.push_back(x(l, e, g)), val.push_back(1);
      p.add_row(idx, val, 1, 1);
    }
    for (int g = 0; g < G; ++g) {
      idx.clear(), val.clear();
      for (int e = 0; e < E; ++e) idx.push_back(x(l, e, g)), val.push_back(1);
      p.add_row(idx, val, E / G, E / G);
      if (std::isfinite(load_tolerance) && total > 0) {
        val.clear();
        for (int e = 0; e < E; ++e) val.push_back(w.load[static_cast<std::size_t>(l * E + e)]);
        p.add_row(idx, val, -milp::kInf, (1 + load_tolerance) * total / G + 1e-9 * total);
      }
    }
  }
  // One indicator per weighted pair (la, a) - (lb, b) and GPU (and node).
  auto link = [&](int la, int a, int lb, int b, double weight) {
    for (int g = 0; g < G; ++g) {
      const int y = p.add_var(0, 1, weight, milp::VarType::kContinuous);  // integral at optimum
      p.add_row({{y, 1.0}, {x(la, a, g), -1.0}}, -milp::kInf, 0);
      p.add_row({{y, 1.0}, {x(lb, b, g), -1.0}}, -milp::kInf, 0);
    }
    if (!nodes) return;
    for (int n = 0; n < N; ++n) {
      const int u = p.add_var(0, 1, node_weight * weight, milp::VarType::kContinuous);
      for (const auto& [l, e] : {std::pair{la, a}, std::pair{lb, b}}) {
        idx.assign(1, u), val.assign(1, 1.0);
        for (int g = n * K; g < (n + 1) * K; ++g) idx.push_back(x(l, e, g)), val.push_back(-1);
        p.add_row(idx, val, -milp::kInf, 0);
      }
    }
  };
  for (int l = 0; l < L; ++l)
    for (int a = 0; a < E; ++a)
      for (int b = 0; b < E; ++b) {
        if (b > a && w.co_row(l, a)[b] > 0) link(l, a, l, b, w.co_row(l, a)[b]);
        if (l + 1 < L && w.trans_row(l, a)[b] > 0) link(l, a, l + 1, b, w.trans_row(l, a)[b]);
      }
  const milp::Result r = milp::solve(p, options);
  if (!r.has_solution()) {
    // A limit that ends the search before its first placement, or a load tolerance no
    // placement meets, is the caller's setting; anything else is the solver's fault.
    if (r.status == milp::Status::kTimeLimit)
      fail("exact placement time limit", options.time_limit,
           "enough seconds for the MILP to find a first placement (it found none: raise it, or use the correlated "
           "heuristic)");
    if (r.status == milp::Status::kNodeLimit)
      fail("exact placement node limit", options.node_limit,
           "enough nodes for the MILP to find a first placement (it found none)");
    if (r.status == milp::Status::kInfeasible && std::isfinite(load_tolerance))
      fail("load tolerance", load_tolerance,
           "a tolerance that some placement of " + std::to_string(E / G) + " experts per GPU meets (none does)");
    fail<SolverError>("exact placement MILP status", std::string(milp::to_string(r.status)), "a feasible placement");
  }
  std::vector<std::int32_t> map(static_cast<std::size_t>(L) * static_cast<std::size_t>(E), 0);
  for (int l = 0; l < L; ++l)
    for (int e = 0; e < E; ++e)
      for (int g = 0; g < G; ++g)
        if (r.solution[static_cast<std::size_t>(x(l, e, g))] > 0.5) map[static_cast<std::size_t>(l * E + e)] = g;
  MilpPlacement out{Placement(L, E, topo, std::move(map)), r.status, 0, r.bound, r.gap};
  out.objective = coupling_objective(w, out.placement, node_weight);
  return out;
}

}  // namespace disagmoe::placement
