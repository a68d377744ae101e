// SPDX-License-Identifier: Apache-2.0
#include <disagmoe/plan/adaptive_allocator.hpp>
#include <disagmoe/plan/plan_json.hpp>
#include <disagmoe/spec/presets.hpp>

#include <doctest/doctest.h>

#include <string>

using namespace disagmoe;
using io::Json;

namespace {
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("a plan read back is the planner's allocation; anything else is a named error") {
  const ModelSpec m = model_preset("olmoe-1b-7b");
  const ClusterSpec c = parse_cluster_name("h800x128:2");
  const plan::Plan p = plan::AdaptiveAllocator(m, c).plan();
  const Json j = plan::to_json(p);
  CHECK(plan::allocation_from_json(j, m, c) == p.allocation);
  CHECK(plan::allocation_from_json(j.at("allocation"), m, c) == p.allocation);  // the fields alone
  Json bad = j;
  bad["colour"] = "red";
  CHECK(error_of([&] { plan::allocation_from_json(bad, m, c); }) ==
        "$.colour = \"(unknown key)\": expected a key that disagmoe-plan --json writes");
  bad = j;
  bad["allocation"]["groups"] = (std::int64_t{1} << 32) + 16;  // must not become 16
  CHECK(error_of([&] { plan::allocation_from_json(bad, m, c); }) ==
        "$.allocation.groups = 4294967312: expected an integer that fits 32 bits");
  bad = j;
  bad["allocation"]["ffn_nics_per_node"] = 9;
  CHECK(error_of([&] { plan::allocation_from_json(bad, m, c); }) ==
        "$.allocation.ffn_nics_per_node = 9: expected an integer in [0, 8] on this cluster");
  CHECK(error_of([&] { plan::allocation_from_json(j, model_preset("mixtral-8x7b"), c); }) ==
        "$.model = \"olmoe-1b-7b\": expected the model of this run (mixtral-8x7b): plan again for it");
  CHECK(error_of([&] { plan::allocation_from_json(j, m, parse_cluster_name("h800x128")); })
            .starts_with("$.cluster = \"h800x128:2\": expected the cluster of this run (h800x128)"));
  ModelSpec longer = m;
  longer.seq_len *= 2;
  CHECK(error_of([&] { plan::allocation_from_json(j, longer, c); }).starts_with("$.seq_len = "));
}
