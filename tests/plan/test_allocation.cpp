// SPDX-License-Identifier: Apache-2.0
// Layer assignment, worker memory (against an explicit tensor list), the analytic
// allocation model, and the MILP formulation (every allocation is a feasible MILP
// point with objective = its bound iff it fits; the MILP optimum = enumeration).
#include <disagmoe/plan/allocation_enumeration.hpp>
#include <disagmoe/plan/allocation_milp.hpp>
#include <disagmoe/plan/analytic_model.hpp>
#include <disagmoe/spec/presets.hpp>

#include "small_case.hpp"
#include "tiny_model.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <vector>

using namespace disagmoe;
using namespace disagmoe::plan;

using test::small_cluster;

TEST_CASE("interleaved_groups: pair i holds i, i+p, ...; every layer once") {
  for (int layers = 1; layers <= 13; ++layers)
    for (int p = 1; p <= layers; ++p) {
      const auto g = interleaved_groups(layers, p);
      REQUIRE(g.size() == std::size_t(p));
      std::vector<int> seen(layers, 0);
      for (int i = 0; i < p; ++i) {
        for (std::size_t k = 0; k < g[i].size(); ++k) {
          CHECK(g[i][k] == i + int(k) * p);
          ++seen[g[i][k]];
        }
        CHECK(int(g[i].size()) == (layers - i + p - 1) / p);
      }
      for (int s : seen) CHECK(s == 1);
    }
  CHECK_THROWS_WITH_AS(interleaved_groups(4, 5), "groups = 5: expected 1 <= groups <= layers (4)", ConfigError);
  CHECK_THROWS_AS(interleaved_groups(4, 0), ConfigError);
}

TEST_CASE("worker memory equals an explicit count of the tiny model's tensors") {
  const ModelSpec m = test::tiny_model();
  // Every tensor, by hand, as (rows, cols).
  std::map<std::string, std::pair<int, int>> attention_side{
      {"embed", {10, 8}},  {"l0.attn_norm", {1, 8}}, {"l0.wq", {8, 8}}, {"l0.wk", {8, 4}},   {"l0.wv", {8, 4}},
      {"l0.wo", {8, 8}},   {"l0.ffn_norm", {1, 8}},  {"l1.attn_norm", {1, 8}}, {"l1.wq", {8, 8}}, {"l1.wk", {8, 4}},
      {"l1.wv", {8, 4}},   {"l1.wo", {8, 8}},        {"l1.ffn_norm", {1, 8}},  {"l1.router", {8, 4}},
      {"final_norm", {1, 8}}, {"head", {8, 10}}};
  double a_params = 0;
  for (const auto& [name, shape] : attention_side) a_params += double(shape.first) * shape.second;
  // F worker of a group of 2: dense FFN of layer 0 (replicated), 2 of the 4 experts of layer 1, the shared expert.
  const double replicated = 3.0 * 8 * 16 + 3.0 * 8 * 3;
  const double own = 2 * 3.0 * 8 * 6;

  WorkerLoad w;
  w.layers = {0, 1};
  w.attention_group_size = 4;
  w.ffn_group_size = 2;
  w.holds_embedding = w.holds_head = true;
  w.head_params = head_shard_params(m, 1, 0);  // one pair: the whole head
  w.attention_in_flight = 0;
  w.ffn_in_flight = 0;
  MemoryOptions o;  // bf16 weights and grads, 12 bytes of Adam state
  MemoryBytes a = attention_worker_memory(m, w, o);
  CHECK(a.parameters == 2 * a_params);
  CHECK(a.gradients == 2 * a_params);
  CHECK(a.optimizer == 12 * a_params);
  CHECK(a.activations == 0);
  MemoryBytes f = ffn_worker_memory(m, w, o);
  CHECK(f.parameters == 2 * (own + replicated));
  CHECK(f.optimizer == 12 * (own + replicated));
  o.zero1 = true;  // shards only what is replicated: A over 4, F's dense/shared over 2
  CHECK(attention_worker_memory(m, w, o).optimizer == 12 * a_params / 4);
  CHECK(ffn_worker_memory(m, w, o).optimizer == 12 * own + 12 * replicated / 2);
  o.zero1 = false;
  // Tied embeddings: the head shares the embedding matrix.
  ModelSpec tied = m;
  tied.tied_embeddings = true;
  WorkerLoad wt = w;
  wt.head_params = head_shard_params(tied, 1, 0);
  CHECK(attention_worker_memory(tied, wt, o).parameters == 2 * (a_params - 80));
  // Vocabulary-parallel over 2 pairs: each holds half the head's 80; pair 0's half is
  // the embedding's when tied.
  CHECK(head_shard_params(m, 2, 0) == 40);
  CHECK(head_shard_params(m, 2, 1) == 40);
  CHECK(head_shard_params(tied, 2, 0) == 0);
  CHECK(head_shard_params(tied, 2, 1) == 40);
  // Activations: in flight × per-layer bytes (cost model), F tokens split over the group.
  w.attention_in_flight = 3;
  w.ffn_in_flight = 6;
  a = attention_worker_memory(m, w, o);
  CHECK(a.activations == 3 * (attention_activation_bytes(m, 0, o) + attention_activation_bytes(m, 1, o)));
  const DispatchOptions d{2, true, 0};
  f = ffn_worker_memory(m, w, o);
  CHECK(f.activations == doctest::Approx(6.0 / 2 * (ffn_activation_bytes(m, 0, o, d) + ffn_activation_bytes(m, 1, o, d))));
}

TEST_CASE("planner options: optimizer and gradient bytes must be finite and >= 0, each named") {
  const auto m = model_preset("olmoe-1b-7b");
  const auto c = small_cluster(2, 8, 8);
  const double inf = std::numeric_limits<double>::infinity();
  for (auto [optimizer, grad, named] : {std::tuple{inf, 0.0, "memory.optimizer_bytes = inf"},
                                        std::tuple{-1.0, 0.0, "memory.optimizer_bytes = -1"},
                                        std::tuple{12.0, -2.0, "memory.grad_bytes = -2"},
                                        std::tuple{12.0, std::nan(""), "memory.grad_bytes = nan"}}) {
    PlanOptions o;
    o.memory.optimizer_bytes = optimizer;
    o.memory.grad_bytes = grad;
    CHECK_THROWS_WITH_AS(AnalyticModel(m, c, o), doctest::Contains(named), ConfigError);
  }
  PlanOptions zero;  // a stateless optimizer is a valid choice
  zero.memory.optimizer_bytes = 0;
  CHECK_NOTHROW(AnalyticModel(m, c, zero));
}

TEST_CASE("require_fit names the worker type, the bytes needed and the bytes available") {
  FitReport r;
  r.capacity = 72e9;
  r.attention_worker.parameters = 10e9;
  r.ffn_worker.parameters = 50e9;
  r.ffn_worker.optimizer = 40e9;
  CHECK(r.attention_fits());
  CHECK_FALSE(r.fits());
  try {
    require_fit(r);
    FAIL("no throw");
  } catch (const ConfigError& e) {
    const std::string s = e.what();
    INFO(s);
    CHECK(s.find("memory_bytes.ffn_worker = 90000000000") == 0);
    CHECK(s.find("at most 7.2e+10 bytes available per GPU") != std::string::npos);
    CHECK(s.find("ffn worker needs 90 GB") != std::string::npos);
    CHECK(s.find("available 72 GB") != std::string::npos);
  }
}

namespace {
// The tiny model at 64 tokens per sequence on 2 nodes of 4 GPUs and 4 NICs, 16 sequences per step.
AnalyticModel tiny_two_nodes(PlanOptions o = {}) {
  ModelSpec m = test::tiny_model();
  m.seq_len = 64;
  o.global_batch = 16;
  return AnalyticModel(m, small_cluster(2, 4, 4), o);
}

// The tiny model's two layers from their layer costs (F group of 4, send-once): FLOPs by
// side, all passes and forward only, and the A↔F bytes of one micro-batch.
struct TinyLayerSums {
  double attention = 0, attention_forward = 0, ffn = 0, ffn_forward = 0, bytes = 0;
};
TinyLayerSums tiny_layer_sums(const ModelSpec& m) {
  TinyLayerSums t;
  for (int l = 0; l < 2; ++l) {
    const LayerCost lc = layer_cost(m, l, DispatchOptions{4, true, 0});
    t.attention += lc.attention_side().total();
    t.attention_forward += lc.attention_side().forward;
    t.ffn += lc.ffn_side().total();
    t.ffn_forward += lc.ffn_side().forward;
    t.bytes += lc.dispatch_bytes + lc.return_bytes;
  }
  return t;
}
}  // namespace

TEST_CASE("AnalyticModel: busy times equal a recount from layer costs (tiny model, 2 nodes)") {
  const AnalyticModel model = tiny_two_nodes();
  const ModelSpec& m = model.model();
  const ClusterSpec& c = model.cluster();
  const Allocation x{1, 2, 2, 1, 3};  // p=1: A group 4 GPUs, F group 4 GPUs; 2 and 6 NICs
  REQUIRE(model.valid(x));
  const StepEstimate e = model.estimate(x);
  const double peak = c.gpu.peak_flops(m.dtype);
  const TinyLayerSums sums = tiny_layer_sums(m);
  const double fa = sums.attention, ff = sums.ffn, bytes = sums.bytes;
  CHECK(e.attention_seconds == doctest::Approx(fa / (peak * 0.5) / 4));
  CHECK(e.ffn_seconds == doctest::Approx(ff / (peak * 0.45) / 4));
  // Gradient all-reduce once per step, by hand: the A group (4 GPUs on 2 nodes) holds
  // every A-side tensor of the tiny model (616 parameters: embedding 80; layer 0 208 =
  // norms 16 + Wq 64 + Wk 32 + Wv 32 + Wo 64; layer 1 240 = 208 + router 32; final norm
  // 8; head 80), the F group the dense FFN (384)
  // and the shared expert (72). A ring over 4 ranks moves 2·3/4 of the bf16 gradients per
  // edge; 2 of its edges cross NICs (one per node); amortised over 8 micro-batches.
  const double nic = c.nic_bandwidth * 0.85;
  const double ar_a = 2 * 1.5 * 616 * 2 / (2 * 1 * nic) / 8, ar_f = 2 * 1.5 * 456 * 2 / (2 * 3 * nic) / 8;
  CHECK(e.attention_network_seconds == doctest::Approx(bytes / (2 * 1 * nic) + ar_a));
  CHECK(e.ffn_network_seconds == doctest::Approx(bytes / (2 * 3 * nic) + ar_f));
  CHECK(e.bound_seconds == doctest::Approx(std::max({fa / (peak * 0.5) / 4, ff / (peak * 0.45) / 4,
                                                     bytes / (2 * 1 * nic) + ar_a, bytes / (2 * 3 * nic) + ar_f})));
  // The O(p) bound from pair sums is the same model summed pair-first.
  CHECK(model.bound_seconds(x, model.pair_sums(1)) == doctest::Approx(e.bound_seconds).epsilon(1e-12));
  CHECK(e.waves == 8.0 / 4);  // 16 sequences = 8 micro-batches of 2, over an A group of 4
  CHECK(e.step_seconds >= 8 * e.bound_seconds);
  CHECK(e.tokens_per_second == doctest::Approx(16 * 64 / e.step_seconds));
  CHECK_THROWS_AS((void)model.estimate(Allocation{1, 2, 2, 3, 3}), ConfigError);  // 6 NICs > 4
  CHECK_THROWS_AS((void)model.estimate(Allocation{3, 2, 2, 1, 3}), ConfigError);  // p=3 > layers
}

TEST_CASE(
    "embedding and vocabulary-parallel head: each pair's A compute and A links by hand (tiny model, p = 2)") {
  PlanOptions with;
  with.embedding_head = true;
  const AnalyticModel off = tiny_two_nodes(), on = tiny_two_nodes(with);
  const ModelSpec& m = on.model();
  const ClusterSpec& c = on.cluster();
  // One GPU micro-batch of T = 2 x 64 tokens: the head's three GEMM passes of 2·T·d·V
  // FLOPs at half of peak, the embedding's 2·T·d bf16 elements forward and 3·T·d back
  // through HBM.
  const double t = 2.0 * 64, peak = c.gpu.peak_flops(m.dtype);
  const double head = 3 * 2 * t * m.hidden * m.vocab / (0.5 * peak);
  const double embed = 5 * t * m.hidden * 2 / c.gpu.hbm_bandwidth;
  const auto a = off.pair_sums(2), b = on.pair_sums(2);
  for (int rc = 0; rc < 2; ++rc) {
    CHECK(b[0].attention_s[rc] == doctest::Approx(a[0].attention_s[rc] + embed + head / 2).epsilon(1e-12));
    CHECK(b[1].attention_s[rc] == doctest::Approx(a[1].attention_s[rc] + head / 2).epsilon(1e-12));
    CHECK(b[0].routed_s[rc] == a[0].routed_s[rc]);  // the F side does not see the head
  }
  // The ring: one bf16 row per token in each direction on every A group; none with one pair.
  CHECK(b[0].head_row_bytes == m.hidden * 2.0);
  CHECK(b[1].head_row_bytes == m.hidden * 2.0);
  CHECK(on.pair_sums(1)[0].head_row_bytes == 0);
  CHECK(on.pair_sums(1)[0].attention_s[0] ==
        doctest::Approx(off.pair_sums(1)[0].attention_s[0] + embed + head));
  // Priced in the A side's busy times: A compute per micro-batch over the group of 4, A
  // links 2·T rows of d more per micro-batch over the side's NICs (2 nodes × 1 NIC / 2 pairs).
  const Allocation x{2, 2, 2, 1, 3};
  REQUIRE(on.valid(x));
  const StepEstimate e0 = off.estimate(x), e1 = on.estimate(x);
  // The pair the estimate quotes is one of the two, at its A compute over the group of 2.
  const double quoted = e1.attention_seconds * 2;
  CHECK((quoted == doctest::Approx(b[0].attention_s[0]).epsilon(1e-12) ||
         quoted == doctest::Approx(b[1].attention_s[0]).epsilon(1e-12)));
  CHECK(on.bound_seconds(x, b) == doctest::Approx(e1.bound_seconds).epsilon(1e-12));
  CHECK(e1.bound_seconds >= e0.bound_seconds);
}

TEST_CASE("recomputation per side: each side's compute and memory follow its own setting only") {
  const AnalyticModel model = tiny_two_nodes();
  const ModelSpec& m = model.model();
  const double peak = model.cluster().gpu.peak_flops(m.dtype);
  const TinyLayerSums sums = tiny_layer_sums(m);
  const double fa = sums.attention, fa_fwd = sums.attention_forward, ff = sums.ffn, ff_fwd = sums.ffn_forward;
  const Allocation off{1, 2, 2, 1, 3};
  for (const Recompute rc :
       {Recompute{false, false}, Recompute{true, false}, Recompute{false, true}, Recompute{true, true}}) {
    Allocation x = off;
    x.recompute = rc;
    INFO(model.describe_allocation(x));
    REQUIRE(model.valid(x));
    const StepEstimate e = model.estimate(x);
    // A recomputing side runs its forward twice (Korthikanti et al. 2022 §5); the other is untouched.
    CHECK(e.attention_seconds == doctest::Approx((fa + (rc.attention ? fa_fwd : 0)) / (peak * 0.5) / 4));
    CHECK(e.ffn_seconds == doctest::Approx((ff + (rc.ffn ? ff_fwd : 0)) / (peak * 0.45) / 4));
    CHECK(model.bound_seconds(x, model.pair_sums(1)) == doctest::Approx(e.bound_seconds).epsilon(1e-12));
    // Memory: each worker's activations are those of its own setting, as if both sides had it.
    Allocation a_only = off, f_only = off;
    a_only.recompute = Recompute::both(rc.attention);
    f_only.recompute = Recompute::both(rc.ffn);
    CHECK(e.memory.attention_worker.activations == model.memory(a_only).attention_worker.activations);
    CHECK(e.memory.ffn_worker.activations == model.memory(f_only).ffn_worker.activations);
  }
  const double t = double(m.tokens_per_micro_batch()), bytes = bytes_of(m.dtype);
  Allocation x = off;
  x.recompute = {true, false};
  const double in_flight = model.attention_in_flight(1, 2);
  // Recomputing, an A worker keeps T·d per layer and micro-batch in flight (2 layers).
  CHECK(model.memory(x).attention_worker.activations ==
        doctest::Approx(2 * in_flight * t * m.hidden * bytes));
  CHECK(model.describe_allocation(x).find("recompute=A ") != std::string::npos);
  x.recompute = {false, true};
  CHECK(model.describe_allocation(x).find("recompute=F ") != std::string::npos);
  // The policy applies to each side: kOff and kOn admit only their own setting.
  PlanOptions on;
  on.recompute = RecomputePolicy::kOn;
  const AnalyticModel always = tiny_two_nodes(on);
  CHECK_FALSE(always.valid(x));
  x.recompute = Recompute::both(true);
  CHECK(always.valid(x));
}

namespace {

const std::vector<test::SmallCase> kCases{
    {"tiny", 64, 1, 8, 0, 80e9, 64, RecomputePolicy::kAuto},
    {"tiny", 64, 2, 4, 4, 80e9, 32, RecomputePolicy::kOff},
    {"olmoe-1b-7b", 2048, 1, 8, 0, 80e9, 64, RecomputePolicy::kAuto},
    {"olmoe-1b-7b", 4096, 2, 8, 4, 80e9, 64, RecomputePolicy::kAuto},
    {"olmoe-1b-7b", 4096, 2, 8, 4, 8e9, 64, RecomputePolicy::kAuto},    // nothing fits
    {"olmoe-1b-7b", 8192, 4, 4, 4, 6e9, 0, RecomputePolicy::kAuto},     // memory binds, default batch
    {"deepseek-moe-16b", 32768, 2, 8, 8, 80e9, 0, RecomputePolicy::kAuto},  // F memory limits the A size
    {"deepseek-moe-16b", 8192, 4, 4, 4, 80e9, 64, RecomputePolicy::kAuto},
    {"mixtral-8x7b", 4096, 2, 8, 8, 80e9, 128, RecomputePolicy::kAuto},
    {"qwen3-30b-a3b", 16384, 2, 8, 8, 80e9, 32, RecomputePolicy::kOn},
};

}  // namespace

TEST_CASE("MILP formulation: each allocation that fits and uses every NIC is feasible with objective = its bound") {
  long cut_by_rows = 0;  // allocations whose two sides fit alone but not together
  for (const test::SmallCase& k : kCases) {
    const AnalyticModel model = k.analytic_model();
    const AllocationMilp f = build_allocation_milp(model);
    long feasible = 0, checked = 0;
    bool any_fits = false;
    for_each_allocation(model, [&](const Allocation& x) {
      // The MILP prices the fused stage of uniform splits; the local search chooses fusion
      // and mixed splits.
      if (!x.fuse || x.mixed_nodes != 0) return;
      const StepEstimate e = model.estimate(x);
      any_fits = any_fits || e.fits();
      const double s = e.bound_seconds * AllocationMilp::kMs;
      const std::vector<double> v = f.encode(x, s);
      const bool all_nics = k.nodes == 1 || x.attention_nics_per_node + x.ffn_nics_per_node == k.nics;
      INFO(k.model << " " << model.describe_allocation(x) << " bound " << e.bound_seconds << " fits " << e.fits());
      ++checked;
      if (e.fits() && all_nics) {
        REQUIRE(f.represents(x));
        ++feasible;
        CHECK(f.decode(v) == x);
        CHECK(f.problem.evaluate(v) == doctest::Approx(s));
        CHECK(f.problem.max_violation(v) <= 1e-7 * std::max(1.0, s));
        // Tight: any smaller S violates a row.
        CHECK(f.problem.max_violation(f.encode(x, s * (1 - 1e-6))) > 0);
      } else if (!e.fits()) {
        // Out of memory: no binary for it, or (both binaries exist) a compatibility row fails.
        CHECK(f.problem.max_violation(v) > 1e-9);
        if (f.represents(x)) ++cut_by_rows;
      } else {
        // An idle NIC: not a point of the program; the same GPUs with the idle NICs given
        // to either side are, with a bound no larger.
        CHECK_FALSE(f.represents(x));
        const int idle = k.nics - x.attention_nics_per_node - x.ffn_nics_per_node;
        for (int to_a : {0, idle}) {
          Allocation y = x;
          y.attention_nics_per_node += to_a;
          y.ffn_nics_per_node += idle - to_a;
          REQUIRE(f.represents(y));
          CHECK(model.estimate(y).bound_seconds <= e.bound_seconds * (1 + 1e-12));
        }
      }
    });
    CHECK((feasible > 0) == any_fits);  // an allocation that fits has one that uses every NIC
    CHECK(checked > 0);
  }
  CHECK(cut_by_rows > 0);  // the F memory coupling is exercised
}

TEST_CASE("F groups whose size does not divide the experts: the busiest GPU (ceil(E/g) experts) is charged") {
  ModelSpec m = test::tiny_model();  // 4 experts
  m.seq_len = 64;
  PlanOptions o;
  o.global_batch = 16;
  const AnalyticModel model(m, small_cluster(1, 8, 0), o);
  REQUIRE(model.valid_ffn(1, 3));       // g = 3 does not divide 4: allowed
  CHECK_FALSE(model.valid_ffn(1, 5));   // g = 5 > E: an F GPU without an expert
  const Allocation x{1, 2, 3, 0, 0};
  REQUIRE(model.valid(x));
  const double peak = small_cluster(1, 8, 0).gpu.peak_flops(m.dtype);
  double routed = 0, other = 0;
  for (int l = 0; l < 2; ++l) {
    const LayerCost lc = layer_cost(m, l);
    routed += lc.experts.total();
    other += (lc.shared_experts + lc.dense_ffn).total();
  }
  // One of the 3 GPUs holds 2 of the 4 experts: half the routed tokens; shared/dense / 3.
  CHECK(model.estimate(x).ffn_seconds == doctest::Approx((routed * 2 / 4 + other / 3) / (peak * 0.45)));
  WorkerLoad w;
  w.layers = {0, 1};
  w.ffn_group_size = 3;
  w.ffn_in_flight = 0;
  const MemoryOptions mo;
  CHECK(ffn_worker_memory(m, w, mo).parameters == 2 * (2 * 3.0 * 8 * 6 + 3.0 * 8 * 16 + 3.0 * 8 * 3));
}
