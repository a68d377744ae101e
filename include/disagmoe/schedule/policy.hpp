// SPDX-License-Identifier: Apache-2.0
/// @file policy.hpp
/// The `schedule_policy` concept: an opt-in tag plus a structural check (stdexec's
/// `sender_concept` idiom).
#pragma once

#include <disagmoe/schedule/op.hpp>
#include <disagmoe/schedule/problem.hpp>

#include <concepts>
#include <string_view>

namespace disagmoe::schedule {

/// Tag a policy names as `using policy_concept = schedule_policy_tag;` to opt in.
struct schedule_policy_tag {};

/// A schedule policy: a small value type that turns a Problem into a Schedule.
/// `P::kName` is the command-line name ("1f1b"); `p.build(problem)` returns the
/// per-worker, per-stream op lists and throws ConfigError for sizes it cannot handle.
template <class P>
concept schedule_policy =
    std::derived_from<typename P::policy_concept, schedule_policy_tag> &&
    requires(const P& p, const Problem& problem) {
      { P::kName } -> std::convertible_to<std::string_view>;
      { p.build(problem) } -> std::same_as<Schedule>;
    };

}  // namespace disagmoe::schedule
