// SPDX-License-Identifier: Apache-2.0
// cuda::Backend on a GPU against the host kernels on the random cases of
// kernel_cases.hpp (empty rows, unread source rows, zero-token ranks, empty inputs):
// bitwise for permutations, layouts and fp32 arithmetic, within bf16 rounding for bf16;
// routing arrays from host memory (staged) and from device memory; no allocation once
// warm; CUDA errors named. Host code; the kernels come from kernels.cu.
#include <disagmoe/backend/cuda/backend.hpp>
#include <disagmoe/backend/host/token_kernels.hpp>
#include <disagmoe/comm/layout.hpp>

#include "kernel_cases.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

using namespace disagmoe;
using cuda::DeviceBuffer;

namespace {

template <class E>
DeviceBuffer<E> upload(const std::vector<E>& v) {
  DeviceBuffer<E> d;
  d.assign(v);
  return d;
}
template <class E>
std::vector<E> download(const DeviceBuffer<E>& d, std::size_t n) {
  std::vector<E> v(n);
  DISAGMOE_CUDA_CHECK(cudaDeviceSynchronize());
  if (n > 0) DISAGMOE_CUDA_CHECK(cudaMemcpy(v.data(), d.data(), n * sizeof(E), cudaMemcpyDeviceToHost));
  return v;
}
template <class E>
std::span<const E> cspan(const DeviceBuffer<E>& d) {
  return {d.data(), d.size()};
}
template <class E>
std::span<E> mspan(DeviceBuffer<E>& d) {
  return {d.data(), d.size()};
}
template <class E>
bool same_bits(const std::vector<E>& a, const std::vector<E>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(E)) == 0);
}
std::vector<__nv_bfloat16> to_bf16(const std::vector<float>& v) {
  std::vector<__nv_bfloat16> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = __float2bfloat16_rn(v[i]);
  return out;
}

/// The fp32 kernels of one case on the device, routing arrays from host (`staged`) or
/// device memory, against the host kernels.
void check_fp32(const test::KernelCase& c, bool staged) {
  cuda::Backend b;
  auto s = b.comm_stream();
  auto src = upload(c.src), grad = upload(c.grad);
  auto d_seg = upload(c.seg), d_idx = upload(c.idx), d_index = upload(c.index);
  auto d_w = upload(c.w), d_scale = upload(c.scale);
  auto d_slot = upload(c.slot);
  auto route = [&]<class E>(const std::vector<E>& host, const DeviceBuffer<E>& dev) {
    return staged ? std::span<const E>(host) : std::span<const E>(dev.data(), dev.size());
  };
  DeviceBuffer<float> gathered, scaled, combined, weighted, gates;
  gathered.resize(c.index.size() * c.width);
  scaled.resize(c.index.size() * c.width);
  combined.resize(c.rows * c.width);
  weighted.resize(c.rows * c.width);
  gates.resize(c.rows * c.top_k);
  b.gather_rows<float>(s, cspan(src), c.width, route(c.index, d_index), mspan(gathered));
  b.gather_rows_scaled<float, float>(s, cspan(src), c.width, route(c.index, d_index), route(c.scale, d_scale),
                                     mspan(scaled));
  b.combine_rows<float, float>(s, cspan(src), c.width, route(c.seg, d_seg), route(c.idx, d_idx), {}, mspan(combined));
  b.combine_rows<float, float>(s, cspan(src), c.width, route(c.seg, d_seg), route(c.idx, d_idx), route(c.w, d_w),
                               mspan(weighted));
  b.gate_gradients<float>(s, cspan(src), cspan(grad), c.width, route(c.seg, d_seg), route(c.idx, d_idx),
                          route(c.slot, d_slot), c.top_k, mspan(gates));
  b.synchronize(b.record(s));

  std::vector<float> e_gathered(gathered.size()), e_scaled(scaled.size()), e_combined(combined.size()),
      e_weighted(weighted.size()), e_gates(gates.size());
  host::gather_rows<float>(c.src, c.width, c.index, e_gathered);
  host::gather_rows_scaled<float, float>(c.src, c.width, c.index, c.scale, e_scaled);
  host::combine_rows<float, float>(c.src, c.width, c.seg, c.idx, {}, e_combined);
  host::combine_rows<float, float>(c.src, c.width, c.seg, c.idx, c.w, e_weighted);
  host::gate_gradients<float>(c.src, c.grad, c.width, c.seg, c.idx, c.slot, c.top_k, e_gates);
  CHECK(same_bits(download(gathered, gathered.size()), e_gathered));
  CHECK(same_bits(download(scaled, scaled.size()), e_scaled));
  CHECK(same_bits(download(combined, combined.size()), e_combined));
  CHECK(same_bits(download(weighted, weighted.size()), e_weighted));
  CHECK(same_bits(download(gates, gates.size()), e_gates));
}

}  // namespace

TEST_CASE("fp32 kernels equal the host kernels bit for bit, routing staged from the host or on the device") {
  for (std::uint64_t seed = 1; seed <= 24; ++seed) {
    INFO("seed = " << seed);
    // Narrow and wide rows (the dot product's 32 lanes x 8 columns wrap past 256), packed
    // (multiples of 8) and not.
    const std::size_t width = seed % 4 == 0   ? 8 * (30 + seed)
                              : seed % 4 == 2 ? 8 * (1 + seed % 6)
                              : seed % 4 == 3 ? 257 + seed
                                              : 0;
    const auto c = test::make_case(seed, seed % 8 == 0 ? 0 : 1 + seed % 60, width);
    for (bool staged : {true, false}) {
      INFO("staged = " << staged);
      check_fp32(c, staged);
    }
  }
}

TEST_CASE("bf16 kernels: permutations bitwise, arithmetic within bf16 rounding of the fp32 host result") {
  for (std::uint64_t seed = 1; seed <= 16; ++seed) {
    INFO("seed = " << seed);
    const std::size_t width = seed % 4 == 0   ? 4096
                              : seed % 2 == 0 ? 64
                                              : 0;  // 4096: lanes wrap, packed loads
    const auto c = test::make_case(seed, seed % 5 == 0 ? 0 : 1 + seed % 50, width, true);
    cuda::Backend b;
    auto s = b.comm_stream();
    const auto src16 = to_bf16(c.src), grad16 = to_bf16(c.grad);
    auto src = upload(src16), grad = upload(grad16);
    DeviceBuffer<__nv_bfloat16> gathered, scaled, weighted;
    DeviceBuffer<float> gates;
    gathered.resize(c.index.size() * c.width);
    scaled.resize(c.index.size() * c.width);
    weighted.resize(c.rows * c.width);
    gates.resize(c.rows * c.top_k);
    b.gather_rows<__nv_bfloat16>(s, cspan(src), c.width, c.index, mspan(gathered));
    b.gather_rows_scaled<__nv_bfloat16, float>(s, cspan(src), c.width, c.index, c.scale, mspan(scaled));
    b.combine_rows<__nv_bfloat16, float>(s, cspan(src), c.width, c.seg, c.idx, c.w, mspan(weighted));
    b.gate_gradients<__nv_bfloat16>(s, cspan(src), cspan(grad), c.width, c.seg, c.idx, c.slot, c.top_k, mspan(gates));
    b.synchronize(b.record(s));

    std::vector<__nv_bfloat16> e_gathered(gathered.size());
    host::gather_rows<__nv_bfloat16>(src16, c.width, c.index, e_gathered);
    CHECK(same_bits(download(gathered, gathered.size()), e_gathered));
    // The fp32 host results on the same (bf16-exact) inputs: one bf16 rounding apart.
    std::vector<float> e_scaled(scaled.size()), e_weighted(weighted.size()), e_gates(gates.size());
    host::gather_rows_scaled<float, float>(c.src, c.width, c.index, c.scale, e_scaled);
    host::combine_rows<float, float>(c.src, c.width, c.seg, c.idx, c.w, e_weighted);
    host::gate_gradients<float>(c.src, c.grad, c.width, c.seg, c.idx, c.slot, c.top_k, e_gates);
    auto near = [](const std::vector<__nv_bfloat16>& got, const std::vector<float>& want) {
      bool ok = got.size() == want.size();
      for (std::size_t i = 0; ok && i < got.size(); ++i)
        ok = std::fabs(cuda::to_float(got[i]) - want[i]) <= std::ldexp(std::fabs(want[i]), -8);
      return ok;
    };
    CHECK(near(download(scaled, scaled.size()), e_scaled));
    CHECK(near(download(weighted, weighted.size()), e_weighted));
    // dL/dgate stays fp32; its inputs are bf16-exact, its terms exact, its sums rounded
    // in the same order as the host's: equal bits.
    CHECK(same_bits(download(gates, gates.size()), e_gates));
  }
}

TEST_CASE("histogram, offsets and the send-once layout equal the host's") {
  for (std::uint64_t seed = 1; seed <= 24; ++seed) {
    INFO("seed = " << seed);
    const std::size_t tokens = seed % 6 == 0 ? 0 : 1 + seed * 37 % 300;
    const auto c = test::make_case(seed, tokens);
    cuda::Backend b;
    auto s = b.comm_stream();
    // Histogram of the destination of every slot, then its offsets.
    std::vector<std::int32_t> dest(c.topk_ids.size());
    for (std::size_t i = 0; i < dest.size(); ++i) dest[i] = c.expert_rank[static_cast<std::size_t>(c.topk_ids[i])];
    auto d_dest = upload(dest);
    DeviceBuffer<std::int64_t> counts, offsets;
    counts.resize(static_cast<std::size_t>(c.ranks));
    offsets.resize(counts.size() + 1);
    b.histogram(s, cspan(d_dest), mspan(counts));
    b.exclusive_offsets(s, cspan(counts), mspan(offsets));
    std::vector<std::int64_t> e_counts(counts.size()), e_offsets(offsets.size());
    host::histogram(dest, e_counts);
    host::exclusive_offsets(e_counts, e_offsets);
    CHECK(download(counts, counts.size()) == e_counts);
    CHECK(download(offsets, offsets.size()) == e_offsets);

    comm::SendOnceLayout layout;
    layout.build(c.expert_rank, c.ranks, c.topk_ids, c.route_k);
    const std::size_t max_rows = tokens * static_cast<std::size_t>(std::min(c.route_k, c.ranks));
    DeviceBuffer<std::int64_t> l_offsets, token_offsets, token_rows, row_token;
    l_offsets.resize(static_cast<std::size_t>(c.ranks) + 1);
    token_offsets.resize(tokens + 1);
    token_rows.resize(max_rows);
    row_token.resize(max_rows);
    b.send_once_layout(s, c.topk_ids, c.route_k, c.expert_rank, c.ranks, mspan(l_offsets), mspan(token_offsets),
                       mspan(token_rows), mspan(row_token));
    b.synchronize(b.record(s));
    const auto total = static_cast<std::size_t>(layout.total_rows());
    auto got_offsets = download(l_offsets, l_offsets.size());
    for (int d = 0; d <= c.ranks; ++d) CHECK(got_offsets[static_cast<std::size_t>(d)] == layout.offset(d));
    const auto e_row_token = layout.row_token(), e_token_rows = layout.token_rows();
    const auto e_token_offsets = layout.token_offsets();
    CHECK(download(row_token, total) == std::vector<std::int64_t>(e_row_token.begin(), e_row_token.begin() + total));
    CHECK(download(token_offsets, tokens + 1) ==
          std::vector<std::int64_t>(e_token_offsets.begin(), e_token_offsets.begin() + tokens + 1));
    CHECK(download(token_rows, total) == std::vector<std::int64_t>(e_token_rows.begin(), e_token_rows.begin() + total));
  }
}

TEST_CASE("empty inputs are legal and write nothing") {
  cuda::Backend b;
  auto s = b.comm_stream();
  DeviceBuffer<float> rows;
  const std::int64_t zero_seg[] = {0};
  std::vector<std::int64_t> none;
  b.gather_rows<float>(s, cspan(rows), 16, none, mspan(rows));
  b.gather_rows_scaled<float, float>(s, cspan(rows), 16, none, std::span<const float>{}, mspan(rows));
  b.combine_rows<float, float>(s, cspan(rows), 16, zero_seg, none, {}, mspan(rows));
  b.gate_gradients<float>(s, cspan(rows), cspan(rows), 16, zero_seg, none, {}, 4, mspan(rows));
  DeviceBuffer<std::int64_t> offsets;
  offsets.resize(1);
  b.exclusive_offsets(s, none, mspan(offsets));
  b.synchronize(b.record(s));
  CHECK(download(offsets, 1) == std::vector<std::int64_t>{0});
}

// Pinned staging blocks are reused once the call that staged through them has run; with
// each call waited for (as a channel waits for its kernels' event), which blocks a call
// gets does not depend on timing, so the count is exact.
TEST_CASE("a warm back end allocates nothing for a step of the same size") {
  const auto c = test::make_case(7, 200, 64);
  cuda::Backend b;
  auto s = b.comm_stream();
  auto src = upload(c.src);
  DeviceBuffer<float> out;
  out.resize(c.rows * c.width);
  auto step = [&] {
    b.combine_rows<float, float>(s, cspan(src), c.width, c.seg, c.idx, c.w, mspan(out));
    b.synchronize(b.record(s));
    b.gather_rows<float>(s, cspan(src), c.width, c.index, std::span<float>(out.data(), c.index.size() * c.width));
    b.synchronize(b.record(s));
  };
  out.resize(std::max(out.size(), c.index.size() * c.width));
  step();
  b.synchronize(b.record(s));
  const auto device_allocs = b.scratch().allocations(), pinned_allocs = b.staging().allocations();
  CHECK(device_allocs > 0);  // the first step did stage its routing arrays
  for (int i = 0; i < 10; ++i) step();
  CHECK(b.scratch().allocations() == device_allocs);
  CHECK(b.staging().allocations() == pinned_allocs);
}

TEST_CASE("events: a later stream waits for an earlier one; queries report completion") {
  cuda::Backend b;
  auto streams = b.worker_streams();
  const auto c = test::make_case(3, 100, 32);
  auto src = upload(c.src);
  DeviceBuffer<float> mid, out;
  mid.resize(c.rows * c.width);
  out.resize(c.rows * c.width);
  b.combine_rows<float, float>(streams.forward, cspan(src), c.width, c.seg, c.idx, c.w, mspan(mid));
  const auto e = b.record(streams.forward);
  b.wait(streams.comm, e);
  std::vector<std::int64_t> identity(c.rows);
  for (std::size_t i = 0; i < c.rows; ++i) identity[i] = static_cast<std::int64_t>(i);
  b.gather_rows<float>(streams.comm, cspan(mid), c.width, identity, mspan(out));
  const auto done = b.record(streams.comm);
  b.synchronize(done);
  CHECK(b.query(done));
  CHECK(b.query(cuda::Event{}));
  std::vector<float> expect(c.rows * c.width);
  host::combine_rows<float, float>(c.src, c.width, c.seg, c.idx, c.w, expect);
  CHECK(same_bits(download(out, out.size()), expect));
}

TEST_CASE("a failing CUDA call throws CudaError naming the call, file and line") {
  void* p = nullptr;
  try {
    DISAGMOE_CUDA_CHECK(cudaMalloc(&p, std::size_t{1} << 62));
    FAIL("cudaMalloc of 4 EiB succeeded");
  } catch (const CudaFatalError&) {
    FAIL("out of memory is not sticky");
  } catch (const CudaError& e) {
    const std::string what = e.what();
    CHECK(what.find("cudaMalloc(&p, std::size_t{1} << 62)") != std::string::npos);
    CHECK(what.find("test_cuda_backend.cpp:") != std::string::npos);
    CHECK(what.find("cudaErrorMemoryAllocation") != std::string::npos);
  }
  CHECK(cudaGetLastError() == cudaSuccess);  // cleared: the next check does not see it
  CHECK(cuda::is_sticky(cudaErrorIllegalAddress));
  CHECK_FALSE(cuda::is_sticky(cudaErrorMemoryAllocation));
}
