// SPDX-License-Identifier: Apache-2.0
// Context parallelism in the simulated problems (AF-Pipe and colocated): the costs at
// degree cp against those at degree 1 and the ring recounted by hand, the plan's degree
// (and ping-pong group) carried into its simulation, memory and step time of such plans
// against the simulator, and the timeline budget.
#include <disagmoe/plan/adaptive_allocator.hpp>
#include <disagmoe/schedule/plan_oracle.hpp>
#include <disagmoe/schedule/schedules.hpp>
#include <disagmoe/spec/presets.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

namespace ds = disagmoe::schedule;
namespace dp = disagmoe::plan;

namespace {

// The ring of one layer and pass, recounted: cp − 1 hops forward (2(cp − 1) backward)
// of a key/value chunk of T/cp tokens over one GPU's NVLink at the network efficiency.
double ring_hops_seconds(const disagmoe::ModelSpec& m, const disagmoe::ClusterSpec& c, int cp, int hops) {
  const double chunk = double(m.seq_len) * m.micro_batch / cp * 2 * m.kv_heads * m.head_dim * 2;  // bf16
  return hops * (c.intra_node_latency + chunk / (c.intra_node_bandwidth * 0.85));
}

// Every per-micro-batch field of layer `a` (degree cp) against `b` (degree 1): 1/cp,
// except that attention's forward and input gradient last at least their ring.
void check_layer_at_degree(const ds::LayerCost& a, const ds::LayerCost& b, int cp, double ring_fwd,
                           double ring_bwd) {
  const auto near = [](double x) { return doctest::Approx(x).epsilon(1e-12); };
  CHECK(a.attn_fwd == near(std::max(b.attn_fwd / cp, ring_fwd)));
  CHECK(a.attn_bwd == near(std::max(b.attn_bwd / cp, ring_bwd)));
  CHECK(a.attn_wgrad == near(b.attn_wgrad / cp));
  CHECK(a.expert_fwd == near(b.expert_fwd / cp));
  CHECK(a.expert_bwd == near(b.expert_bwd / cp));
  CHECK(a.expert_wgrad == near(b.expert_wgrad / cp));
  CHECK(a.dispatch_bytes == near(b.dispatch_bytes / cp));
  CHECK(a.combine_bytes == near(b.combine_bytes / cp));
  CHECK(a.hidden_bytes == near(b.hidden_bytes / cp));
  CHECK(a.attn_activation_bytes == near(b.attn_activation_bytes / cp));
  CHECK(a.expert_activation_bytes == near(b.expert_activation_bytes / cp));
  // Weights, their gradients and state do not depend on how sequences are split.
  CHECK(a.attn_grad_bytes == b.attn_grad_bytes);
  CHECK(a.expert_grad_bytes == b.expert_grad_bytes);
  CHECK(a.attn_state_bytes == b.attn_state_bytes);
  CHECK(a.expert_state_bytes == b.expert_state_bytes);
  CHECK(a.ffn_imbalance == b.ffn_imbalance);
}

}  // namespace

TEST_CASE("context parallelism in the problems: a sliding-window layer's ring carries its halo only") {
  auto m = disagmoe::model_preset("gpt-oss-120b");  // 128-position windows on even layers
  m.seq_len = 32768;
  auto c = disagmoe::cluster_preset("h800x128");
  c.intra_node_bandwidth = 5e7;  // even the halo outlasts the compute it overlaps
  const int cp = 4;              // half-chunks of 4096 positions: each needs the 127 before it, one hop away
  const double halo = c.intra_node_latency + 2 * 127.0 * m.micro_batch * 2 * m.kv_heads * m.head_dim * 2 /
                                                 (c.intra_node_bandwidth * 0.85);
  REQUIRE(m.is_windowed_layer(0));
  REQUIRE_FALSE(m.is_windowed_layer(1));
  ds::CostOptions one, k;
  k.context_parallel = cp;
  const ds::AfLayout lay{16, 4, 4, 4, 4};
  const ds::Problem a = ds::af_problem(m, c, lay, k), b = ds::af_problem(m, c, lay, one);
  const ds::Problem ca = ds::colocated_problem(m, c, {4, 8}, k),
                    cb = ds::colocated_problem(m, c, {4, 8}, one);
  const double rf = ring_hops_seconds(m, c, cp, cp - 1), rb = ring_hops_seconds(m, c, cp, 2 * (cp - 1));
  for (std::size_t l : {0u, 1u}) {
    INFO("layer " << l);
    const double f = l == 0 ? halo : rf, g = l == 0 ? 2 * halo : rb;
    check_layer_at_degree(a.layers[l], b.layers[l], cp, f, g);
    check_layer_at_degree(ca.layers[l], cb.layers[l], cp, f, g);
  }
  CHECK(a.layers[0].attn_fwd == doctest::Approx(halo).epsilon(1e-12));  // the halo sets the pass
  CHECK(a.layers[0].attn_fwd < a.layers[1].attn_fwd / 10);
}

TEST_CASE("context parallelism in the problems: 1/cp of each micro-batch, cp times as many, the ring") {
  auto m = disagmoe::model_preset("mixtral-8x7b");  // 8 KV heads of 128: a ring worth pricing
  m.seq_len = 32768;
  auto c = disagmoe::cluster_preset("h800x128");
  for (const double nvlink : {160e9, 2e9}) {  // the ring hidden under compute, then longer than it
    c.intra_node_bandwidth = nvlink;
    for (int cp : {2, 4}) {
      INFO("NVLink " << nvlink << " B/s, cp " << cp);
      const double rf = ring_hops_seconds(m, c, cp, cp - 1), rb = ring_hops_seconds(m, c, cp, 2 * (cp - 1));
      ds::CostOptions one, k;
      k.context_parallel = cp;
      for (bool rc : {false, true}) {
        one.memory.recompute = k.memory.recompute = {rc, rc};
        const ds::AfLayout lay{16, 4, 4, 4, 4};
        const ds::Problem a = ds::af_problem(m, c, lay, k), b = ds::af_problem(m, c, lay, one);
        CHECK(a.micro_batches == cp * b.micro_batches);
        CHECK(a.tokens_per_micro_batch * cp == doctest::Approx(b.tokens_per_micro_batch));
        CHECK(a.flops_per_micro_batch * cp == doctest::Approx(b.flops_per_micro_batch));
        for (std::size_t l = 0; l < a.layers.size(); ++l) {
          // Recomputation reruns the forward, ring included, before the input gradient.
          ds::LayerCost bl = b.layers[l], al = a.layers[l];
          if (rc) {
            bl.attn_bwd -= bl.attn_fwd;
            bl.expert_bwd -= bl.expert_fwd;
            al.attn_bwd -= al.attn_fwd;
            al.expert_bwd -= al.expert_fwd;
          }
          check_layer_at_degree(al, bl, cp, rf, rb);
        }
        const ds::Problem ca = ds::colocated_problem(m, c, {4, 8}, k),
                          cb = ds::colocated_problem(m, c, {4, 8}, one);
        CHECK(ca.micro_batches == cp * cb.micro_batches);
        if (!rc) check_layer_at_degree(ca.layers[3], cb.layers[3], cp, rf, rb);
      }
      if (nvlink < 1e10) {  // the slow NVLink: the ring sets the pass
        const ds::Problem a = ds::af_problem(m, c, {16, 4, 4, 4, 4}, k);
        CHECK(a.layers[0].attn_fwd == doctest::Approx(rf).epsilon(1e-12));
      }
    }
  }
  // Degrees that would cross a group or a node.
  ds::CostOptions three;
  three.context_parallel = 3;
  CHECK_THROWS_WITH_AS(ds::af_problem(m, c, {16, 4, 4, 4, 4}, three),
                       doctest::Contains("context_parallel = 3"), disagmoe::ConfigError);
  CHECK_THROWS_WITH_AS(ds::colocated_problem(m, c, {4, 8}, three), doctest::Contains("context_parallel = 3"),
                       disagmoe::ConfigError);
  CHECK_THROWS_WITH_AS(ds::simulate_best("1f1b", m, c, three), doctest::Contains("context_parallel = 3"),
                       disagmoe::ConfigError);
  ds::CostOptions four;
  four.context_parallel = 4;
  CHECK_THROWS_WITH_AS(ds::af_problem(m, c, {16, 2, 6, 4, 4}, four), doctest::Contains("A group size (2)"),
                       disagmoe::ConfigError);
  // The timeline budget counts the split micro-batches.
  CHECK(ds::timeline_cost("afpipe", m, four).micro_batches ==
        4 * ds::timeline_cost("afpipe", m, {}).micro_batches);
  ds::CostOptions automatic;
  automatic.context_parallel = 0;  // a search's degree 1; larger ones are checked as they are tried
  CHECK(ds::timeline_cost("afpipe", m, automatic).micro_batches ==
        ds::timeline_cost("afpipe", m, {}).micro_batches);
}

TEST_CASE("a search at degree 0 keeps the fastest of searching at each degree") {
  auto m = disagmoe::model_preset("olmoe-1b-7b");
  m.seq_len = 16384;
  const auto c = disagmoe::parse_cluster_name("h100:2");
  REQUIRE(dp::context_parallel_degrees(m, c.gpus_per_node) == std::vector<int>{1, 2, 4});
  for (const char* name : {"1f1b", "afpipe"}) {
    INFO(name);
    ds::CostOptions o;
    o.context_parallel = 0;
    const std::optional<ds::AfLayout> af = std::string(name) == "afpipe"
                                               ? std::optional<ds::AfLayout>(ds::AfLayout{1, 4, 4, 4, 4})
                                               : std::nullopt;
    const ds::Simulated best = ds::simulate_best(name, m, c, o, {}, 0, af);
    double fastest = 0;
    for (int cp : {1, 2, 4}) {  // oracle: each degree searched alone
      o.context_parallel = cp;
      fastest = std::max(fastest, ds::simulate_best(name, m, c, o, {}, 0, af).result.tokens_per_second);
    }
    CHECK(best.result.tokens_per_second == fastest);
  }
}

TEST_CASE("a context-parallel plan: its degree reaches the simulation, memory within its bound, step close") {
  auto m = disagmoe::model_preset("deepseek-moe-16b");
  m.seq_len = 16384;
  const auto c = disagmoe::parse_cluster_name("h800x128:4");
  dp::PlanOptions o;
  o.context_parallel = 2;
  const dp::AnalyticModel model(m, c, o);
  const dp::Plan plan = dp::AdaptiveAllocator(m, c, o).plan();
  const dp::Allocation& x = plan.allocation;
  REQUIRE(x.context_parallel == 2);
  const ds::PlannedSimulation s = ds::planned_simulation(model, x);
  CHECK(s.cost.context_parallel == 2);
  CHECK(ds::allocation_of(s.layout, s.cost.memory.recompute, s.knobs.af_fuse, s.cost.context_parallel) == x);
  CHECK(ds::plan_options(s.cost, s.knobs).context_parallel == 2);
  const ds::Simulated sim = ds::simulate_plan(model, x);
  CHECK(sim.layout.find(" cp=2") != std::string::npos);
  // Memory: every worker's peak within the plan's bound; a plan that fits fits.
  REQUIRE(plan.predicted.fits());
  CHECK(sim.fits);
  double peak_a = 0, peak_f = 0;
  for (std::size_t w = 0; w < sim.result.workers.size(); ++w)
    (w < std::size_t(x.groups) ? peak_a : peak_f) =
        std::max(w < std::size_t(x.groups) ? peak_a : peak_f, sim.result.workers[w].peak_memory_bytes);
  CHECK(peak_a <= plan.predicted.memory.attention_worker.total() * (1 + 1e-9));
  CHECK(peak_f <= plan.predicted.memory.ffn_worker.total() * (1 + 1e-9));
  // Step: the planner's model of the split micro-batches against the simulated rate.
  const double simulated = double(plan.global_batch) * plan.seq_len / sim.result.tokens_per_second;
  INFO(model.describe_allocation(x) << ": planner " << plan.predicted.step_seconds << " s, simulator "
                                    << simulated << " s");
  CHECK(std::abs(plan.predicted.step_seconds / simulated - 1) < 0.10);  // 5.0% here (p = 4)
}

TEST_CASE("Qwen3-235B at 16K on 128 GPUs: planned with both automatic choices, and it fits when simulated") {
  auto m = disagmoe::model_preset("qwen3-235b-a22b");
  m.seq_len = 16384;
  const auto c = disagmoe::cluster_preset("h800x128");
  dp::PlanOptions fixed;  // degree 1, ping-pong group 2p: nothing fits
  CHECK_THROWS_WITH_AS(dp::AdaptiveAllocator(m, c, fixed).plan(), doctest::Contains("memory_bytes"),
                       disagmoe::ConfigError);
  dp::PlanOptions o;
  o.context_parallel = 0;
  o.group_factor = 0;
  const dp::AdaptiveAllocator allocator(m, c, o);
  const dp::Plan plan = allocator.plan();
  const dp::Allocation& x = plan.allocation;
  INFO(allocator.model().describe_allocation(x));
  REQUIRE(plan.predicted.fits());
  CHECK((x.context_parallel > 1 || x.group_factor == 1));
  const ds::PlannedSimulation s = ds::planned_simulation(allocator.model(), x);
  CHECK(s.knobs.af_group_size == x.group_factor * x.groups);
  const ds::Simulated sim = ds::simulate_plan(allocator.model(), x);
  CHECK(sim.fits);
  for (std::size_t w = 0; w < sim.result.workers.size(); ++w)
    CHECK(sim.result.workers[w].peak_memory_bytes <= (w < std::size_t(x.groups)
                                                          ? plan.predicted.memory.attention_worker
                                                          : plan.predicted.memory.ffn_worker)
                                                             .total() *
                                                         (1 + 1e-9));
}

TEST_CASE("the automatic degrees never split a sequence over more GPUs than it has tokens") {
  // Many short sequences: tokens per micro-batch allow degree 4 by the 4096-token rule,
  // but a sequence of 2 tokens splits over at most 2 GPUs.
  auto m = disagmoe::model_preset("olmoe-1b-7b");
  m.seq_len = 2;
  m.micro_batch = 16384;
  CHECK(dp::context_parallel_degrees(m, 8) == std::vector<int>{1, 2});
  m.seq_len = 1;
  CHECK(dp::context_parallel_degrees(m, 8) == std::vector<int>{1});
  // And the planner plans there (it used to throw on a degree the user never set).
  dp::PlanOptions o;
  o.global_batch = 2 * m.micro_batch;
  const auto plan = dp::AdaptiveAllocator(m, disagmoe::parse_cluster_name("h100:2"), o).plan();
  CHECK(plan.allocation.context_parallel == 1);
}
