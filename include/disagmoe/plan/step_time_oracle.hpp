// SPDX-License-Identifier: Apache-2.0
/// @file step_time_oracle.hpp
/// The `step_time_oracle` concept: anything that predicts or measures the optimizer
/// step time of an allocation — the analytic model (local_search.hpp), the
/// schedule simulator, measured step times — so the allocator's local search can be
/// driven by any of them (DisagMoE, arXiv 2605.11005: "refined by local search using measured
/// per-step times to account for overheads the model misses").
///
/// Shape taken from stdexec (`__detail/__sender_concepts.hpp`): a model opts in with
/// `using oracle_concept = disagmoe::plan::step_time_oracle_tag;` and must also
/// satisfy the structural requirement, so a type with a similar member by accident is
/// never an oracle.
#pragma once

#include <disagmoe/plan/analytic_model.hpp>

#include <concepts>
#include <type_traits>

namespace disagmoe::plan {

/// Opt-in tag: an oracle declares `using oracle_concept = step_time_oracle_tag;`.
struct step_time_oracle_tag {};

/// True when `T` opted in with an `oracle_concept` derived from `step_time_oracle_tag`.
template <class T>
inline constexpr bool enable_step_time_oracle = requires {
  typename T::oracle_concept;
  requires std::derived_from<typename T::oracle_concept, step_time_oracle_tag>;
};

/// An oracle `O` answers `o.step_seconds(allocation)`: the step time in seconds of a
/// structurally valid allocation (AnalyticModel::valid), +infinity when it cannot run
/// (out of memory). It may be slow (a simulation, a measurement); the local search
/// calls it once per distinct allocation. Calls through a const reference.
template <class O>
concept step_time_oracle =
    enable_step_time_oracle<std::remove_cvref_t<O>> && requires(const std::remove_cvref_t<O>& o, const Allocation& a) {
      { o.step_seconds(a) } -> std::convertible_to<double>;
    };

}  // namespace disagmoe::plan
