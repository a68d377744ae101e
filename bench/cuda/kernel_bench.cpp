// SPDX-License-Identifier: Apache-2.0
// The CUDA token kernels on one MoE layer's dispatch (default: 16384 tokens x 4096 hidden,
// bf16, top-8 of 64 experts on 8 F-ranks, uniform routing), each timed with CUDA events
// against a device-to-device cudaMemcpyAsync of the rows the kernel reads, in the same
// run. "of copy BW" is the kernel's bytes moved (rows read + rows written) per second
// over the copy's (read + written); the rows a kernel writes may be fewer than it reads.
// Routing arrays are on the device (the kernels alone are timed). Prints a table last;
// exits 77 without a GPU. Used by scripts/gpu-check.
//   cuda_kernel_bench [tokens] [hidden] [iterations]
#include <disagmoe/backend/cuda/backend.hpp>
#include <disagmoe/comm/layout.hpp>

#include <bench_args.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

using namespace disagmoe;
using bf16 = __nv_bfloat16;

namespace {

template <class E>
cuda::DeviceBuffer<E> upload(const std::vector<E>& v) {
  cuda::DeviceBuffer<E> d;
  d.assign(v);
  return d;
}
template <class E>
std::span<const E> cs(const cuda::DeviceBuffer<E>& d) {
  return {d.data(), d.size()};
}
template <class E>
std::span<E> ms(cuda::DeviceBuffer<E>& d) {
  return {d.data(), d.size()};
}

/// Milliseconds per call of `f` on `s` (3 warm-up calls, then `iters` timed).
double time_ms(cudaStream_t s, int iters, const std::function<void()>& f) {
  cudaEvent_t a = nullptr, b = nullptr;
  DISAGMOE_CUDA_CHECK(cudaEventCreate(&a));
  DISAGMOE_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) f();
  DISAGMOE_CUDA_CHECK(cudaEventRecord(a, s));
  for (int i = 0; i < iters; ++i) f();
  DISAGMOE_CUDA_CHECK(cudaEventRecord(b, s));
  DISAGMOE_CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  DISAGMOE_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  (void)cudaEventDestroy(a);
  (void)cudaEventDestroy(b);
  return static_cast<double>(ms) / iters;
}

struct Row {
  std::string kernel;
  double read_mb, written_mb, kernel_ms, copy_ms;
};

}  // namespace

int main(int argc, char** argv) {
  bench::expect_usage(
      argc, argv, 3,
      "usage: cuda_kernel_bench [tokens] [hidden] [iterations]\n"
      "The CUDA token kernels on one MoE layer's dispatch (default 16384 tokens x 4096 hidden, bf16,\n"
      "top-8 of 64 experts on 8 ranks, 20 iterations), each against a device-to-device copy of the\n"
      "same bytes in the same run. Exits 77 without a GPU.\n");
  const auto tokens = static_cast<std::size_t>(bench::positional(argc, argv, 1, "tokens", 1, 1 << 22, 16384));
  const auto hidden = static_cast<std::size_t>(bench::positional(argc, argv, 2, "hidden", 1, 1 << 16, 4096));
  const int iters = static_cast<int>(bench::positional(argc, argv, 3, "iterations", 1, 10000, 20));
  // Each buffer below holds up to max(send-once rows, 2 x F-rank 0's slots) rows: about 5.3
  // x tokens for top-8 over 8 ranks, so up to ~3 GB of bf16 at the cap, three on the device.
  if (tokens * hidden > (std::size_t{1} << 28))
    bench::bad_argument(argv[0], "tokens x hidden", std::to_string(tokens) + " x " + std::to_string(hidden),
                        "at most 2^28 elements");
  if (cuda::device_count() == 0) {
    std::printf("cuda_kernel_bench: skipped: no CUDA device: %s\n", cuda::no_device_reason().c_str());
    return 77;
  }
  const int experts = 64, ranks = 8, top_k = 8;

  // Routing: top-8 distinct experts per token, uniform; expert e on rank e / 8.
  std::mt19937_64 rng(42);
  std::vector<std::int32_t> topk(tokens * top_k), expert_rank(experts);
  for (int e = 0; e < experts; ++e) expert_rank[static_cast<std::size_t>(e)] = e / (experts / ranks);
  std::vector<float> gates(topk.size());
  for (std::size_t t = 0; t < tokens; ++t) {
    for (int j = 0; j < top_k; ++j) {
      std::int32_t e = 0;
      bool dup = true;
      while (dup) {
        e = static_cast<std::int32_t>(rng() % experts);
        dup = false;
        for (int i = 0; i < j; ++i) dup = dup || topk[t * top_k + static_cast<std::size_t>(i)] == e;
      }
      topk[t * top_k + static_cast<std::size_t>(j)] = e;
      gates[t * top_k + static_cast<std::size_t>(j)] = 1.0f / top_k;
    }
  }
  comm::SendOnceLayout layout;
  layout.build(expert_rank, ranks, topk, top_k);
  const auto rows = static_cast<std::size_t>(layout.total_rows());
  // F-rank 0's arrival from this A-rank: its rows and their slots, fanned out per expert.
  const auto r0 = static_cast<std::size_t>(layout.count(0));
  std::vector<comm::RoutingSlot> meta(r0 * top_k);
  for (std::size_t r = 0; r < r0; ++r) {
    const auto t = static_cast<std::size_t>(layout.row_token()[r]);
    for (int j = 0; j < top_k; ++j)
      meta[r * top_k + static_cast<std::size_t>(j)] = {topk[t * top_k + static_cast<std::size_t>(j)], gates[t * top_k + static_cast<std::size_t>(j)]};
  }
  comm::ArrivalLayout arrival;
  arrival.set_placement(expert_rank, 0);
  arrival.build(meta, top_k);
  const auto slots = static_cast<std::size_t>(arrival.total_slots());

  cuda::Backend b;
  auto s = b.comm_stream();
  // Rows enough for every kernel's input and output, and for the copy of what each reads
  // (gate_gradients reads 2 x slots rows).
  const std::size_t buffer_rows = std::max({rows, tokens, 2 * slots});
  std::vector<bf16> x(buffer_rows * hidden);
  for (auto& v : x) v = __float2bfloat16_rn(static_cast<float>(rng() % 1000) / 1000.0f);
  auto d_src = upload(x);
  cuda::DeviceBuffer<bf16> d_out, d_copy;
  d_out.resize(buffer_rows * hidden);
  d_copy.resize(d_out.size());
  auto d_row_token = upload(std::vector<std::int64_t>(layout.row_token().begin(), layout.row_token().end()));
  auto d_tok_off = upload(std::vector<std::int64_t>(layout.token_offsets().begin(), layout.token_offsets().end()));
  auto d_tok_rows = upload(std::vector<std::int64_t>(layout.token_rows().begin(), layout.token_rows().end()));
  auto v64 = [](std::span<const std::int64_t> v) { return std::vector<std::int64_t>(v.begin(), v.end()); };
  auto d_seg = upload(v64(arrival.row_seg())), d_pos = upload(v64(arrival.row_pos()));
  auto d_erow = upload(v64(arrival.expert_row()));
  auto d_rgate = upload(std::vector<float>(arrival.row_gate().begin(), arrival.row_gate().end()));
  auto d_egate = upload(std::vector<float>(arrival.expert_gate().begin(), arrival.expert_gate().end()));
  auto d_slot = upload(std::vector<std::int32_t>(arrival.row_slot().begin(), arrival.row_slot().end()));
  auto d_topk = upload(topk), d_erank = upload(expert_rank);
  cuda::DeviceBuffer<float> d_gates;
  d_gates.resize(r0 * top_k);
  cuda::DeviceBuffer<std::int64_t> l_off, l_tok_off, l_tok_rows, l_row_token;
  l_off.resize(ranks + 1);
  l_tok_off.resize(tokens + 1);
  l_tok_rows.resize(tokens * top_k);
  l_row_token.resize(tokens * top_k);

  const cudaStream_t cs_ = s.get();
  auto copy = [&](std::size_t bytes) {
    return time_ms(cs_, iters, [&] {
      DISAGMOE_CUDA_CHECK(cudaMemcpyAsync(d_copy.data(), d_src.data(), bytes, cudaMemcpyDeviceToDevice, cs_));
    });
  };
  const double row_mb = static_cast<double>(hidden * sizeof(bf16)) / 1e6;
  std::vector<Row> table;
  auto add = [&](const std::string& name, std::size_t read_rows, std::size_t written_rows,
                 const std::function<void()>& f) {
    const double k = time_ms(cs_, iters, f);
    table.push_back({name, static_cast<double>(read_rows) * row_mb,
                     static_cast<double>(written_rows) * row_mb, k, copy(read_rows * hidden * sizeof(bf16))});
  };
  add("gather_rows (send-once permute)", rows, rows, [&] {
    b.gather_rows<bf16>(s, cs(d_src), hidden, cs(d_row_token), std::span<bf16>(d_out.data(), rows * hidden));
  });
  add("combine_rows (A-rank, unweighted)", rows, tokens, [&] {
    b.combine_rows<bf16, float>(s, cs(d_src), hidden, cs(d_tok_off), cs(d_tok_rows), {},
                                std::span<bf16>(d_out.data(), tokens * hidden));
  });
  add("combine_rows (F-rank 0, gate-weighted)", slots, r0, [&] {
    b.combine_rows<bf16, float>(s, cs(d_src), hidden, cs(d_seg), cs(d_pos), cs(d_rgate),
                                std::span<bf16>(d_out.data(), r0 * hidden));
  });
  add("gather_rows_scaled (F-rank 0 fan-out)", slots, slots, [&] {
    b.gather_rows_scaled<bf16, float>(s, cs(d_src), hidden, cs(d_erow), cs(d_egate),
                                      std::span<bf16>(d_out.data(), slots * hidden));
  });
  add("gate_gradients (F-rank 0, dL/dgate)", 2 * slots, 0, [&] {
    b.gate_gradients<bf16>(s, cs(d_src), cs(d_src), hidden, cs(d_seg), cs(d_pos), cs(d_slot), top_k, ms(d_gates));
  });
  const double layout_ms = time_ms(cs_, iters, [&] {
    b.send_once_layout(s, cs(d_topk), top_k, cs(d_erank), ranks, ms(l_off), ms(l_tok_off), ms(l_tok_rows),
                       ms(l_row_token));
  });
  b.synchronize(b.record(s));

  cudaDeviceProp prop{};
  DISAGMOE_CUDA_CHECK(cudaGetDeviceProperties(&prop, b.device()));
  std::printf("\n%s: %zu tokens x %zu hidden bf16, top-%d of %d experts on %d ranks; %zu send-once rows, "
              "%zu slots on F-rank 0; %d iterations\n",
              prop.name, tokens, hidden, top_k, experts, ranks, rows, slots, iters);
  std::printf("%-40s %8s %8s %10s %10s %12s\n", "kernel", "read MB", "write MB", "kernel ms", "D2D ms",
              "of copy BW");
  for (const auto& r : table) {
    // A time of 0 (an empty input) prints 0% rather than inf or nan.
    const double kernel_bw = r.kernel_ms > 0 ? (r.read_mb + r.written_mb) / r.kernel_ms : 0;
    const double copy_bw = r.copy_ms > 0 ? 2 * r.read_mb / r.copy_ms : 0;
    std::printf("%-40s %8.1f %8.1f %10.3f %10.3f %11.0f%%\n", r.kernel.c_str(), r.read_mb, r.written_mb,
                r.kernel_ms, r.copy_ms, copy_bw > 0 ? 100 * kernel_bw / copy_bw : 0.0);
  }
  std::printf("%-40s %8s %8s %10.3f %10s %12s\n", "send_once_layout (ids -> rows)", "-", "-", layout_ms, "-",
              "-");
  return 0;
}
