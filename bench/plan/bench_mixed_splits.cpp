// SPDX-License-Identifier: Apache-2.0
// What mixed per-node splits (plan::Allocation::mixed_nodes) buy: for every setting the
// planner's analytic plan with every node split alike (the default) and with mixed nodes
// allowed (PlanOptions::mixed_splits, disagmoe-plan --mixed-splits), both simulated (simulate_plan, at the simulated rate over
// the plan's batch). One row per setting (tab-separated: cluster, model, seq_len, uniform
// plan, its simulated s, the plan with mixed splits allowed, its simulated s, analytic
// gain, simulated gain), then how many plans mix and their simulated gains.
//   bench_mixed_splits [--quick]   (--quick: GPT-OSS-120B on 8 nodes only)
#include <disagmoe/plan/adaptive_allocator.hpp>
#include <disagmoe/schedule/plan_oracle.hpp>
#include <disagmoe/spec/presets.hpp>

#include <bench_args.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {
using namespace disagmoe;

struct Planned {
  plan::Plan plan;
  double simulated = 0;
};

Planned plan_and_simulate(const ModelSpec& m, const ClusterSpec& c, bool mixed) {
  plan::PlanOptions o;
  o.context_parallel = 0;  // auto, as disagmoe-plan
  o.group_factor = 0;
  o.mixed_splits = mixed;
  const plan::AdaptiveAllocator allocator(m, c, o);
  Planned r{allocator.plan(), 0};
  const double tokens = double(r.plan.global_batch) * m.seq_len;
  r.simulated =
      schedule::batch_seconds(schedule::simulate_plan(allocator.model(), r.plan.allocation), tokens);
  return r;
}
}  // namespace

int main(int argc, char** argv) {
  bench::expect_usage(argc, argv, 1,
                      "usage: bench_mixed_splits [--quick]\n"
                      "The planner's analytic plan with every node split alike and with mixed per-node\n"
                      "splits allowed, both simulated, for DeepSeek-MoE-16B, GPT-OSS-120B, Mixtral-8x7B,\n"
                      "Qwen3-30B-A3B, OLMoE-1B-7B and Qwen3-235B-A22B at 4K-16K on 4, 8 and 16 nodes of\n"
                      "h800x128: one row per setting, then a summary.\n"
                      "  --quick  GPT-OSS-120B on 8 nodes only\n");
  const bool quick = argc > 1;
  if (quick && std::strcmp(argv[1], "--quick") != 0)
    bench::bad_argument(argv[0], "argument 1", argv[1], "--quick or nothing");
  const std::vector<std::string> clusters =
      quick ? std::vector<std::string>{"h800x128:8"}
            : std::vector<std::string>{"h800x128:4", "h800x128:8", "h800x128"};
  const std::vector<std::string> models =
      quick ? std::vector<std::string>{"gpt-oss-120b"}
            : std::vector<std::string>{"deepseek-moe-16b", "gpt-oss-120b", "mixtral-8x7b",
                                       "qwen3-30b-a3b",    "olmoe-1b-7b",  "qwen3-235b-a22b"};
  int settings = 0, mixing = 0;
  double best_gain = 0, worst_gain = 1e30;
  for (const std::string& cluster : clusters)
    for (const std::string& name : models)
      for (int seq : {4096, 8192, 16384}) {
        ModelSpec m = model_preset(name);
        m.seq_len = seq;
        const ClusterSpec c = parse_cluster_name(cluster);
        try {
          const Planned u = plan_and_simulate(m, c, false), x = plan_and_simulate(m, c, true);
          const plan::AnalyticModel model(m, c, {});  // for describe_allocation only
          const double analytic = u.plan.step_seconds / x.plan.step_seconds,
                       simulated = u.simulated / x.simulated;
          std::printf("%s\t%s\t%d\t%s\t%.3f\t%s\t%.3f\t%.3f\t%.3f\n", cluster.c_str(), name.c_str(), seq,
                      model.describe_allocation(u.plan.allocation).c_str(), u.simulated,
                      model.describe_allocation(x.plan.allocation).c_str(), x.simulated, analytic, simulated);
          ++settings;
          if (x.plan.allocation.mixed_nodes > 0) {
            ++mixing;
            best_gain = std::max(best_gain, simulated);
            worst_gain = std::min(worst_gain, simulated);
          }
        } catch (const ConfigError& e) {
          std::printf("%s\t%s\t%d\tno plan: %s\n", cluster.c_str(), name.c_str(), seq, e.what());
        }
      }
  std::printf("# %d settings planned; %d plans mix", settings, mixing);
  if (mixing > 0) std::printf(", simulated gain over the uniform plan %.3fx to %.3fx", worst_gain, best_gain);
  std::printf("\n");
}
