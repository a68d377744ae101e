// SPDX-License-Identifier: Apache-2.0
/// @file adaptive_allocator.hpp
/// `AdaptiveAllocator`: DisagMoE's adaptive worker allocation (arXiv 2605.11005). The MILP
/// of allocation_milp.hpp gives a seed (the split of GPUs and NICs between attention
/// and FFN groups and the number of group pairs that minimises the pipeline stage
/// bound), which a local search refines with a pluggable `step_time_oracle` (the
/// analytic model by default; the simulator or measured step times later). The
/// result is a `Plan` (plan.hpp).
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/milp/branch_and_bound.hpp>
#include <disagmoe/milp/result.hpp>
#include <disagmoe/plan/allocation_enumeration.hpp>
#include <disagmoe/plan/allocation_milp.hpp>
#include <disagmoe/plan/analytic_model.hpp>
#include <disagmoe/plan/local_search.hpp>
#include <disagmoe/plan/plan.hpp>
#include <disagmoe/plan/step_time_oracle.hpp>

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace disagmoe::plan {

/// Outcome of solving the allocation MILPs.
struct MilpSeed {
  bool found = false;        ///< an allocation that fits exists
  Allocation allocation;     ///< the optimum (over the allowed recompute settings)
  double bound_seconds = 0;  ///< its objective in seconds per micro-batch
  long nodes = 0;            ///< branch-and-bound nodes of the solve
  milp::Status status = milp::Status::kInfeasible;  ///< status of the solve
};

/// Solves the allocation MILP (every allowed recompute setting of each side in one program, with
/// the even-NIC-split cutoff of build_allocation_milp; `prune` = false solves the
/// whole program). Throws SolverError when the solve ends neither optimal nor infeasible.
inline MilpSeed solve_allocation_milp(const AnalyticModel& model, const milp::Options& options = {},
                                      bool prune = true) {
  MilpSeed seed;
  const AllocationMilp f = build_allocation_milp(model, prune);
  const milp::Result r = milp::solve(f.problem, options);
  seed.nodes = r.nodes;
  seed.status = r.status;
  if (r.status == milp::Status::kInfeasible) return seed;
  if (r.status != milp::Status::kOptimal)
    fail<SolverError>("allocation milp status", milp::to_string(r.status), "optimal or infeasible");
  seed.found = true;
  seed.allocation = f.decode(r.solution);
  seed.bound_seconds = r.objective / AllocationMilp::kMs;
  return seed;
}

/// The memory of the valid allocation of `model` that comes closest to fitting (smallest
/// largest worker over capacity), with that ratio. O(#allocations · layers).
inline std::pair<FitReport, double> closest_fit(const AnalyticModel& model) {
  double best = std::numeric_limits<double>::infinity();
  FitReport closest;
  for_each_allocation(model, [&](const Allocation& x) {
    const FitReport r = model.memory(x);
    const double over = std::max(r.attention_worker.total(), r.ffn_worker.total()) / r.capacity;
    if (over < best) {
      best = over;
      closest = r;
    }
  });
  return {closest, best};
}

/// For every pair count p with an allocation that fits, the one the analytic model
/// predicts fastest (ties: the first enumerated), by increasing p.
/// O(#allocations · layers).
inline std::vector<Allocation> fastest_per_pair_count(const AnalyticModel& model) {
  std::map<int, std::pair<double, Allocation>> best;
  // Memory depends on neither the NICs nor fusion, which for_each_allocation varies
  // innermost: one check per split and recomputation.
  std::optional<Allocation> checked;
  bool checked_fits = false;
  for_each_allocation(model, [&](const Allocation& x) {
    Allocation key = x;
    key.attention_nics_per_node = key.ffn_nics_per_node = 0;
    key.fuse = true;
    if (key != checked) {
      checked = key;
      checked_fits = model.memory(x).fits();
    }
    if (!checked_fits) return;
    const StepEstimate e = model.estimate(x);
    const auto [it, fresh] = best.try_emplace(x.groups, e.step_seconds, x);
    if (!fresh && e.step_seconds < it->second.first) it->second = {e.step_seconds, x};
  });
  std::vector<Allocation> v;
  for (const auto& [p, entry] : best) v.push_back(entry.second);
  return v;
}

/// The local search's seed: the allocation MILP's optimum (solve_allocation_milp), or,
/// where no uniform split fits but a mixed one does (Allocation::mixed_nodes: the MILP
/// spans uniform splits), the analytically fastest allocation that fits, with its
/// bound. Not found when nothing fits. O(MILP) + O(#allocations · layers) in that case.
inline MilpSeed allocation_seed(const AnalyticModel& model, const milp::Options& options = {}) {
  MilpSeed s = solve_allocation_milp(model, options);
  if (s.found) return s;
  double fastest = std::numeric_limits<double>::infinity();
  for (const Allocation& x : fastest_per_pair_count(model)) {
    const StepEstimate e = model.estimate(x);
    if (e.step_seconds < fastest) {
      fastest = e.step_seconds;
      s.found = true;
      s.allocation = x;
      s.bound_seconds = e.bound_seconds;
    }
  }
  return s;
}

/// `search` with the analytic model's fastest allocation at every pair count
/// (fastest_per_pair_count) but `except_groups` added to its starts, the analytically
/// fastest first (the starts get at most half of a small budget). For a local search with
/// the analytic model: moves of one pair count at a time rarely cross from the MILP's seed, whose
/// separable objective has no round trip, to a pair count the full model ranks faster
/// (Qwen3-235B 4K with a ping-pong group of p waves: 22.9 s at p = 16 from the seed,
/// 20.5 s at p = 32). O(#allocations · layers).
inline SearchOptions with_pair_count_starts(const AnalyticModel& model, SearchOptions search,
                                            int except_groups = 0) {
  std::vector<std::pair<double, Allocation>> starts;
  for (const Allocation& x : fastest_per_pair_count(model))
    if (x.groups != except_groups) starts.emplace_back(model.estimate(x).step_seconds, x);
  std::stable_sort(starts.begin(), starts.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [step, x] : starts) search.starts.push_back(x);
  return search;
}

/// `o` with its automatic choices resolved: PlanOptions::context_parallel (0: each of
/// context_parallel_degrees) and PlanOptions::group_factor (0: 2, then 1), each as given
/// when set. Of the combinations, the one whose plan (MILP seed + analytic local search, also from
/// every pair count's analytic best: with_pair_count_starts)
/// predicts the shortest step among those that fit memory, the earlier on ties (smaller
/// degree, factor 2 first); when none fits, the combination whose closest allocation
/// overflows least (closest_fit: planning then reports what does not fit even there). Splitting sequences
/// multiplies the micro-batches, so where few long sequences make a step (the pipeline cannot fill) it can
/// shorten the step several times over; a factor of 1 halves the activations in flight where memory binds.
/// Validates the inputs (ConfigError). One MILP solve, one enumeration (the starts) and one
/// local search per combination.
inline PlanOptions resolve_automatic(const ModelSpec& m, const ClusterSpec& c, PlanOptions o,
                                     const milp::Options& options = {}) {
  validate(m);
  validate(c);
  validate(o, m);
  if (o.context_parallel >= 1 && o.group_factor >= 1) return o;
  const std::vector<int> degrees = o.context_parallel >= 1 ? std::vector<int>{o.context_parallel}
                                                           : context_parallel_degrees(m, c.gpus_per_node);
  const std::vector<int> factors =
      o.group_factor >= 1 ? std::vector<int>{o.group_factor} : std::vector<int>{2, 1};
  double best = std::numeric_limits<double>::infinity();
  PlanOptions choice = o;
  choice.context_parallel = degrees.front();
  choice.group_factor = factors.front();
  double least_over = std::numeric_limits<double>::infinity();  // while nothing fits
  for (int cp : degrees)
    for (int k : factors) {
      PlanOptions t = o;
      t.context_parallel = cp;
      t.group_factor = k;
      const AnalyticModel model(m, c, t);
      const MilpSeed seed = allocation_seed(model, options);
      if (!seed.found) {
        const double over = std::isinf(best) ? closest_fit(model).second : least_over;
        if (over < least_over) {
          least_over = over;
          choice = t;
        }
        continue;
      }
      const double step =
          local_search(model, AnalyticOracle{&model}, seed.allocation, with_pair_count_starts(model, {}))
              .best_step_seconds;
      if (step < best) {
        best = step;
        choice = t;
      }
    }
  return choice;
}

/// Plans a model on a cluster. Construction validates the inputs (ConfigError) and
/// resolves the automatic choices of `o` (resolve_automatic).
class AdaptiveAllocator {
 public:
  AdaptiveAllocator(ModelSpec m, ClusterSpec c, PlanOptions o = {})
      : model_(m, c, resolve_automatic(m, c, std::move(o))) {}

  /// The analytic model every stage uses.
  [[nodiscard]] const AnalyticModel& model() const { return model_; }

  /// The MILP seed (allocation_seed). Throws ConfigError when no valid allocation exists
  /// and the out-of-memory error of `require_fit` (naming the worker type, bytes needed
  /// and available) when none fits memory.
  [[nodiscard]] MilpSeed seed(const milp::Options& options = {}) const {
    bool any = false;
    for_each_allocation(model_, [&](const Allocation&) { any = true; });
    const int cp = model_.options().context_parallel;
    expect(
        any, "cluster", model_.cluster().name,
        "room for at least one attention and one FFN group (GPUs per node >= 2, expert count divisible by an "
        "FFN group size, global_batch >= the attention group size" +
            (cp > 1 ? ", and an attention group of context_parallel = " + std::to_string(cp) +
                          " GPUs beside an FFN group: try a smaller context_parallel)"
                    : std::string(")")));
    MilpSeed s = allocation_seed(model_, options);
    if (!s.found) diagnose_out_of_memory();
    return s;
  }

  /// Seed + local search with `oracle`; returns the refined plan.
  template <step_time_oracle O>
  [[nodiscard]] Plan plan(const O& oracle, const SearchOptions& search = {}, const milp::Options& options = {}) const {
    const MilpSeed s = seed(options);
    const SearchResult r = local_search(model_, oracle, s.allocation, search);
    expect(std::isfinite(r.best_step_seconds), "step_seconds", r.best_step_seconds,
           "a finite step time from the oracle at the seed or a neighbour");
    return make_plan(model_, r.best, r, s.bound_seconds, s.nodes);
  }

  /// Seed + local search with the analytic model as the oracle, also from every pair
  /// count's analytically fastest allocation (with_pair_count_starts).
  [[nodiscard]] Plan plan(const SearchOptions& search = {}, const milp::Options& options = {}) const {
    return plan(AnalyticOracle{&model_}, with_pair_count_starts(model_, search), options);
  }

  /// `p` (a plan of this allocator) refined by a second local search from its
  /// allocation with `oracle` (Refinement), which also tries, budget allowing, the
  /// analytic model's fastest allocation at every other pair count
  /// (fastest_per_pair_count, analytically fastest first, on at most half the budget)
  /// and descends from the fastest: the analytic model's error
  /// grows with the layers a pair holds, so its ranking across pair counts is where it
  /// misleads most, and steps of one pair count at a time rarely cross the gap. The
  /// allocation becomes the second search's
  /// best when the oracle can run there (finite step time), and everything derived
  /// from it (predicted, groups, roofline, binding) follows; the first search's record
  /// (seed, step_seconds, evaluations) is kept. A plan whose `oracle` is +inf
  /// everywhere it looked keeps its allocation, with the +inf recorded.
  template <step_time_oracle O>
  [[nodiscard]] Plan refine(const Plan& p, const O& oracle, SearchOptions search) const {
    const SearchResult r = local_search(
        model_, oracle, p.allocation, with_pair_count_starts(model_, std::move(search), p.allocation.groups));
    const SearchResult first{p.seed, p.seed_step_seconds, p.allocation, p.step_seconds, p.evaluations,
                             p.budget_exhausted};
    Plan q = make_plan(model_, r.best, first, p.seed_bound_seconds, p.milp_nodes);
    q.refinement = {true, p.allocation, r.seed_step_seconds, r.best_step_seconds, r.evaluations, r.budget_exhausted, {}};
    return q;
  }

 private:
  // Nothing fits: report the allocation that comes closest (smallest overflow ratio)
  // so the error names the worker type that cannot fit even at its best.
  [[noreturn]] void diagnose_out_of_memory() const {
    const FitReport closest = closest_fit(model_).first;
    require_fit(closest, " even in the allocation that needs the least memory on " + model_.cluster().name +
                             " (context parallelism " + std::to_string(model_.context_parallel()) +
                             ", ping-pong group " + std::to_string(model_.group_factor()) + "p)");
    fail("memory", "inconsistent", "a fitting allocation to be found by the MILP");  // unreachable in theory
  }

  AnalyticModel model_;
};

}  // namespace disagmoe::plan
