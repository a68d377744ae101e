// SPDX-License-Identifier: Apache-2.0
// Plans DeepSeek-MoE-16B, GPT-OSS-120B and Qwen3-235B-A22B on h800x128 at 4K-32K and
// prints, per configuration: the GPU split (attention share of the GPUs used, idle
// GPUs), the NIC split and the NIC bandwidth per GPU of each side, what bounds the
// step, the predicted throughput, and the planning time of the allocator (MILP seed +
// local search) next to its peer in the same run, exhaustive enumeration of every
// allocation with the same model (the MILP's test oracle). Times are the median of
// `repeats` runs, wall clock and CPU time of the measuring thread
// (CLOCK_THREAD_CPUTIME_ID: the VM is shared, wall time is noisy).
// A second table plans the same models with a small global batch, where the
// once-per-step gradient all-reduce (A side: replicated attention, embedding and head;
// F side: shared experts, dense FFN) weighs more per micro-batch: the only A/F traffic
// asymmetry of the model. A third plans two models whose attention outweighs their
// FFN at long sequences, where attention gets more GPUs than FFN.
//   bench_plan [repeats]   (default 3)
#include <disagmoe/plan/adaptive_allocator.hpp>
#include <disagmoe/plan/allocation_enumeration.hpp>
#include <disagmoe/spec/presets.hpp>

#include <bench_args.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

namespace {
using namespace disagmoe;
using namespace disagmoe::plan;
using Clock = std::chrono::steady_clock;

double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
}

struct Times {
  double wall_ms = 0, cpu_ms = 0;
};

// Median wall and median CPU milliseconds of `repeats` calls of f.
template <class F>
Times median_ms(int repeats, F&& f) {
  std::vector<double> wall, cpu;
  for (int r = 0; r < repeats; ++r) {
    const double c0 = thread_cpu_ms();
    const auto t0 = Clock::now();
    f();
    wall.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    cpu.push_back(thread_cpu_ms() - c0);
  }
  std::sort(wall.begin(), wall.end());
  std::sort(cpu.begin(), cpu.end());
  return {wall[wall.size() / 2], cpu[cpu.size() / 2]};
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return in ? a + " " + b + " " + c : "unknown";
}

// Achievable NIC bandwidth per GPU of one side, GB/s (NICs of the side / its GPUs).
double nic_gbps_per_gpu(int nics, int gpus, const ClusterSpec& c) { return double(nics) * c.nic_bandwidth / gpus / 1e9; }

int mismatches = 0;

void row(const char* name, int seq, int global_batch, int repeats, const ClusterSpec& cluster) {
  ModelSpec m = model_preset(name);
  m.seq_len = seq;
  PlanOptions o;
  o.global_batch = global_batch;
  const AdaptiveAllocator alloc(m, cluster, o);
  Plan p;
  Times plan_t;
  try {
    plan_t = median_ms(repeats, [&] { p = alloc.plan(); });
  } catch (const ConfigError& error) {  // e.g. no allocation fits memory (Qwen3-235B 32K)
    std::printf("%-16s %6d %5d no plan: %s\n", name, seq, global_batch, error.what());
    return;
  }
  MilpSeed whole;
  const Times whole_t = median_ms(repeats, [&] { whole = solve_allocation_milp(alloc.model(), {}, false); });
  EnumerationResult e;
  const Times enum_t = median_ms(repeats, [&] { e = enumerate_best_bound(alloc.model()); });
  const int used = p.attention_gpus + p.ffn_gpus, idle = cluster.gpus() - used;
  const double a_share = double(p.attention_gpus) / used;
  // The attention share compute alone would ask for: A seconds / (A + F seconds) of one
  // micro-batch through every layer (efficiencies included, no recomputation).
  const AnalyticModel::PairSums all = alloc.model().pair_sums(1).front();
  const double compute_share = all.attention_s[0] / (all.attention_s[0] + all.routed_s[0] + all.other_s[0]);
  const double a_bw = nic_gbps_per_gpu(p.attention_nics, p.attention_gpus, cluster);
  const double f_bw = nic_gbps_per_gpu(p.ffn_nics, p.ffn_gpus, cluster);
  std::printf(
      "%-16s %6d %5d %3d %4d %4d %4d %6.1f%% %6.1f%% %3d+%d %6.1f %6.1f %5.2fx %-9s %-3s %9.0f %-3s %5ld "
      "%4ld %7.2f %7.2f %7.1f %7.1f %7.1f\n",
      name, seq, p.global_batch, p.allocation.groups, p.attention_gpus, p.ffn_gpus, idle, 100 * a_share,
      100 * compute_share, p.allocation.attention_nics_per_node, p.allocation.ffn_nics_per_node, a_bw, f_bw,
      f_bw / a_bw, std::string(to_string(p.predicted.bottleneck)).c_str(),
      p.ffn_roofline.network_bound() ? "yes" : "no", p.predicted.tokens_per_second,
      plan::to_string(p.allocation.recompute).c_str(), p.milp_nodes, p.evaluations, plan_t.wall_ms,
      plan_t.cpu_ms, whole_t.cpu_ms, enum_t.wall_ms, enum_t.cpu_ms);
  for (const double milp : {p.seed_bound_seconds, whole.bound_seconds})
    if (!(std::abs(milp - e.bound_seconds) <= 1e-6 * e.bound_seconds)) {
      ++mismatches;
      std::printf("  MISMATCH: MILP seed bound %.9g vs enumeration %.9g (%s)\n", milp, e.bound_seconds,
                  alloc.model().describe_allocation(e.best).c_str());
    }
}

void header() {
  std::printf("%-16s %6s %5s %3s %4s %4s %4s %7s %7s %5s %6s %6s %6s %-9s %-3s %9s %-3s %5s %4s %7s %7s %7s %7s %7s\n", "model",
              "seq", "batch", "p", "A", "F", "idle", "A share", "A cmp", "NICs", "A GB/s", "F GB/s", "F/A", "bound", "Fnb",
              "tok/s", "rc", "nodes", "eval", "plan", "plan", "milp", "enum", "enum");
  std::printf("%-16s %6s %5s %3s %4s %4s %4s %7s %7s %5s %6s %6s %6s %-9s %-3s %9s %-3s %5s %4s %7s %7s %7s %7s %7s\n", "", "",
              "seqs", "", "GPUs", "GPUs", "GPUs", "", "share", "A+F", "/GPU", "/GPU", "", "", "", "", "", "milp", "", "wall ms",
              "cpu ms", "whole", "wall ms", "cpu ms");
}
}  // namespace

int main(int argc, char** argv) {
  bench::expect_usage(
      argc, argv, 1,
      "usage: bench_plan [repeats]\n"
      "Plans DeepSeek-MoE-16B, GPT-OSS-120B and Qwen3-235B-A22B on h800x128 at 4K-32K (default batch\n"
      "of 4Mi tokens), then with a 64-sequence batch, then Qwen3-30B-A3B and OLMoE-1B-7B at 16K/32K;\n"
      "prints the GPU and NIC split, NIC bandwidth per GPU of each side, and the planning time\n"
      "(median of `repeats` runs, 1-1000, default 3; wall and thread CPU) next to exhaustive\n"
      "enumeration. Prints MISMATCH when the MILP seed differs from enumeration and then exits\n"
      "with status 1.\n");
  const int repeats = static_cast<int>(bench::positional(argc, argv, 1, "repeats", 1, 1000, 3));
  const ClusterSpec cluster = cluster_preset("h800x128");
  std::printf("cluster %s: %d nodes x %d GPUs, %d NICs of %.0f GB/s per node; median of %d runs; load average %s\n",
              cluster.name.c_str(), cluster.nodes, cluster.gpus_per_node, cluster.nics_per_node,
              cluster.nic_bandwidth / 1e9, repeats, load_average().c_str());
  std::printf("\nDefault batch (%lld tokens per step):\n", static_cast<long long>(kDefaultBatchTokens));
  header();
  for (const char* name : {"deepseek-moe-16b", "gpt-oss-120b", "qwen3-235b-a22b"})
    for (int seq : {4096, 8192, 16384, 32768}) row(name, seq, 0, repeats, cluster);
  std::printf("\nSmall batch (64 sequences per step: the gradient all-reduce weighs more per micro-batch):\n");
  header();
  for (const char* name : {"deepseek-moe-16b", "gpt-oss-120b", "qwen3-235b-a22b"})
    for (int seq : {4096, 32768}) row(name, seq, 64, repeats, cluster);
  std::printf("\nBeyond the issue's grid: models whose attention outweighs their FFN at long sequences (16 Mi-token "
              "batch where 4 Mi tokens leave too few sequences to fill the pipeline):\n");
  header();
  for (const char* name : {"qwen3-30b-a3b", "olmoe-1b-7b"})
    for (int seq : {16384, 32768})
      for (int batch : {0, int((std::int64_t{1} << 24) / seq)}) row(name, seq, batch, repeats, cluster);
  std::printf("\nA share: attention GPUs / GPUs used. A cmp share: the attention share compute alone asks for (A "
              "seconds / (A + F seconds) per micro-batch, efficiencies included). NICs A+F: per node. A, F GB/s/GPU: NIC bandwidth per GPU of the "
              "side; F/A: their ratio. Fnb: FFN intensity below its turning point (network-bound). nodes: MILP "
              "branch-and-bound nodes. milp whole: CPU ms of the MILP alone without the even-split cutoff. eval: oracle calls of the local search.\n");
  std::printf("load average at the end %s; %d mismatches\n", load_average().c_str(), mismatches);
  return mismatches == 0 ? 0 : 1;
}
