// SPDX-License-Identifier: Apache-2.0
// The DisagMoE paper's setting in simulation: 16 nodes x 8 H800 (h800x128), three MoE
// models at 4K-32K tokens, AF-Pipe against every baseline schedule, each at its best
// layout found by the simulator. Prints one table per model and the simulator's own
// speed on the largest configuration.
// Usage: bench_sim --help.
#include <disagmoe/schedule/schedules.hpp>
#include <disagmoe/spec/presets.hpp>

#include <common/cli_main.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <string>
#include <vector>

namespace ds = disagmoe::schedule;

namespace {

struct Variant {
  std::string label;
  std::string schedule;
  int chunks;
};

// Tutel: a2a_ffn_overlap_degree of a few chunks (arXiv 2206.03382); Comet: fine-grained
// (tile-level) overlap, its fused GEMM + all-to-all kernels pipelining 16 tiles each
// (arXiv 2502.19811). `chunks`: the chunked schedule's chunks or Comet's tiles.
const std::vector<Variant> kVariants{
    {"afpipe", "afpipe", 1},           {"1f1b", "1f1b", 1},           {"interleaved", "interleaved", 1},
    {"a2a-overlap", "a2a-overlap", 1}, {"tutel(c=4)", "chunked", 4},  {"comet(t=16)", "comet", 16},
    {"dualpipe", "dualpipe", 1},       {"dualpipev", "dualpipev", 1},
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// CPU seconds of the calling thread: on a shared machine wall time also counts other
// processes' turns, this does not (cache and memory-bandwidth contention still show).
double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Options {
  bool quick = false, speed_only = false, rdma_m2n = false, no_speed = false, embedding_head = false;
  std::string only;  // --only LABEL: time that schedule alone
  int reps = 5;      // simulate() calls per schedule in the speed section (median reported)
  std::vector<int> seqs{4096, 8192, 16384, 32768};
  int global_batch = 1024, max_stages = 16;
  double optimizer_bytes = disagmoe::plan::kDefaultMemory.optimizer_bytes;
  std::vector<std::string> models{"deepseek-moe-16b", "gpt-oss-120b", "qwen3-235b-a22b"};
};

int run(Options o) {
  auto& [quick, speed_only, rdma_m2n, no_speed, embedding_head, only, reps, seqs, global_batch, max_stages,
         optimizer_bytes, models] = o;
  disagmoe::cli::expect_optimizer_bytes(optimizer_bytes);
  const auto cluster = disagmoe::cluster_preset("h800x128");
  if (quick) seqs = {4096};
  ds::CostOptions cost;
  cost.global_batch = global_batch;
  cost.memory.optimizer_bytes = optimizer_bytes;
  cost.embedding_head = embedding_head;
  std::printf(
      "cluster %s (%d GPUs), global batch %d sequences, bf16, %g bytes of optimizer state per parameter, "
      "dedup dispatch, SM share of comm %.3f, baseline stages <= %d (each at its best EP degree, DeepEP "
      "dedup), AF M2N on %s, embedding and head %s\n",
      cluster.name.c_str(), cluster.gpus(), global_batch, optimizer_bytes, cluster.kernel_comm_sm_fraction,
      max_stages, rdma_m2n ? "RDMA (no SMs)" : "SMs",
      embedding_head ? "scheduled (AF-Pipe's head vocabulary-parallel)" : "not scheduled");
  const auto t_all = std::chrono::steady_clock::now();
  for (const auto& name : models) {
    for (int seq : seqs) {
      if (speed_only) break;
      auto m = disagmoe::model_preset(name);
      m.seq_len = seq;
      std::map<std::string, ds::Simulated> res;
      for (const auto& v : kVariants) {
        ds::PolicyKnobs k;
        k.chunks = k.tiles = v.chunks;
        k.af_uses_sms = !rdma_m2n;
        // Baselines at each depth up to --max-stages, each at its best EP degree.
        std::string why;  // the last depth's reason when none runs
        for (int st : {1, 2, 4, 8, 16}) {
          if (v.schedule != "afpipe" && st > max_stages) break;
          try {
            auto r = ds::simulate_best(v.schedule, m, cluster, cost, k, v.schedule == "afpipe" ? 0 : st);
            auto it = res.find(v.label);
            // By rate: each depth runs whole waves of its width, so steps carry different tokens.
            const bool better = it == res.end() || (r.fits && !it->second.fits) ||
                                (r.fits == it->second.fits &&
                                 r.result.tokens_per_second > it->second.result.tokens_per_second);
            if (better) res.insert_or_assign(v.label, std::move(r));
          } catch (const disagmoe::ConfigError& e) {
            why = e.what();
          }
          if (v.schedule == "afpipe") break;
        }
        if (!res.count(v.label))
          std::printf("  %s %d %s: no runnable layout (%s)\n", name.c_str(), seq, v.label.c_str(),
                      why.c_str());
      }
      // When no baseline fits memory the comparison is of speed only, so AF-Pipe is
      // compared at its fastest layout too, not at a slower one chosen because it fits.
      bool baseline_fits = false;
      for (const auto& v : kVariants)
        if (v.schedule != "afpipe" && res.count(v.label)) baseline_fits = baseline_fits || res.at(v.label).fits;
      if (!baseline_fits && res.count("afpipe") && res.at("afpipe").fits) {
        ds::CostOptions any = cost;
        any.memory_fraction = 1e12;  // every layout "fits": fastest wins
        ds::PolicyKnobs k;
        k.af_uses_sms = !rdma_m2n;
        try {
          auto r = ds::simulate_best("afpipe", m, cluster, any, k);
          r.fits = r.result.peak_memory_bytes <= cluster.gpu.hbm_bytes * cost.memory_fraction;
          std::printf("  (no baseline fits memory: afpipe row = fastest layout, %s fits %s; it is %.1f ms)\n",
                      res.at("afpipe").layout.c_str(), "memory", res.at("afpipe").result.step_seconds * 1e3);
          res.insert_or_assign("afpipe", std::move(r));
        } catch (const disagmoe::ConfigError&) {
        }
      }
      std::printf("\n%s, seq %d\n%-13s %-30s %10s %8s %7s %10s %8s %5s\n", name.c_str(), seq, "schedule", "best layout",
                  "step ms", "MFU", "bubble", "exp.comm", "mem GB", "fits");
      for (const auto& v : kVariants) {
        const auto it = res.find(v.label);
        if (it == res.end()) continue;
        const auto& r = it->second.result;
        std::printf("%-13s %-30s %10.1f %7.1f%% %6.1f%% %10.1f %8.1f %5s\n", v.label.c_str(), it->second.layout.c_str(),
                    r.step_seconds * 1e3, r.mfu * 100, r.bubble_fraction * 100, r.exposed_comm_seconds * 1e3,
                    r.peak_memory_bytes / 1e9, it->second.fits ? "yes" : "NO");
      }
      if (!res.count("afpipe")) continue;
      // Ratios per token (ds::batch_seconds): each layout's step runs whole waves of its
      // width, so steps of different layouts carry different tokens.
      const auto per_token = [&](const std::string& l, double ds::SimResult::*seconds) {
        return res.count(l) ? res.at(l).result.*seconds / res.at(l).schedule.tokens_per_step : 0.0;
      };
      auto step = [&](const std::string& l) { return per_token(l, &ds::SimResult::step_seconds); };
      auto exposed = [&](const std::string& l) { return per_token(l, &ds::SimResult::exposed_comm_seconds); };
      // Best overlap baseline among those that fit memory; if none fits, among all
      // (marked), so that the ratio is never taken against nothing.
      double best_overlap = 0;
      std::string best_name;
      bool any_fits = false;
      for (const char* l : {"a2a-overlap", "tutel(c=4)", "comet(t=16)", "dualpipe", "dualpipev"})
        any_fits = any_fits || (res.count(l) && res.at(l).fits);
      for (const char* l : {"a2a-overlap", "tutel(c=4)", "comet(t=16)", "dualpipe", "dualpipev"})
        if (res.count(l) && (res.at(l).fits || !any_fits) && (best_name.empty() || step(l) < best_overlap)) {
          best_overlap = step(l);
          best_name = l;
        }
      std::printf("AF-Pipe speedup: %.2fx over interleaved 1F1B, %.2fx over best overlap (%s%s)%s\n",
                  step("interleaved") / step("afpipe"), best_overlap / step("afpipe"), best_name.c_str(),
                  any_fits ? "" : ", none fits memory",
                  res.at("afpipe").fits ? "" : "; AF-Pipe does not fit memory");
      std::printf("AF-Pipe exposed comm vs tutel %+.0f%%, comet %+.0f%%, dualpipe %+.0f%%\n",
                  100 * (exposed("afpipe") / exposed("tutel(c=4)") - 1),
                  100 * (exposed("afpipe") / exposed("comet(t=16)") - 1),
                  100 * (exposed("afpipe") / exposed("dualpipe") - 1));
    }
  }
  const double total = seconds_since(t_all);
  if (no_speed) {
    std::printf("\ntotal benchmark time %.1f s\n", total);
    return 0;
  }
  // Simulator speed: one step of the largest configuration (Qwen3-235B, 32K). No layout
  // of any schedule fits memory there (table 1's last row), so each schedule runs at its
  // fastest layout, as in the table; AF-Pipe is also timed at the layout the fits-first
  // search picks (1 A GPU per node: 1024 micro-batches). Each is re-simulated 5 times;
  // median reported.
  const auto t_speed = std::chrono::steady_clock::now();
  ds::CostOptions fastest = cost;
  fastest.memory_fraction = 1e12;  // every layout "fits": the fastest wins
  auto m = disagmoe::model_preset("qwen3-235b-a22b");
  m.seq_len = seqs.back();
  std::printf("\nsimulator speed, %s seq %d on %s (median of %d simulate() calls, build excluded; "
              "wall and CPU time of this thread)\n",
              m.name.c_str(), m.seq_len, cluster.name.c_str(), reps);
  if (double la[3]; getloadavg(la, 3) == 3)
    std::printf("load average %.2f %.2f %.2f (the machine is shared; compare CPU ms)\n", la[0], la[1], la[2]);
  std::printf("%-13s %-28s %8s %10s %10s %12s\n", "schedule", "layout", "ops", "wall ms", "CPU ms", "CPU ns/op");
  std::vector<std::pair<Variant, const ds::CostOptions*>> cases;
  for (const auto& v : kVariants) cases.emplace_back(v, &fastest);
  cases.emplace_back(Variant{"afpipe(fits)", "afpipe", 1}, &cost);
  for (const auto& [v, co] : cases) {
    if (!only.empty() && v.label != only) continue;  // time one schedule (profiling)
    ds::PolicyKnobs k;
    k.chunks = k.tiles = v.chunks;
    ds::Simulated s;
    try {
      s = ds::simulate_best(v.schedule, m, cluster, *co, k);
    } catch (const disagmoe::ConfigError& e) {  // e.g. a timeline over the work budget
      std::printf("%-13s not timed: %s\n", v.label.c_str(), e.what());
      continue;
    }
    std::vector<double> wall, cpu;
    for (int i = 0; i < reps; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      const double c0 = thread_cpu_seconds();
      const auto r = ds::simulate(s.schedule);
      cpu.push_back(thread_cpu_seconds() - c0);
      wall.push_back(seconds_since(t0));
      if (r.deadlocked) return 1;
    }
    const double w = median(wall), c = median(cpu);
    std::printf("%-13s %-28s %8zu %10.2f %10.2f %12.1f\n", v.label.c_str(), s.layout.c_str(), s.schedule.ops.size(),
                w * 1e3, c * 1e3, c * 1e9 / double(s.schedule.ops.size()));
  }
  std::printf("\ntotal benchmark time %.1f s (speed section %.1f s)\n", total + seconds_since(t_speed),
              seconds_since(t_speed));
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::vector<std::string> labels{"afpipe(fits)"};
  for (const auto& v : kVariants) labels.push_back(v.label);
  CLI::App app{
      "AF-Pipe against every baseline schedule on 16 nodes x 8 H800 (h800x128), each at its best "
      "layout found by the simulator, for three MoE models at 4K-32K tokens; then the simulator's own "
      "speed on the largest configuration (Qwen3-235B, 32K). See bench/RESULTS.md.",
      "bench_sim"};
  CLI::Option* quick = app.add_flag("--quick", o.quick, "4K tokens only");
  CLI::Option* speed = app.add_flag("--speed", o.speed_only, "only the simulator-speed section");
  app.add_flag("--no-speed", o.no_speed, "skip the simulator-speed section")->excludes(speed);
  app.add_flag("--rdma-m2n", o.rdma_m2n, "AF-Pipe's M2N transfers on an RDMA engine that takes no SMs");
  disagmoe::cli::add_optimizer_bytes(app, o.optimizer_bytes);
  app.add_flag(
      "--embedding-head", o.embedding_head,
      "schedule the embedding and the output head in every schedule (AF-Pipe's head vocabulary-parallel "
      "over its A groups)");
  app.add_option("--only", o.only, "time this schedule alone in the speed section (profiling)")
      ->check(CLI::IsMember(labels));
  app.add_option("--reps", o.reps, "simulate() calls per schedule in the speed section (median reported)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--global-batch", o.global_batch, "sequences per step")->check(CLI::Range(1, 1 << 20));
  app.add_option("--max-stages", o.max_stages, "deepest pipeline the baselines try")
      ->check(CLI::IsMember({1, 2, 4, 8, 16}));
  app.add_option_function<int>(
         "--seq", [&](int v) { o.seqs = {v}; },
         "one sequence length instead of 4K-32K (also the speed section's)")
      ->check(CLI::Range(1, 1 << 20))
      ->excludes(quick);
  app.add_option_function<std::string>(
         "--model", [&](const std::string& v) { o.models = {v}; },
         "one model preset instead of three (the tables; the speed section times Qwen3-235B)")
      ->check(CLI::IsMember(disagmoe::model_preset_names()));
  return disagmoe::cli::run_main(app, argc, argv, [&] { return run(o); });
}
