// SPDX-License-Identifier: Apache-2.0
// disagmoe-sim: simulate one training step of AF-Pipe or a baseline schedule for a
// model on a cluster, print the metrics (or JSON), and write the timeline.
//
//   disagmoe-sim --model qwen3-235b-a22b --cluster h800x128 --schedule afpipe --seq-len 8192
//     --trace afpipe.json --svg afpipe.svg
//   disagmoe-sim --model gpt-oss-120b --cluster h800x128 --compare
#include <common/cli_main.hpp>

#include <disagmoe/io/chrome_trace.hpp>
#include <disagmoe/io/spec_json.hpp>
#include <disagmoe/io/svg_gantt.hpp>
#include <disagmoe/plan/adaptive_allocator.hpp>
#include <disagmoe/plan/plan_json.hpp>
#include <disagmoe/schedule/plan_oracle.hpp>
#include <disagmoe/schedule/schedules.hpp>
#include <disagmoe/schedule/side_metrics.hpp>
#include <disagmoe/schedule/timeline_cost.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

namespace ds = disagmoe::schedule;
using nlohmann::json;

namespace {

// The planner's allocation (plan::AdaptiveAllocator: MILP seed + local search, then the
// search by simulation, as disagmoe-plan makes it) under the options this run simulates
// with (batch, deduplication, M2N transport, embedding and head). The search by
// simulation runs the planner's micro-batches and ping-pong group, so `refine` is false
// when this run sets its own.
disagmoe::plan::Allocation planned_allocation(const disagmoe::ModelSpec& m, const disagmoe::ClusterSpec& c,
                                              const ds::CostOptions& cost, const ds::PolicyKnobs& knobs,
                                              bool refine) {
  disagmoe::plan::PlanOptions o = ds::plan_options(cost, knobs);
  o.group_factor = 0;  // the planner's choice of ping-pong group (plan::resolve_automatic)
  const disagmoe::plan::AdaptiveAllocator allocator(m, c, o);
  return ds::simulated_plan(allocator, refine ? std::nullopt : std::optional<long>(0)).allocation;
}

// Idle seconds by what the worker waits for (schedule/idle_causes.hpp).
json idle_json(const ds::IdleCauses& c) {
  return {{"network_seconds", c.network_seconds},
          {"latency_seconds", c.latency_seconds},
          {"peer_compute_seconds", c.peer_compute_seconds},
          {"other_seconds", c.other_seconds}};
}

json worker_json(const ds::Worker& w, const ds::WorkerMetrics& m, const ds::IdleCauses& idle) {
  return {{"name", w.name},
          {"role", std::string(ds::to_string(w.role))},
          {"gpus", w.gpus},
          {"compute_seconds", m.compute_seconds},
          {"busy_fraction", m.busy_fraction},
          {"bubble_fraction", m.bubble_fraction},
          {"comm_seconds", m.comm_seconds},
          {"exposed_comm_seconds", m.exposed_comm_seconds},
          {"idle", idle_json(idle)},
          {"peak_activation_bytes", m.peak_activation_bytes},
          {"peak_memory_bytes", m.peak_memory_bytes}};
}

json side_json(const ds::SideTime& t) {
  return {{"gpus", t.gpus},
          {"busy_seconds", t.busy_seconds},
          {"exposed_comm_seconds", t.exposed_comm_seconds},
          {"waiting_seconds", t.waiting_seconds},
          {"idle", idle_json(t.idle)}};
}

json result_json(const ds::Simulated& s, const disagmoe::ModelSpec& m, const disagmoe::ClusterSpec& c) {
  const auto& r = s.result;
  const std::vector<ds::IdleCauses> idle = ds::idle_causes(s.schedule, r);
  const ds::SideBreakdown sides = ds::side_breakdown(s.schedule, r, idle);
  json by_side = json::object();
  if (sides.attention.gpus > 0) by_side["attention"] = side_json(sides.attention);
  if (sides.ffn.gpus > 0) by_side["ffn"] = side_json(sides.ffn);
  if (sides.colocated.gpus > 0) by_side["colocated"] = side_json(sides.colocated);
  json workers = json::array();
  for (std::size_t w = 0; w < s.schedule.workers.size(); ++w)
    workers.push_back(worker_json(s.schedule.workers[w], r.workers[w], idle[w]));
  int mb = 0;
  for (const auto& op : s.schedule.ops) mb = std::max(mb, op.micro_batch + 1);
  return {{"schedule", s.schedule.name},
          {"model", m.name},
          {"cluster", c.name},
          {"seq_len", m.seq_len},
          {"layout", s.layout},
          {"micro_batches", mb},
          {"tokens_per_step", s.schedule.tokens_per_step},
          {"step_seconds", r.step_seconds},
          {"tokens_per_second", r.tokens_per_second},
          {"mfu", r.mfu},
          {"exposed_comm_seconds", r.exposed_comm_seconds},
          {"bubble_fraction", r.bubble_fraction},
          {"max_worker_compute_seconds", r.max_worker_compute_seconds},
          {"lower_bound_seconds", r.lower_bound_seconds},
          {"peak_activation_bytes", r.peak_activation_bytes},
          {"peak_memory_bytes", r.peak_memory_bytes},
          {"fits_memory", s.fits},
          {"deadlocked", r.deadlocked},
          {"workers", workers},
          {"sides", by_side},
          {"ops", r.ops}};
}

// `ref`: the first row's tokens/s. Rows compare by rate: each layout runs whole waves of
// its width, so steps can carry different tokens (ds::batch_seconds).
void print_row(const ds::Simulated& s, double ref) {
  const auto& r = s.result;
  std::printf("%-12s %-36s %10.1f %12.0f %6.1f%% %7.1f%% %10.1f %8.1f %6.2fx%s\n", s.schedule.name.c_str(),
              s.layout.c_str(), r.step_seconds * 1e3, r.tokens_per_second, r.mfu * 100,
              r.bubble_fraction * 100, r.exposed_comm_seconds * 1e3, r.peak_memory_bytes / 1e9,
              ref > 0 ? r.tokens_per_second / ref : 1.0, s.fits ? "" : "  (exceeds HBM)");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Simulate one training step of AF-Pipe or a baseline schedule in virtual time", "disagmoe-sim"};
  std::string model = "deepseek-moe-16b", cluster = "h800x128", schedule = "afpipe", plan_file, trace, svg;
  int seq_len = 0, micro_batches = 0, global_batch = 0, micro_batch = 0, stages = 0, context_parallel = 0;
  int groups = 0, attention_gpus = 0, ffn_gpus = 0, attention_nics = -1, ffn_nics = -1, mixed_nodes = 0;
  bool as_json = false, compare = false, no_dedup = false, search_layout = false, rdma_m2n = false;
  double sm_fraction = -1, optimizer_bytes = disagmoe::plan::kDefaultMemory.optimizer_bytes;
  ds::PolicyKnobs knobs;
  ds::CostOptions cost;
  app.add_option("--model", model, "model preset or JSON file")->capture_default_str();
  app.add_option("--cluster", cluster, "cluster preset, NAME:NODES or JSON file")->capture_default_str();
  app.add_option("--schedule", schedule,
                 "afpipe|1f1b|interleaved|a2a-overlap|chunked|comet|dualpipe|dualpipev")
      ->capture_default_str();
  app.add_flag("--compare", compare, "simulate every schedule and print a comparison table");
  app.add_option("--plan", plan_file,
                 "plan JSON (disagmoe-plan --json, or plan::Allocation fields) giving AF-Pipe's A/F split, "
                 "fusion and each side's recomputation (default: the planner's allocation)")
      ->check(disagmoe::cli::kPath);
  app.add_flag("--search-layout", search_layout, "AF-Pipe: search the A/F split with the simulator instead of the planner");
  app.add_option("--seq-len", seq_len, "tokens per sequence (default: the model's)");
  app.add_option("--micro-batch", micro_batch, "sequences per GPU micro-batch (default: the model's)");
  app.add_option("--global-batch", global_batch,
                 "sequences per step (sets micro-batches per schedule; default: the planner's, 4Mi tokens / seq-len, "
                 "or the plan's with --plan)");
  app.add_option("--micro-batches", micro_batches, "pipeline micro-batches per step (overrides --global-batch)");
  app.add_option("--stages", stages, "pipeline stages of the baselines (default: best of 1,2,4,8,16)");
  app.add_option("--virtual-stages", knobs.virtual_stages,
                 "model chunks per stage (interleaved, a2a-overlap, chunked, comet)")
      ->capture_default_str();
  app.add_option("--chunks", knobs.chunks, "FFN/all-to-all chunks per MoE layer (chunked)")->capture_default_str();
  app.add_option("--tiles", knobs.tiles, "tiles each fused GEMM + all-to-all kernel pipelines (comet)")
      ->capture_default_str();
  app.add_option("--af-group-size", knobs.af_group_size, "AF-Pipe micro-batches per ping-pong group (0: auto)");
  app.add_option("--groups", groups, "AF-Pipe A/F group pairs (with --attention-gpus/--ffn-gpus)");
  app.add_option("--attention-gpus", attention_gpus, "AF-Pipe attention GPUs per node");
  app.add_option("--ffn-gpus", ffn_gpus, "AF-Pipe FFN GPUs per node");
  app.add_option("--attention-nics", attention_nics, "AF-Pipe attention NICs per node (default: proportional)");
  app.add_option("--ffn-nics", ffn_nics, "AF-Pipe FFN NICs per node (default: the rest)");
  app.add_option(
      "--mixed-nodes", mixed_nodes,
      "AF-Pipe nodes that move one GPU from FFN to attention (a multiple of --groups, which must divide "
      "the nodes; default 0: every node alike)");
  app.add_option("--sm-fraction", sm_fraction,
                 "share of SMs comm kernels (NCCL, DeepEP-like) hold on both ends of a transfer (default: the "
                 "cluster's kernel_comm_sm_fraction)");
  app.add_flag("--rdma-m2n", rdma_m2n,
               "AF-Pipe's M2N/N2M over an RDMA engine (the cluster's rdma_comm_sm_fraction) instead of kernels");
  disagmoe::cli::add_optimizer_bytes(app, optimizer_bytes);
  app.add_flag(
      "--embedding-head", cost.embedding_head,
      "schedule the embedding and output head as ops: on the first and last stage, AF-Pipe's embedding on "
      "its first A group and its head vocabulary-parallel over all of them (default: a plan's)");
  app.add_option(
      "--context-parallel", context_parallel,
      "GPUs of one node that split each sequence, passing keys and values in a ring (context "
      "parallelism), for every schedule (default: AF-Pipe on a plan at the plan's, --plan's or the "
      "planner's, every other run at its fastest of 1, 2, 4, ... with chunks of at least 4096 tokens)");
  app.add_flag("--no-dedup", no_dedup, "send one row per chosen expert instead of one per destination GPU");
  app.add_flag("--json", as_json, "print one JSON object");
  app.add_option("--trace", trace, "write the timeline as Chrome trace JSON (Perfetto)")->check(disagmoe::cli::kPath);
  app.add_option("--svg", svg, "write the timeline as an SVG Gantt chart")->check(disagmoe::cli::kPath);

  disagmoe::cli::add_max_memory(app);
  disagmoe::cli::add_max_ops(app);

  return disagmoe::cli::run_main(app, argc, argv, [&] {
    namespace dz = disagmoe;
    if (!compare) ds::check_schedule_name(schedule);
    const bool af_mode = compare || schedule == "afpipe";
    const bool virtual_mode = compare || schedule == "interleaved" || schedule == "a2a-overlap" ||
                              schedule == "chunked" || schedule == "comet";
    const bool chunk_mode = compare || schedule == "chunked";
    const bool tile_mode = compare || schedule == "comet";
    // Options that shape one schedule only are errors for the others.
    using dz::cli::expect_applies;
    for (const char* o : {"--plan", "--search-layout", "--af-group-size", "--groups", "--attention-gpus",
                          "--ffn-gpus", "--attention-nics", "--ffn-nics", "--mixed-nodes", "--rdma-m2n"})
      expect_applies(app, o, af_mode, "to be given only with --schedule afpipe or --compare");
    expect_applies(app, "--virtual-stages", virtual_mode,
                   "to be given only with --schedule interleaved, a2a-overlap, chunked, comet or --compare");
    expect_applies(app, "--chunks", chunk_mode, "to be given only with --schedule chunked or --compare");
    expect_applies(app, "--tiles", tile_mode, "to be given only with --schedule comet or --compare");
    expect_applies(app, "--stages", compare || schedule != "afpipe", "to be given only with a baseline or --compare");
    dz::expect(!(app.count("--plan") && app.count("--search-layout")), "--search-layout", "(given)",
               "either --plan or --search-layout, not both");

    dz::ModelSpec m = dz::io::load_model(model);
    dz::ClusterSpec c = dz::io::load_cluster(cluster);
    if (app.count("--seq-len")) m.seq_len = seq_len;
    std::optional<dz::io::Json> plan_json;
    if (!plan_file.empty()) {
      plan_json = dz::io::read_json_file(plan_file);
      // The plan's micro-batch, batch and optimizer state, unless given here (one
      // conversion: the step the plan predicted is the step simulated); when present, in
      // range like the options.
      auto take = [&](const char* key, const char* option, auto& value) {
        if (app.count(option) || !plan_json->is_object() || !plan_json->contains(key)) return false;
        dz::io::detail::read_value(plan_json->at(key), plan_file + ":$." + key, value);
        return true;
      };
      constexpr int kMax = std::numeric_limits<int>::max();
      if (take("micro_batch", "--micro-batch", micro_batch))
        dz::expect_in("--plan micro_batch", micro_batch, 1, kMax);
      if (take("global_batch", "--global-batch", global_batch))
        dz::expect_in("--plan global_batch", global_batch, 1, kMax);
      if (take("optimizer_bytes", "--optimizer-bytes", optimizer_bytes))
        dz::cli::expect_optimizer_bytes(optimizer_bytes, "--plan optimizer_bytes");
      take("embedding_head", "--embedding-head", cost.embedding_head);
      // The SMs the plan gave the comm kernels (disagmoe-plan --sm-fraction), unless given
      // here: part of the cluster the plan saved and is checked against.
      if (!app.count("--sm-fraction") && plan_json->is_object() && plan_json->contains("cluster_spec") &&
          plan_json->at("cluster_spec").is_object() &&
          plan_json->at("cluster_spec").contains("kernel_comm_sm_fraction")) {
        const std::string at = plan_file + ":$.cluster_spec.kernel_comm_sm_fraction";
        dz::io::detail::read_value(plan_json->at("cluster_spec").at("kernel_comm_sm_fraction"), at,
                                   c.kernel_comm_sm_fraction);
        dz::expect_finite_in(at, c.kernel_comm_sm_fraction, 0, 1, true);
      }
    }
    if (app.count("--micro-batch") || micro_batch != 0) m.micro_batch = micro_batch;
    dz::validate(m, "--model");
    if (app.count("--sm-fraction")) {
      // Below 1: compute under kernels that hold every SM would never finish.
      dz::expect_finite_in("--sm-fraction", sm_fraction, 0, 1, true);
      c.kernel_comm_sm_fraction = sm_fraction;
    }
    knobs.af_uses_sms = !rdma_m2n;
    // A plan's batch was checked where it was read (take).
    if (app.count("--global-batch"))
      dz::expect_in("--global-batch", global_batch, 1, std::numeric_limits<int>::max());
    if (global_batch == 0) global_batch = disagmoe::plan::default_global_batch(m);
    dz::expect_in("--micro-batches", micro_batches, 0, std::numeric_limits<int>::max());
    dz::expect_in("--stages", stages, 0, c.gpus());
    if (app.count("--virtual-stages")) dz::expect_in("--virtual-stages", knobs.virtual_stages, 1, m.layers);
    dz::expect_in("--chunks", knobs.chunks, 1, 1024);
    dz::expect_in("--tiles", knobs.tiles, 1, 1 << 20);
    dz::expect_in("--af-group-size", knobs.af_group_size, 0, std::numeric_limits<int>::max());
    cost.global_batch = global_batch;
    cost.micro_batches = micro_batches;
    cost.dedup = !no_dedup;
    if (app.count("--optimizer-bytes")) dz::cli::expect_optimizer_bytes(optimizer_bytes);
    cost.memory.optimizer_bytes = optimizer_bytes;
    const bool cp_given = app.count("--context-parallel") > 0;
    if (cp_given) {
      dz::expect_in("--context-parallel", context_parallel, 1, c.gpus_per_node);
      disagmoe::plan::expect_context_parallel_fits("--context-parallel", context_parallel, m);
    }
    // Context parallelism: as given, else each schedule's best (0), except AF-Pipe on a
    // plan (--plan's or the planner's), which runs at the plan's degree.
    cost.context_parallel = cp_given ? context_parallel : 0;
    int af_context_parallel = cost.context_parallel;
    // Every timeline's cost before any is built, named by this program's options.
    const bool batch_from_plan =
        !app.count("--global-batch") && plan_json && plan_json->is_object() && plan_json->contains("global_batch");
    const char* batch_name = batch_from_plan               ? "--plan global_batch"
                             : app.count("--global-batch") ? "--global-batch"
                                                           : dz::cli::kDefaultGlobalBatch;
    for (auto n : ds::kScheduleNames)
      if (compare || n == schedule)
        ds::expect_timeline_fits(n, m, cost, knobs.chunks, {batch_name, "--micro-batches", "--chunks"});
    std::optional<ds::AfLayout> af;
    // The plan's recomputation (--plan's or the planner's), for AF-Pipe on its layout
    // only: the baselines, and a search for another A/F split, choose their own.
    dz::plan::Recompute af_recompute{};
    // AF-Pipe's settings from a plan: recomputation, stage alignment, context-parallel
    // degree and ping-pong group, the last two unless given here.
    const auto adopt = [&](const dz::plan::Allocation& pa) {
      af_recompute = pa.recompute;
      knobs.af_fuse = pa.fuse;
      if (!cp_given) af_context_parallel = pa.context_parallel;
      if (!app.count("--af-group-size")) knobs.af_group_size = pa.group_factor * pa.groups;
      return ds::af_layout(pa);
    };
    if (plan_json)  // a plan is only valid for the model, cluster and sequence length it was made for
      af = adopt(dz::plan::allocation_from_json(*plan_json, m, c, plan_file + ":$"));
    for (const char* o : {"--attention-nics", "--ffn-nics", "--mixed-nodes"})
      expect_applies(app, o, app.count("--groups") > 0, "to be given only with --groups");
    if (app.count("--groups") || app.count("--attention-gpus") || app.count("--ffn-gpus")) {
      dz::expect(groups >= 1 && attention_gpus >= 1 && ffn_gpus >= 1, "--groups", groups,
                 "--groups, --attention-gpus and --ffn-gpus all given and positive");
      dz::expect(plan_file.empty(), "--groups", groups, "either --plan or --groups, not both");
      dz::expect_in("--groups", groups, 1, c.gpus());
      dz::expect_in("--attention-gpus", attention_gpus, 1, c.gpus_per_node);
      dz::expect_in("--ffn-gpus", ffn_gpus, 1, c.gpus_per_node);
      if (app.count("--attention-nics")) dz::expect_in("--attention-nics", attention_nics, 0, c.nics_per_node);
      if (app.count("--ffn-nics")) dz::expect_in("--ffn-nics", ffn_nics, 0, c.nics_per_node);
      dz::expect_in("--mixed-nodes", mixed_nodes, 0, c.nodes - 1);
      const int na = attention_nics >= 0 ? attention_nics
                                         : std::max(1, c.nics_per_node * attention_gpus / c.gpus_per_node);
      const int nf = ffn_nics >= 0 ? ffn_nics : c.nics_per_node - na;
      af = ds::AfLayout{groups, attention_gpus, ffn_gpus, c.nodes > 1 ? na : 0, c.nodes > 1 ? nf : 0};
      af->mixed_nodes = mixed_nodes;
    }
    // Notes on fallbacks, printed once a step was simulated: an error stays one line.
    std::vector<std::string> notes;
    std::optional<ds::AfLayout> planned;
    if (!af && !search_layout && af_mode) {
      try {
        const bool planners_run = micro_batches == 0 && knobs.af_group_size == 0;
        // The planner resolves a degree of 0 (plan::resolve_automatic).
        const auto pa = planned_allocation(m, c, cost, knobs, planners_run);
        if (!planners_run)
          notes.push_back(
              "the planner's allocation is its analytic choice, not refined by simulation "
              "(it simulates its own micro-batches and ping-pong group: --micro-batches and "
              "--af-group-size set them here)");
        planned = adopt(pa);
      } catch (const disagmoe::ConfigError& e) {
        // No allocation fits the planner's memory model (the simulator's too): say so and
        // let the simulator search, so that --compare still shows every schedule.
        notes.push_back(std::string("the planner found no allocation (") + e.what() +
                        "); searching the A/F split instead");
      }
    }
    std::vector<std::string> names;
    if (compare) {
      for (auto n : ds::kScheduleNames) names.emplace_back(n);
    } else {
      names.push_back(schedule);
    }
    std::vector<ds::Simulated> runs;
    for (const auto& n : names) {
      try {
        if (n == "afpipe" && planned) {
          try {
            // The plan's recomputation and degree, as planned_simulation sets them.
            ds::CostOptions pc = cost;
            pc.memory.recompute = af_recompute;
            pc.context_parallel = af_context_parallel;
            runs.push_back(ds::simulate_best(n, m, c, pc, knobs, stages, planned));
            continue;
          } catch (const disagmoe::ConfigError& e) {
            // Every split the planner emits is a valid simulator layout (uneven experts per
            // F GPU included: the busiest holds ceil(E / g)); this only fires when the
            // planned layout cannot run here (e.g. --micro-batches below the A group
            // count): say so and let the simulator search.
            notes.push_back(std::string("the planner's allocation cannot be simulated (") + e.what() +
                            "); searching the A/F split instead");
          }
        }
        ds::CostOptions cn = cost;
        if (n == "afpipe" && af) {
          cn.memory.recompute = af_recompute;
          cn.context_parallel = af_context_parallel;
        }
        runs.push_back(ds::simulate_best(n, m, c, cn, knobs, stages, af));
      } catch (const disagmoe::ConfigError& e) {
        if (!compare) throw;
        notes.push_back(n + " skipped: " + e.what());
      }
    }
    dz::expect(!runs.empty(), "--compare", dz::Verbatim{"every schedule skipped"},
               "a model, cluster and batch that at least one schedule can run (try --micro-batches or --stages)");
    for (const auto& note : notes) std::cerr << "disagmoe-sim: " << note << '\n';
    const ds::Simulated& head = runs.front();
    if (!trace.empty()) disagmoe::io::write_chrome_trace(trace, head.schedule, head.result);
    if (!svg.empty()) disagmoe::io::write_svg_gantt(svg, head.schedule, head.result);
    if (as_json) {
      if (compare) {
        json all = json::array();
        for (const auto& r : runs) all.push_back(result_json(r, m, c));
        std::cout << json{{"model", m.name}, {"cluster", c.name}, {"seq_len", m.seq_len}, {"schedules", all}}.dump(2)
                  << '\n';
      } else {
        std::cout << result_json(head, m, c).dump(2) << '\n';
      }
      return disagmoe::cli::kExitOk;
    }
    std::printf("%s on %s, seq_len %d, micro_batch %d, global batch %d sequences\n", m.name.c_str(), c.name.c_str(),
                m.seq_len, m.micro_batch, global_batch);
    std::printf("%-12s %-36s %10s %12s %7s %8s %10s %8s %7s\n", "schedule", "layout", "step ms", "tokens/s", "MFU",
                "bubble", "exp.comm", "mem GB", "vs 1st");
    for (const auto& r : runs) print_row(r, head.result.tokens_per_second);
    // Idle time by what it waits for: transfers (network) apart from a peer's compute
    // (imbalance, fill and drain), per side.
    std::printf("per side, mean seconds per GPU: busy / idle behind transfers (bytes + latency) / behind peers' "
                "compute / other\n");
    for (const auto& r : runs) {
      const ds::SideBreakdown b = ds::side_breakdown(r.schedule, r.result);
      std::printf("%-12s", r.schedule.name.c_str());
      for (const auto& [name, t] : {std::pair{"attention", b.attention}, {"ffn", b.ffn}, {"stages", b.colocated}})
        if (t.gpus > 0)
          std::printf("  %s %.3f / %.3f (%.3f + %.3f) / %.3f / %.3f", name, t.busy_seconds,
                      t.idle.network_seconds + t.idle.latency_seconds, t.idle.network_seconds, t.idle.latency_seconds,
                      t.idle.peer_compute_seconds, t.idle.other_seconds);
      std::printf("\n");
    }
    if (head.result.deadlocked) std::cout << head.result.deadlock_report << '\n';
    return disagmoe::cli::kExitOk;
  });
}
