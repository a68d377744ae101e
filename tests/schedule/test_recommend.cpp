// SPDX-License-Identifier: Apache-2.0
// disagmoe-plan's recommendation: the verdict's arithmetic by hand, and the ranking
// against an independent enumeration of the simulated schedules on configurations where
// AF-Pipe wins and where a colocated schedule wins.
#include <disagmoe/plan/adaptive_allocator.hpp>
#include <disagmoe/schedule/recommend.hpp>
#include <disagmoe/spec/presets.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace ds = disagmoe::schedule;
namespace dp = disagmoe::plan;

namespace {
// `comm`: idle behind transfers (bytes and latency), `wait`: behind peers' compute.
ds::RankedSchedule entry(const char* name, double busy, double comm, double wait, bool fits = true) {
  ds::RankedSchedule r;
  r.schedule = name;
  r.layout = "l";
  r.step_seconds = busy + comm + wait;
  r.fits = fits;
  r.peak_memory_bytes = 90e9;
  r.job = {8, busy, comm, wait};
  r.job.idle.network_seconds = comm * 0.75;
  r.job.idle.latency_seconds = comm * 0.25;
  r.job.idle.peer_compute_seconds = wait * 0.5;
  r.job.idle.other_seconds = wait * 0.5;
  return r;
}
}  // namespace

TEST_CASE("verdict: speedup over the runner-up and the largest term of the gap, by hand") {
  // 1.0 s against 1.5 s: +0.1 compute, +0.1 behind transfers, +0.3 behind peers -> balance.
  auto r = ds::verdict(entry("afpipe", 0.6, 0.1, 0.3), entry("dualpipe", 0.7, 0.2, 0.6), 72e9);
  CHECK(r.schedule == "afpipe");
  CHECK(r.runner_up == "dualpipe");
  CHECK(r.speedup == doctest::Approx(1.5));
  CHECK(r.cause == "balance");
  CHECK(r.reason.find("1.50x faster than dualpipe") != std::string::npos);
  CHECK(r.reason.find("of the 500 ms gap, 300 ms more waiting on peers' compute") != std::string::npos);
  CHECK(r.reason.find("100 ms more waiting on transfers (network) and 100 ms more compute") != std::string::npos);
  // A runner-up faster at some terms: those are "less", never a negative time.
  auto mixed = ds::verdict(entry("a", 0.6, 0.3, 0.1), entry("b", 0.5, 0.2, 0.6), 72e9);
  CHECK(mixed.reason.find("of the 300 ms gap, 500 ms more waiting on peers' compute") != std::string::npos);
  CHECK(mixed.reason.find("100 ms less waiting on transfers (network) and 100 ms less compute") != std::string::npos);
  CHECK(mixed.reason.find('-') == std::string::npos);
  // The same gap made of waiting on transfers, then of compute.
  CHECK(ds::verdict(entry("a", 0.6, 0.1, 0.3), entry("b", 0.7, 0.4, 0.4), 72e9).cause == "network");
  CHECK(ds::verdict(entry("a", 0.6, 0.1, 0.3), entry("b", 0.9, 0.2, 0.4), 72e9).cause == "compute");
  // A runner-up that does not fit loses on memory whatever its step.
  auto m = ds::verdict(entry("a", 0.6, 0.1, 0.3), entry("b", 0.1, 0.0, 0.0, false), 72e9);
  CHECK(m.cause == "memory");
  CHECK(m.reason.find("needs 90.0 GB per GPU, over the 72.0 GB usable") != std::string::npos);
}

namespace {
// A schedule as the oracle sees it: seconds of the plan's batch at its simulated rate,
// batch tokens over tokens/s (steps of different layouts carry different tokens).
struct Entry {
  std::string schedule;
  double seconds = 0;
};
struct Oracle {
  Entry af;
  Entry colocated;  // the best of the list
};
// Every schedule simulated on its own, as a user would with disagmoe-sim.
Oracle enumerate(const dp::AnalyticModel& model, const dp::Allocation& x, const std::vector<std::string>& names) {
  const double tokens = double(model.options().global_batch) * model.model().seq_len;
  const auto entry = [&](const ds::Simulated& s) {
    return Entry{s.schedule.name, tokens / s.result.tokens_per_second};
  };
  Oracle o;
  o.af = entry(ds::simulate_plan(model, x));
  ds::CostOptions base = ds::cost_options(model.options(), model.model(), x);
  base.memory.recompute = {};
  bool first = true;
  for (const auto& n : names) {
    const ds::Simulated s = ds::simulate_best(n, model.model(), model.cluster(), base);
    REQUIRE(s.fits);
    if (first || entry(s).seconds < o.colocated.seconds) o.colocated = entry(s);
    first = false;
  }
  return o;
}
}  // namespace

TEST_CASE("recommend: each side wins where the enumeration says it must") {
  // DeepSeek-MoE 16B, 4K, 2 nodes, M2N over RDMA. With 64 sequences per step the
  // colocated pipelines' fill and drain dominate and AF-Pipe wins; with 512, DualPipe
  // hides its bubbles and its GPUs compute less per step (no A/F split), and it wins.
  auto m = disagmoe::model_preset("deepseek-moe-16b");
  m.seq_len = 4096;
  const auto c = disagmoe::parse_cluster_name("h800x128:2");
  const std::vector<std::string> names = {"1f1b", "interleaved", "dualpipe"};
  for (int batch : {64, 512}) {
    CAPTURE(batch);
    dp::PlanOptions o;
    o.global_batch = batch;
    o.m2n_uses_sms = false;
    const dp::AnalyticModel model(m, c, o);
    const dp::Plan plan = dp::AdaptiveAllocator(m, c, o).plan();
    const Oracle want = enumerate(model, plan.allocation, names);
    const ds::Recommendation r = ds::recommend(model, plan.allocation, names);
    const bool af_wins = want.af.seconds < want.colocated.seconds;
    CHECK(af_wins == (batch == 64));
    const auto& win = af_wins ? want.af : want.colocated;
    const auto& lose = af_wins ? want.colocated : want.af;
    CHECK(r.schedule == win.schedule);
    CHECK(r.runner_up == lose.schedule);
    CHECK(r.step_seconds == doctest::Approx(win.seconds).epsilon(1e-12));
    CHECK(r.speedup == doctest::Approx(lose.seconds / win.seconds));
    REQUIRE(r.ranked.size() == names.size() + 1);
    CHECK(r.ranked.front().schedule == r.schedule);
    CHECK(std::is_sorted(r.ranked.begin(), r.ranked.end(),
                         [](const auto& a, const auto& b) { return a.step_seconds < b.step_seconds; }));
    // Each entry's time breakdown is scaled with its step: busy + idle is still the step.
    for (const ds::RankedSchedule& e : r.ranked)
      CHECK(e.job.busy_seconds + e.job.idle.total() == doctest::Approx(e.step_seconds).epsilon(1e-9));
  }
}
