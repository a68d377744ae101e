// SPDX-License-Identifier: Apache-2.0
/// @file plan_oracle.hpp
/// The simulator as the planner's step-time oracle (plan/step_time_oracle.hpp): the
/// allocator's local search can rank allocations by simulated AF-Pipe step time, which
/// sees pipeline fill/drain, link sharing, ping-pong depth and memory that the
/// analytic model abstracts away.
#pragma once

#include <disagmoe/plan/allocation.hpp>
#include <disagmoe/plan/step_time_oracle.hpp>
#include <disagmoe/schedule/schedules.hpp>

#include <utility>

namespace disagmoe::schedule {

/// Step-time oracle backed by one AF-Pipe simulation per allocation. Costs come from
/// `cost` (the allocation's `recompute` flag overrides cost.memory.recompute).
/// step_seconds is +infinity for an allocation whose layout is invalid, deadlocks or
/// exceeds HBM × cost.memory_fraction. O(simulation) per call, typically milliseconds.
class SimulatedStepTime {
 public:
  using oracle_concept = plan::step_time_oracle_tag;

  SimulatedStepTime(ModelSpec model, ClusterSpec cluster, CostOptions cost = {}, PolicyKnobs knobs = {})
      : model_(std::move(model)), cluster_(std::move(cluster)), cost_(std::move(cost)), knobs_(knobs) {}

  /// AF-Pipe's layout for allocation `a`.
  [[nodiscard]] static AfLayout layout(const plan::Allocation& a) {
    return {a.groups, a.attention_gpus_per_node, a.ffn_gpus_per_node, a.attention_nics_per_node,
            a.ffn_nics_per_node};
  }

  /// Simulated seconds of one optimizer step under allocation `a`.
  [[nodiscard]] double step_seconds(const plan::Allocation& a) const {
    CostOptions o = cost_;
    o.memory.recompute = a.recompute;
    return simulated_step_seconds(model_, cluster_, layout(a), o, knobs_);
  }

 private:
  ModelSpec model_;
  ClusterSpec cluster_;
  CostOptions cost_;
  PolicyKnobs knobs_;
};

static_assert(plan::step_time_oracle<SimulatedStepTime>);

}  // namespace disagmoe::schedule
