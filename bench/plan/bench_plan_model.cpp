// SPDX-License-Identifier: Apache-2.0
// The planner's analytic step time (AnalyticModel::estimate) against the simulator's
// (simulate_plan, at the simulated rate over the plan's batch) on a broad set of
// allocations, not only the ones the planner picks: every pair count that is a power of
// two up to the layers, 2, 3 or 4 attention GPUs per node (the rest FFN), NICs 4 + 4
// (--nic-splits: every full split, 1 to K - 1 of a node's K NICs to the A side),
// fusion on and off, ping-pong groups of p and 2p waves, context parallelism 1, 2 and 4
// (chunks of at least 4096 tokens), each with the first recomputation (none, F, A, both)
// that fits. One row per allocation (tab-separated: model, seq_len, M2N, cluster, cp,
// group factor, allocation, analytic s, simulated s, error), then the share within 5%
// and 10% and the mean absolute error, per cluster and in all. The planner's choice is
// where its model errs most optimistically (the search finds the errors), so this grid
// measures the model itself; bench/plan/plan_grid.sh measures its choices.
//   bench_plan_model [--quick] [--nic-splits]   (--quick: one model per cluster, 4K only)
#include <disagmoe/plan/adaptive_allocator.hpp>
#include <disagmoe/schedule/plan_oracle.hpp>
#include <disagmoe/spec/presets.hpp>

#include <bench_args.hpp>

#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace {
using namespace disagmoe;

struct Tally {
  int rows = 0, within_5 = 0, within_10 = 0;
  double abs_error = 0;
  void add(double e) {
    ++rows;
    within_5 += std::abs(e) <= 0.05;
    within_10 += std::abs(e) <= 0.10;
    abs_error += std::abs(e);
  }
  void print(const std::string& what) const {
    if (rows == 0) {
      std::printf("# %-12s no allocation fits\n", what.c_str());
      return;
    }
    std::printf(
        "# %-12s %5d allocations: within 5%% %5d (%.1f%%), within 10%% %5d (%.1f%%), mean |error| %.3f\n",
        what.c_str(), rows, within_5, 100.0 * within_5 / rows, within_10, 100.0 * within_10 / rows,
        abs_error / rows);
  }
};

// The first recomputation (none, F, A, both) with which `x` fits; false when none does.
bool fit_recompute(const plan::AnalyticModel& model, plan::Allocation& x) {
  for (const plan::Recompute rc : {plan::Recompute{false, false}, plan::Recompute{false, true},
                                   plan::Recompute{true, false}, plan::Recompute{true, true}}) {
    x.recompute = rc;
    if (model.estimate(x).fits()) return true;
  }
  return false;
}

void run(const std::string& model_name, int seq, const std::string& cluster_name, bool rdma, bool nic_splits,
         Tally& cluster, Tally& all) {
  ModelSpec m = model_preset(model_name);
  m.seq_len = seq;
  const ClusterSpec c = parse_cluster_name(cluster_name);
  for (int group_factor : {1, 2}) {
    for (int cp : {1, 2, 4}) {
      if (seq / cp < 4096) continue;
      plan::PlanOptions o;
      o.m2n_uses_sms = !rdma;
      o.context_parallel = cp;
      o.group_factor = group_factor;
      const plan::AnalyticModel model(m, c, o);
      const double batch_tokens = double(plan::global_batch_of(o, m)) * seq;
      // A's NICs per node: the even split, or every split (--nic-splits).
      const int first_nics = nic_splits ? 1 : c.nics_per_node / 2;
      const int last_nics = nic_splits ? c.nics_per_node - 1 : first_nics;
      for (int p = 1; p <= m.layers; p *= 2) {
        for (int a : {2, 3, 4}) {
          for (int na = first_nics; na <= last_nics; ++na) {
            for (bool fuse : {true, false}) {
              plan::Allocation x{p, a, c.gpus_per_node - a, na, c.nics_per_node - na, {}, fuse, cp, group_factor};
              if (!model.valid(x) || !fit_recompute(model, x)) continue;
              const double analytic = model.estimate(x).step_seconds;
              const schedule::Simulated s = schedule::simulate_plan(model, x);
              const double simulated = schedule::batch_seconds(s, batch_tokens);
              const double error = analytic / simulated - 1;
              std::printf("%s\t%d\t%s\t%s\tcp=%d\tg=%dp\t%s\t%.4f\t%.4f\t%+.1f%%\n", model_name.c_str(), seq,
                          rdma ? "rdma" : "kernel", cluster_name.c_str(), cp, group_factor,
                          model.describe_allocation(x).c_str(), analytic, simulated, 100 * error);
              cluster.add(error);
              all.add(error);
            }
          }
        }
      }
    }
  }
}
}  // namespace

int main(int argc, char** argv) {
  bench::expect_usage(argc, argv, 2,
                      "usage: bench_plan_model [--quick] [--nic-splits]\n"
                      "The planner's analytic step time against the simulator's on a broad grid of\n"
                      "allocations (DeepSeek-MoE-16B, GPT-OSS-120B, Mixtral-8x7B, Qwen3-235B-A22B on 16\n"
                      "nodes at 4K-32K; DeepSeek-MoE-16B, OLMoE-1B-7B, Qwen3-30B-A3B, GPT-OSS-120B on 4\n"
                      "nodes at 4K-16K; kernel and RDMA M2N): one row per allocation, then a summary.\n"
                      "  --quick       one model per cluster at 4K\n"
                      "  --nic-splits  every full split of a node's K NICs (A: 1 to K - 1; default K/2)\n");
  bool quick = false, nic_splits = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    bool* flag = arg == "--quick" ? &quick : arg == "--nic-splits" ? &nic_splits : nullptr;
    if (flag == nullptr || *flag)
      bench::bad_argument(argv[0], "argument " + std::to_string(i), arg, "--quick or --nic-splits, each once");
    *flag = true;
  }
  struct Setting {
    std::string cluster;
    std::vector<std::string> models;
    std::vector<int> lengths;
  };
  const std::vector<Setting> settings =
      quick ? std::vector<Setting>{{"h800x128", {"deepseek-moe-16b"}, {4096}},
                                   {"h800x128:4", {"olmoe-1b-7b"}, {4096}}}
            : std::vector<Setting>{{"h800x128",
                                    {"deepseek-moe-16b", "gpt-oss-120b", "mixtral-8x7b", "qwen3-235b-a22b"},
                                    {4096, 8192, 16384, 32768}},
                                   {"h800x128:4",
                                    {"deepseek-moe-16b", "olmoe-1b-7b", "qwen3-30b-a3b", "gpt-oss-120b"},
                                    {4096, 8192, 16384}}};
  Tally all;
  std::map<std::string, Tally> per_cluster;
  for (bool rdma : {false, true})
    for (const Setting& s : settings)
      for (const std::string& model : s.models)
        for (int seq : s.lengths) run(model, seq, s.cluster, rdma, nic_splits, per_cluster[s.cluster], all);
  for (const auto& [name, t] : per_cluster) t.print(name);
  all.print("all");
}
