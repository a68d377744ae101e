// SPDX-License-Identifier: Apache-2.0
/// @file plan_oracle.hpp
/// The one conversion from a planner allocation (plan::AnalyticModel + plan::Allocation,
/// i.e. a Plan and the options it was made with) to a simulated AF-Pipe problem, and the
/// simulator as the planner's step-time oracle (plan/step_time_oracle.hpp): the
/// allocator's local search can rank allocations by simulated AF-Pipe step time, which
/// sees pipeline fill/drain, link sharing, ping-pong depth and memory that the analytic
/// model abstracts away. disagmoe-sim --plan, the oracle and the tests all go through
/// `planned_simulation`, so no field of the plan is dropped on the way.
#pragma once

#include <disagmoe/plan/adaptive_allocator.hpp>
#include <disagmoe/plan/analytic_model.hpp>
#include <disagmoe/plan/step_time_oracle.hpp>
#include <disagmoe/schedule/schedules.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>

namespace disagmoe::schedule {

/// AF-Pipe's layout for allocation `a` (every field but `recompute` and
/// `context_parallel`, which are costs, and `fuse`, which is a knob of the policy:
/// planned_simulation carries all three).
inline AfLayout af_layout(const plan::Allocation& a) {
  return {a.groups,
          a.attention_gpus_per_node,
          a.ffn_gpus_per_node,
          a.attention_nics_per_node,
          a.ffn_nics_per_node,
          a.mixed_nodes};
}

/// The allocation of layout `l` with recomputation `recompute`, stage-aligned fusion
/// `fuse`, context parallelism `context_parallel` and ping-pong group factor
/// `group_factor` (inverse of af_layout).
inline plan::Allocation allocation_of(const AfLayout& l, plan::Recompute recompute, bool fuse = true,
                                      int context_parallel = 1, int group_factor = 2) {
  return {l.groups,
          l.attention_gpus_per_node,
          l.ffn_gpus_per_node,
          l.attention_nics_per_node,
          l.ffn_nics_per_node,
          recompute,
          fuse,
          context_parallel,
          group_factor,
          l.mixed_nodes};
}

/// The simulator's costs for planner options `o` on model `m` and allocation `x`: the
/// same efficiencies, training state (recomputation as `x` says), deduplication, usable
/// HBM, batch (resolved: o.global_batch or the default) and context parallelism (`x`'s).
inline CostOptions cost_options(const plan::PlanOptions& o, const ModelSpec& m, const plan::Allocation& x) {
  CostOptions c;
  c.efficiency = o.efficiency;
  c.memory = o.memory;
  c.memory.recompute = x.recompute;
  c.dedup = o.dedup;
  c.global_batch = plan::global_batch_of(o, m);
  c.memory_fraction = o.memory_fraction;
  c.context_parallel = x.context_parallel;
  c.embedding_head = o.embedding_head;
  return c;
}

/// The planner options that `cost_options` maps onto `c` and `k` (its inverse on every
/// field the step depends on; the search-only fields recompute policy and max_groups
/// keep their defaults, the recomputation itself travels in the allocation).
inline plan::PlanOptions plan_options(const CostOptions& c, const PolicyKnobs& k) {
  plan::PlanOptions o;
  o.global_batch = c.global_batch;
  o.efficiency = c.efficiency;
  o.memory = c.memory;
  o.memory.recompute = plan::kDefaultMemory.recompute;
  o.dedup = c.dedup;
  o.memory_fraction = c.memory_fraction;
  o.m2n_uses_sms = k.af_uses_sms;
  o.context_parallel = c.context_parallel;
  o.embedding_head = c.embedding_head;
  return o;
}

/// Everything a simulation of allocation `x` under `model` needs.
struct PlannedSimulation {
  AfLayout layout;
  CostOptions cost;
  PolicyKnobs knobs;  ///< AF-Pipe: the planner's ping-pong group, fusion and M2N transport
};

/// The simulation of allocation `x` of `model`: its layout, its costs (cost_options)
/// and AF-Pipe's knobs — ping-pong group x.group_factor × p (plan::af_group_size; the schedule clamps it
/// to the micro-batches, and keeps two groups in flight, plan::af_in_flight, as the
/// planner's memory model assumes), the allocation's fusion choice and the M2N transport
/// of PlanOptions::m2n_uses_sms.
/// The cluster (with its SM shares of comm kernels) is model.cluster(). O(1).
inline PlannedSimulation planned_simulation(const plan::AnalyticModel& model, const plan::Allocation& x) {
  PlannedSimulation s;
  s.layout = af_layout(x);
  s.cost = cost_options(model.options(), model.model(), x);
  s.knobs.af_group_size = x.group_factor * x.groups;
  s.knobs.af_uses_sms = model.options().m2n_uses_sms;
  s.knobs.af_fuse = x.fuse;
  return s;
}

/// The AF-Pipe Problem of allocation `x` of `model` (planned_simulation, then af_problem).
inline Problem af_problem(const plan::AnalyticModel& model, const plan::Allocation& x) {
  const PlannedSimulation s = planned_simulation(model, x);
  return af_problem(model.model(), model.cluster(), s.layout, s.cost);
}

/// Simulates allocation `x` of `model` under AF-Pipe (layout and knobs of
/// planned_simulation). Throws ConfigError when the layout cannot run.
inline Simulated simulate_plan(const plan::AnalyticModel& model, const plan::Allocation& x) {
  const PlannedSimulation s = planned_simulation(model, x);
  return simulate_best(AFPipe::kName, model.model(), model.cluster(), s.cost, s.knobs, 0, s.layout);
}

/// Step-time oracle backed by one AF-Pipe simulation per allocation, converted by
/// planned_simulation from the planner's own model and options. step_seconds is
/// +infinity for an allocation whose layout is invalid, deadlocks or exceeds
/// HBM × memory_fraction. O(simulation) per call, typically milliseconds.
class SimulatedStepTime {
 public:
  using oracle_concept = plan::step_time_oracle_tag;

  SimulatedStepTime(ModelSpec model, ClusterSpec cluster, plan::PlanOptions options = {})
      : model_(std::move(model), std::move(cluster), std::move(options)) {}

  /// AF-Pipe's layout for allocation `a`.
  [[nodiscard]] static AfLayout layout(const plan::Allocation& a) { return af_layout(a); }

  /// Simulated seconds of one optimizer step under allocation `a`.
  [[nodiscard]] double step_seconds(const plan::Allocation& a) const {
    const PlannedSimulation s = planned_simulation(model_, a);
    return simulated_step_seconds(model_.model(), model_.cluster(), s.layout, s.cost, s.knobs);
  }

 private:
  plan::AnalyticModel model_;
};

static_assert(plan::step_time_oracle<SimulatedStepTime>);

/// Simulations a plan's refinement runs at most by default: a local optimum takes 10–70
/// on the bench grid.
inline constexpr long kRefineEvaluations = 100;

/// Simulated ops a plan's default refinement spends at most, all simulations together
/// (about 2–10 s on the 2-core VM of bench/RESULTS.md, where large timelines simulate at
/// about 1 M ops/s with their construction).
inline constexpr double kRefineOps = 1e7;

/// The simulator as the refinement's oracle, restricted to allocations that fit the
/// planner's memory model: the simulator's peak memory is lower than the planner's
/// bound, and a plan must keep the limit its own memory figures state.
class FittingSimulatedStepTime {
 public:
  using oracle_concept = plan::step_time_oracle_tag;
  explicit FittingSimulatedStepTime(const plan::AnalyticModel& model)
      : model_(&model), sim_(model.model(), model.cluster(), model.options()) {}
  /// Simulated step seconds of `a`; +inf where the planner's memory model says it does not fit.
  [[nodiscard]] double step_seconds(const plan::Allocation& a) const {
    return model_->estimate(a).fits() ? sim_.step_seconds(a) : std::numeric_limits<double>::infinity();
  }

 private:
  const plan::AnalyticModel* model_;  // not owned
  SimulatedStepTime sim_;
};

static_assert(plan::step_time_oracle<FittingSimulatedStepTime>);

/// The planner's plan, checked and refined by simulation: the analytic search's choice
/// (MILP seed + local search) is the start of a second local search whose oracle is the
/// simulator (FittingSimulatedStepTime). Where few micro-batches circulate (p <= 4) the
/// analytic model is 10–37% optimistic and the simulator often prefers a neighbour
/// (bench/RESULTS.md, issue 15).
///  - `evaluations` given: at most that many simulations (0: the analytic plan as is);
///    each must fit the work and memory budgets (expect_timeline_fits, its errors naming
///    `fields`);
///  - not given: as many as kRefineOps simulated ops allow at this plan's timeline size,
///    at most kRefineEvaluations, and none, said in Refinement::skipped, when one
///    simulation exceeds the budgets.
inline plan::Plan simulated_plan(const plan::AdaptiveAllocator& allocator, std::optional<long> evaluations = {},
                                 const TimelineFields& fields = {}) {
  if (evaluations) expect(*evaluations >= 0, "refine evaluations", *evaluations, "a number of simulations >= 0");
  plan::Plan p = allocator.plan();
  if (evaluations == 0L) return p;
  const plan::AnalyticModel& m = allocator.model();
  const CostOptions cost = cost_options(m.options(), m.model(), p.allocation);
  if (evaluations) {
    expect_timeline_fits(AFPipe::kName, m.model(), cost, 1, fields);
  } else {
    const TimelineCost t = timeline_cost(AFPipe::kName, m.model(), cost);
    if (!within_budgets(t)) {
      p.refinement.skipped = "one simulation of this plan (" + std::to_string(t.ops) +
                             " ops) exceeds the work or memory budget (--max-ops, --max-memory)";
      return p;
    }
    evaluations = std::clamp<long>(static_cast<long>(kRefineOps / static_cast<double>(std::max<std::int64_t>(1, t.ops))),
                                   1, kRefineEvaluations);
  }
  return allocator.refine(p, FittingSimulatedStepTime(m), {*evaluations});
}

}  // namespace disagmoe::schedule
