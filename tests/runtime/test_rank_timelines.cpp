// SPDX-License-Identifier: Apache-2.0
// Every rank's timeline (runtime/rank_timelines.hpp) on hand-built timelines: the merge the
// calibration reads, one trace run per rank index, and where each rank's time went, all
// against sums written out by hand.
#include <disagmoe/runtime/rank_timelines.hpp>

#include <doctest/doctest.h>

namespace rt = disagmoe::runtime;
namespace ds = disagmoe::schedule;

namespace {

// Worker 0 (two ranks): a compute op, then an all-to-all; worker 1 (one rank): a compute op.
ds::Schedule two_workers() {
  ds::Schedule s;
  s.name = "hand";
  s.workers.resize(2);
  s.workers[0].name = "S0";
  s.workers[1].name = "S1";
  ds::Op c0;
  c0.kind = ds::OpKind::kAttentionForward;
  c0.worker = 0;
  c0.seconds = 1;
  const int a = s.add(c0);
  ds::Op x;
  x.kind = ds::OpKind::kAllToAll;
  x.stream = ds::Stream::kComm;
  x.worker = x.peer = 0;
  x.bytes = 8;
  x.deps = {a};
  s.add(x);
  ds::Op c1;
  c1.kind = ds::OpKind::kAttentionForward;
  c1.worker = 1;
  c1.seconds = 1;
  s.add(c1);
  return s;
}

rt::MeasuredOp op(double start, double end, double cpu = -1, double bytes = -1) {
  return {start, end, cpu, bytes};
}

// Rank 0 computes 0..2 s on 1.5 s of CPU and enters the all-to-all at 2, posting 6 bytes;
// rank 1 computes 0..3 s on 1 s of CPU, enters at 3.5, posting 10; both leave at 4.5 and
// 5. Worker 1 computes 0..1 s.
rt::RankTimelines timelines() {
  return {
      {{op(0, 2, 1.5), op(2, 4.5, 0.25, 6), op(-1, -1)}, {op(0, 3, 1.0), op(3.5, 5, 0.5, 10), op(-1, -1)}},
      {{op(-1, -1), op(-1, -1), op(0, 1)}}};
}

}  // namespace

TEST_CASE(
    "merged_timelines: the first rank's, an all-to-all from the last entry to the last exit, each op's "
    "slowest CPU and busiest bytes") {
  const auto s = two_workers();
  const auto m = rt::merged_timelines(s, timelines());
  REQUIRE(m.size() == 2);
  CHECK(m[0][0].start == 0);
  CHECK(m[0][0].end == 2);
  CHECK(m[0][0].cpu == 1.5);
  CHECK(m[0][1].start == 3.5);  // rank 1's entry
  CHECK(m[0][1].end == 5);      // rank 1's end, the last
  CHECK(m[0][1].cpu == 0.5);
  CHECK(m[0][1].bytes == 10);  // the busiest rank's
  CHECK(m[0][0].bytes == -1);  // a compute op posts nothing
  CHECK(m[1][2].end == 1);
  // Wrong shapes are named.
  auto bad = timelines();
  bad[0][1].pop_back();
  CHECK_THROWS_AS((void)rt::merged_timelines(s, bad), disagmoe::ConfigError);
  CHECK_THROWS_AS((void)rt::merged_timelines(s, {}), disagmoe::ConfigError);
}

TEST_CASE("rank_times: compute wall and CPU, waits for the last rank, the all-to-all after it") {
  const auto t = rt::rank_times(two_workers(), timelines());
  REQUIRE(t.size() == 2);
  REQUIRE(t[0].size() == 2);
  CHECK(t[0][0].compute_wall == 2);
  CHECK(t[0][0].compute_cpu == 1.5);
  CHECK(t[0][0].off_core() == 0.5);
  CHECK(t[0][0].wait_for_ranks == 1.5);    // entered at 2, the last rank at 3.5
  CHECK(t[0][0].after_last_entry == 1.0);  // left at 4.5
  CHECK(t[0][1].off_core() == 2.0);
  CHECK(t[0][1].wait_for_ranks == 0);
  CHECK(t[0][1].after_last_entry == 1.5);
  // No CPU time measured: the wall time counts as CPU, nothing off core.
  CHECK(t[1][0].compute_wall == 1);
  CHECK(t[1][0].off_core() == 0);
}

TEST_CASE("rank_runs: one trace run per rank index, each rank's own times; none with one rank per worker") {
  const auto s = two_workers();
  const auto low = ds::lower(s);
  const auto runs = rt::rank_runs(low, timelines());
  REQUIRE(runs.size() == 2);
  CHECK(runs[0].label == "measured rank 0");
  CHECK(runs[1].label == "measured rank 1");
  CHECK(runs[0].events.size() == 3);  // worker 0's two ops, worker 1's one
  CHECK(runs[1].events.size() == 2);  // worker 1 has no rank 1
  CHECK(runs[0].step_seconds == 4.5);
  CHECK(runs[1].step_seconds == 5);
  for (const auto& e : runs[1].events) {
    CHECK(e.worker == 0);
    CHECK(e.start == (e.op == 0 ? 0 : 3.5));
  }
  CHECK(rt::rank_runs(low, {{timelines()[0][0]}, timelines()[1]}).empty());
  auto short_rank = timelines();
  short_rank[0][1].resize(1);
  CHECK_THROWS_AS((void)rt::rank_runs(low, short_rank), disagmoe::ConfigError);
}
