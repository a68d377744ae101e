// SPDX-License-Identifier: Apache-2.0
// The embedding and the output head as scheduled ops: once per micro-batch on the worker
// that holds the first / last layer's attention, at the hand-counted cost (GEMM FLOPs of
// the head over the attention side's rate; HBM bytes of the embedding's gather and
// scatter-add), counted in the step time and in MFU.
#include <disagmoe/schedule/cost_adapter.hpp>
#include <disagmoe/schedule/schedules.hpp>
#include <disagmoe/schedule/simulator.hpp>
#include <disagmoe/schedule/timeline_cost.hpp>
#include <disagmoe/spec/presets.hpp>

#include <doctest/doctest.h>

#include <map>
#include <string>

namespace ds = disagmoe::schedule;

namespace {
struct Setup {
  disagmoe::ModelSpec m = disagmoe::model_preset("deepseek-moe-16b");
  disagmoe::ClusterSpec c = [] {
    auto c = disagmoe::cluster_preset("h800x128");
    c.nodes = 2;
    return c;
  }();
  ds::CostOptions o = [] {
    ds::CostOptions o;
    o.micro_batches = 8;
    o.embedding_head = true;
    return o;
  }();
  ds::Problem problem(std::string_view name) const {
    return name == ds::AFPipe::kName ? ds::af_problem(m, c, {2, 3, 5, 4, 4}, o) : ds::colocated_problem(m, c, {2}, o);
  }
};

// Hand counts for one micro-batch of T = micro_batch × seq_len tokens on one GPU: the
// head's logits GEMM is 2·T·d·V FLOPs per pass (forward, input and weight gradient) at
// 50% of peak (the attention side's default efficiency); the embedding moves 2·T·d
// bf16 elements forward and 3·T·d backward through HBM.
struct HandCost {
  double head_pass, embed_fwd, embed_wgrad;
  explicit HandCost(const Setup& s) {
    const double t = double(s.m.micro_batch) * s.m.seq_len;
    head_pass = 2 * t * s.m.hidden * s.m.vocab / (0.5 * s.c.gpu.peak_flops_bf16);
    embed_fwd = 2 * t * s.m.hidden * 2 / s.c.gpu.hbm_bandwidth;
    embed_wgrad = 3 * t * s.m.hidden * 2 / s.c.gpu.hbm_bandwidth;
  }
};
}  // namespace

TEST_CASE("embedding and head: once per micro-batch, at the hand-counted cost, where the first/last layer runs") {
  const Setup st;
  REQUIRE(st.m.dtype == disagmoe::DType::kBf16);
  const HandCost hand(st);
  const std::map<ds::OpKind, double> cost = {{ds::OpKind::kEmbeddingForward, hand.embed_fwd},
                                             {ds::OpKind::kEmbeddingBackwardWeight, hand.embed_wgrad},
                                             {ds::OpKind::kHeadForward, hand.head_pass},
                                             {ds::OpKind::kHeadBackwardInput, hand.head_pass},
                                             {ds::OpKind::kHeadBackwardWeight, hand.head_pass}};
  for (std::string_view name : ds::kScheduleNames) {
    CAPTURE(name);
    const ds::Problem pb = st.problem(name);
    const ds::Schedule s = ds::build_schedule(name, pb);
    const int L = static_cast<int>(pb.layers.size());
    // Which worker runs layer 0's and layer L-1's attention forward of each micro-batch.
    std::map<int, int> first_worker, last_worker;
    for (const auto& op : s.ops)
      if (op.kind == ds::OpKind::kAttentionForward && op.layer == 0) first_worker[op.micro_batch] = op.worker;
      else if (op.kind == ds::OpKind::kAttentionForward && op.layer == L - 1) last_worker[op.micro_batch] = op.worker;
    std::map<std::pair<ds::OpKind, int>, int> seen;  // (kind, micro-batch) -> count
    for (const auto& op : s.ops) {
      const auto it = cost.find(op.kind);
      if (it == cost.end()) continue;
      CAPTURE(ds::to_string(op.kind));
      ++seen[{op.kind, op.micro_batch}];
      CHECK(op.seconds == doctest::Approx(it->second).epsilon(1e-12));
      const bool embed = op.kind == ds::OpKind::kEmbeddingForward || op.kind == ds::OpKind::kEmbeddingBackwardWeight;
      CHECK(op.worker == (embed ? first_worker.at(op.micro_batch) : last_worker.at(op.micro_batch)));
      CHECK(op.stream == (op.kind == ds::OpKind::kEmbeddingForward || op.kind == ds::OpKind::kHeadForward
                              ? ds::Stream::kForward
                              : ds::Stream::kBackward));
    }
    CHECK(seen.size() == cost.size() * static_cast<std::size_t>(pb.micro_batches));
    for (const auto& [key, n] : seen) CHECK(n == 1);
    // Within the timeline bound the budgets check.
    CHECK(static_cast<std::int64_t>(s.ops.size()) <= ds::timeline_cost(name, st.m, st.o, ds::PolicyKnobs{}.chunks).ops);
  }
}

TEST_CASE("embedding and head: the step includes them and MFU counts the FLOPs they run") {
  const Setup st;
  for (std::string_view name : {ds::AFPipe::kName, std::string_view("1f1b")}) {
    CAPTURE(name);
    ds::Problem pb = st.problem(name);
    const auto with = ds::simulate(ds::build_schedule(name, pb));
    ds::Problem without_pb = pb;
    without_pb.embedding_head = {};
    const auto without = ds::simulate(ds::build_schedule(name, without_pb));
    REQUIRE_FALSE(with.deadlocked);
    // The last stage (or A group) runs the head's three passes per micro-batch: the step
    // grows, by at most their sum over the micro-batches plus the embedding's.
    const HandCost hand(st);
    const double added = pb.micro_batches * (3 * hand.head_pass + hand.embed_fwd + hand.embed_wgrad);
    CHECK(with.step_seconds > without.step_seconds);
    CHECK(with.step_seconds <= without.step_seconds + added * (1 + 1e-9) / (1 - st.c.kernel_comm_sm_fraction));
    // MFU's numerator: per GPU micro-batch every layer's FLOPs and the head's, the
    // FLOPs of the compute ops the schedule runs (embedding lookups have none).
    const double per_gpu_mb = disagmoe::plan::model_layer_flops(st.m).total() + 3 * 2.0 * st.m.micro_batch *
                                                                                     st.m.seq_len * st.m.hidden *
                                                                                     st.m.vocab;
    CHECK(pb.flops_per_micro_batch == doctest::Approx(per_gpu_mb * pb.tokens_per_micro_batch /
                                                      (double(st.m.micro_batch) * st.m.seq_len)));
  }
}
