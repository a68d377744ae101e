// SPDX-License-Identifier: Apache-2.0
// disagmoe-train --schedule afpipe|1f1b|a2a-overlap: the training loop on p attention and
// p FFN workers (AF-Pipe), or on p pipeline stages that each run attention and experts
// with an all-to-all inside (the colocated expert-parallel baselines), through
// DisaggregatedTrainer over loopback threads with an emulated network or over MPI ranks;
// the measured step time and exposed communication, the simulator's prediction calibrated
// with the measured op times, a Chrome trace of both, and --check-reference (the
// colocated trainer on the same data, compared to the bit).
#pragma once

#include <disagmoe/backend/host/loopback_transport.hpp>
#include <disagmoe/io/chrome_trace.hpp>
#include <disagmoe/limits.hpp>
#include <disagmoe/runtime/byte_corpus.hpp>
#include <disagmoe/runtime/colocated_trainer.hpp>
#include <disagmoe/runtime/disaggregated_trainer.hpp>
#include <disagmoe/runtime/expert_placement.hpp>
#include <disagmoe/runtime/online_expert_placement.hpp>
#include <disagmoe/runtime/pipeline.hpp>
#include <disagmoe/runtime/timeline.hpp>
#include <disagmoe/schedule/simulator.hpp>
#ifdef DISAGMOE_TRAIN_WITH_MPI
#include <disagmoe/backend/mpi/transport.hpp>
#endif

#include <nlohmann/json.hpp>

#include "../common/cli_main.hpp"
#include "device.hpp"
#include "progress.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace disagmoe::train_cli {

namespace rt = disagmoe::runtime;
namespace mo = disagmoe::model;

/// The attention and expert computes of a colocated trainer type (the workers run the
/// same ones: host, or GPU with --device cuda).
template <class Colocated>
struct ComputesOf;
template <class A, class E>
struct ComputesOf<rt::ColocatedTrainer<A, E>> {
  using Attention = A;
  using Experts = E;
};

/// The options of a disaggregated run.
struct DisaggregatedArgs {
  std::string schedule = "colocated";
  std::string transport = "loopback";
  int pairs = 0;  // 0: 2 on loopback, world size / (M + N) under MPI (baselines: / M)
  int attention_ranks = 1, ffn_ranks = 1;  // M, N: ranks per attention / FFN worker (baselines: G = M)
  int virtual_stages = 2;                  // a2a-overlap: model chunks per stage
  std::string exchange = "auto";
  int group_size = 0, max_in_flight = 0;
  bool no_fuse = false, check_reference = false;
  double net_bandwidth = 0, net_latency = 0;  // emulated network (loopback), bytes/s and s
  int timeout_ms = 30000;
  std::string trace;
  std::string placement = "contiguous";  // or correlated: fitted to the starting model's routing
  int placement_batches = 8;             // batches of routing the correlated placement and the replicas are fitted to
  int replicas = 0;                      // redundant expert slots per FFN rank (baselines: per rank) and MoE layer
  int replace_every = 0;                 // online re-placement: steps of routing per refit (0: off)
  double replace_horizon = 1;            // windows of steps a refit's predicted saving is credited over
  std::vector<int> expert_rank;          // filled by fit_placement
  std::vector<std::vector<int>> expert_replicas;  // filled by fit_placement
};

/// What a run needs from the program: the model, data and the trainer that holds the
/// initial (possibly resumed) state and receives the trained one on rank 0.
struct RunInputs {
  const ModelSpec& spec;
  const rt::TrainOptions& train;
  const mo::DecoderOptions& decoder;
  rt::StageOptions stage;
  const rt::ByteCorpus& corpus;
  int batch = 0;
  std::int64_t steps = 0;
  bool quiet = false;              // --json: no progress bar
  std::string precision = "fp32";  // a GPU compute's GEMMs (device.hpp make_compute)
};

/// What the run measured (filled on rank 0).
struct RunOutcome {
  nlohmann::json curve = nlohmann::json::array();
  std::int64_t tokens = 0;
  double seconds = 0, initial = std::nan(""), final_loss = std::nan("");
  // schedule_seconds: the span of the schedule's ops within a step (the rest is the step
  // start, the replicas' gradient sum, the statistics and the optimizer).
  std::vector<double> step_seconds, schedule_seconds, exposed_comm_seconds, bottleneck_exposed_comm_seconds;
  // The bottleneck's link bytes at full bandwidth beyond its compute time (runtime/timeline.hpp).
  std::vector<double> bottleneck_exposed_comm_floor_seconds;
  // Per step: the busiest expert rank's rows over its worker's mean, the worst worker.
  std::vector<double> expert_rows_max_over_mean;
  std::vector<placement::Replacement> replacements;  // online re-placement's refits
  double migration_seconds = 0;                       // building the moved trainers and copying the state in
  int moves_applied = 0;                              // trainers rebuilt on a new placement
  std::vector<int> expert_rank;                       // the placement the last step ran on
  double predicted_step_seconds = 0, simulated_exposed_comm_seconds = 0, simulated_bottleneck_exposed_comm_seconds = 0;
  std::vector<std::vector<rt::RankTime>> rank_times;  // the last step's, [worker][rank in worker]
  bool rank0 = true;
  int ranks = 0;
};

/// Most worker threads of a loopback run (one per rank).
inline constexpr int kMaxLoopbackRanks = 256;

/// True for the colocated expert-parallel baselines run on workers.
inline bool is_baseline(const DisaggregatedArgs& d) { return d.schedule == "1f1b" || d.schedule == "a2a-overlap"; }
/// World ranks per pair (AF-Pipe: M + N) or per stage (baselines: G).
inline int ranks_per_unit(const DisaggregatedArgs& d) {
  return is_baseline(d) ? d.attention_ranks : d.attention_ranks + d.ffn_ranks;
}

inline rt::DisaggregatedOptions disaggregated_options(const DisaggregatedArgs& d, int world_size) {
  rt::DisaggregatedOptions o;
  o.schedule = d.schedule == "1f1b"          ? rt::ScheduleKind::kOneFOneB
               : d.schedule == "a2a-overlap" ? rt::ScheduleKind::kA2AOverlap
                                             : rt::ScheduleKind::kAfPipe;
  o.a2a_overlap.virtual_stages = d.virtual_stages;
  o.attention_ranks = d.attention_ranks;
  o.ffn_ranks = is_baseline(d) ? d.attention_ranks : d.ffn_ranks;
  o.pairs = d.pairs > 0 ? d.pairs : world_size / ranks_per_unit(d);
  o.exchange = d.exchange == "direct" ? rt::Exchange::kDirect
               : d.exchange == "channel" ? rt::Exchange::kChannel : rt::Exchange::kAuto;
  o.policy.group_size = d.group_size;
  o.policy.max_in_flight = d.max_in_flight;
  o.policy.fuse_combine_dispatch = !is_baseline(d) && !d.no_fuse;
  o.policy.m2n_uses_sms = false;  // CPU workers: no SMs to take
  o.expert_rank = d.expert_rank;
  o.expert_replicas = d.expert_replicas;
  o.executor.timeout = std::chrono::milliseconds(d.timeout_ms);
  if (d.net_bandwidth > 0) o.bytes_per_second = d.net_bandwidth;
  o.latency_seconds = d.net_latency;
  return o;
}

/// The library's names of the options this program sets, as `cli::in_option_terms`
/// renames them (longest first, so that a field is never renamed by a suffix of it).
inline constexpr cli::OptionName kDisaggregatedOptionNames[] = {
    {"DisaggregatedOptions.a2a_overlap.virtual_stages", "--virtual-stages"},
    {"DisaggregatedOptions.policy.max_in_flight", "--max-in-flight"},
    {"DisaggregatedOptions.policy.group_size", "--group-size"},
    {"DisaggregatedOptions.attention_ranks", "--attention-ranks"},
    {"pipeline stages x model chunks", "--pairs x --virtual-stages"},
    {"DisaggregatedOptions.ffn_ranks", "--ffn-ranks"},
    {"DisaggregatedOptions.exchange", "--exchange"},
    {"DisaggregatedOptions.pairs", "--pairs"},
    {"attention_ranks", "--attention-ranks"},
    {"max_in_flight", "--max-in-flight"},
    {"ffn_ranks", "--ffn-ranks"},
    {"group_size", "--group-size"}};

/// What the library checks of `opt` before a worker starts (the schedule can run `spec`
/// on its world of ranks), in this program's option names.
inline void expect_runnable(const rt::DisaggregatedOptions& opt, const ModelSpec& spec, int micro_batches) {
  cli::in_option_terms(kDisaggregatedOptionNames, [&] {
    rt::validate(opt, spec, rt::world_size(opt));
    (void)rt::build_schedule(spec, opt, micro_batches);
  });
}

/// Checks the options before any worker starts (on loopback also what the schedule
/// cannot run; under MPI every rank checks that when it builds its trainer).
inline void check_disaggregated_args(const DisaggregatedArgs& d, const ModelSpec& spec, int micro_batch,
                                     int micro_batches) {
  expect(d.schedule == "colocated" || d.schedule == "afpipe" || is_baseline(d), "--schedule", d.schedule,
         "colocated, afpipe, 1f1b or a2a-overlap");
  expect(d.transport == "loopback" || d.transport == "mpi", "--transport", d.transport, "loopback or mpi");
#ifndef DISAGMOE_TRAIN_WITH_MPI
  expect(d.transport != "mpi", "--transport", d.transport, "loopback (this build has no MPI)");
#endif
  expect(d.pairs >= 0, "--pairs", d.pairs, "a positive integer (0: derived from the world)");
  expect(d.attention_ranks >= 1, "--attention-ranks", d.attention_ranks, "a positive integer");
  expect(d.ffn_ranks >= 1, "--ffn-ranks", d.ffn_ranks, "a positive integer");
  expect(d.ffn_ranks <= spec.experts, "--ffn-ranks", d.ffn_ranks,
         "at most --experts (" + std::to_string(spec.experts) + "): every FFN rank holds experts");
  expect(micro_batch % d.attention_ranks == 0, "--micro-batch", micro_batch,
         "a multiple of --attention-ranks (" + std::to_string(d.attention_ranks) + "): each A-rank takes an equal share");
  expect(d.exchange == "auto" || d.exchange == "direct" || d.exchange == "channel", "--exchange", d.exchange,
         "auto, direct or channel");
  expect(d.pairs <= spec.layers, "--pairs", d.pairs,
         "at most --layers (" + std::to_string(spec.layers) + "): pair (or stage) i holds layers of its own");
  expect(d.virtual_stages >= 1, "--virtual-stages", d.virtual_stages, "a positive integer");
  if (is_baseline(d)) {
    expect(d.ffn_ranks == 1 || d.ffn_ranks == d.attention_ranks, "--ffn-ranks", d.ffn_ranks,
           "unset with --schedule " + d.schedule + ": a stage's --attention-ranks ranks run attention and experts");
    expect(d.exchange != "direct", "--exchange", d.exchange,
           "auto or channel with --schedule " + d.schedule + " (the all-to-all runs through M2NChannel)");
    expect(d.group_size == 0 && d.max_in_flight == 0 && !d.no_fuse, "--schedule", d.schedule,
           "afpipe for --group-size, --max-in-flight or --no-fuse");
  }
  expect(d.group_size >= 0, "--group-size", d.group_size, "an integer >= 0 (0: default)");
  expect(d.max_in_flight >= 0, "--max-in-flight", d.max_in_flight, "an integer >= 0 (0: default)");
  // The emulated network within the bounds of a real link (limits.hpp): a slower one
  // would hold every step for hours.
  if (d.net_bandwidth != 0)
    expect_finite_in("--net-bandwidth", d.net_bandwidth, max_size::kMinBandwidth, max_size::kBandwidth);
  expect_finite_in("--net-latency", d.net_latency, 0, max_size::kLatency);
  expect(d.timeout_ms >= 1, "--timeout", d.timeout_ms, "a positive number of milliseconds");
  expect(d.placement == "contiguous" || d.placement == "correlated", "--placement", d.placement,
         "contiguous or correlated");
  expect(d.placement_batches >= 1 && d.placement_batches <= 4096, "--placement-batches", d.placement_batches,
         "an integer in [1, 4096]");
  const int expert_ranks = is_baseline(d) ? d.attention_ranks : d.ffn_ranks;
  const char* expert_ranks_option = is_baseline(d) ? "--attention-ranks" : "--ffn-ranks";
  if (d.placement == "correlated") {
    expect(d.schedule != "colocated", "--placement", d.placement, "contiguous with --schedule colocated (one worker)");
    expect(spec.experts % expert_ranks == 0, expert_ranks_option, expert_ranks,
           "a divisor of --experts (" + std::to_string(spec.experts) + ") for --placement correlated: every rank "
           "holds as many experts");
  }
  expect(d.replicas >= 0, "--replicas", d.replicas, "an integer >= 0");
  if (d.replicas > 0) {
    expect(d.schedule != "colocated", "--replicas", d.replicas, "0 with --schedule colocated (one worker holds every expert)");
    expect(expert_ranks >= 2, "--replicas", d.replicas,
           std::string("0 with ") + expert_ranks_option + " 1 (a copy lives on another rank than its expert)");
    expect(spec.experts % expert_ranks == 0, expert_ranks_option, expert_ranks,
           "a divisor of --experts (" + std::to_string(spec.experts) + ") for --replicas: every rank holds as many "
           "experts");
    expect(d.replicas <= spec.experts / expert_ranks, "--replicas", d.replicas,
           "at most --experts / " + std::string(expert_ranks_option) + " = " +
               std::to_string(spec.experts / expert_ranks) + " (EPLB's limit: no rank needs two copies of an expert)");
  }
  expect(d.replace_every >= 0, "--replace-every", d.replace_every, "an integer >= 0 (0: off)");
  expect(std::isfinite(d.replace_horizon) && d.replace_horizon > 0 && d.replace_horizon <= 1e9, "--replace-horizon",
         d.replace_horizon, "a number of windows in (0, 1e9]");
  if (d.replace_every > 0) {
    expect(d.schedule != "colocated", "--replace-every", d.replace_every,
           "0 with --schedule colocated (one worker holds every expert)");
    expect(expert_ranks >= 2, "--replace-every", d.replace_every,
           std::string("0 with ") + expert_ranks_option + " 1 (experts move between ranks)");
    expect(spec.experts % expert_ranks == 0, expert_ranks_option, expert_ranks,
           "a divisor of --experts (" + std::to_string(spec.experts) + ") for --replace-every: every rank holds as many "
           "experts");
    expect(d.replicas == 0, "--replace-every", d.replace_every,
           "0 with --replicas (the copies are fitted once, to the starting placement)");
    expect(spec.moe_layers() > 0, "--replace-every", d.replace_every, "0 for a model without MoE layers");
    // The replacer halves each window of routed tokens (placement/online.hpp).
    const double window = static_cast<double>(d.replace_every) * micro_batch * micro_batches * spec.seq_len;
    expect(window <= 1e15 && static_cast<std::int64_t>(window) % 2 == 0, "--replace-every", d.replace_every,
           "a step count whose routed tokens (--replace-every x --batch x --seq-len) are even and at most 1e15");
  }
  if (d.schedule == "colocated")
    expect(d.transport == "loopback" && d.pairs == 0 && !d.check_reference && d.trace.empty() && d.net_bandwidth == 0 &&
               d.attention_ranks == 1 && d.ffn_ranks == 1 && d.exchange == "auto",
           "--schedule", d.schedule,
           "afpipe, 1f1b or a2a-overlap for --transport, --pairs, --attention-ranks, --ffn-ranks, --exchange, "
           "--check-reference, --trace or --net-bandwidth");
  if (d.schedule != "colocated" && d.transport == "loopback") {
    // One thread per rank: a bounded count (MPI ranks come from mpirun instead).
    const std::int64_t threads = std::int64_t{d.pairs > 0 ? d.pairs : 2} * ranks_per_unit(d);
    expect(threads <= kMaxLoopbackRanks, "--attention-ranks", d.attention_ranks,
           "a size whose --pairs x (--attention-ranks + --ffn-ranks) = " + std::to_string(threads) +
               " worker threads is at most " + std::to_string(kMaxLoopbackRanks) + " (use --transport mpi)");
    expect_runnable(disaggregated_options(d, static_cast<int>(threads)), spec, micro_batches);
  }
}

/// What `fit_placement` fitted: the correlated placement (`--placement correlated`) and
/// the replicas (`--replicas`), each with what it changes on the routing it was fitted to.
struct Fitted {
  std::optional<rt::FittedPlacement> placement;
  std::optional<rt::FittedReplicas> replicas;
};

/// Fits `d.expert_rank` (`--placement correlated`) and `d.expert_replicas` (`--replicas`)
/// to how the starting model `full` routes `d.placement_batches` training batches of
/// `batch` sequences (drawn with their own seed, so the training data stream is
/// untouched). Every MPI rank computes the same layout (one thread).
template <class Colocated>
Fitted fit_placement(DisaggregatedArgs& d, Colocated& full, const rt::ByteCorpus& corpus, int batch,
                     std::uint64_t seed) {
  Fitted out;
  if (d.placement != "correlated" && d.replicas == 0) return out;
  mo::Rng rng(mo::derive_seed(seed, 0x9A7C));
  std::vector<std::int32_t> routing;
  for (int i = 0; i < d.placement_batches; ++i) {
    const rt::Batch b = corpus.sample_train(batch, rng);
    const auto r = full.routing({b.inputs, b.targets, b.sequences});
    routing.insert(routing.end(), r.begin(), r.end());
  }
  const int ranks = is_baseline(d) ? d.attention_ranks : d.ffn_ranks;
  if (d.placement == "correlated") {
    placement::CorrelatedPlacementOptions po;
    po.threads = 1;
    out.placement = rt::fit_expert_placement(full.spec(), routing, ranks, po);
    d.expert_rank = out.placement->expert_rank;
  }
  if (d.replicas > 0) {  // on top of the run's primaries, [layer][expert]
    const auto layout = disaggregated_options(d, 1);
    std::vector<int> primaries;
    for (int l = 0; l < full.spec().layers; ++l)
      for (int e = 0; e < full.spec().experts; ++e) primaries.push_back(rt::expert_rank_of(layout, full.spec(), l, e));
    out.replicas = rt::fit_expert_replicas(full.spec(), routing, primaries, ranks, d.replicas);
    d.expert_replicas = out.replicas->expert_replicas;
  }
  return out;
}

/// max |a_i - b_i| / max |b_i| over two equally long sequences (0 when equal): the
/// largest difference relative to the reference's scale.
inline double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0, scale = 1e-30;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    d = std::max(d, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return d / scale;
}

template <class Trainer>  // any ColocatedTrainer (--device picks its experts)
std::vector<double> flat_parameters(Trainer& tr) {
  std::vector<double> out;
  for (const auto* ps : {&tr.attention().parameters(), &tr.experts().parameters()})
    for (const auto& s : ps->slots()) out.insert(out.end(), s.value->data(), s.value->data() + s.value->size());
  return out;
}

/// One rank's loop under the pipeline `Policy` names. `full` holds the starting state (read
/// by every rank) and, on rank 0, receives the trained model; `data_rng` advances as the
/// colocated loop's would.
template <rt::executable_schedule Policy, comm::transport Transport, class Colocated>
void rank_loop(const Policy& policy, Transport& world, const RunInputs& in,
               const rt::DisaggregatedOptions& opt, Colocated& full, mo::Rng data_rng, mo::Rng* final_rng,
               RunOutcome& out, const std::string& trace, int replace_every, double replace_horizon) {
  using Attention = typename ComputesOf<Colocated>::Attention;
  using Experts = typename ComputesOf<Colocated>::Experts;
  using Trainer = rt::Pipeline<Policy, Attention, Experts, Transport>;
  auto make = [&](const rt::DisaggregatedOptions& o) {
    return std::make_unique<Trainer>(policy, make_compute<Attention>(in.spec, in.decoder, in.precision),
                                     make_compute<Experts>(in.spec, in.decoder, in.precision), in.spec,
                                     in.train, o, world, in.stage);
  };
  auto owned = make(opt);
  const rt::ParameterSet<float>* start[] = {&full.attention().parameters(), &full.experts().parameters()};
  owned->load_parameters(start);
  owned->set_steps(full.steps());
  // Online re-placement: every rank feeds the same routing to the same replacer, so all
  // decide alike; a move builds a trainer with the new placement and copies the state in.
  std::optional<rt::OnlineExpertPlacement> online;
  if (replace_every > 0)
    online.emplace(in.spec, opt.ffn_ranks, opt.expert_rank,
                   replace_every * static_cast<std::int64_t>(in.batch) * in.spec.seq_len, replace_horizon);
  const bool lead = world.rank() == 0;
  out.ranks = world.size();
  const std::int64_t first = owned->steps();
  std::optional<cli::ProgressBar> bar;
  if (lead && !in.quiet) bar.emplace(in.steps);
  const auto t0 = std::chrono::steady_clock::now();
  std::optional<io::TraceRun> last_run;
  rt::RankTimelines last_rank_timelines;  // every rank's timeline of the last step
  bool move = false;   // a refit moved experts: the next step runs on the new placement
  bool fresh = false;  // this step is a moved trainer's first: it also builds its schedule
  while (owned->steps() < in.steps) {
    if (move) {
      const auto m0 = std::chrono::steady_clock::now();
      rt::DisaggregatedOptions moved = opt;
      moved.expert_rank = online->expert_rank();
      auto next = make(moved);
      next->take_state(*owned);
      owned = std::move(next);
      out.migration_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - m0).count();
      ++out.moves_applied;
      fresh = true;
    }
    const rt::Batch b = in.corpus.sample_train(in.batch, data_rng);
    const auto s0 = std::chrono::steady_clock::now();
    const rt::StepStats st = owned->step({b.inputs, b.targets, b.sequences});
    const double step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count();
    auto rank_timelines = owned->gather_rank_timelines();
    const auto timelines = rt::merged_timelines(owned->schedule(), rank_timelines);
    const auto rows = owned->gather_expert_rows();
    const bool moved_first = fresh;
    fresh = false;
    // No refit after the last step: its move would never apply.
    move = online && owned->steps() < in.steps && online->observe(owned->gather_routing());
    if (online) {  // a rank that decided otherwise would stall the next trainer's build: say so now
      const auto& rank = online->expert_rank();
      rt::check_same_fingerprints<Transport, 1>(
          world, {comm::ChannelFingerprint::hash(rank.data(), rank.size() * sizeof(int))},
          {rt::FingerprintMeaning{"expert placement fingerprint", "every rank refits alike on the same routing"}},
          opt.executor.timeout);
    }
    if (!lead) continue;
    double load = 0;
    for (const auto& worker : rows) {
      std::int64_t sum = 0;
      for (const auto r : worker) sum += r;
      if (sum > 0)
        load = std::max(load, static_cast<double>(*std::max_element(worker.begin(), worker.end())) *
                                  static_cast<double>(worker.size()) / static_cast<double>(sum));
    }
    out.expert_rows_max_over_mean.push_back(load);
    auto run = rt::measured_run(owned->lowered(), timelines);
    if (!moved_first) {  // as the run's first step, left out of the means (main.cpp)
      out.step_seconds.push_back(step_s);
      out.schedule_seconds.push_back(run.step_seconds);
      out.exposed_comm_seconds.push_back(rt::exposed_comm_seconds(owned->schedule(), run));
      out.bottleneck_exposed_comm_seconds.push_back(rt::bottleneck_exposed_comm_seconds(owned->schedule(), run));
      out.bottleneck_exposed_comm_floor_seconds.push_back(
          rt::bottleneck_exposed_comm_floor(owned->schedule(), run, timelines));
    }
    last_run = std::move(run);
    last_rank_timelines = std::move(rank_timelines);
    out.tokens += static_cast<std::int64_t>(b.inputs.size());
    if (std::isnan(out.initial)) out.initial = st.loss;
    out.final_loss = st.loss;
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (bar)
      bar->update(owned->steps(), st.loss, out.tokens / secs,
                  secs / static_cast<double>(owned->steps() - first) * static_cast<double>(in.steps - owned->steps()));
    out.curve.push_back({{"step", owned->steps()}, {"loss", st.loss}, {"aux_loss", st.aux_loss}, {"z_loss", st.z_loss},
                         {"grad_norm", st.grad_norm}, {"lr", st.lr}, {"step_seconds", step_s},
                         {"exposed_comm_seconds", out.exposed_comm_seconds.back()},
                         {"expert_rows_max_over_mean", load}});
  }
  if (bar) bar->clear();
  std::vector<rt::ParameterSet<float>*> into;
  if (lead) into = {&full.attention().parameters(), &full.experts().parameters()};
  owned->gather_parameters(into);
  if (!lead) {
    out.rank0 = false;
    return;
  }
  if (online) {
    out.replacements = online->decisions();
    out.expert_rank = owned->options().expert_rank;
  }
  full.set_steps(owned->steps());
  if (final_rng != nullptr) *final_rng = data_rng;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (last_run) {  // the simulator's prediction of the last step's schedule from its own op times
    // Loopback workers are threads sharing this host's cores; MPI ranks' hosts are unknown.
    const int cores = std::is_same_v<Transport, host::LoopbackTransport>
                          ? static_cast<int>(std::thread::hardware_concurrency())
                          : 0;
    const auto cal = rt::calibrated(owned->schedule(), *last_run,
                                    rt::merged_timelines(owned->schedule(), last_rank_timelines), cores);
    const auto sim = schedule::simulate(cal);
    const auto sim_run = io::simulated_run(cal, sim, "simulated");
    out.predicted_step_seconds = sim.step_seconds;
    out.rank_times = rt::rank_times(owned->schedule(), last_rank_timelines);
    out.simulated_exposed_comm_seconds = rt::exposed_comm_seconds(cal, sim_run);
    out.simulated_bottleneck_exposed_comm_seconds = rt::bottleneck_exposed_comm_seconds(cal, sim_run);
    if (!trace.empty()) {  // measured and simulated side by side, then each rank of a worker of several
      std::vector<io::TraceRun> runs{*last_run, sim_run};
      for (auto& r : rt::rank_runs(owned->lowered(), last_rank_timelines)) runs.push_back(std::move(r));
      io::write_chrome_trace(trace, owned->schedule(), runs);
    }
  }
}

/// Trains `full` (which holds the start state) under the chosen schedule on its workers;
/// returns what rank 0 measured. `data_rng` is advanced as the colocated loop does.
template <class Colocated>
RunOutcome train_disaggregated(const DisaggregatedArgs& d, const RunInputs& in, Colocated& full,
                               mo::Rng& data_rng) {
  RunOutcome out;
  if (d.transport == "loopback") {
    const auto opt = disaggregated_options(d, (d.pairs > 0 ? d.pairs : 2) * ranks_per_unit(d));
    std::optional<host::NetworkConfig> net;
    if (d.net_bandwidth > 0 || d.net_latency > 0) {
      net.emplace();
      net->nic_bandwidth = d.net_bandwidth;
      net->latency = d.net_latency;
    }
    const int size = rt::world_size(opt);
    host::LoopbackWorld world(size, net);
    mo::Rng final_rng = data_rng;
    std::vector<RunOutcome> outs(static_cast<std::size_t>(size));
    host::run_ranks(world, [&](host::LoopbackTransport& t) {
      rt::visit_schedule(opt, [&](const auto& policy) {
        rank_loop(policy, t, in, opt, full, data_rng, t.rank() == 0 ? &final_rng : nullptr,
                  outs[static_cast<std::size_t>(t.rank())], d.trace,
                  d.replace_every, d.replace_horizon);
      });
    });
    data_rng = final_rng;
    return std::move(outs[0]);
  }
#ifdef DISAGMOE_TRAIN_WITH_MPI
  auto world = mpi::Transport::world();
  const int group = ranks_per_unit(d);
  expect(world.size() % group == 0, "MPI world size", world.size(),
         is_baseline(d) ? "a multiple of --attention-ranks (" + std::to_string(group) + "): p stages of ranks"
                        : "a multiple of --attention-ranks + --ffn-ranks (" + std::to_string(group) +
                              "): p pairs of workers");
  const auto opt = disaggregated_options(d, world.size());
  expect_runnable(opt, in.spec, in.train.micro_batches);  // the world is known only here
  rt::visit_schedule(opt, [&](const auto& policy) {
    rank_loop(policy, world, in, opt, full, data_rng, &data_rng, out, d.trace, d.replace_every, d.replace_horizon);
  });
#endif
  return out;
}

}  // namespace disagmoe::train_cli
