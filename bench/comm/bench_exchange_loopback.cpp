// SPDX-License-Identifier: Apache-2.0
// (c) One MoE layer's exchange on the loopback transport (4 threads: 2 A-ranks,
// 2 F-ranks), with and without the emulated network: M2NChannel send-once dispatch +
// fused return against the pairwise one-row-per-(token, expert) baseline, same
// routing, interleaved in the same run.
#include "exchange_workload.hpp"

#include <bench_args.hpp>

#include <disagmoe/backend/host/loopback_transport.hpp>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <optional>
#include <vector>

int main(int argc, char** argv) {
  bench::expect_usage(
      argc, argv, 0,
      "usage: bench_comm_exchange_loopback\n"
      "One MoE layer's exchange on 4 loopback threads (2 A, 2 F), with and without the emulated\n"
      "network: M2NChannel send-once dispatch and fused return against one row per (token, expert).\n");
  using namespace disagmoe;
  using Clock = std::chrono::steady_clock;
  const int reps = 9;
  std::printf("# bench_comm_exchange_loopback: M=2 A-ranks, N=2 F-ranks, 16 experts, top-4, hidden 1024 fp32,\n"
              "# 1024 tokens per A-rank; median of %d interleaved layers; emulated: 1 node per rank,\n"
              "# NIC 0.5 GB/s per direction, 10 us latency\n", reps);
  std::printf("%-11s %-9s %10s %10s %8s %10s %10s %8s\n", "routing", "network", "m2n rows", "base rows", "bytes",
              "m2n ms", "base ms", "time");
  for (bool correlated : {false, true}) {
    const auto w = bench::make_workload(2, 2, 16, 4, 1024, 1024, correlated, 42);
    for (bool emulated : {false, true}) {
      std::optional<host::NetworkConfig> net;
      if (emulated) {
        net.emplace();
        net->nic_bandwidth = 0.5e9;
        net->latency = 10e-6;
      }
      host::LoopbackWorld world(4, net);
      std::barrier sync(4);
      std::vector<double> t_m2n, t_base;
      std::int64_t m2n_rows = 0, base_rows = 0;
      host::run_ranks(world, [&](host::LoopbackTransport& t) {
        host::Backend backend;
        auto stream = host::Stream::caller();
        bench::HostChannel<host::LoopbackTransport> ch(t, bench::channel_config(w), backend, stream);
        bench::PairwiseExchange<host::LoopbackTransport> base(t, w);
        std::vector<float> out;
        for (int it = 0; it < 2 * reps + 2; ++it) {
          sync.arrive_and_wait();
          const auto a = Clock::now();
          if (it % 2 == 0) bench::m2n_step(ch, w, t.rank(), it, out);
          else base.step(out);
          sync.arrive_and_wait();
          const double ms = std::chrono::duration<double, std::milli>(Clock::now() - a).count();
          if (t.rank() == 0 && it >= 2) (it % 2 == 0 ? t_m2n : t_base).push_back(ms);
        }
        if (t.rank() == 0) {
          m2n_rows = ch.last_rows_sent();
          base_rows = base.rows_sent();
        }
      });
      std::sort(t_m2n.begin(), t_m2n.end());
      std::sort(t_base.begin(), t_base.end());
      const double mt = t_m2n[t_m2n.size() / 2], bt = t_base[t_base.size() / 2];
      std::printf("%-11s %-9s %10lld %10lld %7.0f%% %10.2f %10.2f %7.0f%%\n", correlated ? "correlated" : "uniform",
                  emulated ? "emulated" : "none", static_cast<long long>(m2n_rows), static_cast<long long>(base_rows),
                  100.0 * static_cast<double>(m2n_rows) / static_cast<double>(base_rows), mt, bt, 100.0 * mt / bt);
    }
  }
  std::printf("# rows: dispatched by A-rank 0 per layer (the return carries as many); bytes and time: m2n / baseline\n");
  return 0;
}
