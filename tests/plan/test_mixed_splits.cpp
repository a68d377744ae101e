// SPDX-License-Identifier: Apache-2.0
// Mixed per-node splits (Allocation::mixed_nodes): some nodes give A one GPU more and F
// one fewer. Placement against a GPU-by-GPU recount, the analytic model's group sizes,
// bandwidths and validity by hand, the search against exhaustive enumeration, the JSON.
#include <disagmoe/plan/adaptive_allocator.hpp>
#include <disagmoe/plan/allocation_enumeration.hpp>
#include <disagmoe/plan/plan_json.hpp>
#include <disagmoe/spec/presets.hpp>

#include <doctest/doctest.h>

#include "tiny_model.hpp"
#include <algorithm>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

using namespace disagmoe;
using namespace disagmoe::plan;
using test::small_cluster;

namespace {

// The node of every GPU of a group, one entry per GPU.
std::vector<int> gpu_nodes(const GroupNodes& g, int cluster_nodes) {
  std::vector<int> v;
  for (int n = 0; n < cluster_nodes; ++n)
    for (int k = 0; k < g.gpus_on(n); ++k) v.push_back(n);
  return v;
}

}  // namespace

TEST_CASE("mixed placement: every node's GPUs recounted, transfer shares against a GPU-by-GPU count") {
  int layouts = 0;
  for (int nodes : {2, 4, 8})
    for (int p = 1; p <= nodes; ++p) {
      if (nodes % p != 0) continue;
      for (int k = p; k < nodes; k += p)
        for (int a = 1; a <= 3; ++a)
          for (int f = 2; f <= 4; ++f) {
            INFO("nodes " << nodes << " p " << p << " k " << k << " a " << a << " f " << f);
            std::vector<GroupNodes> as, fs;
            for (int i = 0; i < p; ++i) {
              as.push_back(mixed_group_nodes(i, p, nodes, a, k, a + 1));
              fs.push_back(mixed_group_nodes(i, p, nodes, f, k, f - 1));
            }
            // Per node: A and F take a + f GPUs, A one more on exactly k nodes.
            int mixed = 0;
            for (int n = 0; n < nodes; ++n) {
              int on_a = 0, on_f = 0;
              for (int i = 0; i < p; ++i) {
                on_a += as[static_cast<std::size_t>(i)].gpus_on(n);
                on_f += fs[static_cast<std::size_t>(i)].gpus_on(n);
              }
              CHECK(on_a + on_f == a + f);
              CHECK((on_a == a || on_a == a + 1));
              mixed += on_a == a + 1;
            }
            CHECK(mixed == k);
            // Equal groups: every A group (F group) holds its share of the side's GPUs.
            for (int i = 0; i < p; ++i) {
              const auto na = gpu_nodes(as[static_cast<std::size_t>(i)], nodes);
              const auto nf = gpu_nodes(fs[static_cast<std::size_t>(i)], nodes);
              CHECK(int(na.size()) == (nodes * a + k) / p);
              CHECK(int(nf.size()) == (nodes * f - k) / p);
              CHECK(as[static_cast<std::size_t>(i)].gpus == int(na.size()));
              CHECK(fs[static_cast<std::size_t>(i)].gpus == int(nf.size()));
            }
            // Shares: every (sender GPU, receiver GPU) pair counted once.
            for (int i = 0; i < p; ++i)
              for (int j = 0; j < p; ++j) {
                const auto from = gpu_nodes(as[static_cast<std::size_t>(i)], nodes);
                const auto to = gpu_nodes(fs[static_cast<std::size_t>(j)], nodes);
                double local = 0;
                for (int s : from)
                  for (int r : to) local += s == r;
                CHECK(same_node_share(as[static_cast<std::size_t>(i)], fs[static_cast<std::size_t>(j)]) ==
                      doctest::Approx(local / (double(from.size()) * to.size())).epsilon(1e-12));
              }
            for (const GroupNodes& g : {as.front(), fs.back()}) {
              const auto v = gpu_nodes(g, nodes);
              double nic = 0, nvl = 0;
              for (std::size_t s = 0; s < v.size(); ++s)
                for (std::size_t r = 0; r < v.size(); ++r)
                  if (s != r) (v[s] == v[r] ? nvl : nic) += 1;
              const double n2 = double(v.size()) * v.size();
              const OwnGroupShares own = own_group_shares(g);
              CHECK(own.nic == doctest::Approx(nic / n2).epsilon(1e-12));
              CHECK(own.nvlink == doctest::Approx(nvl / n2).epsilon(1e-12));
            }
            ++layouts;
          }
    }
  CHECK(layouts > 100);
  // Without mixed nodes the shares are the uniform closed forms.
  const OwnGroupShares u = own_group_shares(group_nodes(0, 8, 4));
  CHECK(u.nic == doctest::Approx(0.5));
  CHECK(u.nvlink == doctest::Approx(3.0 / 8));
}

TEST_CASE("the analytic model under a mixed split: group sizes, GPUs, bandwidths and validity by hand") {
  ModelSpec m = model_preset("olmoe-1b-7b");
  m.seq_len = 4096;
  const ClusterSpec c = small_cluster(4, 8, 8);
  PlanOptions o;
  o.mixed_splits = true;
  const AnalyticModel model(m, c, o);
  // p = 2 pairs of two nodes; 2 of the 4 nodes (one per pair) give 3 A + 5 F, the others 2 + 6.
  const Allocation x{2, 2, 6, 3, 5, {}, true, 1, 2, 2};
  REQUIRE(model.valid(x));
  CHECK(attention_gpus(x, c) == 2 * 3 + 2 * 2);
  CHECK(ffn_gpus(x, c) == 2 * 5 + 2 * 6);
  CHECK(model.attention_group_size(x) == 5);
  CHECK(model.ffn_group_size(x) == 11);
  const double eff = model.options().efficiency.network;
  // A: 5 GPUs, each at the mixed node's 3 NICs over 3 A GPUs; F: 11 GPUs at 5 NICs over 6.
  CHECK(model.attention_bandwidth(x) == doctest::Approx(5 * 3 * c.nic_bandwidth * eff / 3));
  CHECK(model.ffn_bandwidth(x) == doctest::Approx(11 * 5 * c.nic_bandwidth * eff / 6));
  Allocation uniform = x;
  uniform.mixed_nodes = 0;
  CHECK(model.attention_bandwidth(uniform) == model.side_bandwidth(2, 2, 3));
  // More A GPUs per pair: more micro-batches each wave, a shorter A compute per micro-batch.
  const StepEstimate e = model.estimate(x), u = model.estimate(uniform);
  CHECK(e.waves == doctest::Approx(u.waves * 4 / 5));
  CHECK(e.attention_seconds == doctest::Approx(u.attention_seconds * 4 / 5));
  const Plan plan = make_plan(model, x, {x, 1, x, 1, 1, false}, 0, 0);
  CHECK(plan.attention_gpus == 10);
  CHECK(plan.ffn_gpus == 22);
  CHECK(plan.idle_gpus == 0);
  CHECK(plan.attention_bandwidth_per_gpu == doctest::Approx(c.nic_bandwidth));
  CHECK(plan.ffn_bandwidth_per_gpu == doctest::Approx(5 * c.nic_bandwidth / 6));
  CHECK(model.describe_allocation(x).find("mixed=2") != std::string::npos);
  // What a mixed split needs.
  const auto invalid = [&](Allocation y) { return !model.valid(y); };
  Allocation y = x;
  y.mixed_nodes = 1;  // not a multiple of p
  CHECK(invalid(y));
  y = x;
  y.mixed_nodes = 4;  // every node: a uniform 3/5 split
  CHECK(invalid(y));
  y = x;
  y.groups = 3;  // p does not divide the nodes
  y.mixed_nodes = 3;
  CHECK(invalid(y));
  y = Allocation{2, 2, 1, 3, 5, {}, true, 1, 2, 2};  // F would keep no GPU on a mixed node
  CHECK(invalid(y));
  CHECK_FALSE(AnalyticModel(m, c, {}).valid(x));  // off by default
  PlanOptions cp2 = o;
  cp2.context_parallel = 2;
  Allocation z = x;
  z.context_parallel = 2;
  z.attention_gpus_per_node = 2;
  CHECK_FALSE(AnalyticModel(m, c, cp2).valid(z));  // rings need the same A GPUs on every node
  z.mixed_nodes = 0;
  CHECK(AnalyticModel(m, c, cp2).valid(z));
}

TEST_CASE("mixed splits against enumeration: the search finds the fastest split, mixed where it wins") {
  // Oracle: every valid allocation (for_each_allocation, mixed ones included) estimated.
  struct Case {
    const char* model;
    int seq, nodes;
  };
  int mixed_best = 0;
  // GPT-OSS-120B on 8 nodes mixes (the balance point lies between two splits per node);
  // the others keep every node alike.
  for (const Case& k :
       {Case{"gpt-oss-120b", 16384, 8}, Case{"gpt-oss-120b", 8192, 8}, Case{"olmoe-1b-7b", 4096, 4},
        Case{"deepseek-moe-16b", 8192, 8}, Case{"qwen3-30b-a3b", 8192, 2}}) {
    ModelSpec m = model_preset(k.model);
    m.seq_len = k.seq;
    const ClusterSpec c = parse_cluster_name("h800x128:" + std::to_string(k.nodes));
    PlanOptions o;
    o.context_parallel = 1;
    o.group_factor = 2;
    o.mixed_splits = true;
    const AdaptiveAllocator allocator(m, c, o);
    const AnalyticModel& model = allocator.model();
    double best = std::numeric_limits<double>::infinity(), best_uniform = best;
    Allocation arg;
    long mixed = 0;
    for_each_allocation(model, [&](const Allocation& x) {
      mixed += x.mixed_nodes > 0;
      const StepEstimate e = model.estimate(x);
      if (!e.fits()) return;
      if (e.step_seconds < best) best = e.step_seconds, arg = x;
      if (x.mixed_nodes == 0) best_uniform = std::min(best_uniform, e.step_seconds);
    });
    const Plan p = allocator.plan();
    INFO(k.model << " " << k.seq << " on " << k.nodes << " nodes: enumeration "
                 << model.describe_allocation(arg) << " " << best << " s, search "
                 << model.describe_allocation(p.allocation) << " " << p.step_seconds << " s, best uniform "
                 << best_uniform << " s");
    CHECK(mixed > 0);
    CHECK(p.step_seconds == doctest::Approx(best).epsilon(1e-12));
    mixed_best += arg.mixed_nodes > 0;
    // Every node alike: the same search never mixes and is no faster.
    PlanOptions u = o;
    u.mixed_splits = false;
    const Plan q = AdaptiveAllocator(m, c, u).plan();
    CHECK(q.allocation.mixed_nodes == 0);
    CHECK(q.step_seconds == doctest::Approx(best_uniform).epsilon(1e-12));
    CHECK(q.step_seconds >= p.step_seconds);
  }
  CHECK(mixed_best >= 2);
}

TEST_CASE("the local search steps the A:F ratio by one node per pair, across whole splits too") {
  ModelSpec m = model_preset("olmoe-1b-7b");
  m.seq_len = 4096;
  PlanOptions o;
  o.mixed_splits = true;
  const AnalyticModel model(m, small_cluster(4, 8, 8), o);
  const auto has = [&](const Allocation& from, int a, int f, int k) {
    for (const Allocation& y : neighbours(model, from))
      if (y.attention_gpus_per_node == a && y.ffn_gpus_per_node == f && y.mixed_nodes == k &&
          y.groups == from.groups && y.attention_nics_per_node == from.attention_nics_per_node)
        return true;
    return false;
  };
  const Allocation uniform{2, 2, 6, 3, 5, {}, true, 1, 2, 0}, mixed{2, 2, 6, 3, 5, {}, true, 1, 2, 2};
  CHECK(has(uniform, 2, 6, 2));  // 2 -> 2.5 A GPUs per node
  CHECK(has(uniform, 1, 7, 2));  // 2 -> 1.5
  CHECK(has(mixed, 2, 6, 0));    // 2.5 -> 2
  CHECK(has(mixed, 3, 5, 0));    // 2.5 -> 3
}

TEST_CASE("every valid allocation is enumerated, mixed ones included, once; only-mixed fits still plan") {
  // Oracle: hand-written loops over every field (every k, not only multiples of p),
  // filtered by AnalyticModel::valid.
  ModelSpec m = model_preset("olmoe-1b-7b");
  m.seq_len = 4096;
  const ClusterSpec c = small_cluster(4, 4, 2);
  PlanOptions o;
  o.mixed_splits = true;
  const AnalyticModel model(m, c, o);
  std::vector<Allocation> listed, by_hand;
  for_each_allocation(model, [&](const Allocation& x) { listed.push_back(x); });
  for (int p = 1; p <= model.max_groups(); ++p)
    for (int a = 0; a <= c.gpus_per_node; ++a)
      for (int f = 0; f <= c.gpus_per_node; ++f)
        for (int k = 0; k < c.nodes; ++k)
          for (int na = 0; na <= c.nics_per_node; ++na)
            for (int nf = 0; nf <= c.nics_per_node; ++nf)
              for (bool ra : {false, true})
                for (bool rf : {false, true})
                  for (bool fuse : {true, false}) {
                    const Allocation x{p, a, f, na, nf, {ra, rf}, fuse, 1, 2, k};
                    if (model.valid(x)) by_hand.push_back(x);
                  }
  const auto key = [](const Allocation& x) {
    return std::tuple{x.groups,
                      x.attention_gpus_per_node,
                      x.ffn_gpus_per_node,
                      x.mixed_nodes,
                      x.attention_nics_per_node,
                      x.ffn_nics_per_node,
                      x.recompute.attention,
                      x.recompute.ffn,
                      x.fuse};
  };
  const auto by_key = [&](const Allocation& x, const Allocation& y) { return key(x) < key(y); };
  std::sort(listed.begin(), listed.end(), by_key);
  std::sort(by_hand.begin(), by_hand.end(), by_key);
  CHECK(listed == by_hand);
  CHECK(std::count_if(by_hand.begin(), by_hand.end(), [](const Allocation& x) { return x.mixed_nodes > 0; }) >
        0);
  // Where only a mixed split fits memory (the MILP spans uniform ones), the planner seeds
  // from the fastest that fits instead of reporting that nothing does.
  ModelSpec big = model_preset("gpt-oss-120b");
  big.seq_len = 65536;
  PlanOptions tight;
  tight.context_parallel = 1;
  tight.memory_fraction = 0.7;
  const ClusterSpec sixteen = parse_cluster_name("h800x128");
  CHECK_THROWS_AS((void)AdaptiveAllocator(big, sixteen, tight).plan(), ConfigError);
  tight.mixed_splits = true;
  const Plan only_mixed = AdaptiveAllocator(big, sixteen, tight).plan();
  CHECK(only_mixed.allocation.mixed_nodes > 0);
  CHECK(only_mixed.predicted.fits());
}

TEST_CASE("the plan's JSON carries the mixed nodes; plans without them read back alike") {
  ModelSpec m = model_preset("olmoe-1b-7b");
  const ClusterSpec c = parse_cluster_name("h800x128:4");
  PlanOptions o;
  o.mixed_splits = true;
  Plan p = AdaptiveAllocator(m, c, o).plan();
  p.allocation = Allocation{2, 2, 6, 3, 5, {}, true, 1, 2, 2};
  const io::Json j = to_json(p);
  CHECK(j.at("allocation").at("mixed_nodes").get<int>() == 2);
  CHECK(allocation_from_json(io::Json::parse(j.dump()), m, c) == p.allocation);
  io::Json old = j;
  old.at("allocation").erase("mixed_nodes");
  CHECK(allocation_from_json(old, m, c).mixed_nodes == 0);
  p.allocation.mixed_nodes = 0;  // a uniform plan's JSON is as before: no key
  CHECK_FALSE(to_json(p).at("allocation").contains("mixed_nodes"));
  io::Json bad = j;
  bad["allocation"]["mixed_nodes"] = 4;  // as many as the nodes
  CHECK_THROWS_AS((void)allocation_from_json(bad, m, c), IoError);
}
