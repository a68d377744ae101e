// SPDX-License-Identifier: Apache-2.0
// Plans DeepSeek-MoE-16B, GPT-OSS-120B and Qwen3-235B-A22B on h800x128 at 4K-32K and
// prints, per configuration: the attention share of GPUs, the NIC split, what bounds
// the step, the predicted throughput, and the planning time of the allocator (MILP
// seed + local search) next to its peer in the same run, exhaustive enumeration of
// every allocation with the same model (the MILP's test oracle).
//   bench_plan [repeats]   (default 3; the median time is printed)
#include <disagmoe/plan/adaptive_allocator.hpp>
#include <disagmoe/spec/presets.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {
using namespace disagmoe;
using namespace disagmoe::plan;
using Clock = std::chrono::steady_clock;

template <class F>
double median_ms(int repeats, F&& f) {
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::max(1, std::atoi(argv[1])) : 3;
  const ClusterSpec cluster = cluster_preset("h800x128");
  std::printf("cluster %s: %d GPUs, %d NICs; default batch %lld tokens; median of %d runs\n", cluster.name.c_str(),
              cluster.gpus(), cluster.nics(), static_cast<long long>(kDefaultBatchTokens), repeats);
  std::printf("%-17s %6s %3s %9s %9s %9s %8s %-9s %8s %10s %6s %5s %9s %9s %6s\n", "model", "seq", "p", "A GPUs",
              "A share", "F NIC sh", "F NIC/GPU", "bound", "F netbd", "tok/s", "rc", "evals", "plan ms", "enum ms",
              "ratio");
  for (const char* name : {"deepseek-moe-16b", "gpt-oss-120b", "qwen3-235b-a22b"}) {
    for (int seq : {4096, 8192, 16384, 32768}) {
      ModelSpec m = model_preset(name);
      m.seq_len = seq;
      const AdaptiveAllocator alloc(m, cluster);
      Plan p;
      const double plan_ms = median_ms(repeats, [&] { p = alloc.plan(); });
      EnumerationResult e;
      const double enum_ms = median_ms(repeats, [&] { e = enumerate_best_bound(alloc.model()); });
      const double a_share = double(p.attention_gpus) / (p.attention_gpus + p.ffn_gpus);
      const double f_nic_share = double(p.ffn_nics) / (p.attention_nics + p.ffn_nics);
      // NIC bandwidth per F GPU relative to per A GPU.
      const double per_gpu = (double(p.ffn_nics) / p.ffn_gpus) / (double(p.attention_nics) / p.attention_gpus);
      const bool f_net = p.ffn_roofline.network_bound();
      std::printf("%-17s %6d %3d %9d %8.1f%% %8.1f%% %8.2fx %-9s %8s %10.0f %6s %5ld %9.1f %9.1f %5.2fx\n", name, seq,
                  p.allocation.groups, p.attention_gpus, 100 * a_share, 100 * f_nic_share, per_gpu,
                  std::string(to_string(p.predicted.bottleneck)).c_str(), f_net ? "yes" : "no",
                  p.predicted.tokens_per_second, p.allocation.recompute ? "on" : "off", p.evaluations, plan_ms,
                  enum_ms, enum_ms / plan_ms);
      if (!(std::abs(p.seed_bound_seconds - e.bound_seconds) <= 1e-6 * e.bound_seconds))
        std::printf("  MISMATCH: MILP seed bound %.9g vs enumeration %.9g\n", p.seed_bound_seconds, e.bound_seconds);
    }
  }
  std::printf("A share: attention GPUs / used GPUs. F NIC sh: FFN NICs / used NICs. F NIC/GPU: NIC bandwidth per FFN "
              "GPU over that per attention GPU. F netbd: FFN intensity below its turning point. ratio: enum ms / plan "
              "ms.\n");
}
