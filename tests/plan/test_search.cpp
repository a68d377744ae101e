// SPDX-License-Identifier: Apache-2.0
// Roofline (hand counts, monotonicity in sequence length, SVG), local search (finds the
// exhaustive minimum of a convex oracle; respects the budget; never worse than the
// seed with the analytic oracle).
#include <disagmoe/plan/allocation_enumeration.hpp>
#include <disagmoe/plan/local_search.hpp>
#include <disagmoe/plan/plan.hpp>
#include <disagmoe/plan/roofline.hpp>
#include <disagmoe/spec/presets.hpp>

#include "tiny_model.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

using namespace disagmoe;
using namespace disagmoe::plan;

TEST_CASE("roofline intensities equal the hand count for the tiny model") {
  const ModelSpec m = test::tiny_model();
  const DispatchOptions d{1, true, 0};  // one F GPU: one row per token each way
  // A side fwd+bwd: layer 0: 3·3072 + (640 + 1280) = 11136; layer 1: + router 3·512 = 12672.
  // Bytes: (dispatch + return) 2 · 8 tokens · 16 B per layer = 256.
  CHECK(attention_intensity(m, d) == doctest::Approx((11136.0 + 12672.0) / 512));
  // F side: dense 3·6144 + experts/shared 3·(4608 + 1152).
  CHECK(ffn_intensity(m, d) == doctest::Approx((18432.0 + 17280.0) / 512));
}

TEST_CASE("attention intensity grows with sequence length, FFN intensity does not") {
  for (const std::string& name : model_preset_names()) {
    ModelSpec m = model_preset(name);
    const DispatchOptions d{8, true, 0};
    m.seq_len = 1024;
    double prev = attention_intensity(m, d);
    const double ffn = ffn_intensity(m, d);
    for (int s : {2048, 4096, 16384, 32768}) {
      m.seq_len = s;
      INFO(name << " seq " << s);
      CHECK(attention_intensity(m, d) > prev);
      CHECK(ffn_intensity(m, d) == doctest::Approx(ffn).epsilon(1e-12));
      prev = attention_intensity(m, d);
    }
  }
}

TEST_CASE("RooflinePoint: achieved = min(ceiling, I × bandwidth), turning point = ceiling / bandwidth") {
  RooflinePoint r{"x", 10, 100, 5};
  CHECK(r.turning_point() == 20);
  CHECK(r.achieved() == 50);
  CHECK(r.network_bound());
  r.intensity = 40;
  CHECK(r.achieved() == 100);
  CHECK_FALSE(r.network_bound());
}

TEST_CASE("RooflineModel of an allocation, and its SVG") {
  ModelSpec m = model_preset("deepseek-moe-16b");
  const ClusterSpec c = cluster_preset("h800x128");
  const AnalyticModel model(m, c, PlanOptions{});
  const Allocation x{4, 3, 4, 3, 5};
  REQUIRE(model.valid(x));
  const RooflineModel r(model, x);
  CHECK(r.turning_point() == doctest::Approx(989.4e12 / 50e9));  // 8 NICs of 50 GB/s per 8 GPUs
  CHECK(r.attention().ceiling == doctest::Approx(989.4e12 * 0.5));
  CHECK(r.ffn().ceiling == doctest::Approx(989.4e12 * 0.45));
  // A side: 16 nodes × 3 NICs / 4 pairs over 12 GPUs per A group.
  CHECK(r.attention().bandwidth == doctest::Approx(16.0 * 3 / 4 * 50e9 * 0.85 / 12));
  CHECK(r.ffn().bandwidth == doctest::Approx(16.0 * 5 / 4 * 50e9 * 0.85 / 16));
  const std::string svg = r.svg("deepseek <16b> & h800");
  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(svg.find("</svg>") != std::string::npos);
  CHECK(svg.find("deepseek &lt;16b&gt; &amp; h800") != std::string::npos);
  int circles = 0;
  for (std::size_t i = svg.find("<circle"); i != std::string::npos; i = svg.find("<circle", i + 1)) ++circles;
  CHECK(circles == 2);
  CHECK(svg.find("nan") == std::string::npos);
  CHECK(svg.find("inf") == std::string::npos);
}

namespace {

// A separable convex bowl with its minimum at a known valid allocation.
struct BowlOracle {
  using oracle_concept = step_time_oracle_tag;
  Allocation target;
  double step_seconds(const Allocation& a) const {
    auto sq = [](double v) { return v * v; };
    return 1 + sq(a.groups - target.groups) + sq(a.attention_gpus_per_node - target.attention_gpus_per_node) +
           sq(a.ffn_gpus_per_node - target.ffn_gpus_per_node) +
           sq(a.attention_nics_per_node - target.attention_nics_per_node) +
           sq(a.ffn_nics_per_node - target.ffn_nics_per_node) +
           (a.recompute.attention != target.recompute.attention ? 0.5 : 0) +
           (a.recompute.ffn != target.recompute.ffn ? 0.25 : 0);
  }
};
static_assert(step_time_oracle<BowlOracle>);
static_assert(!step_time_oracle<int>);

}  // namespace

TEST_CASE("local search reaches the exhaustive minimum of a convex oracle") {
  ModelSpec m = model_preset("olmoe-1b-7b");
  const ClusterSpec c = cluster_preset("h800x128");
  const AnalyticModel model(m, c, PlanOptions{});
  const BowlOracle oracle{Allocation{4, 3, 4, 2, 5, Recompute::both(true)}};
  REQUIRE(model.valid(oracle.target));
  double best = std::numeric_limits<double>::infinity();
  for_each_allocation(model, [&](const Allocation& x) { best = std::min(best, oracle.step_seconds(x)); });
  for (const Allocation& seed : {Allocation{1, 1, 1, 1, 1}, Allocation{16, 6, 2, 6, 2},
                                 Allocation{8, 2, 4, 4, 4, Recompute::both(true)}}) {
    REQUIRE(model.valid(seed));
    const SearchResult r = local_search(model, oracle, seed);
    INFO(model.describe_allocation(seed) << " -> " << model.describe_allocation(r.best));
    CHECK(r.best_step_seconds == best);
    CHECK(r.best == oracle.target);
    CHECK(r.seed == seed);
    CHECK(r.seed_step_seconds == oracle.step_seconds(seed));
    CHECK(r.gain() >= 1);
    CHECK_FALSE(r.budget_exhausted);
  }
  const SearchResult small = local_search(model, oracle, Allocation{1, 1, 1, 1, 1}, SearchOptions{3});
  CHECK(small.evaluations == 3);
  CHECK(small.budget_exhausted);
  CHECK(small.best_step_seconds <= small.seed_step_seconds);
  CHECK_THROWS_AS((void)local_search(model, oracle, Allocation{1, 1, 1, 1, 1}, SearchOptions{0}),
                  ConfigError);
  CHECK_THROWS_AS((void)local_search(model, oracle, Allocation{1, 7, 7, 1, 1}), ConfigError);
}

TEST_CASE("local search with the analytic oracle: never worse than the seed, never better than enumeration") {
  ModelSpec m = model_preset("deepseek-moe-16b");
  for (int seq : {4096, 32768}) {
    m.seq_len = seq;
    const AnalyticModel model(m, cluster_preset("h800x128"), PlanOptions{});
    const AnalyticOracle oracle{&model};
    double best = std::numeric_limits<double>::infinity();
    for_each_allocation(model, [&](const Allocation& x) { best = std::min(best, oracle.step_seconds(x)); });
    const SearchResult r = local_search(model, oracle, Allocation{2, 4, 4, 4, 4, Recompute::both(true)});
    INFO("seq " << seq << " best " << best << " found " << r.best_step_seconds);
    CHECK(r.best_step_seconds <= r.seed_step_seconds);
    CHECK(r.best_step_seconds >= best);
    CHECK(std::isfinite(r.best_step_seconds));
    CHECK(r.best_step_seconds == model.estimate(r.best).step_seconds);
  }
}
