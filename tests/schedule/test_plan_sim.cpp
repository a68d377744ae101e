// SPDX-License-Identifier: Apache-2.0
// The planner against the simulator on the planner's own allocations: one conversion
// (plan_oracle.hpp) that keeps every field, one memory model, one SM rule, and step
// times against the simulator's over grids of models, sequence lengths and clusters.
#include <disagmoe/plan/adaptive_allocator.hpp>
#include <disagmoe/schedule/plan_oracle.hpp>
#include <disagmoe/spec/presets.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace ds = disagmoe::schedule;
namespace dp = disagmoe::plan;

namespace {

struct Case {
  const char* model;
  int seq;
  const char* cluster;
};

// Models with cheap and costly attention, dense first layers (DeepSeek) and sliding
// windows (GPT-OSS), 4K–16K, on 4 and 16 nodes. Each case plans (≈ 1 ms) and simulates
// one step (≤ 10^5 ops).
const std::vector<Case>& grid() {
  static const std::vector<Case> g = {
      {"deepseek-moe-16b", 4096, "h800x128"},   {"deepseek-moe-16b", 8192, "h800x128"},
      {"deepseek-moe-16b", 16384, "h800x128"},  {"gpt-oss-120b", 4096, "h800x128"},
      {"gpt-oss-120b", 8192, "h800x128"},       {"qwen3-30b-a3b", 8192, "h800x128"},
      {"olmoe-1b-7b", 4096, "h800x128:4"},      {"olmoe-1b-7b", 16384, "h800x128:4"},
      {"qwen3-30b-a3b", 4096, "h800x128:4"},    {"deepseek-moe-16b", 8192, "h800x128:4"},
  };
  return g;
}

// The regime where many waves circulate (W ≥ 128 per A worker, ≥ 4 ping-pong groups of
// 2p). With fewer waves and many layers per pair (p ≤ 4 at 8K–32K on 16 nodes) the
// planner is further off (the test of many layers per pair below).
const std::vector<Case>& many_waves() {
  static const std::vector<Case> g = {
      {"deepseek-moe-16b", 4096, "h800x128"},  {"olmoe-1b-7b", 4096, "h800x128:4"},
      {"olmoe-1b-7b", 16384, "h800x128:4"},    {"qwen3-30b-a3b", 4096, "h800x128:4"},
      {"deepseek-moe-16b", 8192, "h800x128:4"},
  };
  return g;
}

dp::AnalyticModel model_of(const Case& k, dp::PlanOptions o = {}) {
  auto m = disagmoe::model_preset(k.model);
  m.seq_len = k.seq;
  return dp::AnalyticModel(m, disagmoe::parse_cluster_name(k.cluster), o);
}

}  // namespace

TEST_CASE("one set of defaults: the simulator's batch, training state and HBM share are the planner's") {
  const ds::CostOptions c;
  const dp::PlanOptions p;
  auto m = disagmoe::model_preset("deepseek-moe-16b");
  for (int seq : {4096, 8192, 32768}) {
    m.seq_len = seq;
    CHECK(ds::global_batch_of(m, c) == dp::global_batch_of(p, m));
    CHECK(ds::global_batch_of(m, c) == (std::int64_t{1} << 22) / seq);  // 4 Mi tokens
  }
  CHECK(c.memory.zero1 == p.memory.zero1);
  CHECK(c.memory.zero1);
  CHECK(c.memory.optimizer_bytes == p.memory.optimizer_bytes);
  CHECK(c.memory.grad_bytes == p.memory.grad_bytes);
  CHECK(c.memory.flash_attention == p.memory.flash_attention);
  CHECK(c.memory_fraction == p.memory_fraction);
  CHECK(c.dedup == p.dedup);
  CHECK(c.efficiency.attention == p.efficiency.attention);
  CHECK(c.efficiency.ffn == p.efficiency.ffn);
  CHECK(c.efficiency.network == p.efficiency.network);
}

TEST_CASE("Plan -> simulated problem: the round trip keeps every field") {
  dp::PlanOptions o;
  o.global_batch = 96;
  o.efficiency = {0.41, 0.37, 0.73};
  o.memory.grad_bytes = 4;
  o.memory.optimizer_bytes = 16;
  o.memory.zero1 = false;
  o.memory.flash_attention = false;
  o.dedup = false;
  o.memory_fraction = 0.8;
  o.m2n_uses_sms = false;
  o.embedding_head = true;
  auto m = disagmoe::model_preset("olmoe-1b-7b");
  m.seq_len = 2048;
  const auto c = disagmoe::parse_cluster_name("h800x128:4");
  const dp::AnalyticModel model(m, c, o);
  const dp::Allocation x{2, 3, 5, 3, 5, {true, false}};
  REQUIRE(model.valid(x));
  const ds::PlannedSimulation s = ds::planned_simulation(model, x);
  // Allocation <-> layout + recompute.
  CHECK(ds::allocation_of(s.layout, s.cost.memory.recompute, s.knobs.af_fuse) == x);
  // Options <-> costs + knobs, field by field.
  const dp::PlanOptions back = ds::plan_options(s.cost, s.knobs);
  CHECK(back.global_batch == o.global_batch);
  CHECK(back.efficiency.attention == o.efficiency.attention);
  CHECK(back.efficiency.ffn == o.efficiency.ffn);
  CHECK(back.efficiency.network == o.efficiency.network);
  CHECK(back.memory.grad_bytes == o.memory.grad_bytes);
  CHECK(back.memory.optimizer_bytes == o.memory.optimizer_bytes);
  CHECK(back.memory.zero1 == o.memory.zero1);
  CHECK(back.memory.flash_attention == o.memory.flash_attention);
  CHECK(back.memory.recompute == o.memory.recompute);
  CHECK(back.dedup == o.dedup);
  CHECK(back.memory_fraction == o.memory_fraction);
  CHECK(back.m2n_uses_sms == o.m2n_uses_sms);
  CHECK(back.embedding_head == o.embedding_head);
  // The problem itself: the plan's groups, bandwidths, batch and recomputation.
  const dp::Plan plan = dp::make_plan(model, x, {x, 1, x, 1, 1, false}, 0, 0);
  const ds::Problem pb = ds::af_problem(model, x);
  REQUIRE(pb.workers.size() == 4);
  CHECK(pb.workers[0].gpus == plan.attention_group_size);
  CHECK(pb.workers[2].gpus == plan.ffn_group_size);
  CHECK(pb.workers[0].nic_bandwidth == doctest::Approx(plan.attention_bandwidth_per_gpu * 0.73));
  CHECK(pb.workers[2].nic_bandwidth == doctest::Approx(plan.ffn_bandwidth_per_gpu * 0.73));
  CHECK(pb.micro_batches * plan.attention_group_size * plan.micro_batch == plan.global_batch);
  CHECK(pb.network.comm_sm_fraction == c.kernel_comm_sm_fraction);
  CHECK(pb.network.rdma_sm_fraction == c.rdma_comm_sm_fraction);
  CHECK(pb.embedding_head.head_fwd ==
        doctest::Approx(dp::head_flops(m).forward / (c.gpu.peak_flops(m.dtype) * 0.41)).epsilon(1e-12));
  // Recomputation: one more forward before each backward.
  const auto lc = dp::layer_cost(m, 1);
  CHECK(pb.layers[1].attn_bwd ==
        doctest::Approx((lc.attention_side().backward_input + lc.attention_side().forward) /
                        (c.gpu.peak_flops(m.dtype) * 0.41)));
  // Knobs: the planner's ping-pong group and transport.
  CHECK(s.knobs.af_group_size == 2 * x.groups);
  CHECK(s.knobs.af_uses_sms == o.m2n_uses_sms);
}

TEST_CASE("one memory model: every worker's state is the planner's, its peak within the planner's bound") {
  for (const Case& k : grid()) {
    INFO(k.model << " seq " << k.seq << " on " << k.cluster);
    const dp::AnalyticModel model = model_of(k);
    const dp::Plan plan = dp::AdaptiveAllocator(model.model(), model.cluster(), model.options()).plan();
    const dp::Allocation& x = plan.allocation;
    const ds::Simulated sim = ds::simulate_plan(model, x);
    const auto& w = sim.schedule.workers;
    const int p = x.groups;
    // The planner's per-pair workers (WorkerLoad of pair i, its in-flight window).
    const int ga = plan.attention_group_size, gf = plan.ffn_group_size;
    const double in_flight = model.attention_in_flight(p, x.attention_gpus_per_node);
    dp::MemoryOptions mo = model.options().memory;
    mo.recompute = x.recompute;
    const auto groups = dp::interleaved_groups(model.model().layers, p);
    double plan_a = 0, plan_f = 0;
    for (int i = 0; i < p; ++i) {
      dp::WorkerLoad load;
      load.layers = groups[static_cast<std::size_t>(i)];
      load.attention_group_size = ga;
      load.ffn_group_size = gf;
      load.holds_embedding = i == 0;
      load.holds_head = i == (model.model().layers - 1) % p;
      load.head_params = dp::head_shard_params(model.model(), p, i);
      load.attention_in_flight = in_flight;
      load.ffn_in_flight = in_flight * ga;
      const dp::MemoryBytes a = dp::attention_worker_memory(model.model(), load, mo);
      const dp::MemoryBytes f = dp::ffn_worker_memory(model.model(), load, mo);
      const auto& ra = sim.result.workers[static_cast<std::size_t>(i)];
      const auto& rf = sim.result.workers[static_cast<std::size_t>(p + i)];
      CHECK(w[static_cast<std::size_t>(i)].static_bytes ==
            doctest::Approx(a.parameters + a.gradients + a.optimizer).epsilon(1e-9));
      CHECK(w[static_cast<std::size_t>(p + i)].static_bytes ==
            doctest::Approx(f.parameters + f.gradients + f.optimizer).epsilon(1e-9));
      CHECK(ra.peak_activation_bytes <= a.activations * (1 + 1e-9));
      CHECK(rf.peak_activation_bytes <= f.activations * (1 + 1e-9));
      plan_a = std::max(plan_a, a.total());
      plan_f = std::max(plan_f, f.total());
    }
    CHECK(plan_a == doctest::Approx(plan.predicted.memory.attention_worker.total()).epsilon(1e-9));
    CHECK(plan_f == doctest::Approx(plan.predicted.memory.ffn_worker.total()).epsilon(1e-9));
    // A plan that fits fits in the simulator.
    REQUIRE(plan.predicted.fits());
    CHECK(sim.fits);
  }
}

TEST_CASE("planner within 11% of the simulator on its own allocation (kernel and RDMA M2N, many waves)") {
  // Within 11% everywhere and within 5% on 7 of these 10 (asserted: 5; 6 before the
  // constants were refitted in session 28, 4 before the ring's path followed the
  // ping-pong groups, session 27): the search picks the allocations where its model
  // errs most optimistically, e.g. 7.8% on one here (10.6% in session 27). This
  // grid is where the model before the round trip's contention term was tuned (8 of 10
  // within 5%); over 3144 fixed allocations (bench_plan_model) and the bench grid's plans
  // the present one is closer (bench/RESULTS.md, sessions 25, 27 and 28). disagmoe-plan's
  // refinement prices plans by simulation.
  int within_5 = 0, cases = 0;
  for (bool kernels : {true, false}) {
    for (const Case& k : many_waves()) {
      dp::PlanOptions o;
      o.m2n_uses_sms = kernels;
      const dp::AnalyticModel model = model_of(k, o);
      const dp::Plan plan = dp::AdaptiveAllocator(model.model(), model.cluster(), o).plan();
      const ds::Simulated sim = ds::simulate_plan(model, plan.allocation);
      // The planner prices the batch with fractional waves; the simulation runs whole ones:
      // compare at the simulated rate over the plan's batch.
      const double predicted = plan.predicted.step_seconds,
                   simulated = double(plan.global_batch) * plan.seq_len / sim.result.tokens_per_second;
      INFO(k.model << " seq " << k.seq << " on " << k.cluster << (kernels ? " kernels" : " rdma") << ": "
                   << model.describe_allocation(plan.allocation) << " planner " << predicted << " s, simulator "
                   << simulated << " s");
      CHECK(plan.predicted.waves >= 4 * model.attention_in_flight(plan.allocation.groups,
                                                                 plan.allocation.attention_gpus_per_node));
      CHECK(std::abs(predicted / simulated - 1) < 0.11);
      within_5 += std::abs(predicted / simulated - 1) < 0.05;
      ++cases;
    }
  }
  CHECK(within_5 >= cases / 2);
}

TEST_CASE("the analytic model against the simulator on every allocation of a grid, not only the planner's") {
  // The planner's choice is where its model errs most optimistically (the search finds
  // the errors), so the model itself is measured on fixed allocations: DeepSeek-MoE-16B
  // 4K on 16 nodes and OLMoE-1B-7B 4K on 4, every power-of-two pair count, 2-4 A GPUs
  // per node, fusion on and off, ping-pong groups of p and 2p waves, kernel M2N
  // (bench_plan_model --quick runs the same and more). Measured: mean |error| 0.066,
  // 54 of 100 within 5% (0.070 and 50 before session 28's refit; 0.078 and 40 with the
  // ring's path priced as whole round trips, session 25); the model before the round
  // trip's contention term and its smooth maximum, 0.150 and 22, and 45% and 65% off on
  // two of them.
  double sum = 0;
  int cases = 0, within_5 = 0;
  for (const Case& k :
       {Case{"deepseek-moe-16b", 4096, "h800x128"}, Case{"olmoe-1b-7b", 4096, "h800x128:4"}}) {
    for (int factor : {1, 2}) {
      dp::PlanOptions o;
      o.context_parallel = 1;
      o.group_factor = factor;
      const dp::AnalyticModel model = model_of(k, o);
      const double batch_tokens = double(dp::global_batch_of(o, model.model())) * k.seq;
      for (int p = 1; p <= model.model().layers; p *= 2) {
        for (int a : {2, 3, 4}) {
          for (bool fuse : {true, false}) {
            dp::Allocation x{p, a, 8 - a, 4, 4, {}, fuse, 1, factor};
            if (!model.valid(x) || !model.estimate(x).fits()) continue;
            const double simulated = ds::batch_seconds(ds::simulate_plan(model, x), batch_tokens);
            const double error = std::abs(model.estimate(x).step_seconds / simulated - 1);
            INFO(k.model << " " << model.describe_allocation(x) << ": error " << error);
            CHECK(error < 0.45);
            sum += error;
            within_5 += error <= 0.05;
            ++cases;
          }
        }
      }
    }
  }
  MESSAGE(cases << " allocations: mean |error| " << sum / cases << ", " << within_5 << " within 5%");
  CHECK(cases >= 60);
  CHECK(sum / cases < 0.08);
  CHECK(within_5 >= cases * 45 / 100);
}

TEST_CASE("planner near the simulator where a pair holds many layers (the waves' contention in the ring)") {
  // DeepSeek-MoE-16B 16K on 16 nodes with 2 or 4 pairs (7 to 14 layers each): A compute,
  // F compute and both sides' links are close, and the ping-pong groups' forward and
  // backward ops share every resource, so each wave's round trip stretches. The
  // asymptotic bound alone was 14-39% optimistic on these allocations (mean 28%); with
  // each round trip stretched by the other waves met on the way, mean 18%; with the
  // ring's path following the ping-pong groups (the first forward and the last backward
  // alone), mean 2.7%, at most 6.2% (session 27); with the comm SM share and the stretch
  // refitted to the bench grid's plans, mean 4.6%, at most 9.5% (its RDMA cases 5-9.5%
  // optimistic: the stretch is smaller; bench/RESULTS.md, session 28).
  auto m = disagmoe::model_preset("deepseek-moe-16b");
  m.seq_len = 16384;
  const auto c = disagmoe::cluster_preset("h800x128");
  double sum = 0;
  int cases = 0;
  for (bool kernels : {true, false}) {
    dp::PlanOptions o;
    o.m2n_uses_sms = kernels;
    o.context_parallel = 1;
    const dp::AnalyticModel model(m, c, o);
    for (int p : {2, 4}) {
      for (int a : {3, 4}) {
        dp::Allocation x{p, a, 8 - a, 4, 4, dp::Recompute{false, true}};
        REQUIRE(model.valid(x));
        REQUIRE(model.estimate(x).fits());
        const double planned = model.estimate(x).step_seconds;
        const double simulated =
            ds::batch_seconds(ds::simulate_plan(model, x), double(dp::global_batch_of(o, m)) * m.seq_len);
        const double error = planned / simulated - 1;
        INFO(model.describe_allocation(x) << (kernels ? " kernels" : " rdma") << ": planner " << planned
                                          << " s, simulator " << simulated << " s");
        CHECK(std::abs(error) < 0.10);
        sum += std::abs(error);
        ++cases;
      }
    }
  }
  CHECK(sum / cases < 0.05);
}

TEST_CASE("the planner's F links carry the busiest F GPU's rows, as the simulator's do") {
  // One node (every A↔F byte on NVLink) and a model without replicated FFN weights (no
  // F-side all-reduce), so the F side's link time per step is exactly the bytes its
  // busiest GPU receives over the simulated NVLink: the simulator's own link load is the
  // oracle. 64 experts over 3 or 5 F GPUs put 22 or 13 on the busiest (more rows than
  // the mean); over 4, 16 each (no excess).
  auto m = disagmoe::model_preset("olmoe-1b-7b");
  m.seq_len = 2048;
  REQUIRE(m.shared_experts == 0);
  for (int l = 0; l < m.layers; ++l) REQUIRE(m.is_moe_layer(l));
  const auto c = disagmoe::parse_cluster_name("h800x128:1");
  dp::PlanOptions o;
  o.global_batch = 60 * m.micro_batch;  // whole waves for A groups of 3, 4 and 5
  const dp::AnalyticModel model(m, c, o);
  for (int f : {3, 4, 5}) {
    const dp::Allocation x{1, c.gpus_per_node - f, f, 0, 0};
    REQUIRE(model.valid(x));
    const ds::Schedule s = ds::AFPipe{}.build(ds::af_problem(model, x));
    double rx = 0;  // seconds of bytes on the F worker's NVLink receive side (resource 4w + 3)
    for (const ds::Op& op : s.ops)
      if (ds::is_comm(op.kind))
        for (const auto& u : ds::detail::comm_uses(s, op))
          if (u.resource == 4 * 1 + 3) rx += u.bytes / ds::detail::capacity(s, u.resource);
    INFO("F GPUs " << f << ": busiest rows / mean " << model.ffn_link_imbalance(f));
    CHECK((model.ffn_link_imbalance(f) > 1) == (m.experts % f != 0));
    CHECK(model.estimate(x).ffn_network_seconds * model.micro_batches() == doctest::Approx(rx).epsilon(1e-9));
  }
}

TEST_CASE("comm SM rule: hand counts of the planner's slow-down and the shares each send takes") {
  // 1 / (1 - f u), u = min(1, link / busy).
  CHECK(dp::comm_sm_slowdown(0.2, 1, 2) == doctest::Approx(1 / 0.9));
  CHECK(dp::comm_sm_slowdown(0.2, 3, 2) == doctest::Approx(1 / 0.8));
  CHECK(dp::comm_sm_slowdown(0, 3, 2) == 1);
  // Presets: DeepEP-like 24 SMs of 132 (Hopper) or 304 CUs (MI300X); RDMA engines none.
  CHECK(disagmoe::cluster_preset("h800x128").kernel_comm_sm_fraction == doctest::Approx(24.0 / 132));
  CHECK(disagmoe::cluster_preset("mi300x").kernel_comm_sm_fraction == doctest::Approx(24.0 / 304));
  CHECK(disagmoe::cluster_preset("h800x128").rdma_comm_sm_fraction == 0);
  // Every schedule's sends follow the transport: pipeline sends are kernels like the
  // all-to-all (no exemption); AF-Pipe's hand-offs and all-reduces are kernels even when
  // its M2N runs over RDMA.
  ds::Problem pb;
  pb.workers = ds::uniform_workers(2);
  pb.micro_batches = 4;
  for (int l = 0; l < 4; ++l) {
    ds::LayerCost lc;
    lc.moe = l % 2 == 1;
    lc.attn_fwd = lc.attn_bwd = lc.attn_wgrad = lc.expert_fwd = lc.expert_bwd = lc.expert_wgrad = 1e-3;
    lc.dispatch_bytes = lc.combine_bytes = lc.hidden_bytes = lc.attn_grad_bytes = lc.expert_grad_bytes = 1e6;
    pb.layers.push_back(lc);
  }
  int sends = 0;
  for (const auto& op : ds::OneFOneB{}.build(pb).ops)
    if (ds::is_comm(op.kind)) {
      CHECK(op.uses_sms);
      sends += op.kind == ds::OpKind::kSend;
    }
  CHECK(sends > 0);
  pb.workers = ds::uniform_workers(1, ds::Role::kAttention);
  pb.workers.push_back(ds::uniform_workers(1, ds::Role::kFfn)[0]);
  pb.workers[1].first_node = 1;
  int m2n = 0, other = 0;
  for (bool uses : {true, false}) {
    ds::AFPipe af;
    af.m2n_uses_sms = uses;
    af.fuse_combine_dispatch = false;
    for (const auto& op : af.build(pb).ops) {
      if (!ds::is_comm(op.kind)) continue;
      const bool kernel_kind = op.kind == ds::OpKind::kSend || op.kind == ds::OpKind::kAllReduce;
      CHECK(op.uses_sms == (kernel_kind || uses));
      (kernel_kind ? other : m2n) += 1;
    }
  }
  CHECK(m2n > 0);
  CHECK(other > 0);
}

TEST_CASE("comm SM rule: the slow-down's period puts NVLink bytes on NVLink, as the simulator does") {
  // DeepSeek-MoE-16B 8K on 16 nodes, p = 16 unfused: each pair's A and F GPUs share a
  // node, so A↔F bytes cross NVLink, and a node's NICs can go mostly to the A side. The
  // MILP's all-NIC busy time then charges the F side's few NICs with those bytes and,
  // taken as the tax's period, hid most of the tax: 4.5%, 5.5%, 6.9%, 8.0% optimistic
  // with 4-7 A NICs. With the period the links really carry: 4.5%, 3.8%, 3.5%, 2.9%
  // (2.6%, 1.9%, 1.6%, 1.1% with the constants refitted in session 28).
  auto m = disagmoe::model_preset("deepseek-moe-16b");
  m.seq_len = 8192;
  dp::PlanOptions o;
  o.context_parallel = 2;
  const dp::AnalyticModel model(m, disagmoe::cluster_preset("h800x128"), o);
  const double batch_tokens = double(dp::global_batch_of(o, m)) * m.seq_len;
  for (int nics = 4; nics <= 7; ++nics) {
    const dp::Allocation x{16, 2, 6, nics, 8 - nics, {}, false, 2, o.group_factor};
    REQUIRE(model.valid(x));
    const double analytic = model.estimate(x).step_seconds;
    const double simulated = ds::batch_seconds(ds::simulate_plan(model, x), batch_tokens);
    INFO(model.describe_allocation(x) << ": planner " << analytic << " s, simulator " << simulated << " s");
    CHECK(std::abs(analytic / simulated - 1) < 0.05);
  }
}

namespace {
// Seconds per step that the comm ops of `s` (all-reduces apart) put on the A workers'
// sending links and the F workers' receiving links: the dispatch direction, as the
// planner prices it (plan::AnalyticModel::pair_link_bytes).
struct SideLinks {
  double attention_nic = 0, attention_nvlink = 0, ffn_nic = 0, ffn_nvlink = 0;
};
SideLinks simulated_links(const ds::Schedule& s) {
  SideLinks r;
  for (const ds::Op& op : s.ops) {
    if (!ds::is_comm(op.kind) || op.kind == ds::OpKind::kAllReduce) continue;
    for (const auto& u : ds::detail::comm_uses(s, op)) {
      const ds::Role role = s.workers[static_cast<std::size_t>(u.resource / 4)].role;
      const double sec = u.bytes / ds::detail::capacity(s, u.resource);
      if (role == ds::Role::kAttention && u.resource % 4 == 0) r.attention_nic += sec;
      if (role == ds::Role::kAttention && u.resource % 4 == 2) r.attention_nvlink += sec;
      if (role == ds::Role::kFfn && u.resource % 4 == 1) r.ffn_nic += sec;
      if (role == ds::Role::kFfn && u.resource % 4 == 3) r.ffn_nvlink += sec;
    }
  }
  return r;
}
}  // namespace

TEST_CASE("fusion: the planner's NIC and NVLink seconds per side are the simulated schedule's, fused and unfused") {
  // Oracle: the simulator's own link loads (comm_uses) of the AF-Pipe schedule built from
  // the plan's conversion, summed over the workers of a side. Layouts with pairs on their
  // own nodes (p = 4), several pairs per node (p = 8), groups over two nodes (p = 1, 2),
  // mixed splits (two nodes of four give A one GPU more), uneven experts per F GPU
  // (DeepSeek, 64 experts over 5 or 11) and a dense first layer.
  for (const char* name : {"olmoe-1b-7b", "deepseek-moe-16b"}) {
    auto m = disagmoe::model_preset(name);
    m.seq_len = 2048;
    const auto c = disagmoe::parse_cluster_name("h800x128:4");
    dp::PlanOptions o;
    o.global_batch = 240 * m.micro_batch;  // whole waves for every A group size below
    o.mixed_splits = true;
    const dp::AnalyticModel model(m, c, o);
    const double eff = o.efficiency.network;
    for (const dp::Allocation base :
         {dp::Allocation{1, 4, 4, 4, 4}, dp::Allocation{2, 4, 4, 4, 4}, dp::Allocation{4, 4, 4, 4, 4},
          dp::Allocation{4, 2, 6, 2, 6}, dp::Allocation{8, 2, 6, 3, 5}, dp::Allocation{4, 3, 5, 4, 4},
          dp::Allocation{2, 3, 5, 3, 5}, dp::Allocation{2, 2, 6, 3, 5, {}, true, 1, 2, 2},
          dp::Allocation{1, 2, 6, 2, 6, {}, true, 1, 2, 2}, dp::Allocation{1, 1, 6, 2, 5, {}, true, 1, 2, 2}})
      for (bool fuse : {true, false}) {
        dp::Allocation x = base;
        x.fuse = fuse;
        REQUIRE(model.valid(x));
        const ds::PlannedSimulation ps = ds::planned_simulation(model, x);
        const ds::Schedule s = ds::build_schedule(ds::AFPipe::kName, ds::af_problem(model, x), ps.knobs);
        const SideLinks sim = simulated_links(s);
        SideLinks plan;
        const int p = x.groups, ga = model.attention_group_size(x), gf = model.ffn_group_size(x);
        const double mb = model.micro_batches();
        for (int i = 0; i < p; ++i) {
          const auto b = model.pair_link_bytes(x, i);
          plan.attention_nic += b.attention_nic / model.attention_bandwidth(x) * mb;
          plan.attention_nvlink += b.attention_nvlink / (ga * c.intra_node_bandwidth * eff) * mb;
          plan.ffn_nic += b.ffn_nic / model.ffn_bandwidth(x) * mb;
          plan.ffn_nvlink += b.ffn_nvlink / (gf * c.intra_node_bandwidth * eff) * mb;
        }
        INFO(name << " " << model.describe_allocation(x));
        CHECK(plan.attention_nic == doctest::Approx(sim.attention_nic).epsilon(1e-9));
        CHECK(plan.attention_nvlink == doctest::Approx(sim.attention_nvlink).epsilon(1e-9));
        CHECK(plan.ffn_nic == doctest::Approx(sim.ffn_nic).epsilon(1e-9));
        CHECK(plan.ffn_nvlink == doctest::Approx(sim.ffn_nvlink).epsilon(1e-9));
      }
  }
}

TEST_CASE("mixed splits: the simulator places, prices and sizes a mixed layout as the planner does") {
  // Oracles: a recount of each node's GPUs over the simulated workers, the NIC rate per
  // GPU by hand (a mixed node's A GPUs share its A NICs a + 1 ways), the planner's memory
  // model, and its step time within the tolerance of the fixed-allocation grid above
  // (measured: -4.1%, -0.8% and +4.1%).
  auto m = disagmoe::model_preset("gpt-oss-120b");
  m.seq_len = 8192;
  const auto c = disagmoe::parse_cluster_name("h800x128:8");
  dp::PlanOptions o;
  o.mixed_splits = true;
  const dp::AnalyticModel model(m, c, o);
  const double eff = model.options().efficiency.network;
  for (dp::Allocation x :
       {dp::Allocation{4, 2, 6, 5, 3, {}, false, 1, 2, 4}, dp::Allocation{2, 2, 6, 4, 4, {}, true, 1, 2, 2},
        dp::Allocation{1, 2, 6, 4, 4, {}, true, 1, 2, 5}}) {
    for (const dp::Recompute rc :
         {dp::Recompute{false, false}, dp::Recompute{false, true}, dp::Recompute{true, true}})
      if (x.recompute = rc; model.estimate(x).fits()) break;  // the least recomputation that fits
    INFO(model.describe_allocation(x));
    REQUIRE(model.valid(x));
    const ds::Problem pb = ds::af_problem(model, x);
    const int p = x.groups, a = x.attention_gpus_per_node, f = x.ffn_gpus_per_node;
    REQUIRE(pb.workers.size() == std::size_t(2 * p));
    int mixed = 0;
    for (int n = 0; n < c.nodes; ++n) {
      int on_a = 0, on_f = 0;
      for (int i = 0; i < p; ++i) {
        on_a += pb.workers[std::size_t(i)].placement().gpus_on(n);
        on_f += pb.workers[std::size_t(p + i)].placement().gpus_on(n);
      }
      CHECK(on_a + on_f == a + f);
      mixed += on_a == a + 1;
    }
    CHECK(mixed == x.mixed_nodes);
    for (int i = 0; i < p; ++i) {
      CHECK(pb.workers[std::size_t(i)].gpus == model.attention_group_size(x));
      CHECK(pb.workers[std::size_t(p + i)].gpus == model.ffn_group_size(x));
      CHECK(pb.workers[std::size_t(i)].nic_bandwidth ==
            doctest::Approx(x.attention_nics_per_node * c.nic_bandwidth * eff / (a + 1)));
      CHECK(pb.workers[std::size_t(p + i)].nic_bandwidth ==
            doctest::Approx(x.ffn_nics_per_node * c.nic_bandwidth * eff / f));
    }
    const dp::StepEstimate e = model.estimate(x);
    const ds::Simulated sim = ds::simulate_plan(model, x);
    REQUIRE(e.fits());
    CHECK(sim.fits);
    const double simulated =
        ds::batch_seconds(sim, double(dp::global_batch_of(model.options(), m)) * m.seq_len);
    MESSAGE(model.describe_allocation(x)
            << ": planner " << e.step_seconds << " s, simulator " << simulated << " s");
    CHECK(std::abs(e.step_seconds / simulated - 1) < 0.15);
  }
}

TEST_CASE("fusion: the planner's choice is the simulator's wherever the two differ by more than 5%") {
  // Brute force: every layout with pairs to hand off between (p >= 2) on a 4-node cluster,
  // simulated fused and unfused; the planner's estimate must order the two alike where the
  // simulated gap is clear.
  int clear = 0, agree = 0;
  for (const std::string name : {"olmoe-1b-7b", "qwen3-30b-a3b"}) {
    auto m = disagmoe::model_preset(name);
    m.seq_len = 4096;
    const auto c = disagmoe::parse_cluster_name("h800x128:4");
    const dp::AnalyticModel model(m, c, dp::PlanOptions{});
    for (const dp::Allocation base :
         {dp::Allocation{2, 4, 4, 4, 4}, dp::Allocation{4, 4, 4, 4, 4}, dp::Allocation{4, 2, 6, 2, 6},
          dp::Allocation{8, 2, 6, 3, 5}, dp::Allocation{4, 3, 5, 4, 4}, dp::Allocation{2, 3, 5, 3, 5},
          dp::Allocation{16, 4, 4, 4, 4}}) {
      if (!model.valid(base)) continue;
      dp::Allocation un = base;
      un.fuse = false;
      const ds::SimulatedStepTime sim(m, c);
      const double sf = sim.step_seconds(base), su = sim.step_seconds(un);
      if (!std::isfinite(sf) || !std::isfinite(su) || std::abs(sf / su - 1) <= 0.05) continue;
      ++clear;
      const double pf = model.estimate(base).step_seconds, pu = model.estimate(un).step_seconds;
      INFO(name << " " << model.describe_allocation(base) << ": simulated fused " << sf << " / unfused " << su
                << " s, planned " << pf << " / " << pu << " s");
      CHECK((pf < pu) == (sf < su));
      agree += (pf < pu) == (sf < su);
    }
  }
  MESSAGE(agree << " of " << clear << " clear cases agree");
  CHECK(clear >= 4);
}

TEST_CASE("fusion: a plan's choice reaches the simulation, and the simulator's own search makes it too") {
  auto m = disagmoe::model_preset("olmoe-1b-7b");
  m.seq_len = 4096;
  const auto c = disagmoe::parse_cluster_name("h800x128:4");
  const dp::AnalyticModel model(m, c, dp::PlanOptions{});
  const dp::Allocation x{4, 4, 4, 4, 4, {}, false};
  REQUIRE(model.valid(x));
  CHECK_FALSE(ds::planned_simulation(model, x).knobs.af_fuse);
  const ds::Simulated run = ds::simulate_plan(model, x);
  CHECK(run.layout.find(" unfused") != std::string::npos);
  int fused_ops = 0;
  for (const ds::Op& op : run.schedule.ops) fused_ops += op.kind == ds::OpKind::kCombineDispatch;
  CHECK(fused_ops == 0);
  dp::Allocation y = x;
  y.fuse = true;
  const ds::Simulated fused = ds::simulate_plan(model, y);
  CHECK(fused.layout.find(" unfused") == std::string::npos);
  CHECK(fused.result.step_seconds != run.result.step_seconds);
  // The simulator's search: its pick is no slower than the same layout the other way.
  ds::CostOptions o;
  o.global_batch = 64;  // a small step: the search simulates a few hundred layouts
  const ds::Simulated best = ds::simulate_best(ds::AFPipe::kName, m, c, o);
  ds::AfLayout lay;
  int g = 0;
  REQUIRE(std::sscanf(best.layout.c_str(), "p=%d a/f=%d/%d nic=%d/%d g=%d", &lay.groups, &lay.attention_gpus_per_node,
                      &lay.ffn_gpus_per_node, &lay.attention_nics_per_node, &lay.ffn_nics_per_node, &g) == 6);
  const bool fuse = best.layout.find(" unfused") == std::string::npos;
  ds::PolicyKnobs k;
  k.af_group_size = g;
  k.af_fuse = !fuse;
  ds::CostOptions oo = o;
  const bool both =
      best.layout.find(" rc") != std::string::npos && best.layout.find(" rc=") == std::string::npos;
  oo.memory.recompute = {both || best.layout.find(" rc=A") != std::string::npos,
                         both || best.layout.find(" rc=F") != std::string::npos};
  INFO(best.layout);
  const double batch_tokens = 64.0 * m.seq_len;  // simulated_step_seconds: the batch at the simulated rate
  CHECK(batch_tokens / best.result.tokens_per_second <= ds::simulated_step_seconds(m, c, lay, oo, k));
}

TEST_CASE("layouts compare by rate: a layout whose width floors the batch is priced for the whole batch") {
  // DeepSeek-MoE-16B at 32K on h800x128: 128 sequences per step. An A group of 48 GPUs
  // (3 per node, p = 1) runs ⌊128 / 48⌋ = 2 waves = 96 sequences; one of 64 runs all 128.
  auto m = disagmoe::model_preset("deepseek-moe-16b");
  m.seq_len = 32768;
  const auto c = disagmoe::cluster_preset("h800x128");
  ds::CostOptions o;
  o.memory.recompute = {true, true};
  REQUIRE(ds::global_batch_of(m, o) == 128);
  const double batch_tokens = 128.0 * m.seq_len;
  for (const auto& [a, sequences] : {std::pair{3, 96}, std::pair{4, 128}}) {
    const ds::AfLayout lay{1, a, 4, 4, 4};
    const ds::Simulated s = ds::simulate_best(ds::AFPipe::kName, m, c, o, {}, 0, lay);
    CAPTURE(a);
    CHECK(s.schedule.tokens_per_step == double(sequences) * m.seq_len);  // an exact recount
    CHECK(ds::batch_seconds(s, batch_tokens) == doctest::Approx(s.result.step_seconds * 128 / sequences));
    CHECK(ds::simulated_step_seconds(m, c, lay, o) ==
          doctest::Approx(batch_tokens / s.result.tokens_per_second).epsilon(1e-12));
  }
}
