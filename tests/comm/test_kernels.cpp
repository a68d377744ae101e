// SPDX-License-Identifier: Apache-2.0
// Host token kernels against naive loops (the oracle) and across thread counts.
#include <disagmoe/backend/host/token_kernels.hpp>

#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <vector>

using namespace disagmoe;
using host::KernelOptions;

namespace {
KernelOptions forced(int threads) { return KernelOptions{threads, 0}; }  // spawn even for tiny work
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}
}  // namespace

TEST_CASE("histogram and exclusive_offsets match a recount") {
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    INFO("seed = " << seed);
    std::mt19937_64 rng(seed);
    const int bins = 1 + static_cast<int>(rng() % 9);
    std::vector<std::int32_t> v(rng() % 200);
    for (auto& x : v) x = static_cast<std::int32_t>(rng() % static_cast<unsigned>(bins));
    std::vector<std::int64_t> counts(static_cast<std::size_t>(bins)), offsets(counts.size() + 1);
    host::histogram(v, counts);
    host::exclusive_offsets(counts, offsets);
    std::int64_t running = 0;
    for (int b = 0; b < bins; ++b) {
      CHECK(offsets[static_cast<std::size_t>(b)] == running);
      const auto n = std::count(v.begin(), v.end(), b);
      CHECK(counts[static_cast<std::size_t>(b)] == n);
      running += n;
    }
    CHECK(offsets.back() == static_cast<std::int64_t>(v.size()));
  }
}

TEST_CASE("histogram names a bin out of range") {
  std::vector<std::int32_t> v{0, 3};
  std::vector<std::int64_t> counts(2);
  CHECK_THROWS_WITH_AS(host::histogram(v, counts), "histogram bins[i] = 3: expected a bin in [0, counts.size())",
                       ConfigError);
}

TEST_CASE("gather_rows and gather_rows_scaled equal a naive loop for any thread count") {
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    INFO("seed = " << seed);
    std::mt19937_64 rng(seed);
    const std::size_t width = 1 + rng() % 7, src_rows = 1 + rng() % 30, n = rng() % 50;
    std::vector<float> src(width * src_rows);
    for (auto& x : src) x = std::uniform_real_distribution<float>(-1, 1)(rng);
    std::vector<std::int64_t> idx(n);
    std::vector<float> scale(n);
    for (std::size_t i = 0; i < n; ++i) {
      idx[i] = static_cast<std::int64_t>(rng() % src_rows);
      scale[i] = std::uniform_real_distribution<float>(-2, 2)(rng);
    }
    std::vector<float> ref(n * width), ref_scaled(n * width);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t c = 0; c < width; ++c) {
        ref[i * width + c] = src[static_cast<std::size_t>(idx[i]) * width + c];
        ref_scaled[i * width + c] = scale[i] * src[static_cast<std::size_t>(idx[i]) * width + c];
      }
    for (int threads : {1, 3}) {
      std::vector<float> out(n * width, -7), out_scaled(n * width, -7);
      host::gather_rows<float>(src, width, idx, out, forced(threads));
      host::gather_rows_scaled<float, float>(src, width, idx, scale, out_scaled, forced(threads));
      CHECK(out == ref);
      CHECK(out_scaled == ref_scaled);
    }
  }
}

TEST_CASE("combine_rows follows the left-to-right contract bitwise, for any thread count") {
  for (std::uint64_t seed = 1; seed <= 30; ++seed) {
    INFO("seed = " << seed);
    std::mt19937_64 rng(seed);
    const std::size_t width = 1 + rng() % 9, src_rows = 1 + rng() % 40, rows = rng() % 25;
    std::vector<float> src(width * src_rows);
    for (auto& x : src) x = std::uniform_real_distribution<float>(-1e3f, 1e3f)(rng);
    std::vector<std::int64_t> seg{0}, idx;
    std::vector<float> w;
    for (std::size_t r = 0; r < rows; ++r) {
      const auto terms = rng() % 5;  // 0 terms gives a zero row
      for (std::size_t q = 0; q < terms; ++q) {
        idx.push_back(static_cast<std::int64_t>(rng() % src_rows));
        w.push_back(std::uniform_real_distribution<float>(0, 1)(rng));
      }
      seg.push_back(static_cast<std::int64_t>(idx.size()));
    }
    std::vector<float> ref(rows * width, 0), ref_unweighted(rows * width, 0);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t c = 0; c < width; ++c)
        for (auto q = seg[r]; q < seg[r + 1]; ++q) {
          const float s = src[static_cast<std::size_t>(idx[static_cast<std::size_t>(q)]) * width + c];
          const float t = w[static_cast<std::size_t>(q)] * s;
          float& o = ref[r * width + c];
          float& u = ref_unweighted[r * width + c];
          o = (q == seg[r]) ? t : o + t;
          u = (q == seg[r]) ? s : u + s;
        }
    for (int threads : {1, 2, 4}) {
      std::vector<float> out(rows * width, 99), out_u(rows * width, 99);
      host::combine_rows<float, float>(src, width, seg, idx, w, out, forced(threads));
      host::combine_rows<float, float>(src, width, seg, idx, {}, out_u, forced(threads));
      CHECK(same_bits(out, ref));
      CHECK(same_bits(out_u, ref_unweighted));
    }
  }
}

TEST_CASE("kernels reject indices outside the source and short outputs") {
  std::vector<float> src(6), dst(4);
  std::vector<std::int64_t> bad{0, 3}, seg{0, 1, 2};
  CHECK_THROWS_WITH_AS(host::gather_rows<float>(src, 2, bad, dst), "gather_rows index[i] = 3: expected a row of src",
                       ConfigError);
  std::vector<float> small(2);
  std::vector<std::int64_t> good{0, 1};
  CHECK_THROWS_AS(host::gather_rows<float>(src, 2, good, small), ConfigError);
  CHECK_THROWS_WITH_AS(host::combine_rows<float>(src, 2, seg, bad, {}, dst),
                       "combine_rows idx[q] = 3: expected a row of src", ConfigError);
}
