// SPDX-License-Identifier: Apache-2.0
/// @file allocation_milp.hpp
/// The GPU/NIC split between attention and FFN groups, the number of group pairs and
/// recomputation as one mixed-integer linear program (MISSION.md, "Adaptive worker
/// allocation"), solved by the library's branch and bound (milp/, see
/// adaptive_allocator.hpp).
///
/// The 1/x terms of the stage time (group sizes Na/p and Nf/p and link capacities
/// N·c·B_nic/p in denominators) are linearised by selecting among candidates with
/// binary variables, one binary w_k per candidate allocation k = (p, a, f, c_a, c_f,
/// recompute) — the disaggregated ("extended") form of the choice, whose LP
/// relaxation is the convex hull of the candidates (Balas 1979, "Disjunctive
/// programming", Ann. Discrete Math. 5; Vielma 2015, "Mixed integer linear programming
/// formulation techniques", SIAM Review 57(1), §3):
///
///     min S                                                      (ms per micro-batch)
///     Σ_k w_k = 1                                                (one allocation)
///     Σ_k (a_k + f_k) · w_k <= G                                 (GPUs per node)
///     Σ_k (c_a,k + c_f,k) · w_k <= K                             (NICs per node; N > 1)
///     S >= Σ_k T_k · w_k                                         (stage time)
///
/// T_k = AnalyticModel::bound_seconds(k): the slowest pair's max of A compute, F
/// compute and each side's link time with its gradient all-reduce — constants per
/// candidate, so the max of a selected candidate is linear in w. Candidates exist only
/// where the allocation is structurally valid (AnalyticModel::valid), fits memory on
/// every worker (the memory rows of a compact formulation, evaluated per candidate
/// instead: memory depends on (p, a, f, recompute) only) and uses every NIC of a node
/// (c_a + c_f = K: link times fall as NICs are added, so an allocation that leaves a
/// NIC idle is dominated by one with the same GPUs that does not). The MILP optimum is
/// therefore the smallest `StepEstimate::bound_seconds` over all valid allocations that
/// fit (the exhaustive oracle `enumerate_best_bound`), and its LP relaxation is already
/// integral: branch and bound closes at the root.
///
/// An earlier compact form (binaries for p, a|p, f|p and NIC counts, big-M link and
/// memory rows, one program per recompute setting) had ≈ 120 binaries but a weak LP
/// bound and took 150–750 branch-and-bound nodes (16–772 ms) on h800x128.
#pragma once

#include <disagmoe/milp/problem.hpp>
#include <disagmoe/plan/allocation.hpp>

#include <span>
#include <string>
#include <vector>

namespace disagmoe::plan {

/// The allocation MILP and how its variables map to allocations.
struct AllocationMilp {
  milp::Problem problem;            ///< the program (objective: ms per micro-batch)
  int stage_var = -1;               ///< S
  std::vector<Allocation> columns;  ///< columns[k]: candidate of binary column_var[k]
  std::vector<int> column_var;      ///< variable index of w_k
  std::vector<double> stage_ms;     ///< T_k in ms

  /// Scale of the objective: S [ms] = bound_seconds × kMs.
  static constexpr double kMs = 1e3;

  /// The allocation a solution vector selects (the binary read as > 0.5); a default
  /// Allocation when none is set. O(candidates).
  [[nodiscard]] Allocation decode(std::span<const double> x) const {
    for (std::size_t k = 0; k < columns.size(); ++k)
      if (x[static_cast<std::size_t>(column_var[k])] > 0.5) return columns[k];
    return {};
  }

  /// Index of allocation `a` among the candidates, -1 when it has no column (invalid,
  /// out of memory, or an idle NIC). O(candidates).
  [[nodiscard]] int find(const Allocation& a) const {
    for (std::size_t k = 0; k < columns.size(); ++k)
      if (columns[k] == a) return int(k);
    return -1;
  }

  /// The solution vector of allocation `a` with S = `stage_ms` (for checking the
  /// formulation against the analytic model); all binaries 0 when `a` has no column.
  [[nodiscard]] std::vector<double> encode(const Allocation& a, double stage) const {
    std::vector<double> x(static_cast<std::size_t>(problem.num_vars()), 0.0);
    x[static_cast<std::size_t>(stage_var)] = stage;
    if (const int k = find(a); k >= 0) x[static_cast<std::size_t>(column_var[static_cast<std::size_t>(k)])] = 1.0;
    return x;
  }
};

/// Builds the allocation MILP of `model` over the recompute settings its policy
/// allows (`only_recompute` = 0 or 1 restricts to that setting; -1 = all). Memory is
/// checked once per (p, a, recompute) for A and per (p, f, recompute) for F, the
/// stage time of each candidate in O(p) from AnalyticModel::pair_sums.
/// O(p_max · layers + candidates · p_max).
inline AllocationMilp build_allocation_milp(const AnalyticModel& model, int only_recompute = -1) {
  using milp::kInf;
  using milp::VarType;
  const ClusterSpec& c = model.cluster();
  const int gpn = c.gpus_per_node, nics = c.nodes == 1 ? 0 : c.nics_per_node;
  const double cap = model.capacity();
  AllocationMilp f;
  milp::Problem& P = f.problem;
  P.set_name("disagmoe_allocation");
  f.stage_var = P.add_var(0, kInf, 1.0, VarType::kContinuous, "S");

  // NIC splits that leave no NIC idle (0 + 0 on one node).
  std::vector<std::pair<int, int>> nic_splits;
  if (nics == 0) nic_splits.emplace_back(0, 0);
  for (int na = 1; na < nics; ++na) nic_splits.emplace_back(na, nics - na);

  for (bool rc : model.recompute_choices()) {
    if (only_recompute >= 0 && rc != bool(only_recompute)) continue;
    for (int p = 1; p <= model.max_groups(); ++p) {
      std::vector<int> as, fs;
      for (int a = 1; a < gpn; ++a)
        if (model.valid_attention(p, a) && model.attention_memory(p, a, rc).total() <= cap) as.push_back(a);
      for (int ff = 1; ff < gpn; ++ff)
        if (model.valid_ffn(p, ff)) fs.push_back(ff);
      if (as.empty() || fs.empty() || as.front() + fs.front() > gpn) continue;
      const std::vector<AnalyticModel::PairSums> sums = model.pair_sums(p);
      for (int ff : fs) {
        // F memory is static bytes + bytes per micro-batch in flight through the pair.
        const auto terms = model.ffn_memory_terms(p, ff, rc);
        for (int a : as) {
          if (a + ff > gpn) break;
          const double in_flight = model.pair_in_flight(a);
          bool fits = true;
          for (const auto& [fixed, per] : terms) fits = fits && fixed + per * in_flight <= cap;
          if (!fits) continue;
          for (const auto& [na, nf] : nic_splits) {
            const Allocation x{p, a, ff, na, nf, rc};
            const double t = AllocationMilp::kMs * model.bound_seconds(x, sums);
            const std::string name = "w_" + std::to_string(f.columns.size());
            f.column_var.push_back(P.add_var(0, 1, 0, VarType::kBinary, name));
            f.columns.push_back(x);
            f.stage_ms.push_back(t);
          }
        }
      }
    }
  }
  std::vector<double> one(f.columns.size(), 1.0), gpus, nic, stage;
  for (std::size_t k = 0; k < f.columns.size(); ++k) {
    const Allocation& x = f.columns[k];
    gpus.push_back(x.attention_gpus_per_node + x.ffn_gpus_per_node);
    nic.push_back(x.attention_nics_per_node + x.ffn_nics_per_node);
    stage.push_back(-f.stage_ms[k]);
  }
  // Σ w = 1 is infeasible (0 = 1) when no candidate fits: the solver reports it.
  P.add_row(f.column_var, one, 1, 1, "one_allocation");
  P.add_row(f.column_var, gpus, -kInf, gpn, "gpus_per_node");
  if (nics > 0) P.add_row(f.column_var, nic, -kInf, nics, "nics_per_node");
  std::vector<int> idx = f.column_var;
  idx.push_back(f.stage_var);
  stage.push_back(1.0);
  P.add_row(idx, stage, 0, kInf, "stage_time");
  return f;
}

}  // namespace disagmoe::plan
