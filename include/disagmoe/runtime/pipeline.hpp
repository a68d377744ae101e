// SPDX-License-Identifier: Apache-2.0
/// @file pipeline.hpp
/// `Pipeline<Policy, Attention, Experts, Transport, Backend>`: a training pipeline composed
/// at compile time from a schedule policy (`schedule::AFPipe`, or the colocated
/// expert-parallel baselines `schedule::OneFOneB` and `schedule::A2AOverlap`), the two
/// stages' computes, a transport and a back end, as a user names it in their trainer:
///
/// ```cpp
/// using Pipeline = disagmoe::runtime::Pipeline<disagmoe::schedule::AFPipe, MyAttention, MyExperts,
///                                              disagmoe::mpi::Transport>;
/// Pipeline trainer(disagmoe::schedule::AFPipe{}, MyAttention(...), MyExperts(...), spec, train, layout, world);
/// ```
///
/// It is a `DisaggregatedTrainer` whose schedule comes from the policy type (and the
/// policy value's knobs) instead of `DisaggregatedOptions::schedule`; the same op lists the
/// simulator runs for that policy drive the workers (DisagMoE, arXiv 2605.11005: one
/// schedule, simulated and executed). A wrong argument is one error naming the concept
/// it violates (tests/runtime/compile_fail/disaggregated_trainer_arguments.cpp).
#pragma once

#include <disagmoe/runtime/disaggregated_trainer.hpp>
#include <disagmoe/schedule/afpipe.hpp>
#include <disagmoe/schedule/baselines.hpp>
#include <disagmoe/schedule/policy.hpp>

#include <concepts>
#include <utility>

namespace disagmoe::runtime {

/// How the runtime runs schedule policy `P`: `kind` selects the worker layout (AF-Pipe's
/// disjoint attention and FFN workers, or colocated stages) and `apply` copies the
/// policy's knobs into the options. Undefined for policies the runtime cannot execute
/// (DualPipe, the chunked overlap): they stay simulator-only.
template <class P>
struct executable_schedule_traits;

template <>
struct executable_schedule_traits<schedule::AFPipe> {
  static constexpr ScheduleKind kind = ScheduleKind::kAfPipe;
  static void apply(const schedule::AFPipe& p, DisaggregatedOptions& o) { o.policy = p; }
};

template <>
struct executable_schedule_traits<schedule::OneFOneB> {
  static constexpr ScheduleKind kind = ScheduleKind::kOneFOneB;
  static void apply(const schedule::OneFOneB&, DisaggregatedOptions&) {}  // no knobs
};

template <>
struct executable_schedule_traits<schedule::A2AOverlap> {
  static constexpr ScheduleKind kind = ScheduleKind::kA2AOverlap;
  static void apply(const schedule::A2AOverlap& p, DisaggregatedOptions& o) { o.a2a_overlap = p; }
};

/// A schedule policy the runtime can execute on real workers: a `schedule_policy` with
/// `executable_schedule_traits` (specialise them to teach the runtime a new layout).
template <class P>
concept executable_schedule = schedule::schedule_policy<P> && requires(const P& p, DisaggregatedOptions& o) {
  { executable_schedule_traits<P>::kind } -> std::convertible_to<ScheduleKind>;
  executable_schedule_traits<P>::apply(p, o);
};

/// `layout` with its schedule fields replaced by `policy`'s (kind and knobs); the rest
/// (pairs, ranks per worker, exchange, placement, rates, deadline) is kept.
template <executable_schedule Policy>
[[nodiscard]] DisaggregatedOptions with_schedule(const Policy& policy, DisaggregatedOptions layout) {
  layout.schedule = executable_schedule_traits<Policy>::kind;
  executable_schedule_traits<Policy>::apply(policy, layout);
  return layout;
}

/// Calls `f(policy)` with the policy value `options` selects at run time
/// (`options.schedule` and its knobs), so a program that takes the schedule from its
/// command line can still name a `Pipeline` type per policy. Returns what `f` returns
/// (the same type for every policy).
template <class F>
decltype(auto) visit_schedule(const DisaggregatedOptions& options, F&& f) {
  switch (options.schedule) {
    case ScheduleKind::kAfPipe: return std::forward<F>(f)(options.policy);
    case ScheduleKind::kOneFOneB: return std::forward<F>(f)(schedule::OneFOneB{});
    case ScheduleKind::kA2AOverlap: return std::forward<F>(f)(options.a2a_overlap);
  }
  fail("DisaggregatedOptions.schedule", static_cast<int>(options.schedule), "afpipe, 1f1b or a2a-overlap");
}

/// See the file comment. Construction is collective over `world`, as for
/// `DisaggregatedTrainer`, whose interface it has.
template <executable_schedule Policy, attention_compute Attention, expert_compute Experts, comm::transport Transport,
          comm::backend Backend = host::Backend>
class Pipeline : public DisaggregatedTrainer<Attention, Experts, Transport, Backend> {
  using Base = DisaggregatedTrainer<Attention, Experts, Transport, Backend>;

 public:
  using policy_type = Policy;

  /// `layout`: how the workers are laid out (its schedule fields are replaced by
  /// `policy`'s); the other arguments as `DisaggregatedTrainer`'s.
  Pipeline(Policy policy, Attention attention, Experts experts, const ModelSpec& spec, TrainOptions train,
           DisaggregatedOptions layout, Transport& world, StageOptions stage = {})
      : Base(std::move(attention), std::move(experts), spec, train, with_schedule(policy, std::move(layout)), world,
             stage) {}
};

}  // namespace disagmoe::runtime
