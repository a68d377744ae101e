// SPDX-License-Identifier: Apache-2.0
// Compile-fail check for the schedule_policy concept, built once per case by ctest:
// CASE_model must compile (a shipped policy passes); CASE_untagged (the right members
// but no opt-in tag) and CASE_wrong_build (the tag but a wrong build) must not.
#include <disagmoe/schedule/baselines.hpp>
#include <disagmoe/schedule/policy.hpp>

namespace ds = disagmoe::schedule;

template <ds::schedule_policy P>
ds::Schedule run(const P& p, const ds::Problem& pb) {
  return p.build(pb);
}

#if defined(CASE_untagged) || defined(CASE_wrong_build)
struct NoTag {  // structurally fine, but never opted in
  static constexpr std::string_view kName = "no-tag";
  ds::Schedule build(const ds::Problem&) const { return {}; }
};
struct WrongBuild {  // opted in, but build returns the wrong type
  using policy_concept = ds::schedule_policy_tag;
  static constexpr std::string_view kName = "wrong";
  int build(const ds::Problem&) const { return 0; }
};
#if defined(CASE_untagged)
ds::Schedule use(const ds::Problem& pb) { return run(NoTag{}, pb); }
#else
ds::Schedule use(const ds::Problem& pb) { return run(WrongBuild{}, pb); }
#endif
#else
ds::Schedule use(const ds::Problem& pb) { return run(ds::OneFOneB{}, pb); }
#endif

int main() { return 0; }
