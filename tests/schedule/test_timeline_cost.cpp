// SPDX-License-Identifier: Apache-2.0
// The timeline cost estimate (timeline_cost.hpp) against an exact recount: the ops every
// shipped policy emits on small configurations, over the layouts simulate_best tries,
// never exceed the estimate, and the largest stays within a factor of it (a bound that
// says nothing would pass the first check alone); the budgets reject by name.
#include <disagmoe/schedule/schedules.hpp>
#include <disagmoe/schedule/timeline_cost.hpp>
#include <disagmoe/spec/presets.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace ds = disagmoe::schedule;

namespace {

// Every layout simulate_best could try on one 8-GPU node: depths 1, 2, 4 for the
// baselines; for AF-Pipe pair counts 1, 2 and A GPUs 2, 4, 6, ping-pong groups p and 2p.
std::int64_t most_ops(std::string_view name, const disagmoe::ModelSpec& m, const disagmoe::ClusterSpec& c,
                      const ds::CostOptions& o, const ds::PolicyKnobs& k) {
  std::int64_t most = 0;
  auto count = [&](const ds::Problem& pb, const ds::PolicyKnobs& kk) {
    try {
      most = std::max<std::int64_t>(most, static_cast<std::int64_t>(ds::build_schedule(name, pb, kk).ops.size()));
    } catch (const disagmoe::ConfigError&) {  // a layout this policy cannot run
    }
  };
  if (name == ds::AFPipe::kName) {
    for (int p : {1, 2})
      for (int a : {2, 4, 6})
        for (int g : {p, 2 * p}) {
          ds::PolicyKnobs kk = k;
          kk.af_group_size = g;
          count(ds::af_problem(m, c, {p, a, c.gpus_per_node - a, 0, 0}, o), kk);
        }
  } else {
    for (int stages : {1, 2, 4}) count(ds::colocated_problem(m, c, {stages}, o), k);
  }
  return most;
}

}  // namespace

TEST_CASE("timeline_cost bounds the ops of every policy, within a factor of two") {
  const auto c = disagmoe::cluster_preset("h100");
  for (const char* model : {"olmoe-1b-7b", "deepseek-moe-16b"}) {
    disagmoe::ModelSpec m = disagmoe::model_preset(model);
    m.layers = 8;
    m.first_dense_layers = std::min(m.first_dense_layers, 1);
    for (int mb : {4, 8, 16})
      for (int chunks : {1, 2, 4}) {
        ds::CostOptions o;
        o.micro_batches = mb;
        ds::PolicyKnobs k;
        k.chunks = chunks;
        for (auto name : ds::kScheduleNames) {
          if (chunks > 1 && name != ds::ChunkedOverlap::kName) continue;
          const std::int64_t actual = most_ops(name, m, c, o, k);
          const ds::TimelineCost est = ds::timeline_cost(name, m, o, chunks);
          INFO(std::string(model), " ", name, " micro-batches ", mb, " chunks ", chunks, ": ", actual, " ops, estimate ", est.ops);
          REQUIRE(actual > 0);
          CHECK(actual <= est.ops);
          CHECK(2 * actual >= est.ops);
          CHECK(est.bytes == doctest::Approx(ds::kBytesPerOp * static_cast<double>(est.ops)));
        }
      }
  }
}

TEST_CASE("timeline_cost: micro-batches from the global batch; overflow and budgets name the input") {
  disagmoe::ModelSpec m = disagmoe::model_preset("olmoe-1b-7b");
  ds::CostOptions o;
  o.global_batch = 64;
  m.micro_batch = 4;
  CHECK(ds::timeline_cost("1f1b", m, o).micro_batches == 16);
  // Per micro-batch: every layer's ops and the embedding's and head's.
  CHECK(ds::timeline_cost("1f1b", m, o).ops ==
        16 * (m.layers * ds::ops_per_layer(1) + ds::kEmbeddingHeadOps) + 4 * m.layers);
  CHECK(ds::timeline_cost("chunked", m, o, 3).ops ==
        16 * (m.layers * ds::ops_per_layer(3) + ds::kEmbeddingHeadOps) + 4 * m.layers);
  CHECK(ds::timeline_cost("1f1b", m, o, 3).ops == ds::timeline_cost("1f1b", m, o).ops);  // chunks: chunked only

  const disagmoe::Limits saved = disagmoe::limits();
  disagmoe::limits().max_ops = 1000;
  CHECK_THROWS_WITH_AS(ds::expect_timeline_fits("1f1b", m, o), doctest::Contains("global_batch = 64: expected"),
                       disagmoe::ConfigError);
  o.micro_batches = 1;
  CHECK_NOTHROW(ds::expect_timeline_fits("1f1b", m, o));  // 16 x 12 + 64 = 256 ops
  CHECK_THROWS_WITH_AS(ds::expect_timeline_fits("chunked", m, o, 100, {"g", "mb", "--chunks"}),
                       doctest::Contains("--chunks = 100: expected"), disagmoe::ConfigError);
  o.micro_batches = 1000;
  CHECK_THROWS_WITH_AS(ds::expect_timeline_fits("chunked", m, o, 2, {"g", "--micro-batches", "--chunks"}),
                       doctest::Contains("--micro-batches = 1000: expected a size whose simulated timeline of chunked"),
                       disagmoe::ConfigError);
  // simulate_best applies the same check before it builds anything.
  CHECK_THROWS_WITH_AS(ds::simulate_best("1f1b", m, disagmoe::cluster_preset("h100"), o),
                       doctest::Contains("micro_batches = 1000"), disagmoe::ConfigError);
  disagmoe::limits() = saved;
  disagmoe::limits().max_memory_bytes = 1 << 20;  // 2048 ops of 512 bytes
  CHECK_THROWS_WITH_AS(ds::expect_timeline_fits("1f1b", m, o), doctest::Contains("--max-memory"),
                       disagmoe::ConfigError);
  disagmoe::limits() = saved;
  o.micro_batches = 2000000000;
  CHECK_THROWS_WITH_AS(ds::expect_timeline_fits("chunked", m, o, 1 << 30), doctest::Contains("micro_batches = 2000000000"),
                       disagmoe::ConfigError);
}
