// SPDX-License-Identifier: Apache-2.0
// AF-Pipe's ping-pong group factor in the planner: k = 1 keeps half the micro-batches
// in flight (closed form), the MILP still equals enumeration, and the automatic choice
// of factor and context-parallel degree equals planning every combination.
#include <disagmoe/plan/adaptive_allocator.hpp>
#include <disagmoe/plan/allocation_enumeration.hpp>
#include <disagmoe/plan/plan_json.hpp>
#include <disagmoe/spec/presets.hpp>

#include "small_case.hpp"

#include <doctest/doctest.h>

#include <limits>
#include <string>

using namespace disagmoe;
using namespace disagmoe::plan;
using test::small_cluster;

namespace {

AnalyticModel factor_model(int k, double hbm = 80e9) {
  ModelSpec m = model_preset("olmoe-1b-7b");
  m.seq_len = 8192;
  PlanOptions o;
  o.global_batch = 256;
  o.group_factor = k;
  return AnalyticModel(m, small_cluster(2, 8, 8, hbm), o);
}

}  // namespace

TEST_CASE("group factor 1: half the micro-batches in flight, half the activations, state unchanged") {
  const AnalyticModel two = factor_model(2), one = factor_model(1);
  int checked = 0;
  for (int p : {1, 2, 4})
    for (int a : {1, 2, 4}) {
      if (two.group_size(p, a) == 0) continue;  // 2a A GPUs do not split into p groups
      ++checked;
      INFO("p " << p << ", a " << a);
      const double waves = double(two.micro_batches()) / two.group_size(p, a);
      REQUIRE(waves >= 4 * p);  // both windows are full
      CHECK(two.attention_in_flight(p, a) == 4 * p);
      CHECK(one.attention_in_flight(p, a) == 2 * p);
      CHECK(one.pair_in_flight(a) == 2 * two.group_size(p, a) * p);
      const Allocation x2{p, a, 8 - a, 4, 4, {}, true, 1, 2};
      Allocation x1 = x2;
      x1.group_factor = 1;
      REQUIRE(two.valid(x2));
      REQUIRE(one.valid(x1));
      CHECK_FALSE(one.valid(x2));  // another factor is not this model's
      const FitReport m2 = two.memory(x2), m1 = one.memory(x1);
      CHECK(m1.attention_worker.activations ==
            doctest::Approx(m2.attention_worker.activations / 2).epsilon(1e-12));
      CHECK(m1.ffn_worker.activations == doctest::Approx(m2.ffn_worker.activations / 2).epsilon(1e-12));
      CHECK(m1.attention_worker.optimizer == m2.attention_worker.optimizer);
      CHECK(m1.ffn_worker.parameters == m2.ffn_worker.parameters);
    }
  CHECK(checked == 8);
  PlanOptions bad;
  bad.group_factor = 3;
  CHECK_THROWS_WITH_AS(AnalyticModel(model_preset("olmoe-1b-7b"), small_cluster(2, 8, 8), bad),
                       doctest::Contains("group_factor = 3"), ConfigError);
}

TEST_CASE("MILP optimum equals exhaustive enumeration at group factor 1") {
  for (double hbm : {80e9, 12e9}) {  // the second binds memory
    const AnalyticModel model = factor_model(1, hbm);
    const EnumerationResult e = enumerate_best_bound(model);
    const MilpSeed s = solve_allocation_milp(model);
    INFO("HBM " << hbm);
    REQUIRE(e.found);
    REQUIRE(s.found);
    CHECK(s.bound_seconds == doctest::Approx(e.bound_seconds).epsilon(1e-6));
    CHECK(s.allocation.group_factor == 1);
    CHECK(model.estimate(s.allocation).fits());
  }
}

TEST_CASE(
    "automatic choices: the fastest plan over every degree and factor; the closest to fitting when none "
    "fits") {
  ModelSpec m = model_preset("olmoe-1b-7b");
  m.seq_len = 16384;
  for (double hbm : {80e9, 14e9, 12e9, 10e9}) {  // ample, tight, tighter, too little
    const ClusterSpec c = small_cluster(2, 8, 8, hbm);
    PlanOptions o;
    o.global_batch = 64;
    o.context_parallel = 0;
    o.group_factor = 0;
    const PlanOptions r = resolve_automatic(m, c, o);
    // Oracle: plan every combination; the fastest that fits, else the one whose
    // closest allocation overflows least.
    double best_step = std::numeric_limits<double>::infinity(), least = best_step;
    int best_cp = 0, best_k = 0, least_cp = 1, least_k = 2;
    for (int cp : {1, 2, 4})
      for (int k : {2, 1}) {
        PlanOptions t = o;
        t.context_parallel = cp;
        t.group_factor = k;
        const AnalyticModel model(m, c, t);
        if (!solve_allocation_milp(model).found) {
          const double over = closest_fit(model).second;
          if (over < least) {
            least = over;
            least_cp = cp;
            least_k = k;
          }
          continue;
        }
        const double step = AdaptiveAllocator(m, c, t).plan().step_seconds;
        if (step < best_step) {
          best_step = step;
          best_cp = cp;
          best_k = k;
        }
      }
    INFO("HBM " << hbm);
    if (best_cp > 0) {
      CHECK(r.context_parallel == best_cp);
      CHECK(r.group_factor == best_k);
      CHECK(AdaptiveAllocator(m, c, o).plan().step_seconds == doctest::Approx(best_step).epsilon(1e-12));
    } else {
      CHECK(r.context_parallel == least_cp);
      CHECK(r.group_factor == least_k);
      CHECK_THROWS_WITH_AS(AdaptiveAllocator(m, c, o).plan(), doctest::Contains("ping-pong group"),
                           ConfigError);
    }
    if (hbm == 80e9) CHECK(r.group_factor == 2);  // memory to spare: the busier ring
    if (hbm == 12e9) CHECK(r.group_factor == 1);  // only the smaller window fits
    if (hbm == 10e9) CHECK(best_cp == 0);         // nothing fits
  }
}

TEST_CASE("plan JSON carries the group factor and reads it back strictly") {
  ModelSpec m = model_preset("olmoe-1b-7b");
  m.seq_len = 8192;
  const ClusterSpec c = small_cluster(2, 8, 8);
  PlanOptions o;
  o.group_factor = 1;
  const Plan p = AdaptiveAllocator(m, c, o).plan();
  io::Json j = to_json(p);
  CHECK(j["allocation"]["group_factor"] == 1);
  CHECK(allocation_from_json(j, m, c) == p.allocation);
  j["allocation"].erase("group_factor");  // plans written before the choice: 2p
  CHECK(allocation_from_json(j, m, c).group_factor == 2);
  j["allocation"]["group_factor"] = 3;
  CHECK_THROWS_WITH_AS(allocation_from_json(j, m, c), doctest::Contains("$.allocation.group_factor"),
                       IoError);
}
