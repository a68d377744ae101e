// SPDX-License-Identifier: Apache-2.0
/// @file token_kernels.hpp
/// Host token kernels for MoE dispatch: histogram and offsets of destinations, row
/// permutation (gather), and un-permutation with a weighted combine. Rows are
/// `width` contiguous elements of a row-major matrix.
///
/// Determinism: every output row is produced by exactly one thread, and the terms
/// of a combined row are added in the order the segment lists them, so the result
/// is bitwise identical for any thread count (for a fixed build: compile with
/// `-ffp-contract=off` where FMA contraction could differ between call sites).
#pragma once

#include <disagmoe/backend/host/thread_pool.hpp>
#include <disagmoe/error.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace disagmoe::host {

/// Run-time knobs of the host kernels.
struct KernelOptions {
  /// Most threads one call may use (1 = the calling thread only).
  int threads = 1;
  /// Work per extra thread below which no extra thread is used (a wake-up costs microseconds).
  std::size_t min_bytes_per_thread = std::size_t{1} << 21;
  /// Where the extra threads come from (nullptr: `ThreadPool::shared()`).
  ThreadPool* pool = nullptr;
};

/// Calls `body(begin, end)` on disjoint contiguous chunks covering [0, n), on up to
/// `opts.threads` threads of the pool when `bytes` of work make it pay. The chunking
/// depends only on n and the chunk count; `body` must write disjoint outputs.
template <class Body>
void parallel_for(std::size_t n, std::size_t bytes, const KernelOptions& opts, Body&& body) {
  std::size_t chunks = static_cast<std::size_t>(std::max(1, opts.threads));
  if (opts.min_bytes_per_thread > 0)
    chunks = std::min(chunks, std::max<std::size_t>(1, bytes / opts.min_bytes_per_thread));
  chunks = std::min(chunks, std::max<std::size_t>(1, n));
  if (chunks <= 1) {
    body(std::size_t{0}, n);
    return;
  }
  const std::size_t chunk = (n + chunks - 1) / chunks;
  ThreadPool& pool = opts.pool != nullptr ? *opts.pool : ThreadPool::shared();
  pool.run(chunks, [&](std::size_t i) {
    const std::size_t b = std::min(n, i * chunk), e = std::min(n, b + chunk);
    body(b, e);
  });
}

/// counts[b] = number of i with bins[i] == b. Throws ConfigError naming the first
/// bin outside [0, counts.size()). O(bins + counts).
inline void histogram(std::span<const std::int32_t> bins, std::span<std::int64_t> counts) {
  std::fill(counts.begin(), counts.end(), 0);
  const auto n = static_cast<std::int64_t>(counts.size());
  for (std::size_t i = 0; i < bins.size(); ++i) {
    const std::int64_t b = bins[i];
    if (b < 0 || b >= n) fail("histogram bins[i]", b, "a bin in [0, counts.size())");
    ++counts[static_cast<std::size_t>(b)];
  }
}

/// offsets[0] = 0, offsets[i+1] = offsets[i] + counts[i] (exclusive scan; the last
/// entry is the total). Precondition: offsets.size() == counts.size() + 1. O(counts).
inline void exclusive_offsets(std::span<const std::int64_t> counts, std::span<std::int64_t> offsets) {
  expect(offsets.size() == counts.size() + 1, "exclusive_offsets offsets.size()", offsets.size(),
         "counts.size() + 1");
  offsets[0] = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) offsets[i + 1] = offsets[i] + counts[i];
}

/// Rows ahead of the current one whose source the gathers prefetch.
inline constexpr std::size_t kPrefetchDistance = 4;

namespace detail {
/// Prefetches the first cache lines of a row (GCC/Clang builtin; a no-op elsewhere).
inline void prefetch_row(const void* p, std::size_t bytes) {
#if defined(__GNUC__)
  const auto* c = static_cast<const char*>(p);
  for (std::size_t off = 0; off < bytes && off < 512; off += 64) __builtin_prefetch(c + off);
#else
  (void)p;
  (void)bytes;
#endif
}

inline void check_rows(std::size_t elems, std::size_t width, std::size_t rows, const char* field) {
  if (elems < rows * width) fail(field, elems, "at least rows * width elements");
}
}  // namespace detail

/// Permute: dst row i = src row index[i]. Precondition: every index is a row of `src`
/// (checked in the serial pre-pass only when `checked`). O(index.size() * width).
template <class T>
void gather_rows(std::span<const T> src, std::size_t width, std::span<const std::int64_t> index,
                 std::span<T> dst, const KernelOptions& opts = {}, bool checked = true) {
  detail::check_rows(dst.size(), width, index.size(), "gather_rows dst.size()");
  const auto src_rows = static_cast<std::int64_t>(width == 0 ? 0 : src.size() / width);
  if (checked)
    for (auto i : index)
      if (i < 0 || i >= src_rows) fail("gather_rows index[i]", i, "a row of src");
  const std::size_t row_bytes = width * sizeof(T);
  parallel_for(index.size(), index.size() * row_bytes, opts, [&](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i) {
      // Rows come from random places: touch a later source row early so its page walk
      // and first lines overlap this copy (hardware prefetchers stop at page borders).
      if (i + kPrefetchDistance < e)
        detail::prefetch_row(src.data() + static_cast<std::size_t>(index[i + kPrefetchDistance]) * width, row_bytes);
      std::memcpy(dst.data() + i * width, src.data() + static_cast<std::size_t>(index[i]) * width,
                  row_bytes);
    }
  });
}

/// dst row i = scale[i] * src row index[i] (the per-expert gradient fan-out).
/// Same preconditions as `gather_rows`; scale.size() == index.size().
template <class T, class W>
void gather_rows_scaled(std::span<const T> src, std::size_t width,
                        std::span<const std::int64_t> index, std::span<const W> scale,
                        std::span<T> dst, const KernelOptions& opts = {}) {
  detail::check_rows(dst.size(), width, index.size(), "gather_rows_scaled dst.size()");
  const auto src_rows = static_cast<std::int64_t>(width == 0 ? 0 : src.size() / width);
  for (auto i : index)
    if (i < 0 || i >= src_rows) fail("gather_rows_scaled index[i]", i, "a row of src");
  expect(scale.size() == index.size(), "gather_rows_scaled scale.size()", scale.size(),
         "index.size()");
  parallel_for(index.size(), index.size() * width * sizeof(T), opts,
               [&](std::size_t b, std::size_t e) {
                 for (std::size_t i = b; i < e; ++i) {
                   const T s = static_cast<T>(scale[i]);
                   const T* in = src.data() + static_cast<std::size_t>(index[i]) * width;
                   T* out = dst.data() + i * width;
                   for (std::size_t c = 0; c < width; ++c) out[c] = s * in[c];
                 }
               });
}

/// Un-permute with weighted combine: for every output row r,
///   out[r] = t_q0 + t_q1 + ... (left to right), q in [seg[r], seg[r+1]),
///   t_q = w[q] * src[idx[q]] rounded to T (or src[idx[q]] when `w` is empty);
/// an empty segment gives a zero row. This summation order is the contract that
/// makes results reproducible (see the file comment). seg.size() == out rows + 1.
/// O(idx.size() * width).
template <class T, class W = T>
void combine_rows(std::span<const T> src, std::size_t width, std::span<const std::int64_t> seg,
                  std::span<const std::int64_t> idx, std::span<const W> w, std::span<T> out,
                  const KernelOptions& opts = {}) {
  expect(!seg.empty(), "combine_rows seg.size()", 0, ">= 1");
  const std::size_t rows = seg.size() - 1;
  detail::check_rows(out.size(), width, rows, "combine_rows out.size()");
  expect(w.empty() || w.size() == idx.size(), "combine_rows w.size()", w.size(),
         "0 or idx.size()");
  expect(seg.front() >= 0 && static_cast<std::size_t>(seg.back()) <= idx.size(),
         "combine_rows seg.back()", seg.back(), "<= idx.size()");
  const auto src_rows = static_cast<std::int64_t>(width == 0 ? 0 : src.size() / width);
  for (auto i : idx)
    if (i < 0 || i >= src_rows) fail("combine_rows idx[q]", i, "a row of src");
  for (std::size_t r = 0; r < rows; ++r)
    if (seg[r] > seg[r + 1]) fail("combine_rows seg[r + 1]", seg[r + 1], ">= seg[r] (non-decreasing)");
  const bool weighted = !w.empty();
  parallel_for(rows, idx.size() * width * sizeof(T), opts, [&](std::size_t b, std::size_t e) {
    for (std::size_t r = b; r < e; ++r) {
      T* __restrict o = out.data() + r * width;  // out never aliases src (distinct buffers)
      const auto q0 = static_cast<std::size_t>(seg[r]), q1 = static_cast<std::size_t>(seg[r + 1]);
      if (q0 >= q1) {
        std::fill(o, o + width, T{});
        continue;
      }
      if (r + 1 < e)  // the next row's terms: random rows, see gather_rows
        for (auto q = static_cast<std::size_t>(seg[r + 1]); q < static_cast<std::size_t>(seg[r + 2]); ++q)
          detail::prefetch_row(src.data() + static_cast<std::size_t>(idx[q]) * width, width * sizeof(T));
      const T* __restrict s0 = src.data() + static_cast<std::size_t>(idx[q0]) * width;
      const T w0 = weighted ? static_cast<T>(w[q0]) : T{1};
      std::size_t q = q0 + 1;
      if (q < q1) {
        // First two terms in one pass: t0 + t1 rounds exactly as the two-pass form
        // (t0 stored, then + t1) but reads and writes the output row once.
        const T* __restrict s1 = src.data() + static_cast<std::size_t>(idx[q]) * width;
        const T w1 = weighted ? static_cast<T>(w[q]) : T{1};
        if (weighted) {
          for (std::size_t c = 0; c < width; ++c) o[c] = w0 * s0[c] + w1 * s1[c];
        } else {
          for (std::size_t c = 0; c < width; ++c) o[c] = s0[c] + s1[c];
        }
        ++q;
      } else if (weighted) {
        for (std::size_t c = 0; c < width; ++c) o[c] = w0 * s0[c];
      } else {
        std::memcpy(o, s0, width * sizeof(T));
      }
      for (; q < q1; ++q) {
        const T* __restrict s = src.data() + static_cast<std::size_t>(idx[q]) * width;
        if (weighted) {
          const T wq = static_cast<T>(w[q]);
          for (std::size_t c = 0; c < width; ++c) o[c] += wq * s[c];
        } else {
          for (std::size_t c = 0; c < width; ++c) o[c] += s[c];
        }
      }
    }
  });
}

/// Dot product of two rows in T (the gate-gradient kernel), in the order a GPU warp sums
/// it with coalesced loads, so that the CUDA kernel equals this one bit for bit: column c
/// goes to lane (c / 8) % 32, each lane sums its columns in ascending order, then for
/// h = 16, 8, 4, 2, 1 lane l < h adds lane l + h (a butterfly). O(width).
template <class T>
T row_dot(const T* a, const T* b, std::size_t width) {
  constexpr std::size_t lanes = 32, chunk = 8;
  std::array<T, lanes> partial{};
  for (std::size_t c0 = 0; c0 < width; c0 += chunk) {
    T& acc = partial[(c0 / chunk) % lanes];
    for (std::size_t c = c0; c < std::min(c0 + chunk, width); ++c) acc += a[c] * b[c];
  }
  for (std::size_t h = lanes / 2; h >= 1; h /= 2)
    for (std::size_t l = 0; l < h; ++l) partial[l] += partial[l + h];
  return partial[0];
}

/// The dL/dgate reduction of a combined row: for every row r and term q in
/// [seg[r], seg[r+1]), out[r * top_k + slot[q]] = row_dot(outputs row pos[q], grad row r),
/// every other entry of row r zero. Shapes: grad [rows x width], out [rows x top_k].
/// O(seg.back() * width).
template <class T>
void gate_gradients(std::span<const T> outputs, std::span<const T> grad, std::size_t width,
                    std::span<const std::int64_t> seg, std::span<const std::int64_t> pos,
                    std::span<const std::int32_t> slot, std::size_t top_k, std::span<float> out) {
  expect(!seg.empty(), "gate_gradients seg.size()", 0, ">= 1");
  const std::size_t rows = seg.size() - 1;
  detail::check_rows(out.size(), top_k, rows, "gate_gradients out.size()");
  detail::check_rows(grad.size(), width, rows, "gate_gradients grad.size()");
  const auto out_rows = static_cast<std::int64_t>(width == 0 ? 0 : outputs.size() / width);
  for (std::size_t r = 0; r < rows; ++r) {
    std::fill_n(out.data() + r * top_k, top_k, 0.0f);
    for (auto q = static_cast<std::size_t>(seg[r]); q < static_cast<std::size_t>(seg[r + 1]); ++q) {
      if (pos[q] < 0 || pos[q] >= out_rows) fail("gate_gradients pos[q]", pos[q], "a row of outputs");
      if (slot[q] < 0 || static_cast<std::size_t>(slot[q]) >= top_k) fail("gate_gradients slot[q]", slot[q], "a slot in [0, top_k)");
      out[r * top_k + static_cast<std::size_t>(slot[q])] = static_cast<float>(
          row_dot(outputs.data() + static_cast<std::size_t>(pos[q]) * width, grad.data() + r * width, width));
    }
  }
}

}  // namespace disagmoe::host
