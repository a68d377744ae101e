// SPDX-License-Identifier: Apache-2.0
// bench/runtime: AF-Pipe against colocated expert parallelism on real workers (loopback
// threads over the emulated network), the same kernels in the same run: AF-Pipe with
// stage alignment as direct messages and through comm::M2NChannel (its hand-off), and the
// baselines 1F1B-EP and Megatron's A2A overlap, whose all-to-all inside a stage is the
// same M2NChannel with every rank on both ends. Each beside the simulator's prediction of
// the same step calibrated with the run's own op times, and the colocated trainer (one
// rank, no communication) for scale.
//
// The emulated network is set per world size from 1F1B-EP on one stage of all the ranks:
// the NIC bandwidth at which its busiest rank's all-to-all bytes take `--comm-share` of
// its step (measured without a network), so that all-to-all is worth hiding. Reported per
// run: measured step time, the span of the schedule's ops within it (the rest is the
// step start, the replicas' gradient sum, the statistics and the optimizer, which the
// schedule does not contain), exposed communication (a transfer in flight while its
// worker computes nothing), the simulator's figures for the schedule calibrated with the
// run's own compute times and per-transfer overhead (on the host's cores), the prediction error against the
// schedule's span, the exposed
// share of the step, and exposed communication and speed relative to the first 1F1B-EP.
// Exposed communication is given twice: the mean over workers, and the bottleneck's (the
// worker that computes longest: what lengthens the step; AF-Pipe's lighter side waiting
// on a transfer while the busier one computes counts in the mean only). Beside the
// bottleneck's, its floor (runtime::bottleneck_exposed_comm_floor: its busiest link's
// bytes, as its ranks posted them, at full bandwidth beyond its compute time, which no
// run of the same transfers goes below without computing longer), and "floor/1f1b", the
// floor over 1F1B-EP's bottleneck exposure: a row whose floor/1f1b exceeds a target
// cannot meet it by reordering the same bytes. Last, where the ranks' time goes (rank_timelines.hpp), for
// the worker whose ranks spend the most compute time off their cores, mean over its
// ranks: "compute s" (its compute ops' wall time), "off core" (of that, beyond their CPU
// time: waiting to be scheduled), "rank wait" (in all-to-alls, before the worker's last
// rank enters) and "a2a tail" (in all-to-alls, after it entered), beside "sim a2a" (the
// same worker's all-to-alls in the prediction).
//
//   bench_runtime [--model tiny|small] [--world 2,4] [--micro-batches N] [--micro-batch S]
//                 [--steps N] [--comm-share F] [--latency S]
#include <disagmoe/backend/host/keep_freed_memory.hpp>
#include <disagmoe/backend/host/loopback_transport.hpp>
#include <disagmoe/model/presets.hpp>
#include <disagmoe/model/reference_attention.hpp>
#include <disagmoe/model/reference_experts.hpp>
#include <disagmoe/runtime/colocated_trainer.hpp>
#include <disagmoe/runtime/disaggregated_trainer.hpp>
#include <disagmoe/runtime/timeline.hpp>
#include <disagmoe/schedule/simulator.hpp>

#include <bench_args.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

namespace dm = disagmoe;
namespace rt = disagmoe::runtime;
namespace mo = disagmoe::model;
using Attention = mo::ReferenceAttention<float>;
using Experts = mo::ReferenceExperts<float>;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string model = "tiny";
  std::vector<int> worlds{2, 4};
  int micro_batches = 8, micro_batch = 4, steps = 6;
  double comm_share = 0.4, latency = 50e-6;
};

struct Batches {
  std::vector<std::vector<int>> in, tg;
  int sequences = 0;
};

Batches random_batches(int steps, int sequences, int seq_len) {
  mo::Rng rng(3);
  Batches b;
  b.sequences = sequences;
  for (int s = 0; s < steps; ++s) {
    b.in.emplace_back();
    b.tg.emplace_back();
    for (int i = 0; i < sequences * seq_len; ++i) {
      b.in.back().push_back(static_cast<int>(rng.below(256)));
      b.tg.back().push_back(static_cast<int>(rng.below(256)));
    }
  }
  return b;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

/// Median step of the colocated trainer (the first step, which allocates, left out).
double colocated_step(const dm::ModelSpec& spec, const rt::TrainOptions& t, const Batches& data) {
  rt::ColocatedTrainer<Attention, Experts> tr(Attention(spec, {}), Experts(spec, {}), spec, t);
  std::vector<double> secs;
  for (std::size_t s = 0; s < data.in.size(); ++s) {
    const auto t0 = Clock::now();
    tr.step({data.in[s], data.tg[s], data.sequences});
    if (s > 0) secs.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return median(secs);
}

struct Result {
  double step = 0, schedule = 0, exposed = 0, predicted_step = 0, predicted_exposed = 0, bottleneck = 0,
         predicted_bottleneck = 0, floor = 0, comm_cpu = 0, compute = 0, off_core = 0, rank_wait = 0,
         a2a_tail = 0, simulated_a2a = 0;
};

/// The worker whose ranks spend the most compute time off their cores, and its RankTime
/// (mean over its ranks).
std::pair<int, rt::RankTime> busiest_off_core(const std::vector<std::vector<rt::RankTime>>& times) {
  rt::RankTime best;
  int at = 0;
  double worst = -1;
  for (std::size_t k = 0; k < times.size(); ++k) {
    const auto& w = times[k];
    rt::RankTime mean;
    for (const auto& r : w) {
      mean.compute_wall += r.compute_wall / static_cast<double>(w.size());
      mean.compute_cpu += r.compute_cpu / static_cast<double>(w.size());
      mean.wait_for_ranks += r.wait_for_ranks / static_cast<double>(w.size());
      mean.after_last_entry += r.after_last_entry / static_cast<double>(w.size());
    }
    if (mean.off_core() > worst) worst = mean.off_core(), best = mean, at = static_cast<int>(k);
  }
  return {at, best};
}

/// Seconds worker `w`'s all-to-alls take in simulation `r` of `s`.
double all_to_all_seconds(const dm::schedule::Schedule& s, const dm::schedule::SimResult& r, int w) {
  double total = 0;
  for (std::size_t i = 0; i < s.ops.size(); ++i)
    if (s.ops[i].kind == dm::schedule::OpKind::kAllToAll && s.ops[i].worker == w && r.timings[i].start >= 0)
      total += r.timings[i].end - r.timings[i].start;
  return total;
}

/// Median measured and predicted figures of a run under `opt` on loopback workers over
/// the emulated network `net` (the first step, which builds the schedule, left out).
Result run(const dm::ModelSpec& spec, const rt::TrainOptions& t, const Batches& data, const rt::DisaggregatedOptions& opt,
           const dm::host::NetworkConfig& net) {
  dm::host::LoopbackWorld world(rt::world_size(opt), net);
  std::vector<double> steps, span, exposed, pstep, pexposed, bneck, pbneck, floor, ccpu, comp, off, wait,
      tail, sa2a;
  dm::host::run_ranks(world, [&](dm::host::LoopbackTransport& tp) {
    rt::DisaggregatedTrainer<Attention, Experts, dm::host::LoopbackTransport> tr(Attention(spec, {}), Experts(spec, {}),
                                                                                spec, t, opt, tp);
    for (std::size_t s = 0; s < data.in.size(); ++s) {
      const auto t0 = Clock::now();
      tr.step({data.in[s], data.tg[s], data.sequences});
      const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
      const auto ranks = tr.gather_rank_timelines();
      if (tp.rank() != 0 || s == 0) continue;
      const auto timelines = rt::merged_timelines(tr.schedule(), ranks);
      const auto [worker, where] = busiest_off_core(rt::rank_times(tr.schedule(), ranks));
      comp.push_back(where.compute_wall);
      off.push_back(where.off_core());
      wait.push_back(where.wait_for_ranks);
      tail.push_back(where.after_last_entry);
      const auto measured = rt::measured_run(tr.lowered(), timelines);
      const auto cal =
          rt::calibrated(tr.schedule(), measured, timelines, static_cast<int>(std::thread::hardware_concurrency()));
      const auto sim = dm::schedule::simulate(cal);
      sa2a.push_back(all_to_all_seconds(cal, sim, worker));
      steps.push_back(secs);
      span.push_back(measured.step_seconds);
      exposed.push_back(rt::exposed_comm_seconds(tr.schedule(), measured));
      pstep.push_back(sim.step_seconds);
      const auto simulated = dm::io::simulated_run(cal, sim);
      pexposed.push_back(rt::exposed_comm_seconds(cal, simulated));
      bneck.push_back(rt::bottleneck_exposed_comm_seconds(tr.schedule(), measured));
      pbneck.push_back(rt::bottleneck_exposed_comm_seconds(cal, simulated));
      floor.push_back(rt::bottleneck_exposed_comm_floor(tr.schedule(), measured, timelines));
      ccpu.push_back(cal.network.comm_sm_fraction);
    }
  });
  return {median(steps), median(span),   median(exposed), median(pstep), median(pexposed),
          median(bneck), median(pbneck), median(floor),   median(ccpu),  median(comp),
          median(off),   median(wait),   median(tail),    median(sa2a)};
}

/// Bytes a rank of the busiest worker of one step under `opt` sends to other ranks (an
/// all-to-all's own share, 1/G of it, stays on the rank).
double worker_bytes(const dm::ModelSpec& spec, const rt::TrainOptions& t, const rt::DisaggregatedOptions& opt) {
  const auto s = rt::build_schedule(spec, opt, t.micro_batches);
  std::vector<double> per(s.workers.size(), 0.0);
  for (const auto& op : s.ops) {
    if (!dm::schedule::is_comm(op.kind) || op.kind == dm::schedule::OpKind::kAllReduce) continue;
    const double g = s.workers[static_cast<std::size_t>(op.worker)].gpus;
    per[static_cast<std::size_t>(op.worker)] += op.worker == op.peer ? op.bytes * (g - 1) / g : op.bytes;
  }
  return *std::max_element(per.begin(), per.end());
}

/// One configuration of the comparison.
struct Variant {
  std::string name;
  rt::DisaggregatedOptions opt;
};

rt::DisaggregatedOptions options_of(rt::ScheduleKind kind, int units, int m, int n, rt::Exchange exchange, bool fuse) {
  rt::DisaggregatedOptions o;
  o.schedule = kind;
  o.pairs = units;
  o.attention_ranks = m;
  o.ffn_ranks = n;
  o.exchange = exchange;
  o.policy.fuse_combine_dispatch = fuse;
  o.policy.m2n_uses_sms = false;
  return o;
}

/// The schedules compared on `world` ranks: AF-Pipe with stage alignment (direct, and
/// through M2NChannel: p pairs of one rank each, one pair of groups) and the colocated-EP
/// baselines with an all-to-all inside a stage.
std::vector<Variant> variants(int world, int layers, int micro_batches) {
  using S = rt::ScheduleKind;
  using X = rt::Exchange;
  std::vector<Variant> v;
  const int half = world / 2;
  const std::string pairs = " p=" + std::to_string(half);
  v.push_back({"afpipe direct" + pairs, options_of(S::kAfPipe, half, 1, 1, X::kDirect, true)});
  v.push_back({"afpipe channel" + pairs, options_of(S::kAfPipe, half, 1, 1, X::kChannel, true)});
  if (half > 1)
    v.push_back({"afpipe M=N=" + std::to_string(half), options_of(S::kAfPipe, 1, half, half, X::kChannel, true)});
  for (int stages = 1; stages <= world / 2; stages *= 2) {
    const int g = world / stages;
    const std::string tag = " p=" + std::to_string(stages) + " G=" + std::to_string(g);
    v.push_back({"1f1b-ep" + tag, options_of(S::kOneFOneB, stages, g, g, X::kAuto, false)});
    if (2 * stages <= layers && micro_batches % stages == 0)
      v.push_back({"a2a-overlap" + tag, options_of(S::kA2AOverlap, stages, g, g, X::kAuto, false)});
  }
  return v;
}

// --world: a comma-separated list of even rank counts, 2 to 64.
std::vector<int> parse_worlds(const char* program, const std::string& s) {
  std::vector<int> v;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');) {
    v.push_back(int(bench::integer_value(program, "--world", x, 2, 64)));
    if (v.back() % 2 != 0) bench::bad_argument(program, "--world", x, "an even number of ranks");
  }
  if (v.empty()) bench::bad_argument(program, "--world", s, "a list of rank counts, e.g. 2,4");
  return v;
}

int usage(int code) {
  std::fprintf(code == 0 ? stdout : stderr,
               "usage: bench_runtime [--model tiny|small] [--world 2,4] [--micro-batches N] [--micro-batch S]\n"
               "                     [--steps N] [--comm-share F] [--latency S]\n"
               "AF-Pipe against colocated expert parallelism (1F1B-EP, A2A overlap) on the same loopback\n"
               "workers, kernels and emulated network, each beside the simulator's calibrated prediction.\n"
               "The network is set so that 1F1B-EP's all-to-all takes --comm-share of its step. See\n"
               "bench/RESULTS.md.\n");
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto next = [&] { return bench::option_value(argc, argv, i); };
      if (a == "--help" || a == "-h") return usage(0);
      else if (a == "--model") o.model = next();
      else if (a == "--world")
        o.worlds = parse_worlds(argv[0], next());
      else if (a == "--micro-batches")
        o.micro_batches = int(bench::integer_value(argv[0], a, next(), 1, 4096));
      else if (a == "--micro-batch")
        o.micro_batch = int(bench::integer_value(argv[0], a, next(), 1, 4096));
      else if (a == "--steps")
        o.steps = int(bench::integer_value(argv[0], a, next(), 2, 100000));
      else if (a == "--comm-share")
        o.comm_share = bench::real_value(argv[0], a, next(), 0.01, 0.99);
      else if (a == "--latency")
        o.latency = bench::real_value(argv[0], a, next(), 0, 10);
      else
        bench::bad_argument(argv[0], "argument", a, "an option of --help");
    }
    // Checked before any run: 1F1B-EP on one stage of w ranks gives each rank an equal
    // share of every micro-batch (a world of 8 used to fail after the 2- and 4-rank tables).
    for (const int w : o.worlds)
      if (o.micro_batch % w != 0)
        bench::bad_argument(
            argv[0], "--world", std::to_string(w),
            "a divisor of --micro-batch (" + std::to_string(o.micro_batch) +
                " sequences): 1F1B-EP on one stage of all the ranks splits each micro-batch over them");
    dm::host::keep_freed_memory();
    dm::ModelSpec spec = mo::train_preset(o.model);
    spec.micro_batch = o.micro_batch;
    rt::TrainOptions t;
    t.micro_batches = o.micro_batches;
    const Batches data = random_batches(o.steps, o.micro_batches * o.micro_batch, spec.seq_len);
    const double col = colocated_step(spec, t, data);
    std::printf("bench_runtime: model %s (%d layers, hidden %d, %d experts top-%d), %d micro-batches x %d sequences x %d "
                "bytes, %u hardware threads\n",
                o.model.c_str(), spec.layers, spec.hidden, spec.experts, spec.top_k, o.micro_batches, o.micro_batch,
                spec.seq_len, std::thread::hardware_concurrency());
    std::printf("colocated trainer (1 rank): %.4f s per step\n", col);
    for (const int w : o.worlds) {
      // The network: 1F1B-EP on one stage of all ranks, measured without a network, sets
      // the bandwidth at which its busiest rank's all-to-all bytes take comm_share of a step.
      const auto ep = options_of(rt::ScheduleKind::kOneFOneB, 1, w, w, rt::Exchange::kAuto, false);
      const double compute = run(spec, t, data, ep, {}).step;
      const double bw = worker_bytes(spec, t, ep) / (o.comm_share / (1 - o.comm_share) * compute);
      dm::host::NetworkConfig net;
      net.nic_bandwidth = bw;
      net.latency = o.latency;
      std::printf("\n%d ranks, emulated NIC %.1f MB/s per rank, latency %.0f us (1F1B-EP p=1 without network: %.4f s)\n",
                  w, bw / 1e6, o.latency * 1e6, compute);
      std::printf(
          "%-22s %8s %10s %10s %7s %10s %10s %8s %9s %10s %10s %9s %9s %10s %9s %8s %9s %8s %9s %8s %8s\n",
          "schedule", "step s", "schedule s", "predicted", "err %", "exposed s", "predicted", "share %",
          "exp/1f1b", "bottleneck", "predicted", "bn/1f1b", "bn floor", "floor/1f1b", "speedup", "comm cpu",
          "compute s", "off core", "rank wait", "a2a tail", "sim a2a");
      auto vs = variants(w, spec.layers, o.micro_batches);
      std::vector<Result> rs;
      const Result* ref = nullptr;  // the first 1F1B-EP row
      for (auto& v : vs) {
        v.opt.bytes_per_second = bw;
        v.opt.latency_seconds = o.latency;
        rs.push_back(run(spec, t, data, v.opt, net));
      }
      for (std::size_t i = 0; i < vs.size() && ref == nullptr; ++i)
        if (vs[i].opt.schedule == rt::ScheduleKind::kOneFOneB) ref = &rs[i];
      for (std::size_t i = 0; i < vs.size(); ++i) {
        const Result& r = rs[i];
        std::printf(
            "%-22s %8.4f %10.4f %10.4f %7.1f %10.4f %10.4f %8.1f %8.2fx %10.4f %10.4f %8.2fx %9.4f %9.2fx "
            "%8.2fx %8.2f %9.4f %8.4f %9.4f %8.4f %8.4f\n",
            vs[i].name.c_str(), r.step, r.schedule, r.predicted_step,
            100 * (r.predicted_step - r.schedule) / r.schedule, r.exposed, r.predicted_exposed,
            100 * r.exposed / r.step, r.exposed / ref->exposed, r.bottleneck, r.predicted_bottleneck,
            r.bottleneck / ref->bottleneck, r.floor, r.floor / ref->bottleneck, ref->step / r.step,
            r.comm_cpu, r.compute, r.off_core, r.rank_wait, r.a2a_tail, r.simulated_a2a);
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_runtime: error: %s\n", e.what());
    return 2;
  }
}
