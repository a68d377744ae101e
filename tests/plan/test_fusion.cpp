// SPDX-License-Identifier: Apache-2.0
// AF-Pipe's stage-aligned fusion (combine of layer l + dispatch of layer l + 1) as a
// choice of the planner: where each transfer's bytes go (hand count), the search's
// pick against the enumeration of both choices, and the choice in the plan's JSON.
#include <disagmoe/plan/adaptive_allocator.hpp>
#include <disagmoe/plan/allocation_enumeration.hpp>
#include <disagmoe/plan/plan_json.hpp>
#include <disagmoe/spec/presets.hpp>

#include "tiny_model.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <string>

using namespace disagmoe;
using namespace disagmoe::plan;
using test::small_cluster;
using test::tiny_model;

TEST_CASE("group placement: A_i and F_i share their nodes; the next pair's A group sits on the next ones") {
  // 2 nodes of 8 GPUs, 4 A + 4 F per node, p = 2: pair i on node i.
  CHECK(group_nodes(1, 4, 4).first_node == 1);
  CHECK(group_nodes(1, 4, 4).nodes == 1);
  CHECK(same_node_share(group_nodes(0, 4, 4), group_nodes(0, 4, 4)) == 1);
  CHECK(same_node_share(group_nodes(1, 4, 4), group_nodes(0, 4, 4)) == 0);
  // p = 1: both groups of 8 span the two nodes; half of each GPU's destinations are local.
  CHECK(group_nodes(0, 8, 4).nodes == 2);
  CHECK(same_node_share(group_nodes(0, 8, 4), group_nodes(0, 8, 4)) == doctest::Approx(0.5));
  // 3 A GPUs per node in groups of 2: group 1 straddles nodes 0 and 1 (one GPU on each).
  CHECK(group_nodes(1, 2, 3).first_node == 0);
  CHECK(group_nodes(1, 2, 3).nodes == 2);
}

TEST_CASE("link bytes by hand: fused sends the next layer's rows across the NIC, unfused one row") {
  // Tiny model (layer 0 dense, layer 1 MoE over 4 experts), 2 nodes, p = 2: pair i (layer
  // i) on node i, so A_0 ↔ F_0 stays on NVLink and F_0 → A_1 crosses the NIC.
  const ModelSpec m = tiny_model();
  const ClusterSpec c = small_cluster(2, 8, 4);
  PlanOptions o;
  o.global_batch = 16;
  const AnalyticModel model(m, c, o);
  const double t = double(m.tokens_per_micro_batch()), row = t * row_bytes(m);
  const double rows = expected_distinct_gpus(m.experts, m.top_k, 4);
  for (bool fuse : {true, false}) {
    const Allocation x{2, 4, 4, 2, 2, {}, fuse};
    REQUIRE(model.valid(x));
    INFO("fuse " << fuse);
    // Pair 0 = layer 0 (dense: one row per token to F), not the last layer.
    const auto b0 = model.pair_link_bytes(x, 0);
    CHECK(b0.attention_nic == doctest::Approx(fuse ? row : 2 * row));  // the fused stage, or two one-row hand-offs
    CHECK(b0.attention_nvlink == doctest::Approx(fuse ? row : 2 * row));  // own dispatch (+ own return)
    CHECK(b0.ffn_nic == doctest::Approx(fuse ? row : 0.0));
    CHECK(b0.ffn_nvlink == doctest::Approx(fuse ? row : 2 * row));
    // Pair 1 = layer 1 (MoE, the last): dispatch and return over NVLink either way.
    const auto b1 = model.pair_link_bytes(x, 1);
    CHECK(b1.attention_nic == 0);
    CHECK(b1.attention_nvlink == doctest::Approx(2 * rows * row));
    CHECK(b1.ffn_nvlink == doctest::Approx(2 * rows * row));  // 4 experts on 4 F GPUs: no busiest excess
  }
  // p = 1: there is no next pair; fusion changes nothing.
  const Allocation one{1, 4, 2, 2, 2, {}, true};
  Allocation unfused = one;
  unfused.fuse = false;
  CHECK(model.estimate(one).step_seconds == model.estimate(unfused).step_seconds);
}

namespace {
struct Cluster {
  const char* model;
  int seq;
  int nodes;
};
// Layouts on 2–4 nodes where the fused stage loses (pairs on their own nodes, many rows
// per token) and where it wins (one node: every byte on NVLink, the hand-off is extra).
const Cluster kClusters[] = {{"olmoe-1b-7b", 4096, 4}, {"olmoe-1b-7b", 4096, 1}, {"deepseek-moe-16b", 4096, 4},
                             {"qwen3-30b-a3b", 8192, 2}, {"mixtral-8x7b", 4096, 2}};
}  // namespace

TEST_CASE("the search's fusion choice is the faster of the two at its layout; each choice wins on some layout") {
  int fused = 0, unfused = 0;
  for (const Cluster& k : kClusters) {
    ModelSpec m = model_preset(k.model);
    m.seq_len = k.seq;
    const ClusterSpec c = parse_cluster_name(std::string("h800x128:") + std::to_string(k.nodes));
    const AdaptiveAllocator allocator(m, c);
    const Plan p = allocator.plan();
    Allocation other = p.allocation;
    other.fuse = !other.fuse;
    const double mine = allocator.model().estimate(p.allocation).step_seconds;
    const double theirs = allocator.model().estimate(other).step_seconds;
    INFO(k.model << " on " << c.name << ": " << allocator.model().describe_allocation(p.allocation) << " " << mine
                 << " s, the other choice " << theirs << " s");
    CHECK(mine <= theirs);
    CHECK(p.step_seconds == mine);
    // Enumeration of both choices over every allocation: each wins somewhere, so the
    // choice is made, not fixed.
    for_each_allocation(allocator.model(), [&](const Allocation& x) {
      if (!x.fuse) return;
      Allocation y = x;
      y.fuse = false;
      const double tf = allocator.model().estimate(x).step_seconds, tu = allocator.model().estimate(y).step_seconds;
      fused += tf < tu;
      unfused += tu < tf;
    });
  }
  CHECK(fused >= 1);
  CHECK(unfused >= 1);
}

TEST_CASE("the plan's JSON carries the fusion choice; plans without it read back fused") {
  ModelSpec m = model_preset("olmoe-1b-7b");
  const ClusterSpec c = parse_cluster_name("h800x128:4");
  Plan p = AdaptiveAllocator(m, c).plan();
  for (bool fuse : {true, false}) {
    p.allocation.fuse = fuse;
    const io::Json j = to_json(p);
    CHECK(j.at("fuse").get<bool>() == fuse);
    CHECK(j.at("allocation").at("fuse").get<bool>() == fuse);
    CHECK(allocation_from_json(j, m, c) == p.allocation);
    CHECK(allocation_from_json(io::Json::parse(j.dump()), m, c).fuse == fuse);
  }
  io::Json old = to_json(p);
  old.erase("fuse");
  old.at("allocation").erase("fuse");
  CHECK(allocation_from_json(old, m, c).fuse);
  io::Json bad = to_json(p);
  bad["allocation"]["fuse"] = 1;
  CHECK_THROWS_AS((void)allocation_from_json(bad, m, c), IoError);
}
