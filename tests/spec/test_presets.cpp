// SPDX-License-Identifier: Apache-2.0
// Preset parameter counts against the totals their authors published (the oracle).
#include <disagmoe/spec/model_size.hpp>
#include <disagmoe/spec/presets.hpp>

#include <doctest/doctest.h>

#include <cmath>

using namespace disagmoe;

namespace {
struct Published {
  const char* name;
  double total;   // parameters, as published
  double active;  // parameters active per token, as published
  bool active_excludes_embedding;  // gpt-oss model card counts the unembedding only
};
// Sources: DeepSeekMoE paper; gpt-oss model card; Qwen3 technical report; Mixtral paper;
// OLMoE paper (see presets.hpp).
constexpr Published kPublished[] = {
    {"deepseek-moe-16b", 16.4e9, 2.8e9, false}, {"gpt-oss-120b", 116.83e9, 5.13e9, true},
    {"qwen3-30b-a3b", 30.5e9, 3.3e9, false},    {"qwen3-235b-a22b", 235e9, 22e9, false},
    {"mixtral-8x7b", 46.7e9, 12.9e9, false},    {"olmoe-1b-7b", 6.9e9, 1.3e9, false},
};
}  // namespace

TEST_CASE("preset totals are within 1% of the published totals") {
  for (const auto& p : kPublished) {
    const ModelSpec m = model_preset(p.name);
    CAPTURE(p.name);
    CHECK_NOTHROW(validate(m));
    const double total = static_cast<double>(total_params(m));
    CHECK(std::abs(total / p.total - 1) < 0.01);
    double active = static_cast<double>(active_params(m));
    if (p.active_excludes_embedding) active -= double(m.vocab) * m.hidden;
    // published active counts are rounded to two significant digits
    CHECK(std::abs(active / p.active - 1) < 0.035);
  }
}

TEST_CASE("every preset is valid and found by name") {
  for (const auto& name : model_preset_names()) CHECK(model_preset(name).name == name);
  for (const auto& name : cluster_preset_names()) {
    const ClusterSpec c = cluster_preset(name);
    CHECK(c.name == name);
    CHECK_NOTHROW(validate(c));
  }
  CHECK(cluster_preset("h800x128").gpus() == 128);
  CHECK(model_preset_names().size() == 6);
  CHECK_THROWS_WITH_AS(model_preset("gpt-5"),
                       doctest::Contains("model = \"gpt-5\": expected a preset name (deepseek-moe-16b"), ConfigError);
}
