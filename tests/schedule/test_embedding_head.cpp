// SPDX-License-Identifier: Apache-2.0
// The embedding and the output head as scheduled ops: once per micro-batch on the worker
// that holds the first / last layer's attention, at the hand-counted cost (GEMM FLOPs of
// the head over the attention side's rate; HBM bytes of the embedding's gather and
// scatter-add), counted in the step time and in MFU.
#include <disagmoe/schedule/cost_adapter.hpp>
#include <disagmoe/schedule/lowering.hpp>
#include <disagmoe/schedule/schedules.hpp>
#include <disagmoe/schedule/simulator.hpp>
#include <disagmoe/schedule/timeline_cost.hpp>
#include <disagmoe/spec/presets.hpp>

#include <doctest/doctest.h>

#include <map>
#include <string>
#include <tuple>

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
    // AF-Pipe's head is vocabulary-parallel: each of its p A groups runs 1/p of every
    // pass; a baseline's last stage runs the whole head.
    const bool af = name == ds::AFPipe::kName;
    int p = 0;
    for (const auto& w : pb.workers) p += w.role == ds::Role::kAttention;
    std::map<std::tuple<ds::OpKind, int, int>, int> seen;  // (kind, micro-batch, worker) -> count
    for (const auto& op : s.ops) {
      const auto it = cost.find(op.kind);
      if (it == cost.end()) continue;
      CAPTURE(ds::to_string(op.kind));
      ++seen[{op.kind, op.micro_batch, op.worker}];
      const bool embed = op.kind == ds::OpKind::kEmbeddingForward || op.kind == ds::OpKind::kEmbeddingBackwardWeight;
      CHECK(op.seconds == doctest::Approx(it->second / (af && !embed ? p : 1)).epsilon(1e-12));
      if (embed || !af)
        CHECK(op.worker == (embed ? first_worker.at(op.micro_batch) : last_worker.at(op.micro_batch)));
      else
        CHECK(pb.workers[static_cast<std::size_t>(op.worker)].role == ds::Role::kAttention);
      // The head's forward opens the backward: posted on AF-Pipe, listed on the backward
      // stream (checked below); on a stage's forward stream.
      CHECK(op.stream ==
            (op.kind == ds::OpKind::kEmbeddingForward || (op.kind == ds::OpKind::kHeadForward && !af)
                 ? ds::Stream::kForward
                 : ds::Stream::kBackward));
    }
    CHECK(seen.size() ==
          (af ? 2 + 3 * std::size_t(p) : cost.size()) * static_cast<std::size_t>(pb.micro_batches));
    for (const auto& [key, n] : seen) CHECK(n == 1);
    if (af)
      for (const auto& op : s.ops)
        if (cost.count(op.kind) != 0)
          CHECK(op.posted ==
                (op.kind == ds::OpKind::kHeadForward || op.kind == ds::OpKind::kHeadBackwardInput));
    if (af) {
      // The ring per micro-batch, on the last layer: 2 (p - 1) sends of one hidden row per
      // token (the output out, the merged gradient back) and p - 1 of the statistics (two
      // fp32 per token) for the weight gradients.
      const double tokens = pb.tokens_per_micro_batch / pb.workers[0].gpus;
      std::map<int, std::pair<int, int>> ring_sends;  // micro-batch -> (rows, statistics)
      for (const auto& op : s.ops)
        if (op.kind == ds::OpKind::kSend && op.layer == L - 1) {
          auto& [rows, stats] = ring_sends[op.micro_batch];
          if (op.bytes == pb.layers.back().hidden_bytes)
            ++rows;
          else if (op.bytes == 8 * tokens)
            ++stats;
          else
            FAIL("a ring send of " << op.bytes << " bytes");
        }
      CHECK(ring_sends.size() == static_cast<std::size_t>(pb.micro_batches));
      for (const auto& [j, n] : ring_sends) CHECK(n == std::pair{2 * (p - 1), p - 1});
      // The runtime runs compute streams in order: it cannot lower posted compute.
      CHECK_THROWS_WITH_AS(ds::lower(s), doctest::Contains("posted"), disagmoe::ConfigError);
    }
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
    // Without the head as ops, MFU counts only the layers: FLOPs that take no simulated
    // time would inflate it (by 8% on DeepSeek-MoE-16B 4K: DualPipe 41.9% against 38.8%).
    Setup off = st;
    off.o.embedding_head = false;
    const ds::Problem layers_only = off.problem(name);
    CHECK(layers_only.flops_per_micro_batch ==
          doctest::Approx(disagmoe::plan::model_layer_flops(st.m).total() * layers_only.tokens_per_micro_batch /
                          (double(st.m.micro_batch) * st.m.seq_len)));
  }
}

TEST_CASE("embedding and head: AF-Pipe's vocabulary-parallel head takes 1/p of the head's time per group") {
  // One micro-batch on free layers and links: the embedding, then every group's shard
  // of the head's three passes side by side, (fwd + bwd + wgrad) / p, then the
  // embedding's gradient (A_0's in-order backward stream runs its shard's weight
  // gradient first). Closed form, for p = 1 (the whole head), 2 and 4.
  for (int p : {1, 2, 4}) {
    CAPTURE(p);
    ds::Problem pb;
    pb.workers = ds::uniform_workers(p, ds::Role::kAttention);
    for (auto w : ds::uniform_workers(p, ds::Role::kFfn)) pb.workers.push_back(w);
    pb.network.nic_latency = pb.network.nvlink_latency = 0;
    pb.layers.assign(4, ds::LayerCost{});
    pb.micro_batches = 1;
    pb.embedding_head = {0.5, 0.25, 3.0, 5.0, 4.0};
    const auto r = ds::simulate(ds::build_schedule(ds::AFPipe::kName, pb));
    REQUIRE_FALSE(r.deadlocked);
    CHECK(r.step_seconds == doctest::Approx(0.5 + 0.25 + 12.0 / p).epsilon(1e-12));
  }
}

TEST_CASE("embedding and head: AF-Pipe's A workers hold V/p rows of the head each, by recount") {
  // DeepSeek-MoE-16B (untied) on 2 nodes, p = 2, A groups of 3: each A worker's state is
  // its layers' A-side parameters, the embedding on pair 0, the final norm on the last
  // layer's pair and half the head, at bf16 weights and gradients and 12 bytes of Adam
  // state sharded over the group (ZeRO-1). Summed over the pairs: every A-side tensor once.
  const Setup st;
  REQUIRE_FALSE(st.m.tied_embeddings);
  const ds::Problem pb = st.problem(ds::AFPipe::kName);
  const ds::Schedule s = ds::build_schedule(ds::AFPipe::kName, pb);
  const int p = 2, ga = s.workers[0].gpus, L = st.m.layers;
  REQUIRE(ga == 3);
  const double vd = double(st.m.vocab) * st.m.hidden, per_param = 2 + 2 + 12.0 / ga;
  double all = 0;
  for (int i = 0; i < p; ++i) {
    double params = (i == 0 ? vd : 0) + (i == (L - 1) % p ? st.m.hidden : 0) + vd / 2;
    for (int l = i; l < L; l += p) params += double(disagmoe::plan::attention_side_params(st.m, l));
    CHECK(s.workers[static_cast<std::size_t>(i)].static_bytes ==
          doctest::Approx(params * per_param).epsilon(1e-12));
    all += s.workers[static_cast<std::size_t>(i)].static_bytes;
  }
  double every = 2 * vd + st.m.hidden;
  for (int l = 0; l < L; ++l) every += double(disagmoe::plan::attention_side_params(st.m, l));
  CHECK(all == doctest::Approx(every * per_param).epsilon(1e-12));
}

TEST_CASE("embedding and head: AF-Pipe's head shards do not hold back the ping-pong groups") {
  // DeepSeek-MoE-16B 4K on 16 nodes, p = 16, 3/5 per node: the F side is the bottleneck
  // (1.58 s of compute per GPU) and the A side has room for the head. Scheduled with
  // the head, the step grows by the A side's share of it and the ring's transfers, under
  // 10% (2.07 s against 1.96 s). With the shards' logits and input gradients at a fixed
  // point of the backward stream each group's head waited for the previous group's whole
  // backward: 2.69 s.
  auto m = disagmoe::model_preset("deepseek-moe-16b");
  m.seq_len = 4096;
  ds::CostOptions o;
  o.embedding_head = true;
  const ds::Problem with = ds::af_problem(m, disagmoe::cluster_preset("h800x128"), {16, 3, 5, 4, 4}, o);
  ds::Problem without = with;
  without.embedding_head = {};
  ds::AFPipe policy;
  policy.group_size = 32;
  const double a = ds::simulate(policy.build(with)).step_seconds,
               b = ds::simulate(policy.build(without)).step_seconds;
  CHECK(a > b);
  CHECK(a < 1.10 * b);
}
