// SPDX-License-Identifier: Apache-2.0
// Compiled by ctest (tests/plan/CMakeLists.txt) with one CASE_* macro: CASE_model must
// compile; every other case is a near-miss of `step_time_oracle` and must fail.
#include <disagmoe/plan/local_search.hpp>

#include <string>

namespace {

struct Oracle {
#ifndef CASE_no_tag
  using oracle_concept = disagmoe::plan::step_time_oracle_tag;
#endif
#if defined(CASE_wrong_return)
  std::string step_seconds(const disagmoe::plan::Allocation&) const { return "1"; }
#elif defined(CASE_non_const)
  double step_seconds(const disagmoe::plan::Allocation&) { return 1; }
#else
  double step_seconds(const disagmoe::plan::Allocation&) const { return 1; }
#endif
};

}  // namespace

static_assert(disagmoe::plan::step_time_oracle<Oracle>, "Oracle must satisfy disagmoe::plan::step_time_oracle");

// Using the search with a non-model must be rejected by its constraint too.
disagmoe::plan::SearchResult use(const disagmoe::plan::AnalyticModel& m, const Oracle& o) {
  return disagmoe::plan::local_search(m, o, disagmoe::plan::Allocation{});
}
