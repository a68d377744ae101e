// SPDX-License-Identifier: Apache-2.0
// bench/runtime: AF-Pipe on real workers (loopback threads over the emulated network)
// against the colocated trainer in the same run, and against the simulator's prediction
// of the same step calibrated with the run's own op times. Variants: stage alignment on
// (direct messages), off (direct), and off through comm::M2NChannel (one rank per worker).
//
// The emulated network is set from the colocated step: its bandwidth makes the bytes one
// AF-Pipe step moves between workers take `--comm-share` of the colocated step time if
// sent back to back on one link, so communication is worth hiding. Reported per run:
// measured step time, exposed communication (a transfer in flight while its worker
// computes nothing), the calibrated simulator's figures and the prediction error.
//
//   bench_runtime [--model tiny|small] [--pairs 1,2] [--micro-batches N] [--micro-batch S]
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

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
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
  std::vector<int> pairs{1, 2};
  int micro_batches = 8, micro_batch = 2, steps = 6;
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

struct AfResult {
  double step = 0, exposed = 0, predicted_step = 0, predicted_exposed = 0, bytes = 0;
};

AfResult afpipe(const dm::ModelSpec& spec, const rt::TrainOptions& t, const Batches& data, int pairs, bool fuse,
                rt::Exchange exchange, double bandwidth, double latency) {
  rt::DisaggregatedOptions opt;
  opt.pairs = pairs;
  opt.exchange = exchange;
  opt.policy.fuse_combine_dispatch = fuse;
  opt.policy.m2n_uses_sms = false;
  opt.bytes_per_second = bandwidth;
  opt.latency_seconds = latency;
  dm::host::NetworkConfig net;
  net.nic_bandwidth = bandwidth;
  net.latency = latency;
  dm::host::LoopbackWorld world(2 * pairs, net);
  std::vector<double> steps, exposed, pstep, pexposed;
  double bytes = 0;
  dm::host::run_ranks(world, [&](dm::host::LoopbackTransport& tp) {
    rt::DisaggregatedTrainer<Attention, Experts, dm::host::LoopbackTransport> tr(Attention(spec, {}), Experts(spec, {}),
                                                                                spec, t, opt, tp);
    for (std::size_t s = 0; s < data.in.size(); ++s) {
      const auto t0 = Clock::now();
      tr.step({data.in[s], data.tg[s], data.sequences});
      const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
      const auto timelines = tr.gather_timelines();
      if (tp.rank() != 0 || s == 0) continue;
      const auto run = rt::measured_run(tr.lowered(), timelines);
      const auto cal = rt::calibrated(tr.schedule(), run, timelines);
      const auto sim = dm::schedule::simulate(cal);
      steps.push_back(secs);
      exposed.push_back(rt::exposed_comm_seconds(tr.schedule(), run));
      pstep.push_back(sim.step_seconds);
      pexposed.push_back(rt::exposed_comm_seconds(cal, dm::io::simulated_run(cal, sim)));
      bytes = 0;
      for (const auto& op : tr.schedule().ops)
        if (dm::schedule::is_comm(op.kind) && op.peer != op.worker) bytes += op.bytes;
    }
  });
  return {median(steps), median(exposed), median(pstep), median(pexposed), bytes};
}

/// Bytes one AF-Pipe step of `pairs` pairs moves between workers.
double step_bytes(const dm::ModelSpec& spec, const rt::TrainOptions& t, int pairs, bool fuse) {
  rt::DisaggregatedOptions opt;
  opt.pairs = pairs;
  opt.policy.fuse_combine_dispatch = fuse;
  const auto s = opt.policy.build(rt::afpipe_problem(spec, opt, t.micro_batches));
  double bytes = 0;
  for (const auto& op : s.ops)
    if (dm::schedule::is_comm(op.kind) && op.peer != op.worker) bytes += op.bytes;
  return bytes;
}

std::vector<int> parse_list(const char* s) {
  std::vector<int> v;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');) v.push_back(std::stoi(x));
  return v;
}

int usage(int code) {
  std::fprintf(code == 0 ? stdout : stderr,
               "usage: bench_runtime [--model tiny|small] [--pairs 1,2] [--micro-batches N] [--micro-batch S]\n"
               "                     [--steps N] [--comm-share F] [--latency S]\n"
               "AF-Pipe on loopback workers over an emulated network vs the colocated trainer and vs the\n"
               "simulator's calibrated prediction. See bench/RESULTS.md.\n");
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto next = [&]() -> const char* {
        if (i + 1 >= argc) throw dm::ConfigError(a + ": expected a value");
        return argv[++i];
      };
      if (a == "--help" || a == "-h") return usage(0);
      else if (a == "--model") o.model = next();
      else if (a == "--pairs") o.pairs = parse_list(next());
      else if (a == "--micro-batches") o.micro_batches = std::stoi(next());
      else if (a == "--micro-batch") o.micro_batch = std::stoi(next());
      else if (a == "--steps") o.steps = std::stoi(next());
      else if (a == "--comm-share") o.comm_share = std::stod(next());
      else if (a == "--latency") o.latency = std::stod(next());
      else return usage(2);
    }
    dm::expect(o.steps >= 2, "--steps", o.steps, "at least 2 (the first step is left out)");
    dm::expect(o.comm_share > 0, "--comm-share", o.comm_share, "a positive fraction");
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
    std::printf("colocated trainer (1 worker): %.4f s per step\n\n", col);
    std::printf("%-16s %7s %9s %10s %10s %7s %10s %10s %9s\n", "schedule", "workers", "net MB/s", "step s", "predicted",
                "err %", "exposed s", "predicted", "vs coloc");
    struct Variant {
      const char* name;
      bool fuse;
      rt::Exchange exchange;
    };
    const Variant variants[] = {{"afpipe", true, rt::Exchange::kDirect},
                                {"afpipe-unfused", false, rt::Exchange::kDirect},
                                {"afpipe-channel", false, rt::Exchange::kChannel}};
    for (const int p : o.pairs)
      for (const auto& v : variants) {
        const double bw = step_bytes(spec, t, p, v.fuse) / (o.comm_share * col);
        const AfResult r = afpipe(spec, t, data, p, v.fuse, v.exchange, bw, o.latency);
        std::printf("%-16s %7d %9.1f %10.4f %10.4f %7.1f %10.4f %10.4f %8.2fx\n", v.name, 2 * p, bw / 1e6, r.step,
                    r.predicted_step, 100 * (r.predicted_step - r.step) / r.step, r.exposed, r.predicted_exposed,
                    col / r.step);
      }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_runtime: error: %s\n", e.what());
    return 2;
  }
}
