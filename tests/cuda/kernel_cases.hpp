// SPDX-License-Identifier: Apache-2.0
// Random inputs of the token kernels shared by the host test of row_math.hpp and the GPU
// test of cuda::Backend: rows of an F-rank's combine (segments of 0..top_k terms, so
// some output rows are empty, as for a token routed elsewhere), source rows that no
// term reads (an expert that received nothing), and a send-once routing in which some
// ranks hold no chosen expert (zero-token ranks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace disagmoe::test {

/// One random instance of every kernel's inputs (see the file comment).
struct KernelCase {
  std::size_t width = 0, src_rows = 0, rows = 0, top_k = 0;
  std::vector<float> src, grad;                  // [src_rows x width], [rows x width]
  std::vector<std::int64_t> seg, idx, index;     // seg: rows + 1; idx: seg.back(); index: gather rows
  std::vector<float> w, scale;                   // per term; per gathered row
  std::vector<std::int32_t> slot;                // per term, distinct within a row
  // Send-once routing.
  int experts = 0, ranks = 0, route_k = 0;
  std::vector<std::int32_t> topk_ids, expert_rank;
};

/// A value exactly representable in bf16 (8 significant bits) in [-2, 2).
inline float bf16_exact(std::mt19937_64& rng) {
  return static_cast<float>(static_cast<int>(rng() % 512) - 256) / 128.0f;
}

/// Case `seed`; `tokens` 0 gives empty inputs everywhere, `width` 0 picks 1..40 (odd
/// widths exercise the unpacked kernels, multiples of 8 the packed ones). With
/// `bf16_values` every row value and weight is exact in bf16 (then fp32 sums of few terms
/// are exact in any order); otherwise they are arbitrary floats, so that a different
/// summation order shows in the bits.
inline KernelCase make_case(std::uint64_t seed, std::size_t tokens, std::size_t width = 0, bool bf16_values = false) {
  std::mt19937_64 rng(seed);
  auto value = [&] {
    return bf16_values ? bf16_exact(rng) : std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng);
  };
  KernelCase c;
  c.width = width != 0 ? width : 1 + rng() % 40;
  c.top_k = 1 + rng() % 4;
  c.rows = tokens;
  c.src_rows = 1 + rng() % (tokens * c.top_k + 1) + 2;  // + 2: rows nobody reads
  c.src.resize(c.src_rows * c.width);
  for (auto& x : c.src) x = value();
  c.grad.resize(c.rows * c.width);
  for (auto& x : c.grad) x = value();
  c.seg.assign(1, 0);
  for (std::size_t r = 0; r < c.rows; ++r) {
    const std::size_t terms = rng() % (c.top_k + 1);  // 0: an empty row
    std::vector<std::int32_t> slots;
    for (std::size_t q = 0; q < terms; ++q) {
      c.idx.push_back(static_cast<std::int64_t>(rng() % (c.src_rows - 2)));
      c.w.push_back(value());
      c.slot.push_back(static_cast<std::int32_t>(q));  // distinct, ascending as the channel's
    }
    c.seg.push_back(static_cast<std::int64_t>(c.idx.size()));
  }
  const std::size_t gathered = rng() % (tokens * 2 + 1);
  for (std::size_t i = 0; i < gathered; ++i) {
    c.index.push_back(static_cast<std::int64_t>(rng() % c.src_rows));
    c.scale.push_back(value());
  }
  c.ranks = 1 + static_cast<int>(rng() % 6);
  c.experts = 1 + static_cast<int>(rng() % 12);
  c.route_k = 1 + static_cast<int>(rng() % static_cast<unsigned>(c.experts < 8 ? c.experts : 8));
  c.expert_rank.resize(static_cast<std::size_t>(c.experts));
  // Experts only on the even ranks when there are several: the odd ones get no token.
  const int holders = c.ranks > 1 ? (c.ranks + 1) / 2 : 1;
  for (auto& r : c.expert_rank) r = 2 * static_cast<std::int32_t>(rng() % static_cast<unsigned>(holders));
  for (auto& r : c.expert_rank) r = r < c.ranks ? r : 0;
  for (std::size_t t = 0; t < tokens; ++t) {
    std::vector<std::int32_t> chosen;  // distinct experts per token
    while (chosen.size() < static_cast<std::size_t>(c.route_k)) {
      const auto e = static_cast<std::int32_t>(rng() % static_cast<unsigned>(c.experts));
      bool dup = false;
      for (auto x : chosen) dup = dup || x == e;
      if (!dup) chosen.push_back(e);
    }
    c.topk_ids.insert(c.topk_ids.end(), chosen.begin(), chosen.end());
  }
  return c;
}

}  // namespace disagmoe::test
