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
#include <disagmoe/plan/allocation.hpp>
#include <disagmoe/plan/allocation_milp.hpp>
#include <disagmoe/plan/local_search.hpp>
#include <disagmoe/plan/plan.hpp>
#include <disagmoe/plan/step_time_oracle.hpp>

#include <limits>
#include <string>

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

/// `o` with PlanOptions::context_parallel resolved: as given when >= 1; for 0 (auto)
/// the degree of context_parallel_degrees whose plan (MILP seed + analytic local
/// search) predicts the shortest step among those that fit memory, the smaller on
/// ties; 1 when none fits (its planning then reports what does not). Splitting
/// sequences multiplies the micro-batches, so where few long sequences make a step (the
/// pipeline cannot fill) it can shorten the step several times over. Validates the
/// inputs (ConfigError). One MILP solve and local search per degree.
inline PlanOptions resolve_context_parallel(const ModelSpec& m, const ClusterSpec& c, PlanOptions o,
                                            const milp::Options& options = {}) {
  validate(m);
  validate(c);
  validate(o, m);
  if (o.context_parallel >= 1) return o;
  double best = std::numeric_limits<double>::infinity();
  int choice = 1;
  for (int cp : context_parallel_degrees(m, c.gpus_per_node)) {
    o.context_parallel = cp;
    const AnalyticModel model(m, c, o);
    const MilpSeed seed = solve_allocation_milp(model, options);
    if (!seed.found) continue;
    const double step = local_search(model, AnalyticOracle{&model}, seed.allocation).best_step_seconds;
    if (step < best) {
      best = step;
      choice = cp;
    }
  }
  o.context_parallel = choice;
  return o;
}

/// Plans a model on a cluster. Construction validates the inputs (ConfigError) and
/// resolves an automatic context-parallel degree (resolve_context_parallel).
class AdaptiveAllocator {
 public:
  AdaptiveAllocator(ModelSpec m, ClusterSpec c, PlanOptions o = {})
      : model_(m, c, resolve_context_parallel(m, c, std::move(o))) {}

  /// The analytic model every stage uses.
  [[nodiscard]] const AnalyticModel& model() const { return model_; }

  /// The MILP seed. Throws ConfigError when no valid allocation exists and the
  /// out-of-memory error of `require_fit` (naming the worker type, bytes needed and
  /// available) when none fits memory.
  [[nodiscard]] MilpSeed seed(const milp::Options& options = {}) const {
    bool any = false;
    for_each_allocation(model_, [&](const Allocation&) { any = true; });
    expect(any, "cluster", model_.cluster().name,
           "room for at least one attention and one FFN group (GPUs per node >= 2, expert count divisible by an "
           "FFN group size, global_batch >= the attention group size)");
    MilpSeed s = solve_allocation_milp(model_, options);
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

  /// Seed + local search with the analytic model as the oracle.
  [[nodiscard]] Plan plan(const SearchOptions& search = {}, const milp::Options& options = {}) const {
    return plan(AnalyticOracle{&model_}, search, options);
  }

  /// `p` (a plan of this allocator) refined by a second local search from its
  /// allocation with `oracle` (Refinement). The allocation becomes the second search's
  /// best when the oracle can run there (finite step time), and everything derived
  /// from it (predicted, groups, roofline, binding) follows; the first search's record
  /// (seed, step_seconds, evaluations) is kept. A plan whose `oracle` is +inf
  /// everywhere it looked keeps its allocation, with the +inf recorded.
  template <step_time_oracle O>
  [[nodiscard]] Plan refine(const Plan& p, const O& oracle, const SearchOptions& search) const {
    const SearchResult r = local_search(model_, oracle, p.allocation, search);
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
    double best = std::numeric_limits<double>::infinity();
    FitReport closest;
    for_each_allocation(model_, [&](const Allocation& x) {
      const FitReport r = model_.memory(x);
      const double over = std::max(r.attention_worker.total(), r.ffn_worker.total()) / r.capacity;
      if (over < best) {
        best = over;
        closest = r;
      }
    });
    require_fit(closest, " even in the allocation that needs the least memory on " + model_.cluster().name);
    fail("memory", "inconsistent", "a fitting allocation to be found by the MILP");  // unreachable in theory
  }

  AnalyticModel model_;
};

}  // namespace disagmoe::plan
