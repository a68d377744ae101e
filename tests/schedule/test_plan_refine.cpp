// SPDX-License-Identifier: Apache-2.0
// The planner's search by simulation (AdaptiveAllocator::refine with FittingSimulatedStepTime,
// schedule::simulated_plan): its step is what the simulator says of the plan's own
// allocation through disagmoe-sim --plan's path, it never loses to the analytic choice,
// it stops at a local optimum of the simulator, everything derived from the allocation
// follows it, and its budget and failures are honoured.
#include <disagmoe/plan/adaptive_allocator.hpp>
#include <disagmoe/plan/allocation_enumeration.hpp>
#include <disagmoe/plan/plan_json.hpp>
#include <disagmoe/schedule/plan_oracle.hpp>
#include <disagmoe/spec/presets.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace ds = disagmoe::schedule;
namespace dp = disagmoe::plan;

namespace {

// `model` at `seq` tokens on `cluster`, kernel or RDMA M2N.
dp::AdaptiveAllocator allocator_of(const char* model, int seq, const char* cluster, bool kernels = true) {
  disagmoe::ModelSpec m = disagmoe::model_preset(model);
  m.seq_len = seq;
  dp::PlanOptions o;
  o.m2n_uses_sms = kernels;
  return dp::AdaptiveAllocator(m, disagmoe::cluster_preset(cluster), o);
}

// DeepSeek-MoE-16B at 16K on 16 nodes: one pair of groups, where the analytic model is
// about 30% optimistic and the simulator prefers a neighbour of its choice (bench/RESULTS.md,
// issue 15). A simulation costs ~1 ms here.
dp::AdaptiveAllocator deepseek_16k(bool kernels = true) {
  return allocator_of("deepseek-moe-16b", 16384, "h800x128", kernels);
}

// The simulator's AF-Pipe step on allocation `x`, through simulate_best (the path of
// disagmoe-sim --plan and the recommendation), not through the oracle: the plan's batch
// at the simulated rate (tokens per step over tokens/s).
double simulated(const dp::AnalyticModel& model, const dp::Allocation& x) {
  return double(model.options().global_batch) * model.model().seq_len /
         ds::simulate_plan(model, x).result.tokens_per_second;
}

// An oracle that cannot run anywhere.
struct NowhereOracle {
  using oracle_concept = dp::step_time_oracle_tag;
  [[nodiscard]] double step_seconds(const dp::Allocation&) const { return std::numeric_limits<double>::infinity(); }
};

}  // namespace

TEST_CASE("search by simulation: the simulator's step on the plan's allocation, no worse, a local optimum") {
  for (bool kernels : {true, false}) {
    INFO((kernels ? "kernel M2N" : "RDMA M2N"));
    const dp::AdaptiveAllocator allocator = deepseek_16k(kernels);
    const dp::AnalyticModel& model = allocator.model();
    const dp::Plan analytic = allocator.plan();
    const dp::Plan p = ds::simulated_plan(allocator);
    const dp::Refinement& r = p.refinement;
    REQUIRE(r.ran);
    CHECK(r.from == analytic.allocation);
    CHECK(r.from_step_seconds == doctest::Approx(simulated(model, r.from)).epsilon(1e-12));
    CHECK(r.step_seconds == doctest::Approx(simulated(model, p.allocation)).epsilon(1e-12));
    // Here the simulator's choice differs from the analytic one, and is faster.
    CHECK_FALSE(p.allocation == analytic.allocation);
    CHECK(r.step_seconds < r.from_step_seconds);
    CHECK(r.gain() == doctest::Approx(r.from_step_seconds / r.step_seconds));
    // A local optimum of the simulator: no neighbour runs faster.
    REQUIRE_FALSE(r.budget_exhausted);
    for (const dp::Allocation& y : dp::neighbours(model, p.allocation)) {
      INFO(model.describe_allocation(y));
      CHECK(ds::FittingSimulatedStepTime(model).step_seconds(y) >= r.step_seconds);
    }
    // It keeps the planner's memory limit, and stays within the default budget.
    CHECK(p.predicted.fits());
    CHECK(r.evaluations <= ds::kRefineEvaluations);
    // What derives from the allocation follows it; the first search's record stays.
    CHECK(p.predicted.step_seconds == model.estimate(p.allocation).step_seconds);
    CHECK(p.attention_group_size == model.group_size(p.allocation.groups, p.allocation.attention_gpus_per_node));
    CHECK(p.ffn_gpus == dp::ffn_gpus(p.allocation, model.cluster()));
    CHECK(p.layer_groups.size() == static_cast<std::size_t>(p.allocation.groups));
    CHECK(p.seed == analytic.seed);
    CHECK(p.step_seconds == analytic.step_seconds);
    CHECK(p.evaluations == analytic.evaluations);
  }
}

TEST_CASE("search by simulation: budget, off, bad budget, an oracle that cannot run") {
  const dp::AdaptiveAllocator allocator = deepseek_16k();
  const dp::Plan analytic = allocator.plan();
  SUBCASE("one simulation: the analytic choice, measured, kept") {
    const dp::Plan p = ds::simulated_plan(allocator, 1);
    CHECK(p.refinement.evaluations == 1);
    CHECK(p.refinement.budget_exhausted);
    CHECK(p.allocation == analytic.allocation);
    CHECK(p.refinement.step_seconds == doctest::Approx(simulated(allocator.model(), analytic.allocation)));
  }
  SUBCASE("zero: the analytic plan") {
    const dp::Plan p = ds::simulated_plan(allocator, 0);
    CHECK_FALSE(p.refinement.ran);
    CHECK(p.allocation == analytic.allocation);
    CHECK_FALSE(dp::to_json(p).contains("refinement"));
  }
  SUBCASE("negative") {
    CHECK_THROWS_WITH_AS((void)ds::simulated_plan(allocator, -1),
                         "refine evaluations = -1: expected a number of simulations >= 0", disagmoe::ConfigError);
  }
  SUBCASE("nowhere: the allocation stays, its step is +inf, null in JSON") {
    const dp::Plan p = allocator.refine(analytic, NowhereOracle{}, {100});
    CHECK(p.allocation == analytic.allocation);
    CHECK(std::isinf(p.refinement.step_seconds));
    const auto j = dp::to_json(p);
    CHECK(j.at("refinement").at("step_seconds").is_null());
    CHECK(j.at("refinement").at("evaluations").get<long>() == p.refinement.evaluations);
  }
}

TEST_CASE("a refined plan's JSON: the refinement, and the refined allocation read back") {
  const dp::AdaptiveAllocator allocator = deepseek_16k();
  const dp::Plan p = ds::simulated_plan(allocator);
  const auto j = dp::to_json(p);
  const auto& r = j.at("refinement");
  CHECK(r.at("step_seconds").get<double>() == p.refinement.step_seconds);
  CHECK(r.at("from_step_seconds").get<double>() == p.refinement.from_step_seconds);
  CHECK(r.at("from").at("groups").get<int>() == p.refinement.from.groups);
  CHECK(r.at("from").at("attention_gpus_per_node").get<int>() == p.refinement.from.attention_gpus_per_node);
  const dp::AnalyticModel& model = allocator.model();
  CHECK(dp::allocation_from_json(j, model.model(), model.cluster()) == p.allocation);
}

TEST_CASE("search by simulation keeps the planner's memory limit, which the simulator alone would cross") {
  // DeepSeek-MoE-16B at 64K on one H100 node: the simulator's peak memory is below the
  // planner's bound, so a search on simulated step times alone leaves the planner's limit.
  const dp::AdaptiveAllocator allocator = allocator_of("deepseek-moe-16b", 65536, "h100");
  const dp::AnalyticModel& model = allocator.model();
  const dp::Plan analytic = allocator.plan();
  REQUIRE(analytic.predicted.fits());
  const dp::Plan unguarded =
      allocator.refine(analytic, ds::SimulatedStepTime(model.model(), model.cluster(), model.options()), {100});
  CHECK_FALSE(unguarded.predicted.fits());
  const dp::Plan p = ds::simulated_plan(allocator);
  CHECK(p.predicted.fits());
  CHECK(p.refinement.ran);
}

TEST_CASE("search by simulation: the default budget is simulated ops; a plan too big to simulate is not refined") {
  const dp::AdaptiveAllocator allocator = deepseek_16k();
  const dp::AnalyticModel& model = allocator.model();
  const dp::Plan analytic = allocator.plan();
  const auto ops = ds::timeline_cost(ds::AFPipe::kName, model.model(),
                                     ds::cost_options(model.options(), model.model(), analytic.allocation))
                       .ops;
  REQUIRE(ops > 0);
  const long budget = std::clamp<long>(static_cast<long>(ds::kRefineOps / static_cast<double>(ops)), 1,
                                       ds::kRefineEvaluations);
  CHECK(ds::simulated_plan(allocator).refinement.evaluations <= budget);
  // Below one simulation's ops: the analytic plan, with the reason; asked for explicitly: an error.
  const auto saved = disagmoe::limits().max_ops;
  disagmoe::limits().max_ops = ops - 1;
  const dp::Plan p = ds::simulated_plan(allocator);
  const std::string skipped = p.refinement.skipped;
  CHECK_THROWS_AS((void)ds::simulated_plan(allocator, 5), disagmoe::ConfigError);
  disagmoe::limits().max_ops = saved;
  CHECK_FALSE(p.refinement.ran);
  CHECK(p.allocation == analytic.allocation);
  CHECK(skipped.find(std::to_string(ops) + " ops") != std::string::npos);
  CHECK(dp::to_json(p).at("refinement").at("skipped").get<std::string>() == skipped);
}

namespace {
// The analytic step, except that one pair count runs twice as fast: a stand-in for a
// simulator that disagrees with the analytic ranking across pair counts.
struct FastPairCountOracle {
  using oracle_concept = dp::step_time_oracle_tag;
  const dp::AnalyticModel* model;
  int fast_groups;
  [[nodiscard]] double step_seconds(const dp::Allocation& x) const {
    return dp::AnalyticOracle{model}.step_seconds(x) * (x.groups == fast_groups ? 0.5 : 1.0);
  }
};
}  // namespace

TEST_CASE("search by simulation also starts from the analytic best of every other pair count") {
  const dp::AdaptiveAllocator allocator = deepseek_16k();
  const dp::AnalyticModel& model = allocator.model();
  const dp::Plan analytic = allocator.plan();
  const std::vector<dp::Allocation> starts = dp::fastest_per_pair_count(model);
  // One per pair count that fits, each the analytic optimum of its count (brute force).
  REQUIRE(starts.size() >= 3);
  for (const dp::Allocation& s : starts) {
    double best = std::numeric_limits<double>::infinity();
    dp::for_each_allocation(model, [&](const dp::Allocation& x) {
      if (x.groups == s.groups && model.estimate(x).fits())
        best = std::min(best, model.estimate(x).step_seconds);
    });
    CHECK(model.estimate(s).step_seconds == best);
  }
  // The fast pair count: the one farthest from the plan's, out of reach of a few steps.
  const dp::Allocation far = std::abs(starts.front().groups - analytic.allocation.groups) >
                                     std::abs(starts.back().groups - analytic.allocation.groups)
                                 ? starts.front()
                                 : starts.back();
  const FastPairCountOracle oracle{&model, far.groups};
  const long budget = 400;
  const dp::Plan p = allocator.refine(analytic, oracle, {budget});
  CHECK(p.allocation.groups == far.groups);
  CHECK(p.refinement.step_seconds <= oracle.step_seconds(far));
  CHECK(p.refinement.from_step_seconds == oracle.step_seconds(analytic.allocation));
  CHECK(p.refinement.evaluations <= budget);
  // Without the other starts, descent from the plan alone stays away from it; with them,
  // and budget left, the search also runs that descent, so it is never slower.
  const dp::SearchResult alone = dp::local_search(model, oracle, analytic.allocation, {budget});
  CHECK(alone.best.groups != far.groups);
  CHECK_FALSE(alone.budget_exhausted);
  REQUIRE_FALSE(p.refinement.budget_exhausted);
  CHECK(p.refinement.step_seconds <= alone.best_step_seconds);
  // At most half of a small budget goes to the starts, the analytically fastest first:
  // the seed and that one are tried, and the descent still runs.
  const long small = 4;
  const dp::Plan q = allocator.refine(analytic, oracle, {small});
  CHECK(q.refinement.evaluations == small);
  dp::Allocation likeliest = starts.front();
  for (const dp::Allocation& s : starts)
    if (s.groups != analytic.allocation.groups &&
        (likeliest.groups == analytic.allocation.groups ||
         model.estimate(s).step_seconds < model.estimate(likeliest).step_seconds))
      likeliest = s;
  CHECK(q.refinement.step_seconds <=
        std::min(oracle.step_seconds(analytic.allocation), oracle.step_seconds(likeliest)));
}
