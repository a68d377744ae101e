// SPDX-License-Identifier: Apache-2.0
// Measured step times for the planner's local search (runtime/measured_oracle.hpp): the
// layout of an allocation against hand counts, the oracle against a counting measurement
// (what it calls, what it skips), and a real search over loopback training runs.
#include "disaggregated_cases.hpp"

#include <disagmoe/model/reference_attention.hpp>
#include <disagmoe/model/reference_experts.hpp>
#include <disagmoe/plan/adaptive_allocator.hpp>
#include <disagmoe/plan/local_search.hpp>
#include <disagmoe/runtime/measured_oracle.hpp>
#include <disagmoe/spec/presets.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <tuple>
#include <vector>

namespace dm = disagmoe;
namespace rt = disagmoe::runtime;
namespace mo = disagmoe::model;
namespace pl = disagmoe::plan;

namespace {

// The shared small model (disaggregated_cases.hpp), one sequence per planner micro-batch.
dm::ModelSpec tiny_model() {
  dm::ModelSpec m = disaggregated_test::spec_of(2, 2, 0, 0);
  m.name = "tiny-test";
  m.micro_batch = 1;
  return m;
}

dm::ClusterSpec small_cluster(int nodes, int gpus_per_node) {
  dm::ClusterSpec c = dm::cluster_preset("h100");
  c.gpus_per_node = gpus_per_node;
  c.nics_per_node = std::min(c.nics_per_node, gpus_per_node);
  return dm::scaled_to_nodes(c, nodes);
}

// A made-up step time per layout, and how often each layout was asked for.
struct CountingMeasure {
  std::map<std::tuple<int, int, int>, int>* calls;
  double operator()(const rt::DisaggregatedOptions& o) const {
    ++(*calls)[{o.pairs, o.attention_ranks, o.ffn_ranks}];
    return 1.0 / o.attention_ranks + 2.0 / o.ffn_ranks + 0.01 * o.pairs;
  }
};

}  // namespace

TEST_CASE("layout_of: p pairs, A GPUs / p ranks per attention worker, F GPUs / p per FFN worker") {
  const pl::AnalyticModel model(tiny_model(), small_cluster(2, 4), pl::PlanOptions{.global_batch = 16});
  pl::Allocation x;
  x.groups = 2;
  x.attention_gpus_per_node = 1;
  x.ffn_gpus_per_node = 3;
  x.attention_nics_per_node = x.ffn_nics_per_node = 1;
  REQUIRE(model.valid(x));
  rt::DisaggregatedOptions base;
  base.exchange = rt::Exchange::kChannel;
  base.expert_rank = {0, 0, 0, 0};
  const auto o = rt::layout_of(model, x, base);
  CHECK(o.pairs == 2);
  CHECK(o.attention_ranks == 1);  // 2 nodes x 1 A GPU / 2 pairs
  CHECK(o.ffn_ranks == 3);        // 2 nodes x 3 F GPUs / 2 pairs
  CHECK(o.exchange == rt::Exchange::kChannel);
  CHECK(o.expert_rank.empty());
  x.groups = 3;  // 2 A GPUs do not split into 3 groups
  CHECK_THROWS_AS((void)rt::layout_of(model, x), dm::ConfigError);
}

TEST_CASE("MeasuredStepOracle: the search measures each distinct layout once and never one that does not fit") {
  std::map<std::tuple<int, int, int>, int> calls;
  const pl::AnalyticModel model(tiny_model(), small_cluster(1, 6), pl::PlanOptions{.global_batch = 12});
  const rt::MeasuredStepOracle<CountingMeasure> oracle{&model, {}, CountingMeasure{&calls}};
  static_assert(pl::step_time_oracle<decltype(oracle)>);
  pl::Allocation seed;
  seed.groups = 1;
  seed.attention_gpus_per_node = 1;
  seed.ffn_gpus_per_node = 1;
  REQUIRE(model.valid(seed));
  const pl::SearchResult r = pl::local_search(model, oracle, seed, {});
  CHECK(r.best_step_seconds <= r.seed_step_seconds);
  // The best is what the measurement says of its layout (recomputed independently).
  const auto best = rt::layout_of(model, r.best);
  CHECK(r.best_step_seconds == doctest::Approx(1.0 / best.attention_ranks + 2.0 / best.ffn_ranks + 0.01 * best.pairs));
  long total = 0;
  for (const auto& [layout, n] : calls) total += n;
  CHECK(total <= r.evaluations);
  CHECK(calls.size() >= 2);  // it moved
  // Every layout the search could reach and that beats the seed by more GPUs on the F side
  // was found: with 6 GPUs the made-up time prefers F ranks, so the best has more than one.
  CHECK(best.ffn_ranks > 1);

  // A 16B-parameter model on GPUs of 1 MiB: nothing fits, nothing is measured.
  dm::ClusterSpec tiny_hbm = small_cluster(1, 6);
  tiny_hbm.gpu.hbm_bytes = 1 << 20;
  const pl::AnalyticModel starved(dm::model_preset("deepseek-moe-16b"), tiny_hbm, pl::PlanOptions{.global_batch = 12});
  REQUIRE(starved.valid(seed));
  const rt::MeasuredStepOracle<CountingMeasure> none{&starved, {}, CountingMeasure{&calls}};
  const auto before = calls;
  CHECK(std::isinf(none.step_seconds(seed)));
  CHECK(calls == before);
}

TEST_CASE("LoopbackMeasurement: the local search runs on measured loopback training steps") {
  const dm::ModelSpec spec = tiny_model();
  const pl::AnalyticModel model(spec, small_cluster(1, 4), pl::PlanOptions{.global_batch = 12});
  rt::TrainOptions train;
  train.micro_batches = 2;
  mo::Rng rng(9);
  std::vector<int> in, tg;
  const int sequences = 12;  // 2 micro-batches of 6: any A worker of 1, 2 or 3 ranks splits them
  for (int i = 0; i < sequences * spec.seq_len; ++i) {
    in.push_back(static_cast<int>(rng.below(256)));
    tg.push_back(static_cast<int>(rng.below(256)));
  }
  rt::LoopbackMeasurement<mo::ReferenceAttention<float>, mo::ReferenceExperts<float>> measure{
      spec, train, {}, {rt::TokenBatch{in, tg, sequences}}, 3, std::nullopt};
  rt::DisaggregatedOptions base;
  base.executor.timeout = std::chrono::milliseconds(20000);
  const rt::MeasuredStepOracle<decltype(measure)> oracle{&model, base, measure};
  pl::Allocation seed;
  seed.groups = 1;
  seed.attention_gpus_per_node = 1;
  seed.ffn_gpus_per_node = 2;
  REQUIRE(model.valid(seed));
  const pl::SearchResult r = pl::local_search(model, oracle, seed, {.max_evaluations = 4});
  CHECK(r.evaluations >= 2);
  CHECK(std::isfinite(r.best_step_seconds));
  CHECK(r.best_step_seconds > 0);
  CHECK(r.best_step_seconds <= r.seed_step_seconds);
}
