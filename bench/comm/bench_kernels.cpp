// SPDX-License-Identifier: Apache-2.0
// (a) Host token kernels against a plain memcpy of the same bytes, in the same run.
// permute   : dst[i] = src[perm[i]] for a random permutation (every row moved once);
// unpermute : out[t] = sum_j w_tj * src[pos_tj] (top-k weighted combine, the return
//             path), compared with memcpy of the bytes it reads.
// (b) Per-call cost of a small two-thread gather (a micro-batch's rows): the kernels'
//     thread pool against starting a thread per call, as the kernels did before.
#include <disagmoe/backend/host/token_kernels.hpp>

#include <bench_args.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

namespace {
using Clock = std::chrono::steady_clock;

/// The peer of (b): the same chunking, the extra chunk on a thread started for the call.
void gather_spawning(const std::vector<float>& src, std::size_t width, const std::vector<std::int64_t>& index,
                     std::vector<float>& dst) {
  const std::size_t n = index.size(), half = (n + 1) / 2;
  auto body = [&](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i)
      std::memcpy(dst.data() + i * width, src.data() + static_cast<std::size_t>(index[i]) * width, width * sizeof(float));
  };
  std::jthread other([&] { body(half, n); });
  body(0, half);
}

template <class F>
double median_seconds(int reps, F&& f) {
  std::vector<double> t;
  f();  // warm-up: page faults and caches
  for (int r = 0; r < reps; ++r) {
    const auto a = Clock::now();
    f();
    t.push_back(std::chrono::duration<double>(Clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  bench::expect_usage(
      argc, argv, 0,
      "usage: bench_comm_kernels\n"
      "The host token kernels (permute, gate-weighted unpermute) against memcpy of the same bytes, and\n"
      "a small gather on the kernel thread pool against a thread started per call. See bench/RESULTS.md.\n");
  using namespace disagmoe;
  const std::size_t tokens = 16384, width = 1024, k = 2;  // 4 KiB fp32 rows, 64 MiB per matrix
  const int reps = 11;
  std::mt19937_64 rng(1);
  std::vector<float> src(tokens * k * width), dst(tokens * k * width), out(tokens * width);
  for (auto& x : src) x = std::uniform_real_distribution<float>(-1, 1)(rng);
  std::vector<std::int64_t> perm(tokens * k);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  // Return path: token t's k partial rows sit at random places of a [tokens*k] buffer.
  std::vector<std::int64_t> seg(tokens + 1), idx(perm);
  std::vector<float> w(tokens * k);
  for (std::size_t t = 0; t <= tokens; ++t) seg[t] = static_cast<std::int64_t>(t * k);
  for (auto& x : w) x = std::uniform_real_distribution<float>(0, 1)(rng);

  std::printf("# bench_comm_kernels: %zu rows x %zu fp32 (%.0f MiB moved per call), median of %d\n",
              tokens * k, width, static_cast<double>(tokens * k * width * 4) / (1 << 20), reps);
  std::printf("%-28s %8s %10s %10s %8s\n", "kernel", "threads", "kernel GB/s", "memcpy GB/s", "ratio");
  const double bytes = static_cast<double>(tokens * k * width * sizeof(float));
  for (int threads : {1, 2}) {
    host::KernelOptions opts{threads, std::size_t{1} << 20};
    const double t_copy = median_seconds(reps, [&] { std::memcpy(dst.data(), src.data(), static_cast<std::size_t>(bytes)); });
    const double t_perm = median_seconds(reps, [&] {
      host::gather_rows<float>(src, width, perm, dst, opts, false);
    });
    const double t_comb = median_seconds(reps, [&] {
      host::combine_rows<float, float>(src, width, seg, idx, w, out, opts);
    });
    const double copy_gbs = bytes / t_copy / 1e9;
    std::printf("%-28s %8d %10.2f %10.2f %7.0f%%\n", "permute (gather rows)", threads, bytes / t_perm / 1e9, copy_gbs,
                100.0 * t_copy / t_perm);
    std::printf("%-28s %8d %10.2f %10.2f %7.0f%%\n", "unpermute (k=2 combine)", threads, bytes / t_comb / 1e9, copy_gbs,
                100.0 * t_copy / t_comb);
  }

  // (b) small calls: 64 rows of 4 KiB, two threads forced (no minimum work per thread).
  const std::size_t small = 64;
  std::vector<std::int64_t> small_index(perm.begin(), perm.begin() + static_cast<std::ptrdiff_t>(small));
  std::vector<float> small_dst(small * width);
  const host::KernelOptions forced{2, 0};
  const int calls = 2000;
  const double t_pool = median_seconds(reps, [&] {
    for (int c = 0; c < calls; ++c) host::gather_rows<float>(src, width, small_index, small_dst, forced, false);
  });
  const double t_spawn = median_seconds(reps, [&] {
    for (int c = 0; c < calls; ++c) gather_spawning(src, width, small_index, small_dst);
  });
  std::printf("\n# small gathers: %zu rows x %zu fp32 per call, 2 threads, %d calls, median of %d\n", small, width,
              calls, reps);
  std::printf("%-28s %12s\n", "threads from", "us per call");
  std::printf("%-28s %12.2f\n", "the kernels' pool", 1e6 * t_pool / calls);
  std::printf("%-28s %12.2f\n", "a thread started per call", 1e6 * t_spawn / calls);
  std::printf("%-28s %11.2fx\n", "pool speed-up", t_spawn / t_pool);
  return 0;
}
