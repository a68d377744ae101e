// SPDX-License-Identifier: Apache-2.0
// Context parallelism inside the attention groups: the key/value ring (a sliding
// window's halo included) against a hand count, the analytic model at degree cp against
// the same model at degree 1 (every per-micro-batch cost over cp, cp times the
// micro-batches), the MILP against enumeration, the automatic degree against planning
// every degree, and the JSON.
#include <disagmoe/plan/adaptive_allocator.hpp>
#include <disagmoe/plan/allocation_enumeration.hpp>
#include <disagmoe/plan/plan_json.hpp>
#include <disagmoe/spec/presets.hpp>

#include "small_case.hpp"

#include <doctest/doctest.h>

#include <limits>
#include <string>

using namespace disagmoe;
using namespace disagmoe::plan;
using test::small_cluster;

namespace {

// OLMoE at 16K on 2 nodes of 8 GPUs: attention is a large share, sequences are long.
ModelSpec long_olmoe(int seq = 16384) {
  ModelSpec m = model_preset("olmoe-1b-7b");
  m.seq_len = seq;
  return m;
}

AnalyticModel cp_model(const ModelSpec& m, const ClusterSpec& c, int cp, int global_batch = 256) {
  PlanOptions o;
  o.global_batch = global_batch;
  o.context_parallel = cp;
  return AnalyticModel(m, c, o);
}

}  // namespace

TEST_CASE("context-parallel ring: cp - 1 key/value chunks forward, twice that backward (hand count)") {
  const ModelSpec m = long_olmoe();  // 16 KV heads of 128, bf16
  ClusterSpec c = small_cluster(2, 8, 8);
  c.intra_node_bandwidth = 100e9;
  c.intra_node_latency = 3e-6;
  for (int cp : {2, 4, 8}) {
    // Chunk: 16384 / cp tokens × (K and V: 2 × 16 × 128 elements) × 2 bytes.
    const double chunk = 16384.0 / cp * 2 * 16 * 128 * 2;
    const double hop = 3e-6 + chunk / (100e9 * 0.85);
    const RingAttentionSeconds r = context_parallel_ring_seconds(m, 0, cp, c, 0.85);
    CHECK(r.forward == doctest::Approx((cp - 1) * hop).epsilon(1e-12));
    CHECK(r.backward == doctest::Approx(2 * (cp - 1) * hop).epsilon(1e-12));
  }
  const RingAttentionSeconds none = context_parallel_ring_seconds(m, 0, 1, c, 0.85);
  CHECK(none.forward == 0);
  CHECK(none.backward == 0);
}

TEST_CASE("context-parallel ring of a sliding-window layer: only the window's halo (hand count)") {
  ModelSpec m = long_olmoe(32768);  // 16 KV heads of 128, bf16
  m.sliding_window_interval = 2;    // even layers windowed, odd layers full
  ClusterSpec c = small_cluster(2, 8, 8);
  c.intra_node_bandwidth = 100e9;
  c.intra_node_latency = 3e-6;
  const double per_position = double(m.micro_batch) * 2 * 16 * 128 * 2;  // K and V of each sequence
  const double bw = 100e9 * 0.85;
  // cp = 4: each GPU holds two half-chunks of 4096 positions of each sequence (load-balanced
  // causal layout); a window w sees the w - 1 positions before each, taken from the
  // neighbours on both sides at once; the whole ring passes 3 x 8192 = 24576 positions.
  const int cp = 4;
  struct Case {
    int window;
    double positions, hops;
  };
  for (const Case w :
       {Case{1, 0, 0}, Case{128, 254, 1}, Case{4097, 8192, 1}, Case{4098, 8194, 2}, Case{8193, 16384, 2},
        Case{12288, 24574, 3}, Case{12289, 24576, 3}, Case{30000, 24576, 3}}) {
    INFO("window " << w.window);
    m.sliding_window = w.window;
    const double forward = w.hops * 3e-6 + w.positions * per_position / bw;
    const RingAttentionSeconds windowed = context_parallel_ring_seconds(m, 0, cp, c, 0.85);
    CHECK(windowed.forward == doctest::Approx(forward).epsilon(1e-12));
    CHECK(windowed.backward == doctest::Approx(2 * forward).epsilon(1e-12));
    const RingAttentionSeconds full = context_parallel_ring_seconds(m, 1, cp, c, 0.85);
    CHECK(full.forward == doctest::Approx(3 * 3e-6 + 3 * 8192 * per_position / bw).epsilon(1e-12));
  }
  CHECK_THROWS_AS(context_parallel_ring_seconds(m, m.layers, cp, c, 0.85), ConfigError);
}

TEST_CASE("analytic model at degree cp: cp times the micro-batches, each 1/cp of the work and bytes") {
  const ModelSpec m = long_olmoe();
  ClusterSpec c = small_cluster(2, 8, 8);
  c.intra_node_bandwidth = 1e15;  // rings far shorter than the compute they overlap
  c.intra_node_latency = 0;
  const AnalyticModel one = cp_model(m, c, 1);
  for (int cp : {2, 4}) {
    INFO("cp = " << cp);
    const AnalyticModel k = cp_model(m, c, cp);
    CHECK(k.micro_batches() == cp * one.micro_batches());
    CHECK(k.tokens_per_micro_batch() == doctest::Approx(double(m.tokens_per_micro_batch()) / cp));
    // Attention passes here are far longer than their ring: 1/cp of the work.
    const RingAttentionSeconds ring =
        context_parallel_ring_seconds(m, 0, cp, c, k.options().efficiency.network);
    for (bool rc : {false, true}) {
      CHECK(k.attention_pair_seconds(2, rc) ==
            doctest::Approx(one.attention_pair_seconds(2, rc) / cp).epsilon(1e-12));
      CHECK(k.ffn_pair_seconds(2, 8, rc) ==
            doctest::Approx(one.ffn_pair_seconds(2, 8, rc) / cp).epsilon(1e-12));
    }
    CHECK(one.attention_pair_seconds(2, false) / cp > 10 * (ring.forward + ring.backward) * m.layers);
    // Allocations: the A GPUs per node and the A group size are multiples of cp, and
    // every allocation carries the model's degree.
    long n = 0;
    for_each_allocation(k, [&](const Allocation& x) {
      ++n;
      CHECK(x.context_parallel == cp);
      CHECK(x.attention_gpus_per_node % cp == 0);
      CHECK(k.group_size(x.groups, x.attention_gpus_per_node) % cp == 0);
    });
    CHECK(n > 0);
    const Allocation x{2, 4, 4, 4, 4, {}, true, cp};
    REQUIRE(k.valid(x));
    Allocation x1 = x;
    x1.context_parallel = 1;
    CHECK_FALSE(k.valid(x1));  // another degree is not this model's
    REQUIRE(one.valid(x1));
    // Many waves (W >= 4p at both degrees): the same micro-batches in flight, 1/cp the
    // tokens each, so 1/cp of the activations; state is unchanged.
    REQUIRE(double(one.micro_batches()) / one.group_size(2, 4) >= 4 * 2);
    const FitReport a = k.memory(x), b = one.memory(x1);
    CHECK(a.attention_worker.activations ==
          doctest::Approx(b.attention_worker.activations / cp).epsilon(1e-12));
    CHECK(a.ffn_worker.activations == doctest::Approx(b.ffn_worker.activations / cp).epsilon(1e-12));
    CHECK(a.attention_worker.optimizer == b.attention_worker.optimizer);
    CHECK(a.ffn_worker.parameters == b.ffn_worker.parameters);
    // Links carry 1/cp of the rows per micro-batch.
    const StepEstimate ea = k.estimate(x), eb = one.estimate(x1);
    CHECK(ea.attention_network_seconds * cp == doctest::Approx(eb.attention_network_seconds).epsilon(0.01));
  }
}

TEST_CASE("analytic model at degree cp: an attention pass lasts at least its own layer's ring") {
  ClusterSpec c = small_cluster(2, 8, 8);
  c.intra_node_bandwidth = 1e6;  // a ring far slower than the compute
  c.intra_node_latency = 3e-6;
  const int cp = 4;
  double full_rings = 0;
  for (const int window : {0, 512}) {  // then every third layer passes a halo only
    INFO("window " << window);
    ModelSpec m = long_olmoe();  // 16384 positions: half-chunks of 2048, the whole ring 3 x 4096
    m.sliding_window = window;
    m.sliding_window_interval = 3;
    const AnalyticModel k = cp_model(m, c, cp);
    const double eff = k.options().efficiency.network;
    // Forward ring, recounted: the whole ring (3 hops, 12288 positions) or a window's halo
    // (2 x 511 positions, one hop); K and V of 16 heads of 128 in bf16 per position.
    const auto ring_forward = [&](int l) {
      const bool halo = m.is_windowed_layer(l);
      return (halo ? 1 : 3) * 3e-6 +
             (halo ? 2 * 511.0 : 12288.0) * m.micro_batch * 2 * 16 * 128 * 2 / (c.intra_node_bandwidth * eff);
    };
    // Per layer: forward = ring forward, input gradient = ring backward (twice it), weight
    // gradient = its FLOPs / cp; recomputation reruns the forward (and its ring).
    const double peak = c.gpu.peak_flops(m.dtype) * k.options().efficiency.attention;
    double sum = 0, sum_rc = 0;
    for (int l = 0; l < m.layers; l += 2) {
      const double w = layer_cost(m, l).attention_side().backward_weight / cp / peak;
      sum += 3 * ring_forward(l) + w;
      sum_rc += 4 * ring_forward(l) + w;
    }
    CHECK(k.attention_pair_seconds(2, false) == doctest::Approx(sum).epsilon(1e-9));
    CHECK(k.attention_pair_seconds(2, true) == doctest::Approx(sum_rc).epsilon(1e-9));
    if (window == 0)
      full_rings = sum;
    else
      CHECK(sum < 0.8 * full_rings);  // a third of the layers pass 2 x 511 of 12288 positions
  }
}

TEST_CASE("MILP optimum equals exhaustive enumeration under context parallelism") {
  const std::vector<test::SmallCase> cases{
      {"olmoe-1b-7b", 16384, 2, 8, 4, 80e9, 64, RecomputePolicy::kAuto, 2},
      {"olmoe-1b-7b", 16384, 2, 8, 4, 17e9, 64, RecomputePolicy::kAuto, 2},  // memory binds
      {"deepseek-moe-16b", 16384, 4, 4, 4, 80e9, 32, RecomputePolicy::kAuto, 2},
      {"olmoe-1b-7b", 32768, 2, 8, 8, 80e9, 32, RecomputePolicy::kAuto, 4},
  };
  for (const test::SmallCase& k : cases) {
    const AnalyticModel model = k.analytic_model();
    const EnumerationResult e = enumerate_best_bound(model);
    const MilpSeed s = solve_allocation_milp(model);
    INFO(std::string(k.model) << " seq " << k.seq << " cp " << k.context_parallel << ": enumeration "
                              << e.bound_seconds << ", MILP " << s.bound_seconds);
    REQUIRE(e.found == s.found);
    REQUIRE(e.found);
    CHECK(s.bound_seconds == doctest::Approx(e.bound_seconds).epsilon(1e-6));
    REQUIRE(model.valid(s.allocation));
    CHECK(s.allocation.context_parallel == k.context_parallel);
    CHECK(model.estimate(s.allocation).fits());
  }
}

TEST_CASE("automatic degree: the fastest of planning each degree; none below 4096 tokens per GPU") {
  const ClusterSpec c = small_cluster(2, 8, 8);
  for (int seq : {4096, 16384, 65536}) {
    const ModelSpec m = long_olmoe(seq);
    PlanOptions o;
    o.global_batch = 16;  // few long sequences: splitting them fills the pipeline
    o.context_parallel = 0;
    const PlanOptions r = resolve_automatic(m, c, o);
    // Oracle: plan at every degree the rule admits, keep the fastest (the smaller on ties).
    int best = 1;
    double best_step = std::numeric_limits<double>::infinity();
    for (int cp = 1; cp < 8 && (cp == 1 || seq / cp >= 4096); cp *= 2) {
      PlanOptions oc = o;
      oc.context_parallel = cp;
      const double step = AdaptiveAllocator(m, c, oc).plan().step_seconds;
      if (step < best_step) {
        best_step = step;
        best = cp;
      }
    }
    INFO("seq " << seq);
    CHECK(r.context_parallel == best);
    const Plan p = AdaptiveAllocator(m, c, o).plan();
    CHECK(p.allocation.context_parallel == best);
    CHECK(p.step_seconds == doctest::Approx(best_step).epsilon(1e-12));
    if (seq == 4096) CHECK(best == 1);  // 2048-token chunks are not considered
    if (seq == 65536) CHECK(best > 1);  // 16 sequences of 64K: splitting them pays
  }
  PlanOptions bad;
  bad.context_parallel = -1;
  CHECK_THROWS_WITH_AS(AnalyticModel(long_olmoe(), c, bad), doctest::Contains("context_parallel"),
                       ConfigError);
  bad.context_parallel = 2;  // 2 × (2^31 − 1) micro-batches do not fit an int
  bad.global_batch = std::numeric_limits<int>::max();
  CHECK_THROWS_WITH_AS(AnalyticModel(long_olmoe(), c, bad), doctest::Contains("context_parallel = 2"),
                       ConfigError);
  bad.global_batch = 0;
  bad.context_parallel = 0;  // auto is the allocator's to resolve
  CHECK_THROWS_WITH_AS(AnalyticModel(long_olmoe(), c, bad), doctest::Contains("context_parallel"),
                       ConfigError);
}

TEST_CASE("plan JSON carries the context-parallel degree and reads it back strictly") {
  const ModelSpec m = long_olmoe();
  const ClusterSpec c = small_cluster(2, 8, 8);
  PlanOptions o;
  o.context_parallel = 2;
  const Plan p = AdaptiveAllocator(m, c, o).plan();
  REQUIRE(p.allocation.context_parallel == 2);
  io::Json j = to_json(p);
  CHECK(j["allocation"]["context_parallel"] == 2);
  CHECK(allocation_from_json(j, m, c) == p.allocation);
  j["allocation"].erase("context_parallel");  // plans written before the choice
  CHECK(allocation_from_json(j, m, c).context_parallel == 1);
  for (int bad : {0, 9}) {
    j["allocation"]["context_parallel"] = bad;
    CHECK_THROWS_WITH_AS(allocation_from_json(j, m, c), doctest::Contains("$.allocation.context_parallel"),
                         IoError);
  }
}
