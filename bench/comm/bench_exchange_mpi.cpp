// SPDX-License-Identifier: Apache-2.0
// (b) One MoE layer's exchange over Open MPI with 4 ranks (2 A-ranks, 2 F-ranks):
// M2NChannel<mpi::Transport> send-once dispatch + fused return against an
// MPI_Alltoallv dispatch + combine that sends one row per (token, expert) pair, same
// routing, interleaved in the same run. Run:
//   OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
//   mpirun -np 4 --oversubscribe build/rel-comm/bench/comm/bench_comm_exchange_mpi
#include "exchange_workload.hpp"

#include <bench_args.hpp>

#include <disagmoe/backend/mpi/transport.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

namespace {

/// The Alltoallv baseline: counts (MPI_Alltoall), rows out, expert outputs back.
class AlltoallvExchange {
 public:
  AlltoallvExchange(const bench::Workload& w, int rank, int size) : w_(w), rank_(rank), size_(size) {
    if (rank < w.m) layout_.build(w, static_cast<std::size_t>(rank));
  }
  std::int64_t rows_sent() const { return rows_sent_; }

  void step(std::vector<float>& out) {
    const int h = w_.h;
    std::vector<int> send_rows(static_cast<std::size_t>(size_), 0), recv_rows(static_cast<std::size_t>(size_), 0);
    if (rank_ < w_.m)
      for (int d = 0; d < w_.n; ++d) send_rows[static_cast<std::size_t>(w_.m + d)] = static_cast<int>(layout_.counts[static_cast<std::size_t>(d)]);
    MPI_Alltoall(send_rows.data(), 1, MPI_INT, recv_rows.data(), 1, MPI_INT, MPI_COMM_WORLD);
    std::vector<int> sc(static_cast<std::size_t>(size_)), sd(sc), rc(sc), rd(sc);
    int s_total = 0, r_total = 0;
    for (int p = 0; p < size_; ++p) {
      sc[static_cast<std::size_t>(p)] = send_rows[static_cast<std::size_t>(p)] * h;
      rc[static_cast<std::size_t>(p)] = recv_rows[static_cast<std::size_t>(p)] * h;
      sd[static_cast<std::size_t>(p)] = s_total;
      rd[static_cast<std::size_t>(p)] = r_total;
      s_total += sc[static_cast<std::size_t>(p)];
      r_total += rc[static_cast<std::size_t>(p)];
    }
    send_.resize(static_cast<std::size_t>(s_total));
    recv_.resize(static_cast<std::size_t>(r_total));
    if (rank_ < w_.m)
      disagmoe::host::gather_rows<float>(w_.x[static_cast<std::size_t>(rank_)], static_cast<std::size_t>(h), layout_.row_token, send_, {}, false);
    MPI_Alltoallv(send_.data(), sc.data(), sd.data(), MPI_FLOAT, recv_.data(), rc.data(), rd.data(), MPI_FLOAT, MPI_COMM_WORLD);
    y_.resize(recv_.size());
    bench::expert_compute(recv_, y_);
    // Return: the exact mirror (F-ranks send back what they received).
    MPI_Alltoallv(y_.data(), rc.data(), rd.data(), MPI_FLOAT, send_.data(), sc.data(), sd.data(), MPI_FLOAT, MPI_COMM_WORLD);
    if (rank_ < w_.m) {
      out.resize(w_.tokens * static_cast<std::size_t>(h));
      disagmoe::host::combine_rows<float, float>(send_, static_cast<std::size_t>(h), layout_.seg, layout_.pos, layout_.weights, out);
      rows_sent_ = static_cast<std::int64_t>(layout_.row_token.size());
    }
  }

 private:
  const bench::Workload& w_;
  int rank_, size_;
  bench::PairLayout layout_;
  std::vector<float> send_, recv_, y_;
  std::int64_t rows_sent_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  using namespace disagmoe;
  using Clock = std::chrono::steady_clock;
  bench::expect_usage(
      argc, argv, 0,
      "usage: mpirun -np 4 bench_comm_exchange_mpi\n"
      "One MoE layer's exchange over Open MPI, 4 ranks (2 A, 2 F): M2NChannel send-once dispatch and\n"
      "fused return against MPI_Alltoallv with one row per (token, expert).\n");
  mpi::Environment env(argc, argv);
  auto world = mpi::Transport::world();
  if (world.size() != 4) {
    if (world.rank() == 0) std::fprintf(stderr, "bench_comm_exchange_mpi: world size = %d: expected 4 (mpirun -np 4)\n", world.size());
    return 2;
  }
  const int reps = 9;
  if (world.rank() == 0)
    std::printf("# bench_comm_exchange_mpi: 4 MPI ranks (2 A, 2 F), 16 experts, top-4, hidden 1024 fp32,\n"
                "# 1024 tokens per A-rank; median of %d interleaved layers\n"
                "%-11s %10s %10s %8s %10s %10s %8s\n",
                reps, "routing", "m2n rows", "a2av rows", "bytes", "m2n ms", "a2av ms", "time");
  for (bool correlated : {false, true}) {
    const auto w = bench::make_workload(2, 2, 16, 4, 1024, 1024, correlated, 42);
    host::Backend backend;
    auto stream = host::Stream::caller();
    bench::HostChannel<mpi::Transport> ch(world, bench::channel_config(w), backend, stream);
    AlltoallvExchange base(w, world.rank(), world.size());
    std::vector<double> t_m2n, t_base;
    std::vector<float> out;
    for (int it = 0; it < 2 * reps + 2; ++it) {
      MPI_Barrier(MPI_COMM_WORLD);
      const auto a = Clock::now();
      if (it % 2 == 0) bench::m2n_step(ch, w, world.rank(), it, out);
      else base.step(out);
      MPI_Barrier(MPI_COMM_WORLD);
      if (it >= 2) (it % 2 == 0 ? t_m2n : t_base).push_back(std::chrono::duration<double, std::milli>(Clock::now() - a).count());
    }
    if (world.rank() == 0) {
      std::sort(t_m2n.begin(), t_m2n.end());
      std::sort(t_base.begin(), t_base.end());
      const double mt = t_m2n[t_m2n.size() / 2], bt = t_base[t_base.size() / 2];
      const auto mr = ch.last_rows_sent(), br = base.rows_sent();
      std::printf("%-11s %10lld %10lld %7.0f%% %10.2f %10.2f %7.0f%%\n", correlated ? "correlated" : "uniform",
                  static_cast<long long>(mr), static_cast<long long>(br), 100.0 * static_cast<double>(mr) / static_cast<double>(br),
                  mt, bt, 100.0 * mt / bt);
    }
  }
  if (world.rank() == 0) std::printf("# rows: dispatched by A-rank 0 per layer (the return carries as many); bytes and time: m2n / a2av\n");
  return 0;
}
