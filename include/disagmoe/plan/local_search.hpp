// SPDX-License-Identifier: Apache-2.0
/// @file local_search.hpp
/// Local search over allocations around a seed, driven by any `step_time_oracle`
/// (DisagMoE, arXiv 2605.11005, "Adaptive worker allocation": the roofline/MILP seed is refined by
/// local search with step times that include what the seed's model leaves out).
#pragma once

#include <disagmoe/plan/analytic_model.hpp>
#include <disagmoe/plan/step_time_oracle.hpp>

#include <cmath>
#include <limits>
#include <map>
#include <tuple>
#include <vector>

namespace disagmoe::plan {

/// The analytic model as a step-time oracle: predicted step seconds, +inf when the
/// allocation does not fit memory.
struct AnalyticOracle {
  using oracle_concept = step_time_oracle_tag;
  const AnalyticModel* model = nullptr;  ///< not owned; must outlive the oracle
  /// Step seconds of `a` (AnalyticModel::estimate), +inf if it does not fit.
  [[nodiscard]] double step_seconds(const Allocation& a) const {
    const StepEstimate e = model->estimate(a);
    return e.fits() ? e.step_seconds : std::numeric_limits<double>::infinity();
  }
};
static_assert(step_time_oracle<AnalyticOracle>);

/// Limits of the search.
struct SearchOptions {
  long max_evaluations = 2000;  ///< oracle calls, the seed included (>= 1)
  /// Further starting points (valid allocations), evaluated after the seed on at most
  /// half the budget: the descent starts from the fastest of them and the seed.
  std::vector<Allocation> starts;
};

/// Outcome of a local search.
struct SearchResult {
  Allocation seed;                ///< where it started
  double seed_step_seconds = 0;   ///< oracle at the seed
  Allocation best;                ///< best allocation found
  double best_step_seconds = 0;   ///< oracle at `best`
  long evaluations = 0;           ///< oracle calls
  bool budget_exhausted = false;  ///< stopped by max_evaluations, not by a local optimum
  /// seed / best step time (>= 1; 1 when the seed is locally optimal).
  [[nodiscard]] double gain() const { return best_step_seconds > 0 ? seed_step_seconds / best_step_seconds : 1.0; }
};

/// Valid neighbours of `x`: move one GPU per node between A and F or into/out of
/// the idle pool, move one GPU from F to A (or back) on one more (fewer) node per pair
/// (Allocation::mixed_nodes), move one NIC per node likewise, change p to the nearest valid
/// value up or down (keeping GPUs per node and mixed nodes, else re-fitting them), toggle
/// one side's recomputation, toggle AF-Pipe's stage-aligned fusion (so that at a local optimum
/// the fusion choice is the faster of the two for its layout). O(gpn + p_max)
/// validity checks.
inline std::vector<Allocation> neighbours(const AnalyticModel& model, const Allocation& x) {
  std::vector<Allocation> out;
  auto add = [&](Allocation y) {
    if (!(y == x) && model.valid(y)) out.push_back(y);
  };
  for (int da : {-1, 0, 1})
    for (int df : {-1, 0, 1}) {
      if (da == 0 && df == 0) continue;
      Allocation y = x;
      y.attention_gpus_per_node += da;
      y.ffn_gpus_per_node += df;
      add(y);
    }
  // One step of the A:F ratio, a + k / nodes: past k = 0 or nodes, the next whole split.
  const int nodes = model.cluster().nodes;
  for (int dk : {-1, 1}) {
    Allocation y = x;
    y.mixed_nodes += dk * x.groups;
    if (y.mixed_nodes >= nodes || y.mixed_nodes < 0) {
      y.attention_gpus_per_node += dk;
      y.ffn_gpus_per_node -= dk;
      y.mixed_nodes = dk > 0 ? 0 : nodes - x.groups;
    }
    add(y);
  }
  for (int da : {-1, 0, 1})
    for (int df : {-1, 0, 1}) {
      if (da == 0 && df == 0) continue;
      Allocation y = x;
      y.attention_nics_per_node += da;
      y.ffn_nics_per_node += df;
      add(y);
    }
  for (int dir : {-1, 1}) {
    for (int p = x.groups + dir; p >= 1 && p <= model.max_groups(); p += dir) {
      Allocation y = x;
      y.groups = p;
      if (!model.valid_mixed(p, y.ffn_gpus_per_node, y.mixed_nodes)) y.mixed_nodes = 0;
      if (model.valid(y)) {
        out.push_back(y);
        break;
      }
      // Same p with the nearest valid GPU counts per node.
      bool found = false;
      for (int a = 1; a < model.cluster().gpus_per_node && !found; ++a)
        for (int f = 1; a + f <= model.cluster().gpus_per_node && !found; ++f) {
          Allocation z = y;
          z.attention_gpus_per_node = a;
          z.ffn_gpus_per_node = f;
          if (model.valid(z) && std::abs(a - x.attention_gpus_per_node) + std::abs(f - x.ffn_gpus_per_node) <= 2) {
            out.push_back(z);
            found = true;
          }
        }
      if (found) break;
    }
  }
  for (bool Recompute::*side : {&Recompute::attention, &Recompute::ffn}) {
    Allocation y = x;
    y.recompute.*side = !(x.recompute.*side);
    add(y);
  }
  {
    Allocation y = x;
    y.fuse = !x.fuse;
    add(y);
  }
  return out;
}

/// Steepest-descent local search from `seed` (which must be valid): evaluates all
/// neighbours of the current allocation, moves to the best if it improves, stops at a
/// local optimum or when `opt.max_evaluations` oracle calls are spent. With
/// `opt.starts`, they are evaluated after the seed (on at most half the budget) and the
/// descent starts from the fastest of all; budget left then also descends from the seed. Each distinct
/// allocation is evaluated once. Deterministic.
template <step_time_oracle O>
SearchResult local_search(const AnalyticModel& model, const O& oracle, const Allocation& seed,
                          const SearchOptions& opt = {}) {
  expect(opt.max_evaluations >= 1, "max_evaluations", opt.max_evaluations, "a positive number of evaluations");
  expect(model.valid(seed), "seed", model.describe_allocation(seed), "a valid allocation");
  for (const Allocation& x : opt.starts)
    expect(model.valid(x), "start", model.describe_allocation(x), "a valid allocation");
  std::map<std::tuple<int, int, int, int, int, bool, bool, bool, int>, double> cache;
  SearchResult r;
  auto eval = [&](const Allocation& a) -> double {
    const auto key = std::tuple{a.groups,
                                a.attention_gpus_per_node,
                                a.ffn_gpus_per_node,
                                a.attention_nics_per_node,
                                a.ffn_nics_per_node,
                                a.recompute.attention,
                                a.recompute.ffn,
                                a.fuse,
                                a.mixed_nodes};
    if (auto it = cache.find(key); it != cache.end()) return it->second;
    ++r.evaluations;
    const double t = static_cast<double>(oracle.step_seconds(a));
    cache.emplace(key, t);
    return t;
  };
  // Descends from `x` (step `t`) to a local optimum or the end of the budget.
  auto descend = [&](Allocation x, double t) {
    for (;;) {
      Allocation next = x;
      double next_t = t;
      for (const Allocation& y : neighbours(model, x)) {
        if (r.evaluations >= opt.max_evaluations) {
          r.budget_exhausted = true;
          break;
        }
        const double u = eval(y);
        if (u < next_t) {
          next = y;
          next_t = u;
        }
      }
      if (!(next_t < t)) break;
      x = next;
      t = next_t;
      if (r.budget_exhausted) break;
    }
    if (t < r.best_step_seconds) {
      r.best = x;
      r.best_step_seconds = t;
    }
  };
  r.seed = r.best = seed;
  r.seed_step_seconds = r.best_step_seconds = eval(seed);
  for (const Allocation& x : opt.starts) {
    if (2 * r.evaluations >= opt.max_evaluations) break;  // at most half the budget on starts
    if (const double t = eval(x); t < r.best_step_seconds) {
      r.best = x;
      r.best_step_seconds = t;
    }
  }
  const Allocation first = r.best;
  descend(first, r.best_step_seconds);
  // Budget left: the seed's own descent too, when it did not start the first.
  if (!r.budget_exhausted && !(first == seed)) descend(seed, r.seed_step_seconds);
  return r;
}

}  // namespace disagmoe::plan
