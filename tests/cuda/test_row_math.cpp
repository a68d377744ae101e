// SPDX-License-Identifier: Apache-2.0
// The per-element arithmetic of the CUDA token kernels (backend/cuda/row_math.hpp), run
// on the host, against the host kernels: bitwise for fp32 (packed and unpacked), within
// bf16 rounding for bf16. Host compiler only: this runs without a GPU.
#include <disagmoe/backend/cuda/row_math.hpp>
#include <disagmoe/backend/host/token_kernels.hpp>

#include "kernel_cases.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

using namespace disagmoe;

namespace {

/// The combine as the kernel runs it: U packs per call, strided by ceil(packs / U) packs.
template <class T, int P, int U = 1, bool full = false>
std::vector<T> combine_by_packs(const std::vector<T>& src, const test::KernelCase& c, bool weighted) {
  std::vector<T> out(c.rows * c.width);
  const std::size_t per_row = (c.width / P + U - 1) / U;
  for (std::size_t r = 0; r < c.rows; ++r)
    for (std::size_t j = 0; j < per_row; ++j)
      cuda::combine_packs<T, P, U, full>(src.data(), c.width, c.seg.data(), c.idx.data(),
                                         weighted ? c.w.data() : nullptr, r, j * P, per_row * P,
                                         out.data() + r * c.width);
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

std::vector<__nv_bfloat16> to_bf16(const std::vector<float>& v) {
  std::vector<__nv_bfloat16> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = __float2bfloat16_rn(v[i]);
  return out;
}

}  // namespace

TEST_CASE("row_math combine equals host::combine_rows bit for bit (fp32, packed and unpacked)") {
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    INFO("seed = " << seed);
    const std::size_t width = seed % 2 == 0 ? 8 * (1 + seed % 5) : 0;  // even seeds: multiples of 8
    const auto c = test::make_case(seed, seed % 7 == 0 ? 0 : 1 + seed % 30, width);
    for (bool weighted : {false, true}) {
      INFO("weighted = " << weighted);
      std::vector<float> expect(c.rows * c.width);
      host::combine_rows<float, float>(c.src, c.width, c.seg, c.idx, weighted ? std::span<const float>(c.w)
                                                                              : std::span<const float>{}, expect);
      CHECK(same_bits(combine_by_packs<float, 1>(c.src, c, weighted), expect));
      if (c.width % 4 == 0) {
        CHECK(same_bits(combine_by_packs<float, 4>(c.src, c, weighted), expect));
        CHECK(same_bits(combine_by_packs<float, 4, 3>(c.src, c, weighted), expect));  // packs % 3 != 0 too
        CHECK(same_bits(combine_by_packs<float, 4, 4>(c.src, c, weighted), expect));
        if (c.width / 4 % 2 == 0)
          CHECK(same_bits(combine_by_packs<float, 4, 2, true>(c.src, c, weighted), expect));
      }
    }
  }
}

TEST_CASE("row_math scaled gather and gate gradients equal the host kernels bit for bit (fp32)") {
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    INFO("seed = " << seed);
    const auto c = test::make_case(seed, seed % 9 == 0 ? 0 : 1 + seed % 25);
    std::vector<float> expect(c.index.size() * c.width), got(expect.size());
    host::gather_rows_scaled<float, float>(c.src, c.width, c.index, c.scale, expect);
    for (std::size_t i = 0; i < c.index.size(); ++i)
      for (std::size_t col = 0; col < c.width; ++col)
        got[i * c.width + col] =
            cuda::scaled_pack<float, 1>(c.src.data(), c.width, c.index.data(), c.scale.data(), i, col).v[0];
    CHECK(same_bits(got, expect));
  }
}

TEST_CASE("row_math gate gradients equal host::gate_gradients bit for bit (fp32), by lanes and packed") {
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    INFO("seed = " << seed);
    // Widths past 32 lanes x 8 columns (lanes wrap), some multiples of 8 (the packed loads).
    const std::size_t width = seed % 2 == 0 ? 8 * (1 + seed * 7 % 90) : 1 + seed * 37 % 700;
    const auto c = test::make_case(seed, seed % 9 == 0 ? 0 : 1 + seed % 12, width);
    std::vector<float> g_expect(c.rows * c.top_k), serial(g_expect.size()), lanes(g_expect.size());
    host::gate_gradients<float>(c.src, c.grad, c.width, c.seg, c.idx, c.slot, c.top_k, g_expect);
    for (std::size_t r = 0; r < c.rows; ++r)
      for (std::size_t s = 0; s < c.top_k; ++s) {
        const auto e = r * c.top_k + s;
        serial[e] = cuda::gate_gradient<float>(c.src.data(), c.grad.data(), c.width, c.seg.data(),
                                               c.idx.data(), c.slot.data(), r, static_cast<std::int32_t>(s));
        // The warp kernel's split: one partial per lane (packed loads where the kernel uses
        // them), then the tree.
        const auto q = cuda::gate_term(c.seg.data(), c.slot.data(), r, static_cast<std::int32_t>(s));
        if (q < 0) continue;
        const float* a =
            c.src.data() + static_cast<std::size_t>(c.idx[static_cast<std::size_t>(q)]) * c.width;
        const float* b = c.grad.data() + r * c.width;
        float partial[cuda::kDotLanes];
        for (int l = 0; l < cuda::kDotLanes; ++l) {
          partial[l] = cuda::row_dot_partial<float, false>(a, b, c.width, l);
          // The packed loads (aligned rows, widths of whole chunks) sum the same products
          // in the same order as the unpacked fallback the kernel takes otherwise.
          if (c.width % cuda::kDotChunk == 0)
            CHECK(cuda::row_dot_partial<float, true>(a, b, c.width, l) == partial[l]);
        }
        lanes[e] = cuda::row_dot_tree(partial);
      }
    CHECK(same_bits(serial, g_expect));
    CHECK(same_bits(lanes, g_expect));
  }
}

TEST_CASE("row_math bf16 dot partials: packed loads equal the unpacked fallback bit for bit") {
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    INFO("seed = " << seed);
    const std::size_t width = 8 * (1 + seed * 13 % 70);  // whole chunks, past 256 columns
    const auto c = test::make_case(seed, 1 + seed % 5, width);
    const auto src = to_bf16(c.src), grad = to_bf16(c.grad);
    for (std::size_t r = 0; r < c.rows; ++r)
      for (int l = 0; l < cuda::kDotLanes; ++l) {
        const __nv_bfloat16* a = src.data() + (r % c.src_rows) * c.width;
        const __nv_bfloat16* b = grad.data() + r * c.width;
        CHECK(cuda::row_dot_partial<__nv_bfloat16, true>(a, b, c.width, l) ==
              cuda::row_dot_partial<__nv_bfloat16, false>(a, b, c.width, l));
      }
  }
}

TEST_CASE("row_math bf16 combine stays within bf16 rounding of the fp32 host result") {
  for (std::uint64_t seed = 1; seed <= 30; ++seed) {
    INFO("seed = " << seed);
    const auto c = test::make_case(seed, 1 + seed % 20, 8 * (1 + seed % 4), true);
    std::vector<float> expect(c.rows * c.width);
    host::combine_rows<float, float>(c.src, c.width, c.seg, c.idx, c.w, expect);
    const auto got = combine_by_packs<__nv_bfloat16, 8>(to_bf16(c.src), c, true);
    for (std::size_t i = 0; i < expect.size(); ++i) {
      // One rounding to bf16 (8 significant bits) of the fp32 sum: |err| <= 2^-8 |x|.
      const float g = cuda::to_float(got[i]);
      CHECK(std::fabs(g - expect[i]) <= std::ldexp(std::fabs(expect[i]), -8));
    }
  }
}

TEST_CASE("bf16 is a channel row element, int is not") {
  static_assert(comm::row_element<__nv_bfloat16>);
  static_assert(comm::row_element<float>);
  static_assert(!comm::row_element<int>);
  CHECK(cuda::is_row_element_v<__nv_bfloat16>);
  CHECK_FALSE(cuda::is_row_element_v<double>);
}
