// SPDX-License-Identifier: Apache-2.0
// disagmoe-plan: split a cluster between attention and FFN groups for a MoE model
// (MILP seed + local search over the analytic model, then a local search by
// simulation from its choice), explain the result, and say whether to run it or the
// best colocated schedule (both simulated).
//   disagmoe-plan --model qwen3-30b-a3b --cluster h800x128 --seq-len 16384
//   disagmoe-plan --model my_model.json --cluster h100:4 --json --svg roofline.svg
#include <disagmoe/io/spec_json.hpp>
#include <disagmoe/plan/adaptive_allocator.hpp>
#include <disagmoe/plan/plan_json.hpp>
#include <disagmoe/schedule/plan_oracle.hpp>
#include <disagmoe/schedule/recommend.hpp>
#include <disagmoe/schedule/timeline_cost.hpp>
#include <disagmoe/spec/presets.hpp>

#include "../common/cli_main.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>

namespace {
using namespace disagmoe;

void print_table(const plan::AdaptiveAllocator& allocator, const plan::Plan& p) {
  const plan::StepEstimate& e = p.predicted;
  std::printf(
      "%s on %s: seq %d, micro-batch %d, global batch %d sequences, recompute %s, fused combine + dispatch "
      "%s, context parallel %d, ping-pong group %dp\n",
      p.model.name.c_str(), p.cluster.name.c_str(), p.seq_len, p.micro_batch, p.global_batch,
      plan::to_string(p.allocation.recompute).c_str(), p.allocation.fuse ? "on" : "off",
      p.allocation.context_parallel, p.allocation.group_factor);
  if (const plan::Allocation& x = p.allocation; x.mixed_nodes > 0)
    std::printf("GPUs per node: %d attention + %d FFN, on %d mixed nodes %d + %d\n",
                x.attention_gpus_per_node, x.ffn_gpus_per_node, x.mixed_nodes, x.attention_gpus_per_node + 1,
                x.ffn_gpus_per_node - 1);
  const int used = p.attention_gpus + p.ffn_gpus;
  std::printf("%-10s %6s %7s %6s %12s %10s %14s %16s %12s\n", "side", "GPUs", "share", "NICs", "NIC GB/s/GPU",
              "group", "busy ms/mb", "memory GB/GPU", "intensity");
  std::printf("%-10s %6d %6.1f%% %6d %12.1f %10d %14.3f %16.2f %12.0f\n", "attention", p.attention_gpus,
              100.0 * p.attention_gpus / used, p.attention_nics, p.attention_bandwidth_per_gpu / 1e9,
              p.attention_group_size, std::max(e.attention_compute_seconds, e.attention_link_seconds) * 1e3,
              e.memory.attention_worker.total() / 1e9, p.attention_roofline.intensity);
  std::printf("%-10s %6d %6.1f%% %6d %12.1f %10d %14.3f %16.2f %12.0f\n", "ffn", p.ffn_gpus,
              100.0 * p.ffn_gpus / used, p.ffn_nics, p.ffn_bandwidth_per_gpu / 1e9, p.ffn_group_size,
              std::max(e.ffn_compute_seconds, e.ffn_link_seconds) * 1e3, e.memory.ffn_worker.total() / 1e9,
              p.ffn_roofline.intensity);
  std::printf("NIC bandwidth per GPU, FFN / attention: %.2fx\n", p.ffn_bandwidth_per_gpu / p.attention_bandwidth_per_gpu);
  std::printf("groups %d (interleaved, %zu layers in pair 0); stage %.3f ms; analytic step %.3f s; %.0f tokens/s; "
              "bottleneck %s; capacity %.1f GB/GPU; turning point %.0f FLOP/B\n",
              p.allocation.groups, p.layer_groups.front().size(), e.stage_seconds * 1e3, e.step_seconds,
              e.tokens_per_second, std::string(plan::to_string(e.bottleneck)).c_str(), e.memory.capacity / 1e9,
              p.turning_point);
  std::printf("comm kernels' SMs slow compute by %.3fx (attention) and %.3fx (FFN)\n", e.attention_sm_slowdown,
              e.ffn_sm_slowdown);
  std::printf("search: MILP seed %.3f s -> %.3f s after %ld evaluations (gain %.3fx)\n", p.seed_step_seconds,
              p.step_seconds, p.evaluations, p.gain());
  if (const plan::Refinement& r = p.refinement; r.ran) {
    const plan::AnalyticModel& model = allocator.model();
    const auto secs = [](double t) {
      char b[32];
      std::snprintf(b, sizeof b, "%.3f s", t);
      return std::isfinite(t) ? std::string(b) : std::string("cannot run");
    };
    const char* plural = r.evaluations == 1 ? "" : "s";
    std::printf("simulated: the analytic choice (%s): %s; ", model.describe_allocation(r.from).c_str(),
                secs(r.from_step_seconds).c_str());
    if (!(p.allocation == r.from))
      std::printf("moved to %s: %s after %ld simulation%s (gain %.3fx%s)\n",
                  model.describe_allocation(p.allocation).c_str(), secs(r.step_seconds).c_str(), r.evaluations, plural,
                  r.gain(), r.budget_exhausted ? ", budget spent" : "");
    else if (r.budget_exhausted)
      std::printf("no faster allocation found within %ld simulation%s (budget spent)\n", r.evaluations, plural);
    else
      std::printf("no neighbour runs faster (%ld simulation%s)\n", r.evaluations, plural);
  } else if (!r.skipped.empty()) {
    std::printf("simulated: not refined: %s\n", r.skipped.c_str());
  }
  std::printf("%s\n", p.explanation().c_str());
  std::printf("idle GPUs %d; binding constraint (%s): %s\n", p.idle_gpus, p.binding.kind.c_str(),
              p.binding.text.c_str());
}

void print_recommendation(const schedule::Recommendation& r) {
  std::printf(
      "simulated, best layout of each schedule (step: the plan's batch at the simulated rate):\n%-12s %-36s "
      "%10s %8s\n",
      "schedule", "layout", "step ms", "fits");
  for (const auto& s : r.ranked)
    std::printf("%-12s %-36s %10.1f %8s\n", s.schedule.c_str(), s.layout.c_str(), s.step_seconds * 1e3,
                s.fits ? "yes" : "no");
  std::printf("recommendation (%s): %s\n", r.cause.c_str(), r.reason.c_str());
}

io::Json recommendation_json(const schedule::Recommendation& r) {
  io::Json ranked = io::Json::array();
  for (const auto& s : r.ranked)
    ranked.push_back({{"schedule", s.schedule},
                      {"layout", s.layout},
                      {"step_seconds", s.step_seconds},
                      {"fits_memory", s.fits},
                      {"peak_memory_bytes", s.peak_memory_bytes},
                      {"busy_seconds", s.job.busy_seconds},
                      {"exposed_comm_seconds", s.job.exposed_comm_seconds},
                      {"waiting_seconds", s.job.waiting_seconds}});
  return {{"schedule", r.schedule},
          {"layout", r.layout},
          {"step_seconds", r.step_seconds},
          {"runner_up", r.runner_up},
          {"runner_up_layout", r.runner_up_layout},
          {"runner_up_step_seconds", r.runner_up_step_seconds},
          {"speedup", r.speedup},
          {"cause", r.cause},
          {"reason", r.reason},
          {"ranked", ranked}};
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Plan DisagMoE's attention/FFN split of GPUs and NICs for a model on a cluster.", "disagmoe-plan"};
  std::string model_arg, cluster_arg, svg_path;
  int seq_len = 0, micro_batch = 0, global_batch = 0, context_parallel = 0, group_factor = 0;
  bool json = false, rdma_m2n = false, no_recommend = false, embedding_head = false, mixed_splits = false;
  long refine_evaluations = 0;
  double sm_fraction = 0, optimizer_bytes = plan::kDefaultMemory.optimizer_bytes;
  app.add_option("--model", model_arg, "a model preset name or a JSON file")->required();
  app.add_option("--cluster", cluster_arg, "a cluster preset, NAME:NODES, or a JSON file")->required();
  app.add_option("--seq-len", seq_len, "tokens per sequence (default: the model's)");
  app.add_option("--micro-batch", micro_batch, "sequences per micro-batch (default: the model's)");
  app.add_option("--global-batch", global_batch, "sequences per step (default: 4Mi tokens / seq-len)");
  app.add_option("--sm-fraction", sm_fraction,
                 "share of SMs comm kernels hold on both ends of a transfer (default: the cluster's "
                 "kernel_comm_sm_fraction)");
  app.add_flag("--rdma-m2n", rdma_m2n, "M2N/N2M over an RDMA engine (the cluster's rdma_comm_sm_fraction)");
  cli::add_optimizer_bytes(app, optimizer_bytes);
  app.add_flag("--embedding-head", embedding_head,
               "price the embedding (on the first pair) and the output head, vocabulary-parallel over the A "
               "groups, as scheduled ops, and schedule them in every simulation (AF-Pipe and the baselines)");
  app.add_flag(
      "--mixed-splits", mixed_splits,
      "let some nodes give attention one GPU more than the others, so that the attention/FFN ratio can sit "
      "between two splits per node (context parallelism 1 there; default: every node alike)");
  app.add_option(
         "--context-parallel", context_parallel,
         "GPUs of one node that split each sequence of the attention groups, passing keys and values in a "
         "ring (context parallelism); 0: the degree of 1, 2, 4, ... whose plan is fastest (chunks of at "
         "least 4096 tokens)")
      ->capture_default_str();
  app.add_option(
         "--group-factor", group_factor,
         "AF-Pipe's ping-pong group in micro-batch waves per pair: 2 keeps each worker of the ring busy, "
         "1 halves the activations in flight; 0: the faster plan that fits")
      ->capture_default_str();
  app.add_option("--refine-evaluations", refine_evaluations,
                 "simulations the search by simulation from the analytic choice may run (0: the analytic plan; "
                 "default: as many as " + std::to_string(static_cast<long>(schedule::kRefineOps)) +
                     " simulated ops allow, at most " + std::to_string(schedule::kRefineEvaluations) + ")");
  app.add_flag("--no-recommend", no_recommend,
               "skip simulating AF-Pipe's plan against the colocated schedules (no recommendation)");
  app.add_flag("--json", json, "print one JSON object instead of the table");
  app.add_option("--svg", svg_path, "write the roofline chart (SVG) to this file")->check(disagmoe::cli::kPath);
  cli::add_max_memory(app);
  cli::add_max_ops(app);
  // The planner's option names in its errors, as this program's options.
  static constexpr cli::OptionName kPlanOptionNames[] = {{"context_parallel", "--context-parallel"},
                                                         {"global_batch", "--global-batch"}};
  return cli::run_main(app, argc, argv, [&] {
    return cli::in_option_terms(kPlanOptionNames, [&] {
      ModelSpec m = io::load_model(model_arg);
      ClusterSpec c = io::load_cluster(cluster_arg);
      if (app.count("--sm-fraction")) {
        expect_finite_in("--sm-fraction", sm_fraction, 0, 1, true);
        c.kernel_comm_sm_fraction = sm_fraction;
      }
      if (app.count("--seq-len")) {
        expect_in("--seq-len", seq_len, 1, max_size::kSeqLen);
        m.seq_len = seq_len;
      }
      if (app.count("--micro-batch")) {
        expect_in("--micro-batch", micro_batch, 1, max_size::kMicroBatch);
        m.micro_batch = micro_batch;
      }
      if (app.count("--global-batch"))
        expect(global_batch > 0, "--global-batch", global_batch, "a positive number of sequences");
      expect_in("--context-parallel", context_parallel, 0, c.gpus_per_node);
      expect_in("--group-factor", group_factor, 0, 2);
      if (mixed_splits) {
        expect(c.nodes > 1, "--mixed-splits", "(given)",
               "a cluster of more than one node (a mixed split moves GPUs between the sides of some nodes)");
        expect(context_parallel <= 1, "--context-parallel", context_parallel,
               "0 or 1 with --mixed-splits (a mixed split needs the same attention GPUs on every node)");
      }
      cli::expect_optimizer_bytes(optimizer_bytes);
      plan::PlanOptions o;
      o.memory.optimizer_bytes = optimizer_bytes;
      o.global_batch = global_batch;
      o.context_parallel = context_parallel;
      o.group_factor = group_factor;
      o.m2n_uses_sms = !rdma_m2n;
      o.embedding_head = embedding_head;
      o.mixed_splits = mixed_splits;
      const plan::AdaptiveAllocator allocator(m, c, o);
      std::optional<long> refine;
      if (app.count("--refine-evaluations")) {
        expect_in("--refine-evaluations", refine_evaluations, 0L, 1000000L);
        refine = refine_evaluations;
      }
      const char* batch_name = app.count("--global-batch") ? "--global-batch" : cli::kDefaultGlobalBatch;
      if (!no_recommend) {  // before any simulation: the heaviest timeline the recommendation builds
        schedule::CostOptions baselines =
            schedule::cost_options(allocator.model().options(), allocator.model().model(), {});
        baselines.context_parallel = 0;  // each baseline at its fastest degree (schedule::recommend)
        schedule::expect_timeline_fits(
            schedule::ChunkedOverlap::kName, allocator.model().model(), baselines,
            schedule::PolicyKnobs{}.chunks,
            {batch_name, batch_name, "chunks of the chunked baseline (--no-recommend skips it)"});
      }
      const plan::Plan p = schedule::simulated_plan(allocator, refine, {batch_name, batch_name, "--chunks"});
      if (!svg_path.empty()) {
        std::ofstream out(svg_path);
        expect<IoError>(static_cast<bool>(out), "--svg", svg_path, "a writable file");
        out << plan::RooflineModel(allocator.model(), p.allocation)
                   .svg(p.model.name + " on " + p.cluster.name + ", seq " + std::to_string(p.seq_len));
        out.flush();  // a write error of the buffered tail shows only here
        expect<IoError>(static_cast<bool>(out), "--svg", svg_path, "a writable file");
      }
      std::optional<schedule::Recommendation> rec;
      if (!no_recommend) rec = schedule::recommend(allocator.model(), p.allocation);
      if (json) {
        io::Json j = plan::to_json(p);
        if (rec) j["recommendation"] = recommendation_json(*rec);
        std::cout << j.dump(2) << '\n';
      } else {
        print_table(allocator, p);
        if (rec) print_recommendation(*rec);
      }
      return cli::kExitOk;
    });
  });
}
