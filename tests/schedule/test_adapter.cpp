// SPDX-License-Identifier: Apache-2.0
// The cost adapter against a recount from plan/cost_model.hpp, and the simulator-backed
// searches on a small cluster.
#include "uniform.hpp"

#include <disagmoe/plan/cost_model.hpp>
#include <disagmoe/schedule/schedules.hpp>
#include <disagmoe/spec/presets.hpp>

#include <doctest/doctest.h>

#include <cmath>

namespace ds = disagmoe::schedule;
namespace dp = disagmoe::plan;

TEST_CASE("colocated problem: layout, micro-batches and FLOPs recount") {
  const auto m = disagmoe::model_preset("deepseek-moe-16b");
  const auto c = disagmoe::cluster_preset("h800x128");
  ds::CostOptions o;
  const auto pb = ds::colocated_problem(m, c, {8}, o);
  REQUIRE(pb.workers.size() == 8);
  CHECK(pb.workers[0].gpus == 16);
  CHECK(pb.workers[0].nodes == 2);
  CHECK(pb.workers[3].first_node == 6);
  CHECK(pb.micro_batches == 1024 / 16);
  CHECK(pb.tokens_per_micro_batch * pb.micro_batches == doctest::Approx(1024.0 * m.seq_len));
  // NIC share per GPU: 8 NICs x 50 GB/s x 0.85 over 8 GPUs.
  CHECK(pb.workers[0].nic_bandwidth == doctest::Approx(50e9 * 0.85));
  const double peak = c.gpu.peak_flops(m.dtype);
  double attn = 0, ffn = 0, attn_ref = 0, ffn_ref = 0;
  for (int l = 0; l < m.layers; ++l) {
    const auto& x = pb.layers[static_cast<std::size_t>(l)];
    attn += (x.attn_fwd + x.attn_bwd + x.attn_wgrad) * peak * o.efficiency.attention;
    ffn += (x.expert_fwd + x.expert_bwd + x.expert_wgrad) * peak * o.efficiency.ffn;
    const auto lc = dp::layer_cost(m, l);
    attn_ref += lc.attention_side().total() + (lc.moe ? 0 : lc.dense_ffn.total());
    ffn_ref += (lc.experts + lc.shared_experts).total();
    CHECK(x.moe == m.is_moe_layer(l));
    if (x.moe) CHECK(x.dispatch_bytes == doctest::Approx(dp::dispatch_bytes(m, l, {16, true, 0})));
  }
  CHECK(attn == doctest::Approx(attn_ref));
  CHECK(ffn == doctest::Approx(ffn_ref));
  CHECK_THROWS_WITH_AS(ds::colocated_problem(m, c, {7}, o), doctest::Contains("stages = 7"), disagmoe::ConfigError);
}

TEST_CASE("colocated problem: pipeline sends are posted beside the all-to-alls, which keep their turns") {
  // Megatron's pipeline sends run on their own NCCL stream: on an in-order comm stream
  // no two comm ops of a worker overlap, so any overlap of a send with an all-to-all of
  // the same worker shows the send kept no turn; the all-to-alls never overlap.
  auto m = disagmoe::model_preset("olmoe-1b-7b");
  m.seq_len = 4096;
  const auto c = disagmoe::parse_cluster_name("h800x128:2");
  ds::CostOptions o;
  o.micro_batches = 8;
  const auto pb = ds::colocated_problem(m, c, {2}, o);
  for (const auto& w : pb.workers) CHECK(w.posted_sends);
  for (const char* name : {"1f1b", "a2a-overlap"}) {
    CAPTURE(name);
    for (bool posted : {true, false}) {
      CAPTURE(posted);
      ds::Schedule s = ds::build_schedule(name, pb);
      for (auto& w : s.workers) {
        CHECK(w.posted_sends);  // the policy keeps the problem's workers
        w.posted_sends = posted;
      }
      const auto r = ds::simulate(s);
      REQUIRE_FALSE(r.deadlocked);
      int send_overlaps = 0, a2a_overlaps = 0;
      for (std::size_t i = 0; i < s.ops.size(); ++i)
        for (std::size_t j = i + 1; j < s.ops.size(); ++j) {
          const auto &a = s.ops[i], &b = s.ops[j];
          if (a.stream != ds::Stream::kComm || b.stream != ds::Stream::kComm || a.worker != b.worker)
            continue;
          const auto &ta = r.timings[i], &tb = r.timings[j];
          if (std::max(ta.start, tb.start) >= std::min(ta.end, tb.end)) continue;
          const bool a_send = a.kind == ds::OpKind::kSend, b_send = b.kind == ds::OpKind::kSend;
          if (a_send != b_send) ++send_overlaps;
          if (!a_send && !b_send) ++a2a_overlaps;
        }
      CHECK(a2a_overlaps == 0);
      CHECK((send_overlaps > 0) == posted);
    }
  }
}

TEST_CASE("AF problem: expert work per F GPU scales with A/F group sizes; tokens match colocated") {
  const auto m = disagmoe::model_preset("qwen3-235b-a22b");
  const auto c = disagmoe::cluster_preset("h800x128");
  const ds::AfLayout lay{4, 6, 2, 6, 2};
  const auto pb = ds::af_problem(m, c, lay);
  REQUIRE(pb.workers.size() == 8);
  CHECK(pb.workers[0].role == ds::Role::kAttention);
  CHECK(pb.workers[4].role == ds::Role::kFfn);
  CHECK(pb.workers[0].gpus == 24);  // 16 nodes x 6 / 4 groups
  CHECK(pb.workers[4].gpus == 8);   // 16 x 2 / 4
  CHECK(pb.workers[0].nodes == 4);
  CHECK(pb.workers[4].nic_bandwidth == doctest::Approx(2 * 50e9 * 0.85 / 2));
  CHECK(pb.micro_batches == 1024 / 24);  // rounded down: 42 waves of 24 sequences
  const double peak = c.gpu.peak_flops(m.dtype);
  const auto lc = dp::layer_cost(m, 5, {8, true, 0});
  CHECK(pb.layers[5].expert_fwd * peak * 0.45 == doctest::Approx(lc.ffn_side().forward * 24.0 / 8.0));
  CHECK(pb.layers[5].combine_bytes == doctest::Approx(lc.return_bytes * 3.0));
  const auto col = ds::colocated_problem(m, c, {8});
  CHECK(pb.flops_per_micro_batch / pb.tokens_per_micro_batch ==
        doctest::Approx(col.flops_per_micro_batch / col.tokens_per_micro_batch));
  CHECK_THROWS_WITH_AS(ds::af_problem(m, c, {3, 4, 4, 4, 4}), doctest::Contains("groups = 3"), disagmoe::ConfigError);
  CHECK_THROWS_WITH_AS(ds::af_problem(m, c, {1, 4, 4, 6, 4}), doctest::Contains("attention_nics_per_node"),
                       disagmoe::ConfigError);
}

TEST_CASE("recomputation trades activation memory for one extra forward") {
  const auto m = disagmoe::model_preset("gpt-oss-120b");
  const auto c = disagmoe::cluster_preset("h800x128");
  ds::CostOptions a, b;
  b.memory.recompute = disagmoe::plan::Recompute::both(true);
  const auto x = ds::colocated_problem(m, c, {4}, a).layers[3];
  const auto y = ds::colocated_problem(m, c, {4}, b).layers[3];
  CHECK(y.attn_bwd == doctest::Approx(x.attn_bwd + x.attn_fwd));
  CHECK(y.expert_bwd == doctest::Approx(x.expert_bwd + x.expert_fwd));
  // Each side on its own: only its backward and its activations change.
  for (const bool attention : {true, false}) {
    ds::CostOptions one;
    one.memory.recompute = {attention, !attention};
    const auto z = ds::colocated_problem(m, c, {4}, one).layers[3];
    CHECK(z.attn_bwd == doctest::Approx(attention ? y.attn_bwd : x.attn_bwd));
    CHECK(z.expert_bwd == doctest::Approx(attention ? x.expert_bwd : y.expert_bwd));
    CHECK(z.attn_activation_bytes == (attention ? y : x).attn_activation_bytes);
    CHECK(z.expert_activation_bytes == (attention ? x : y).expert_activation_bytes);
    CHECK(z.attn_fwd == x.attn_fwd);
    CHECK(z.expert_fwd == x.expert_fwd);
  }
  // A dense layer's FFN runs with the attention part: it recomputes, and drops its
  // activations, with that part (DeepSeek-MoE-16B's layer 0 is dense).
  const auto ds16 = disagmoe::model_preset("deepseek-moe-16b");
  REQUIRE_FALSE(ds16.is_moe_layer(0));
  const auto dense = [&](disagmoe::plan::Recompute rc) {
    ds::CostOptions one;
    one.memory.recompute = rc;
    return ds::colocated_problem(ds16, c, {4}, one).layers[0];
  };
  const auto off = dense({false, false}), att = dense({true, false}), ffn = dense({false, true});
  CHECK(ffn.attn_bwd == off.attn_bwd);
  CHECK(ffn.attn_activation_bytes == off.attn_activation_bytes);
  CHECK(att.attn_bwd == doctest::Approx(off.attn_bwd + off.attn_fwd));
  CHECK(att.attn_activation_bytes == dense({true, true}).attn_activation_bytes);
  CHECK(att.attn_activation_bytes < off.attn_activation_bytes);
  CHECK(y.attn_activation_bytes < x.attn_activation_bytes);
  CHECK(y.expert_activation_bytes < x.expert_activation_bytes);
}

TEST_CASE("searches pick a runnable layout; the step-time oracle is finite exactly for valid layouts") {
  const auto [m, c, o] = ds::test::small_setting();
  for (auto name : ds::kScheduleNames) {
    CAPTURE(name);
    const auto s = ds::simulate_best(name, m, c, o);
    CHECK_FALSE(s.result.deadlocked);
    CHECK(s.result.step_seconds >= s.result.lower_bound_seconds);
    CHECK(s.result.tokens_per_second * s.result.step_seconds == doctest::Approx(64.0 * 1024));
  }
  CHECK(std::isfinite(ds::simulated_step_seconds(m, c, {2, 4, 4, 4, 4}, o)));
  CHECK(std::isinf(ds::simulated_step_seconds(m, c, {3, 4, 4, 4, 4}, o)));
  CHECK_THROWS_WITH_AS(ds::simulate_best("gpipe", m, c, o), doctest::Contains("schedule = \"gpipe\""),
                       disagmoe::ConfigError);
}

#include <disagmoe/plan/allocation.hpp>
#include <disagmoe/schedule/plan_oracle.hpp>

TEST_CASE("the simulator is a plan::step_time_oracle: same value as a direct simulation, inf when invalid") {
  static_assert(dp::step_time_oracle<ds::SimulatedStepTime>);
  const auto [m, c, o] = ds::test::small_setting();
  const ds::SimulatedStepTime oracle(m, c, ds::plan_options(o, {}));
  dp::Allocation a;
  a.groups = 2;
  a.attention_gpus_per_node = 4;
  a.ffn_gpus_per_node = 4;
  a.attention_nics_per_node = 3;
  a.ffn_nics_per_node = 5;
  const double t = oracle.step_seconds(a);
  CHECK(std::isfinite(t));
  CHECK(t == ds::simulated_step_seconds(m, c, {2, 4, 4, 3, 5}, o));
  a.recompute = dp::Recompute::both(true);  // one more forward per backward: strictly slower
  CHECK(oracle.step_seconds(a) > t);
  a.groups = 3;  // 8 A GPUs do not split into 3 groups
  CHECK(std::isinf(oracle.step_seconds(a)));
}

#include <disagmoe/schedule/simulator.hpp>

TEST_CASE("AF problem: an F group size that does not divide the experts follows the ceil rule") {
  // Qwen3-235B: 128 experts, top-8. 16 nodes x 5 F GPUs / 16 pairs = F groups of 5:
  // the busiest GPU holds ceil(128 / 5) = 26 experts (plan::Allocation's rule).
  auto m = disagmoe::model_preset("qwen3-235b-a22b");
  m.seq_len = 1024;
  const auto c = disagmoe::cluster_preset("h800x128");
  ds::CostOptions o;
  o.micro_batches = 1;  // one micro-batch: no two ops overlap, op times are exact
  const ds::AfLayout lay{16, 3, 5, 4, 4};
  const auto pb = ds::af_problem(m, c, lay, o);
  REQUIRE(pb.workers[16].gpus == 5);
  const int ga = 3, l = 7;
  // By hand: routed expert FLOPs of one micro-batch on each of the 3 A GPUs, 26/128 of
  // them on the busiest F GPU, at the FFN efficiency. Qwen3 has no shared experts.
  const auto lc = dp::layer_cost(m, l, {5, true, 0});
  REQUIRE(m.shared_experts == 0);
  const double peak = c.gpu.peak_flops(m.dtype) * 0.45;
  const double by_hand = lc.experts.forward * ga * 26.0 / 128.0 / peak;
  CHECK(pb.layers[l].expert_fwd == doctest::Approx(by_hand).epsilon(1e-12));
  CHECK(pb.layers[l].expert_bwd == doctest::Approx(lc.experts.backward_input * ga * 26.0 / 128.0 / peak).epsilon(1e-12));
  // Rows: the busiest GPU is hit by a token unless all 8 picks miss its 26 experts.
  double miss = 1;
  for (int i = 0; i < 8; ++i) miss *= (128.0 - 26 - i) / (128.0 - i);
  const double mean_rows_per_gpu = dp::expected_distinct_gpus(128, 8, 5) / 5;
  const double imb = (1 - miss) / mean_rows_per_gpu;
  CHECK(imb > 1);
  CHECK(pb.layers[l].ffn_imbalance == doctest::Approx(imb).epsilon(1e-12));
  CHECK(pb.layers[l].combine_bytes == doctest::Approx(lc.return_bytes * ga / 5.0 * imb).epsilon(1e-12));
  // State: 26 experts' weights, not 128 / 5.
  const auto even = ds::af_problem(m, c, {16, 4, 4, 4, 4}, o);  // F groups of 4: 32 experts each
  CHECK(pb.layers[l].expert_state_bytes / even.layers[l].expert_state_bytes == doctest::Approx(26.0 / 32.0));

  // The plan simulates; its expert forward takes exactly the hand-computed time, and
  // the F GPU receives imb x the even share of each A GPU's dispatch.
  ds::PolicyKnobs k;
  k.af_uses_sms = false;
  const auto s = ds::build_schedule("afpipe", pb, k);
  const auto r = ds::simulate(s);
  REQUIRE_FALSE(r.deadlocked);
  bool seen = false;
  for (std::size_t i = 0; i < s.ops.size(); ++i) {
    const auto& op = s.ops[i];
    if (op.layer != l || op.backward) continue;
    if (op.kind == ds::OpKind::kExpertForward) {
      CHECK(r.timings[i].end - r.timings[i].start == doctest::Approx(by_hand).epsilon(1e-9));
      seen = true;
    }
    if (op.kind == ds::OpKind::kDispatch) {
      double rx = 0;
      for (const auto& u : ds::detail::comm_uses(s, op))
        if (u.resource / 4 == op.peer) rx += u.bytes;
      CHECK(rx == doctest::Approx(lc.dispatch_bytes * ga / 5.0 * imb).epsilon(1e-12));
    }
  }
  CHECK(seen);
  // The layout search accepts it as given (no ConfigError, no deadlock).
  const auto best = ds::simulate_best("afpipe", m, c, o, k, 0, lay);
  CHECK_FALSE(best.result.deadlocked);
  CHECK(best.result.step_seconds >= best.result.lower_bound_seconds);
}
