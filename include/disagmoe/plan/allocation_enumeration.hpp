// SPDX-License-Identifier: Apache-2.0
/// @file allocation_enumeration.hpp
/// Every valid allocation of a model (for_each_allocation), and the exhaustive oracle of
/// the MILP's objective over them (enumerate_best_bound).
#pragma once

#include <disagmoe/plan/allocation.hpp>
#include <disagmoe/plan/analytic_model.hpp>

#include <limits>

namespace disagmoe::plan {

/// Calls `f(x)` for every valid allocation of `model` (p, GPUs per node, mixed nodes,
/// NICs per node, recompute on each side, fusion: on first; the NICs and fusion vary
/// innermost). O(p_max · gpn² · (1 + nodes / p) · nics² · 8) calls.
template <class F>
void for_each_allocation(const AnalyticModel& model, F&& f) {
  const ClusterSpec& c = model.cluster();
  const int nic_max = c.nodes == 1 ? 0 : c.nics_per_node;
  for (bool ra : model.recompute_choices())
    for (bool rf : model.recompute_choices())
      for (int p = 1; p <= model.max_groups(); ++p)
        for (int a = 1; a < c.gpus_per_node; ++a) {
          if (!model.valid_attention(p, a)) continue;
          for (int fg = 1; a + fg <= c.gpus_per_node; ++fg) {
            for (int k = 0; k < c.nodes; k += p) {
              if (!model.valid_mixed(p, fg, k)) continue;
              for (int na = 0; na <= nic_max; ++na)
                for (int nf = 0; na + nf <= nic_max; ++nf) {
                  const Allocation x{
                      p, a, fg, na, nf, {ra, rf}, true, model.context_parallel(), model.group_factor(), k};
                  if (!model.valid(x)) continue;
                  f(x);
                  f(Allocation{
                      x.groups, a, fg, na, nf, {ra, rf}, false, x.context_parallel, x.group_factor, k});
                }
            }
          }
        }
}

/// The result of searching allocations by exhaustive enumeration.
struct EnumerationResult {
  bool found = false;            ///< some valid allocation fits memory
  Allocation best;               ///< minimises bound_seconds among those that fit (ties: first found)
  double bound_seconds = std::numeric_limits<double>::infinity();
  long evaluations = 0;          ///< allocations evaluated
};

/// Exhaustive oracle for the MILP: the allocation that fits memory with the smallest
/// bound_seconds (the MILP objective), over the splits the MILP spans: every node alike
/// (mixed splits are the local search's). O(#allocations · layers).
inline EnumerationResult enumerate_best_bound(const AnalyticModel& model) {
  EnumerationResult r;
  for_each_allocation(model, [&](const Allocation& x) {
    if (x.mixed_nodes != 0) return;
    ++r.evaluations;
    const StepEstimate e = model.estimate(x);
    if (e.fits() && e.bound_seconds < r.bound_seconds) {
      r.found = true;
      r.best = x;
      r.bound_seconds = e.bound_seconds;
    }
  });
  return r;
}

}  // namespace disagmoe::plan
