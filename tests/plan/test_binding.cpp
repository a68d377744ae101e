// SPDX-License-Identifier: Apache-2.0
// The binding constraint of an allocation against an enumeration of the allocations
// that would relieve its bottleneck.
#include <disagmoe/plan/binding.hpp>
#include <disagmoe/plan/plan.hpp>
#include <disagmoe/spec/presets.hpp>

#include <doctest/doctest.h>

#include <string>

namespace dp = disagmoe::plan;

namespace {
// Qwen3-235B at 8K on 16 nodes: 2 A + 6 F GPUs per node, 32 pairs, recomputation.
dp::AnalyticModel qwen(double hbm) {
  auto m = disagmoe::model_preset("qwen3-235b-a22b");
  m.seq_len = 8192;
  auto c = disagmoe::cluster_preset("h800x128");
  c.gpu.hbm_bytes = hbm;
  return dp::AnalyticModel(m, c, {});
}
const dp::Allocation kX{32, 2, 6, 4, 4, dp::Recompute::both(true)};
}  // namespace

TEST_CASE("binding: F memory forces the F GPUs when every split with more A GPUs overflows F") {
  const dp::AnalyticModel model = qwen(80e9);
  REQUIRE(model.valid(kX));
  REQUIRE(model.memory(kX).fits());
  REQUIRE(model.estimate(kX).bottleneck == dp::Bottleneck::kAttention);
  // Enumeration: every valid allocation with 3..7 A GPUs per node (F the rest) has an F
  // worker over the usable HBM.
  int valid = 0;
  for (int p = 1; p <= model.max_groups(); ++p)
    for (bool rc : {false, true})
      for (int a = 3; a < 8; ++a) {
        const dp::Allocation y{p, a, 8 - a, 4, 4, dp::Recompute::both(rc)};
        if (!model.valid(y)) continue;
        ++valid;
        CHECK_FALSE(model.memory(y).ffn_fits());
      }
  REQUIRE(valid > 0);
  const dp::Binding b = dp::binding_constraint(model, kX);
  CHECK(b.kind == "memory");
  CHECK(b.text.rfind("F memory forces 96 F GPUs", 0) == 0);
  CHECK(b.text.find("bound by A compute") != std::string::npos);
}

TEST_CASE("binding: with room in HBM the split is balanced or the search's, never memory; idle GPUs counted") {
  const dp::AnalyticModel model = qwen(8e12);
  const dp::Binding b = dp::binding_constraint(model, kX);
  CHECK(b.kind != "memory");
  CHECK(b.text.rfind("A compute", 0) == 0);
  // A plan on 7 of 8 GPUs per node leaves one per node idle.
  dp::SearchResult r;
  r.seed = r.best = {16, 2, 5, 4, 4, dp::Recompute::both(true)};
  const dp::Plan p = dp::make_plan(model, r.best, r, 0, 0);
  CHECK(p.idle_gpus == 16);
}
