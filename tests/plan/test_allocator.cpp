// SPDX-License-Identifier: Apache-2.0
// The MILP optimum equals exhaustive enumeration of all allocations on small clusters
// (same cost model); the AdaptiveAllocator's plan; the out-of-memory error.
#include <disagmoe/plan/adaptive_allocator.hpp>
#include <disagmoe/plan/allocation_enumeration.hpp>
#include <disagmoe/spec/presets.hpp>

#include "small_case.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

using namespace disagmoe;
using namespace disagmoe::plan;
using test::small_cluster;

TEST_CASE("MILP optimum equals exhaustive enumeration on small clusters") {
  const std::vector<test::SmallCase> cases{
      {"tiny", 64, 1, 8, 0, 80e9, 64, RecomputePolicy::kAuto},
      {"tiny", 64, 2, 4, 4, 80e9, 32, RecomputePolicy::kOff},
      {"olmoe-1b-7b", 2048, 1, 8, 0, 80e9, 64, RecomputePolicy::kAuto},
      {"olmoe-1b-7b", 4096, 2, 8, 4, 80e9, 64, RecomputePolicy::kAuto},
      {"olmoe-1b-7b", 4096, 2, 8, 4, 8e9, 64, RecomputePolicy::kAuto},  // memory binds
      {"olmoe-1b-7b", 8192, 4, 4, 4, 6e9, 0, RecomputePolicy::kAuto},   // memory binds, default batch
      {"deepseek-moe-16b", 8192, 4, 4, 4, 80e9, 64, RecomputePolicy::kAuto},
      {"mixtral-8x7b", 4096, 2, 8, 8, 80e9, 128, RecomputePolicy::kAuto},
      {"qwen3-30b-a3b", 16384, 2, 8, 8, 80e9, 32, RecomputePolicy::kOn},
      {"olmoe-1b-7b", 4096, 1, 8, 0, 1e9, 64, RecomputePolicy::kAuto},  // nothing fits
      // The embedding and the vocabulary-parallel head priced: A compute and A links per pair.
      {"tiny", 64, 2, 4, 4, 80e9, 32, RecomputePolicy::kOff, 1, true},
      {"olmoe-1b-7b", 4096, 2, 8, 4, 80e9, 64, RecomputePolicy::kAuto, 1, true},
      {"deepseek-moe-16b", 8192, 4, 4, 4, 80e9, 64, RecomputePolicy::kAuto, 1, true},
      {"deepseek-moe-16b", 4096, 2, 8, 8, 80e9, 128, RecomputePolicy::kAuto, 2, true},
  };
  int one_side = 0;  // optima that recompute on one side only
  for (const test::SmallCase& k : cases) {
    const AnalyticModel model = k.analytic_model();
    const EnumerationResult e = enumerate_best_bound(model);
    const MilpSeed s = solve_allocation_milp(model);
    const MilpSeed whole = solve_allocation_milp(model, {}, false);  // without the cutoff
    INFO(k.model << " seq " << k.seq << " on " << k.nodes << "x" << k.gpus << " (" << k.nics << " NICs, " << k.hbm
                 << " B): enumeration " << e.bound_seconds << " over " << e.evaluations << ", MILP " << s.bound_seconds);
    REQUIRE(e.found == s.found);
    REQUIRE(e.found == whole.found);
    if (!e.found) continue;
    CHECK(s.bound_seconds == doctest::Approx(e.bound_seconds).epsilon(1e-6));
    CHECK(whole.bound_seconds == doctest::Approx(e.bound_seconds).epsilon(1e-6));
    // The decoded allocation is valid, fits and has the MILP's objective as its bound.
    REQUIRE(model.valid(s.allocation));
    const StepEstimate est = model.estimate(s.allocation);
    CHECK(est.fits());
    CHECK(est.bound_seconds == doctest::Approx(s.bound_seconds).epsilon(1e-6));
    one_side += e.best.recompute.attention != e.best.recompute.ffn;
  }
  CHECK(one_side > 0);  // the per-side choice is exercised
}

TEST_CASE("AdaptiveAllocator: seed, refined plan, evaluations and gain") {
  ModelSpec m = model_preset("olmoe-1b-7b");
  m.seq_len = 8192;
  const AdaptiveAllocator alloc(m, small_cluster(4, 8, 8));
  const Plan p = alloc.plan();
  CHECK(p.step_seconds <= p.seed_step_seconds);
  CHECK(p.gain() >= 1);
  CHECK(p.evaluations >= 1);
  CHECK(p.step_seconds == doctest::Approx(p.predicted.step_seconds));
  CHECK(p.attention_gpus + p.ffn_gpus <= 32);
  CHECK(p.attention_nics + p.ffn_nics <= 32);
  CHECK(p.attention_group_size * p.allocation.groups == p.attention_gpus);
  CHECK(p.ffn_group_size * p.allocation.groups == p.ffn_gpus);
  CHECK(p.layer_groups.size() == std::size_t(p.allocation.groups));
  CHECK(p.predicted.fits());
  CHECK(p.predicted.memory.capacity == doctest::Approx(0.9 * 80e9));
  CHECK(p.global_batch == int(kDefaultBatchTokens / 8192));
  CHECK(p.predicted.tokens_per_second == doctest::Approx(double(p.global_batch) * 8192 / p.step_seconds));
  const std::string why = p.explanation();
  CHECK(why.rfind("The step is bound by ", 0) == 0);
  CHECK(why.find(std::string(to_string(p.predicted.bottleneck)) == "network" ? "network" : "compute") !=
        std::string::npos);
}

TEST_CASE("a model that cannot fit: error names the worker type, bytes needed and available") {
  const ModelSpec m = model_preset("qwen3-235b-a22b");
  const AdaptiveAllocator alloc(m, cluster_preset("h100"));
  try {
    (void)alloc.plan();
    FAIL("no throw");
  } catch (const ConfigError& e) {
    const std::string s = e.what();
    INFO(s);
    CHECK(s.rfind("memory_bytes.", 0) == 0);
    const bool names_worker = s.find("ffn_worker = ") != std::string::npos ||
                              s.find("attention_worker = ") != std::string::npos;
    CHECK(names_worker);
    CHECK(s.find("bytes available per GPU") != std::string::npos);
    CHECK(s.find("available 72 GB") != std::string::npos);
    CHECK(s.find("worker needs ") != std::string::npos);
  }
  // No valid allocation at all: a single GPU per node cannot host both sides.
  ClusterSpec one = small_cluster(2, 1, 1);
  CHECK_THROWS_WITH_AS((void)AdaptiveAllocator(model_preset("olmoe-1b-7b"), one).plan(),
                       doctest::Contains("room for at least one attention and one FFN group"), ConfigError);
}

namespace {
// Smallest bound over the allocations that fit and split a node's NICs evenly.
double best_even_split(const AnalyticModel& model) {
  double best = std::numeric_limits<double>::infinity();
  for_each_allocation(model, [&](const Allocation& x) {
    if (x.attention_nics_per_node != x.ffn_nics_per_node) return;
    const StepEstimate e = model.estimate(x);
    if (e.fits()) best = std::min(best, e.bound_seconds);
  });
  return best;
}
}  // namespace

TEST_CASE("NIC split: A↔F traffic loads both sides alike; the side with the heavier gradient all-reduce gets more NICs") {
  // No replicated weights on either side (OLMoE has no shared experts or dense layers;
  // A groups of one GPU have no all-reduce): for an even NIC split the two sides' link
  // times are equal up to the busiest F GPU's share of the rows (1 when the F group
  // divides the experts) — every A↔F byte leaves one side's NIC and enters the other's.
  {
    ModelSpec m = model_preset("olmoe-1b-7b");
    m.seq_len = 1024;
    const AnalyticModel model(m, small_cluster(4, 8, 8), PlanOptions{64, {}, {}, RecomputePolicy::kOff});
    long checked = 0;
    for_each_allocation(model, [&](const Allocation& x) {
      if (x.attention_nics_per_node != x.ffn_nics_per_node || model.group_size(x.groups, x.attention_gpus_per_node) != 1)
        return;
      const StepEstimate e = model.estimate(x);
      INFO(model.describe_allocation(x));
      const double busiest = model.ffn_link_imbalance(model.group_size(x.groups, x.ffn_gpus_per_node));
      CHECK(e.attention_network_seconds * busiest == doctest::Approx(e.ffn_network_seconds).epsilon(1e-12));
      ++checked;
    });
    CHECK(checked > 0);
  }
  struct Asym {
    const char* model;
    int seq, global_batch, max_groups;
    bool attention_heavier;
  };
  // A heavier: OLMoE at 256 tokens, 8 sequences per step, one pair — the A group of 2
  // GPUs (one per node) all-reduces attention, embedding and head over the NICs. F
  // heavier: DeepSeek-MoE-16B, whose shared experts and dense first layer are
  // replicated over the (larger) F group. Both checked against enumeration, and the
  // uneven split must beat every even one.
  for (const Asym& k : {Asym{"olmoe-1b-7b", 256, 8, 1, true}, Asym{"deepseek-moe-16b", 1024, 8, 0, false}}) {
    ModelSpec m = model_preset(k.model);
    m.seq_len = k.seq;
    PlanOptions o{k.global_batch, {}, {}, RecomputePolicy::kOff};
    o.max_groups = k.max_groups;
    const AnalyticModel model(m, small_cluster(2, 8, 8), o);
    const EnumerationResult e = enumerate_best_bound(model);
    const MilpSeed s = solve_allocation_milp(model);
    INFO(k.model << ": enumeration " << model.describe_allocation(e.best) << " " << e.bound_seconds << ", MILP "
                 << model.describe_allocation(s.allocation) << " " << s.bound_seconds);
    REQUIRE(e.found);
    REQUIRE(s.found);
    CHECK(s.bound_seconds == doctest::Approx(e.bound_seconds).epsilon(1e-6));
    const int more_a = s.allocation.attention_nics_per_node - s.allocation.ffn_nics_per_node;
    CHECK((k.attention_heavier ? more_a > 0 : more_a < 0));
    CHECK(best_even_split(model) > 1.02 * e.bound_seconds);
  }
}
