// SPDX-License-Identifier: Apache-2.0
// Golden per-worker orders for small sizes, written out by hand from the rules in
// the published schedules (and afpipe.hpp for AF-Pipe).
#include "uniform.hpp"

#include <disagmoe/schedule/afpipe.hpp>
#include <disagmoe/schedule/baselines.hpp>
#include <disagmoe/schedule/describe.hpp>
#include <disagmoe/schedule/dualpipe.hpp>

#include <doctest/doctest.h>

namespace ds = disagmoe::schedule;
using ds::test::uniform_problem;

TEST_CASE("golden: 1F1B p=3 m=4") {
  const auto s = ds::OneFOneB{}.build(uniform_problem(3, 3, 4));
  CHECK(ds::action_string(s, 0) == "F0 F1 F2 B0 F3 B1 B2 B3");
  CHECK(ds::action_string(s, 1) == "F0 F1 B0 F2 B1 F3 B2 B3");
  CHECK(ds::action_string(s, 2) == "F0 B0 F1 B1 F2 B2 F3 B3");
}

TEST_CASE("golden: interleaved p=2 v=2 m=4") {
  const auto s = ds::Interleaved1F1B{2}.build(uniform_problem(2, 4, 4));
  // Table (N = p = 2): F order 0c0 1c0 0c1 1c1 2c0 3c0 2c1 3c1; rank 0 warms up
  // 2(p-1) + (v-1)p = 4 forwards, rank 1 warms up 2.
  CHECK(ds::action_string(s, 0) == "F0 F1 F0 F1 F2 B0 F3 B1 F2 B0 F3 B1 B2 B3 B2 B3");
  CHECK(ds::action_string(s, 1) == "F0 F1 F0 B0 F1 B1 F2 B0 F3 B1 F2 B2 F3 B3 B2 B3");
}

TEST_CASE("golden: A2A overlap p=2 v=1 m=4 pairs F and B after one extra warmup") {
  const auto s = ds::A2AOverlap{1}.build(uniform_problem(2, 2, 4));
  CHECK(ds::action_string(s, 0) == "F0 F1 F2+B0 F3+B1 B2 B3");
  CHECK(ds::action_string(s, 1) == "F0 F1+B0 F2+B1 F3+B2 B3");
}

TEST_CASE("golden: DualPipe p=4 m=8 (eight steps of B6)") {
  const auto s = ds::DualPipe{}.build(uniform_problem(4, 4, 8));
  // Rank 0: half-rank 0, phase 0 = micro-batches 0-3 (down), phase 1 = 4-7 (up).
  CHECK(ds::action_string(s, 0) == "F0 F1 F2 F4 B4 W4 F5 F3+B5 F6+B0 B6 F7+B1 B7 B2 W2 B3 W3");
  // Rank 1: middle rank, its first step-4 pair runs unoverlapped; zero-bubble from i = 1.
  CHECK(ds::action_string(s, 1) == "F0 F4 F1 F5 F2 B4 F6+B0 F3+B5 F7+B1 B6 B2 B7 B3 W7 W3");
  // Rank 3 mirrors rank 0 with the directions swapped.
  CHECK(ds::action_string(s, 3) == "F4 F5 F6 F0 B0 W0 F1 F7+B1 F2+B4 B2 F3+B5 B3 B6 W6 B7 W7");
}

TEST_CASE("golden: DualPipeV p=2 m=4 (B7)") {
  const auto s = ds::DualPipeV{}.build(uniform_problem(2, 4, 4));
  CHECK(ds::action_string(s, 0) == "F0 F1 F2 F0 B0 W0 F1 F3+B1 F2+B0 B2 F3+B1 B3 B2 W2 B3 W3");
  CHECK(ds::action_string(s, 1) == "F0 F0 F1 F1 F2 B0 F2+B0 F3+B1 F3+B1 B2 B2 B3 B3 W3 W3");
}

TEST_CASE("golden: AF-Pipe p=2 L=4 m=4 group 2: interleaved layers, round-major per group") {
  auto pb = uniform_problem(4, 4, 4);
  for (int i = 0; i < 4; ++i) pb.workers[static_cast<std::size_t>(i)].role = i < 2 ? ds::Role::kAttention : ds::Role::kFfn;
  const auto s = ds::AFPipe{2}.build(pb);
  CHECK(ds::stream_string(s, 0, ds::Stream::kForward) ==
        "attn_fwd:0.0 attn_fwd:1.0 attn_fwd:0.2 attn_fwd:1.2 attn_fwd:2.0 attn_fwd:3.0 attn_fwd:2.2 attn_fwd:3.2");
  CHECK(ds::stream_string(s, 3, ds::Stream::kForward) ==
        "expert_fwd:0.1 expert_fwd:1.1 expert_fwd:0.3 expert_fwd:1.3 "
        "expert_fwd:2.1 expert_fwd:3.1 expert_fwd:2.3 expert_fwd:3.3");
  CHECK(ds::stream_string(s, 1, ds::Stream::kBackward) ==
        "attn_bwd:0.3 attn_wgrad:0.3 attn_bwd:1.3 attn_wgrad:1.3 attn_bwd:0.1 attn_wgrad:0.1 attn_bwd:1.1 "
        "attn_wgrad:1.1 attn_bwd:2.3 attn_wgrad:2.3 attn_bwd:3.3 attn_wgrad:3.3 attn_bwd:2.1 attn_wgrad:2.1 "
        "attn_bwd:3.1 attn_wgrad:3.1");
  // Fused combine+dispatch: F0 (layer 0) sends to A1 (layer 1); one-way M2N from A0.
  int fused = 0, m2n = 0;
  for (const auto& op : s.ops) {
    if (op.kind == ds::OpKind::kCombineDispatch && !op.backward && op.layer == 0) {
      CHECK(op.worker == 2);
      CHECK(op.peer == 1);
      ++fused;
    }
    if (op.kind == ds::OpKind::kDispatch && !op.backward && op.layer == 0) {
      CHECK(op.worker == 0);
      CHECK(op.peer == 2);
      ++m2n;
    }
    CHECK(op.kind != ds::OpKind::kAllToAll);
  }
  CHECK(fused == 4);
  CHECK(m2n == 4);
}
