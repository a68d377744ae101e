// SPDX-License-Identifier: Apache-2.0
// Colocated deployments chosen apart from pipeline depth (parallel folding): the
// all-to-all's link loads against an enumeration of every routing, the per-GPU state
// and all-reduce bytes by hand, an all-to-all's simulated time by hand, and the
// search's best deployment against brute force over depth, EP degree, ZeRO-1 and
// recomputation on a small cluster where memory binds.
#include "../plan/tiny_model.hpp"
#include "reference_simulator.hpp"

#include <disagmoe/schedule/schedules.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace ds = disagmoe::schedule;
namespace dp = disagmoe::plan;

namespace {

// Every k-subset of {0, ..., n-1}, in lexicographic order.
std::vector<std::vector<int>> subsets(int n, int k) {
  std::vector<std::vector<int>> out;
  std::vector<int> s(static_cast<std::size_t>(k));
  for (int i = 0; i < k; ++i) s[static_cast<std::size_t>(i)] = i;
  while (true) {
    out.push_back(s);
    int i = k - 1;
    while (i >= 0 && s[static_cast<std::size_t>(i)] == n - k + i) --i;
    if (i < 0) return out;
    ++s[static_cast<std::size_t>(i)];
    for (int j = i + 1; j < k; ++j) s[static_cast<std::size_t>(j)] = s[static_cast<std::size_t>(j - 1)] + 1;
  }
}

struct Tally {
  std::vector<double> rows, nic, nvlink;  // per GPU
};

// Every GPU of an EP group of `ep` (q per node, consecutive) sends one token for each
// k-subset of experts (experts in contiguous blocks of E / ep per GPU); each GPU's
// transmissions are counted row by row. DeepEP: one NIC row per remote node hit, to
// the GPU of the sender's local rank there, which forwards one NVLink row to every
// other GPU hit on its node.
Tally enumerate_rows(int experts, int k, int ep, int q, bool dedup, bool node_dedup) {
  Tally t{std::vector<double>(static_cast<std::size_t>(ep)), std::vector<double>(static_cast<std::size_t>(ep)),
          std::vector<double>(static_cast<std::size_t>(ep))};
  const int per_gpu = experts / ep;
  for (int s = 0; s < ep; ++s)
    for (const auto& pick : subsets(experts, k)) {
      std::vector<int> dest;  // one entry per row
      for (int e : pick) dest.push_back(e / per_gpu);
      if (dedup) {
        std::sort(dest.begin(), dest.end());
        dest.erase(std::unique(dest.begin(), dest.end()), dest.end());
      }
      t.rows[static_cast<std::size_t>(s)] += static_cast<double>(dest.size());
      std::set<int> remote_nodes;
      for (int g : dest) {
        if (g == s) continue;
        if (g / q == s / q) {
          t.nvlink[static_cast<std::size_t>(s)] += 1;
        } else if (!node_dedup) {
          t.nic[static_cast<std::size_t>(s)] += 1;
        } else {
          remote_nodes.insert(g / q);
          const int relay = (g / q) * q + s % q;
          if (g != relay) t.nvlink[static_cast<std::size_t>(relay)] += 1;
        }
      }
      t.nic[static_cast<std::size_t>(s)] += static_cast<double>(remote_nodes.size());
    }
  const double tokens = static_cast<double>(subsets(experts, k).size());  // per GPU
  for (auto* v : {&t.rows, &t.nic, &t.nvlink})
    for (double& x : *v) x /= tokens;
  return t;
}

}  // namespace

TEST_CASE("all-to-all rows per token: per-GPU and per-node dedup against every routing, counted") {
  struct Case {
    int experts, k, ep, q;
  };
  for (const Case cs : {Case{8, 2, 8, 4}, Case{8, 3, 8, 2}, Case{16, 4, 4, 2}, Case{8, 2, 4, 4}, Case{12, 3, 6, 3},
                        Case{8, 1, 8, 1}}) {
    disagmoe::ModelSpec m = dp::test::tiny_model();
    m.experts = cs.experts;
    m.top_k = cs.k;
    for (const bool dedup : {false, true})
      for (const bool node : {false, true}) {
        CAPTURE(cs.experts);
        CAPTURE(cs.k);
        CAPTURE(cs.ep);
        CAPTURE(cs.q);
        CAPTURE(dedup);
        CAPTURE(node);
        const auto r = ds::all_to_all_rows(m, cs.ep, cs.q, dedup, node);
        const Tally t = enumerate_rows(cs.experts, cs.k, cs.ep, cs.q, dedup, node && dedup);
        for (int g = 0; g < cs.ep; ++g) {  // every GPU, relays included, carries the same load
          CHECK(r.rows == doctest::Approx(t.rows[static_cast<std::size_t>(g)]));
          CHECK(r.nic_rows == doctest::Approx(t.nic[static_cast<std::size_t>(g)]));
          CHECK(r.nvlink_rows == doctest::Approx(t.nvlink[static_cast<std::size_t>(g)]));
        }
      }
  }
  // A hand count: 4 experts on 4 GPUs, 2 nodes of 2, top-2, sender GPU 0. Of the 6 pairs
  // {01 02 03 12 13 23}, 5 hit node 1 (5/6 NIC rows with node dedup; 1 row per GPU
  // without: 6 remote picks / 6), GPU 1 is hit by 3 (1/2 direct NVLink row) and GPU 0
  // relays for GPU 2's tokens that hit GPU 1: 1/2 more.
  disagmoe::ModelSpec m = dp::test::tiny_model();
  const auto node = ds::all_to_all_rows(m, 4, 2, true, true), gpu = ds::all_to_all_rows(m, 4, 2, true, false);
  CHECK(node.nic_rows == doctest::Approx(5.0 / 6));
  CHECK(gpu.nic_rows == doctest::Approx(1.0));
  CHECK(gpu.nvlink_rows == doctest::Approx(0.5));
  CHECK(node.nvlink_rows == doctest::Approx(1.0));
  CHECK_THROWS_WITH_AS(ds::all_to_all_rows(m, 3, 1, true, true), doctest::Contains("ep = 3"), disagmoe::ConfigError);
}

TEST_CASE("colocated problem with ep below the stage: state, all-reduce bytes and link shares by hand") {
  const auto m = disagmoe::model_preset("deepseek-moe-16b");
  const auto c = disagmoe::cluster_preset("h800x128");
  ds::CostOptions o;  // bf16, ZeRO-1, 12 optimizer bytes per parameter
  const int d = 64, ep = 16, edp = 4;  // 2 stages of 64 GPUs (8 nodes); EP over 2 nodes
  const auto pb = ds::colocated_problem(m, c, {2, ep, true}, o);
  REQUIRE(pb.workers.size() == 2);
  const int l = m.layers - 1;  // an MoE layer
  REQUIRE(m.is_moe_layer(l));
  const double routed = double(m.experts) * double(disagmoe::expert_params(m));
  const double shared = double(m.shared_experts) * double(disagmoe::gated_ffn_params(m, m.shared_expert_ffn));
  const auto& x = pb.layers[static_cast<std::size_t>(l)];
  // Per GPU: E/ep routed experts with Adam state over the 4 EDP replicas, shared experts over all 64.
  CHECK(x.expert_state_bytes == doctest::Approx(routed / ep * (2 + 2 + 12.0 / edp) + shared * (2 + 2 + 12.0 / d)));
  CHECK(x.expert_grad_bytes ==
        doctest::Approx(2.0 * (edp - 1) / edp * routed / ep * 2 + 2.0 * (d - 1) / d * shared * 2));
  // The all-to-all's bytes are the per-GPU deduplicated rows over 16 GPUs; the links
  // carry the node-deduplicated share (2 nodes of 8).
  const double t = double(m.tokens_per_micro_batch());
  const double rows16 = dp::expected_distinct_gpus(m.experts, m.top_k, 16);
  CHECK(x.dispatch_bytes == doctest::Approx(t * rows16 * m.hidden * 2));
  const double node_hit = dp::expected_distinct_gpus(m.experts, m.top_k, 2) / 2;
  CHECK(pb.workers[0].a2a_nic_share == doctest::Approx(node_hit / rows16));
  CHECK(pb.workers[0].a2a_nvlink_share == doctest::Approx(2.0 * 7 * rows16 / 16 / rows16));
  // EP inside a node: no NIC at all.
  CHECK(ds::colocated_problem(m, c, {2, 8, true}, o).workers[0].a2a_nic_share == 0);
  // ep = 0 keeps expert parallelism tied to depth: EP over the whole stage.
  CHECK(ds::colocated_problem(m, c, {2}, o).layers[static_cast<std::size_t>(l)].dispatch_bytes ==
        doctest::Approx(t * dp::expected_distinct_gpus(m.experts, m.top_k, 64) * m.hidden * 2));
  CHECK_THROWS_WITH_AS(ds::colocated_problem(m, c, {2, 3}, o), doctest::Contains("ep = 3"), disagmoe::ConfigError);
  CHECK_THROWS_WITH_AS(ds::colocated_problem(m, c, {2, 128}, o), doctest::Contains("ep = 128"),
                       disagmoe::ConfigError);
}

TEST_CASE("an all-to-all moves its NIC and NVLink shares at the slower link's pace, by hand") {
  ds::Schedule s;
  s.name = "a2a";
  ds::Worker w;
  w.gpus = 16;
  w.nodes = 2;
  w.nic_bandwidth = 1e9;
  w.nvlink_bandwidth = 1e10;
  w.a2a_nic_share = 0.25;
  w.a2a_nvlink_share = 1.75;
  s.workers = {w};
  s.network.nic_latency = 1e-3;
  ds::Op op;
  op.kind = ds::OpKind::kAllToAll;
  op.stream = ds::Stream::kComm;
  op.worker = op.peer = 0;
  op.bytes = 1e9;
  s.add(op);
  // NIC: 0.25 GB at 1 GB/s = 0.25 s; NVLink: 1.75 GB at 10 GB/s = 0.175 s; plus latency.
  CHECK(ds::simulate(s).step_seconds == doctest::Approx(0.251));
  CHECK(ds::test::simulate_reference(s).step_seconds == doctest::Approx(0.251));
  // Without shares: 8 of 16 destinations off the node, 0.5 s.
  s.workers[0].a2a_nic_share = s.workers[0].a2a_nvlink_share = -1;
  CHECK(ds::simulate(s).step_seconds == doctest::Approx(0.501));
  s.workers[0].a2a_nic_share = 0.5;
  CHECK_THROWS_WITH_AS(ds::simulate(s), doctest::Contains("a2a_nvlink_share"), disagmoe::ConfigError);
}

namespace {
struct Best {
  double step = 0;
  bool fits = false;
  double peak = 0;
};
bool before(const Best& a, const std::optional<Best>& b) {
  return !b || (a.fits != b->fits ? a.fits : a.step < b->step);
}
}  // namespace

TEST_CASE("colocated search: the best deployment equals brute force over depth, EP, ZeRO-1 and recomputation") {
  disagmoe::ModelSpec m = dp::test::tiny_model();
  m.layers = 4;
  m.experts = 8;
  m.seq_len = 64;
  m.hidden = 256;  // a few MB per layer: HBM above ClusterSpec's 1 MiB floor can bind
  m.heads = 4;
  m.kv_heads = 2;
  m.head_dim = 64;
  m.expert_ffn = 512;
  m.shared_expert_ffn = 256;
  m.dense_ffn = 1024;
  auto c = dp::test::small_cluster(2, 4, 4);
  ds::CostOptions o;
  o.global_batch = 64;
  // Brute force over every depth and EP degree 1..D (ConfigError: not a deployment),
  // ZeRO-1 on and off, with and without recomputation, DeepEP transport as the search's.
  auto brute = [&](const std::string& name, double hbm) {
    c.gpu.hbm_bytes = hbm;
    std::optional<Best> best;
    std::vector<double> peaks;
    for (int p = 1; p <= c.gpus(); ++p)
      for (int ep = 1; ep <= c.gpus(); ++ep)
        for (bool zero : {true, false})
          for (bool rc : {false, true}) {
            ds::CostOptions oo = o;
            oo.memory.zero1 = zero;
            oo.memory.recompute = disagmoe::plan::Recompute::both(rc);
            try {
              const auto s = ds::build_schedule(name, ds::colocated_problem(m, c, {p, ep, true}, oo));
              const auto r = ds::simulate(s);
              if (r.deadlocked) continue;
              const Best b{r.step_seconds, r.peak_memory_bytes <= hbm * o.memory_fraction, r.peak_memory_bytes};
              peaks.push_back(b.peak);
              if (before(b, best)) best = b;
            } catch (const disagmoe::ConfigError&) {
            }
          }
    REQUIRE(best.has_value());
    return std::pair{*best, peaks};
  };
  for (const std::string name :
       {"1f1b", "interleaved", "a2a-overlap", "chunked", "comet", "dualpipe", "dualpipev"}) {
    CAPTURE(name);
    // HBM at the median peak, so that memory rules out about half the deployments.
    auto peaks = brute(name, 1e12).second;
    REQUIRE(peaks.size() >= 8);
    std::nth_element(peaks.begin(), peaks.begin() + static_cast<long>(peaks.size() / 2), peaks.end());
    const double hbm = peaks[peaks.size() / 2] / o.memory_fraction;
    const Best want = brute(name, hbm).first;
    c.gpu.hbm_bytes = hbm;
    const auto got = ds::simulate_best(name, m, c, o);
    CAPTURE(got.layout);
    CHECK(got.fits == want.fits);
    CHECK(got.result.step_seconds == want.step);
    if (got.fits) CHECK(got.result.peak_memory_bytes <= hbm * o.memory_fraction);
  }
}
