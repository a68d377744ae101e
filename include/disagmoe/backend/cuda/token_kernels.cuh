// SPDX-License-Identifier: Apache-2.0
/// @file token_kernels.cuh
/// Device code of the CUDA token kernels and the definitions of the launch functions
/// declared in launch.hpp (see there for each one's contract). nvcc only.
///
/// Every kernel is a grid-stride loop over its outputs, each output written by exactly
/// one thread with the arithmetic of row_math.hpp, so results do not depend on the
/// launch configuration and fp32 results equal the host kernels bit for bit. No float
/// atomics anywhere; the histogram's integer atomics give an exact, order-free count.
/// CUB is used for scans through its two-phase temp-storage protocol (CUB docs,
/// "Temporary storage": a first call with a null pointer returns the bytes needed) in
/// a wrapped namespace (cub.cuh).
#pragma once

#include <disagmoe/backend/cuda/cub.cuh>  // first: wraps CUB

#include <disagmoe/backend/cuda/check.hpp>
#include <disagmoe/backend/cuda/launch.hpp>
#include <disagmoe/backend/cuda/row_math.hpp>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

namespace disagmoe::cuda::kernels {

/// Threads per block of every kernel here (a multiple of the warp size).
inline constexpr int kThreads = 256;
/// Most blocks of a grid-stride launch (enough to fill any current GPU many times over).
inline constexpr std::size_t kMaxBlocks = std::size_t{1} << 16;

/// Blocks for `n` independent items (at least 1; callers skip n == 0).
inline unsigned blocks_for(std::size_t n) {
  return static_cast<unsigned>(std::min(kMaxBlocks, (n + kThreads - 1) / kThreads));
}

/// True when `p` is aligned to `bytes`.
inline bool aligned(const void* p, std::size_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

template <class Word>
__global__ void gather_words(const Word* __restrict__ src, std::size_t row_words, const std::int64_t* __restrict__ index,
                             std::size_t total, Word* __restrict__ dst) {
  for (std::size_t g = blockIdx.x * std::size_t{kThreads} + threadIdx.x; g < total;
       g += std::size_t{gridDim.x} * kThreads) {
    const std::size_t i = g / row_words, c = g - i * row_words;
    dst[g] = src[static_cast<std::size_t>(index[i]) * row_words + c];
  }
}

template <class Word>
void launch_gather_words(cudaStream_t stream, const void* src, std::size_t row_bytes, const std::int64_t* index,
                         std::size_t rows, void* dst) {
  const std::size_t row_words = row_bytes / sizeof(Word), total = rows * row_words;
  gather_words<Word><<<blocks_for(total), kThreads, 0, stream>>>(static_cast<const Word*>(src), row_words, index,
                                                                  total, static_cast<Word*>(dst));
  DISAGMOE_CUDA_CHECK_LAUNCH();
}

template <class T, int P>
__global__ void scaled_rows(const T* __restrict__ src, std::size_t width, const std::int64_t* __restrict__ index,
                            const float* __restrict__ scale, std::size_t total, T* __restrict__ dst) {
  const std::size_t packs = width / P;
  for (std::size_t g = blockIdx.x * std::size_t{kThreads} + threadIdx.x; g < total;
       g += std::size_t{gridDim.x} * kThreads) {
    const std::size_t i = g / packs, c = (g - i * packs) * P;
    *reinterpret_cast<Pack<T, P>*>(dst + i * width + c) = scaled_pack<T, P>(src, width, index, scale, i, c);
  }
}

/// Thread g of row r writes packs j, j + J, ..., j + (U-1)J of the row (J = ceil(packs /
/// U), j = g mod J): neighbours stay on neighbouring packs, and each thread reads its
/// row's terms once for U independent loads.
template <class T, int P, int U, bool full>
__global__ void combine(const T* __restrict__ src, std::size_t width, const std::int64_t* __restrict__ seg,
                        const std::int64_t* __restrict__ idx, const float* __restrict__ w,
                        std::size_t per_row, std::size_t total, T* __restrict__ out) {
  for (std::size_t g = blockIdx.x * std::size_t{kThreads} + threadIdx.x; g < total;
       g += std::size_t{gridDim.x} * kThreads) {
    const std::size_t r = g / per_row, j = g - r * per_row;
    combine_packs<T, P, U, full>(src, width, seg, idx, w, r, j * P, per_row * P, out + r * width);
  }
}

/// One warp per entry (r, s): the lanes load the two rows' 16-byte chunks side by side
/// (row_dot_partial), then meet in the butterfly of row_dot_tree through xor shuffles (lane
/// 0 ends with partial[0] of the tree: lane l < h adds lane l + h, as there).
template <class T, bool packed>
__global__ void gate_grad(const T* __restrict__ outputs, const T* __restrict__ grad, std::size_t width,
                          const std::int64_t* __restrict__ seg, const std::int64_t* __restrict__ pos,
                          const std::int32_t* __restrict__ slot, std::size_t top_k, std::size_t total,
                          float* __restrict__ out) {
  constexpr unsigned kWarps = kThreads / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  for (std::size_t g = blockIdx.x * std::size_t{kWarps} + threadIdx.x / 32; g < total;
       g += std::size_t{gridDim.x} * kWarps) {
    const std::size_t r = g / top_k;
    const std::int64_t q = gate_term(seg, slot, r, static_cast<std::int32_t>(g - r * top_k));
    float v = 0.0f;
    if (q >= 0) {  // uniform across the warp
      v = row_dot_partial<T, packed>(outputs + static_cast<std::size_t>(pos[q]) * width, grad + r * width,
                                     width, lane);
      for (int h = kDotLanes / 2; h >= 1; h /= 2) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, h));
    }
    if (lane == 0) out[g] = v;
  }
}

template <class Bin>
__global__ void count_bins(const Bin* __restrict__ bins, std::size_t n, unsigned long long* counts, std::size_t nbins) {
  for (std::size_t i = blockIdx.x * std::size_t{kThreads} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * kThreads) {
    const auto b = static_cast<long long>(bins[i]);
    if (b >= 0 && static_cast<std::size_t>(b) < nbins) atomicAdd(counts + b, 1ULL);
  }
}

/// Send-once layout, pass 1 (one thread per token): the distinct destinations of token t
/// in ascending order, their number, and flags[d * tokens + t] = 1 for each.
template <class Id>
__global__ void token_destinations(const Id* __restrict__ topk_ids, std::size_t tokens, int top_k,
                                   const std::int32_t* __restrict__ expert_rank, std::int32_t* __restrict__ token_dest,
                                   std::int64_t* __restrict__ degree, std::int64_t* __restrict__ flags) {
  for (std::size_t t = blockIdx.x * std::size_t{kThreads} + threadIdx.x; t < tokens;
       t += std::size_t{gridDim.x} * kThreads) {
    const Id* ids = topk_ids + t * static_cast<std::size_t>(top_k);
    int distinct = 0;
    for (int j = 0; j < top_k; ++j) {
      const std::int32_t d = expert_rank[ids[j]];
      bool first = true;
      int below = 0;  // distinct destinations smaller than d
      for (int i = 0; i < top_k; ++i) {
        const std::int32_t e = expert_rank[ids[i]];
        if (e == d && i < j) first = false;
        if (e < d) {
          bool seen = false;  // count e once: at its first slot
          for (int h = 0; h < i; ++h) seen = seen || expert_rank[ids[h]] == e;
          below += seen ? 0 : 1;
        }
      }
      if (!first) continue;
      token_dest[t * static_cast<std::size_t>(top_k) + static_cast<std::size_t>(below)] = d;
      flags[static_cast<std::size_t>(d) * tokens + t] = 1;
      ++distinct;
    }
    degree[t] = distinct;
  }
}

/// Pass 2 (one thread per token): places the token's rows. pos = exclusive scan of the
/// destination-major flags, so pos[d * tokens + t] is the row of (d, t).
template <class I>
__global__ void place_rows(std::size_t tokens, int top_k, const std::int32_t* __restrict__ token_dest,
                           const I* __restrict__ pos, const I* __restrict__ token_offsets, I* __restrict__ token_rows,
                           I* __restrict__ row_token) {
  for (std::size_t t = blockIdx.x * std::size_t{kThreads} + threadIdx.x; t < tokens;
       t += std::size_t{gridDim.x} * kThreads) {
    const I q0 = token_offsets[t], q1 = token_offsets[t + 1];
    for (I i = 0; i < q1 - q0; ++i) {
      const auto d = static_cast<std::size_t>(token_dest[t * static_cast<std::size_t>(top_k) + static_cast<std::size_t>(i)]);
      const I row = pos[d * tokens + t];
      token_rows[q0 + i] = row;
      row_token[row] = static_cast<I>(t);
    }
  }
}

/// Pass 3: offsets[d] = pos[d * tokens] (the rows before destination d), d <= ranks.
template <class I>
__global__ void destination_offsets(std::size_t tokens, int ranks, const I* __restrict__ pos, I* __restrict__ offsets) {
  const int d = static_cast<int>(blockIdx.x * kThreads + threadIdx.x);
  if (d <= ranks) offsets[d] = pos[static_cast<std::size_t>(d) * tokens];
}

/// Carves a workspace into 256-byte aligned pieces.
struct Carver {
  char* base;
  std::size_t used = 0;
  template <class E>
  E* take(std::size_t n) {
    used = (used + 255) / 256 * 256;
    E* p = base == nullptr ? nullptr : reinterpret_cast<E*>(base + used);
    used += n * sizeof(E);
    return p;
  }
};

/// The send-once workspace: flags and their scan (ranks * tokens + 1 each: the extra
/// zero makes the last scan entry the total), degrees, destinations, CUB temp storage.
struct LayoutWorkspace {
  std::int64_t *flags, *pos, *degree;
  std::int32_t* token_dest;
  void* temp;
  std::size_t temp_bytes, bytes;
};

template <class Id>
LayoutWorkspace carve_layout(void* base, std::size_t tokens, int top_k, int ranks) {
  const std::size_t cells = static_cast<std::size_t>(ranks) * tokens + 1;
  std::size_t scan_bytes = 0, sum_bytes = 0;
  DISAGMOE_CUDA_CHECK(cubw::DeviceScan::ExclusiveSum(nullptr, scan_bytes, static_cast<const std::int64_t*>(nullptr),
                                                     static_cast<std::int64_t*>(nullptr), static_cast<std::int64_t>(cells)));
  DISAGMOE_CUDA_CHECK(cubw::DeviceScan::InclusiveSum(nullptr, sum_bytes, static_cast<const std::int64_t*>(nullptr),
                                                     static_cast<std::int64_t*>(nullptr), static_cast<std::int64_t>(tokens)));
  Carver c{static_cast<char*>(base)};
  LayoutWorkspace w{};
  w.flags = c.take<std::int64_t>(cells);
  w.pos = c.take<std::int64_t>(cells);
  w.degree = c.take<std::int64_t>(tokens);
  w.token_dest = c.take<std::int32_t>(tokens * static_cast<std::size_t>(top_k));
  w.temp_bytes = std::max(scan_bytes, sum_bytes);
  w.temp = c.take<char>(w.temp_bytes);
  w.bytes = c.used;
  return w;
}

}  // namespace disagmoe::cuda::kernels

namespace disagmoe::cuda::launch {

template <class T>
void gather_rows(cudaStream_t stream, const T* src, std::size_t width, const std::int64_t* index, std::size_t rows,
                 T* dst) {
  const std::size_t row_bytes = width * sizeof(T);
  if (rows == 0 || row_bytes == 0) return;
  // The widest word that divides the row and aligns both bases (cudaMalloc gives 256 bytes).
  auto fits = [&](std::size_t w) { return row_bytes % w == 0 && kernels::aligned(src, w) && kernels::aligned(dst, w); };
  if (fits(16))
    kernels::launch_gather_words<uint4>(stream, src, row_bytes, index, rows, dst);
  else if (fits(8))
    kernels::launch_gather_words<unsigned long long>(stream, src, row_bytes, index, rows, dst);
  else if (fits(4))
    kernels::launch_gather_words<unsigned>(stream, src, row_bytes, index, rows, dst);
  else if (fits(2))
    kernels::launch_gather_words<unsigned short>(stream, src, row_bytes, index, rows, dst);
  else
    kernels::launch_gather_words<unsigned char>(stream, src, row_bytes, index, rows, dst);
}

template <class T>
void gather_rows_scaled(cudaStream_t stream, const T* src, std::size_t width, const std::int64_t* index,
                        const float* scale, std::size_t rows, T* dst) {
  if (rows == 0 || width == 0) return;
  constexpr int kP = 16 / sizeof(T);
  if (width % kP == 0 && kernels::aligned(src, 16) && kernels::aligned(dst, 16)) {
    const std::size_t total = rows * (width / kP);
    kernels::scaled_rows<T, kP><<<kernels::blocks_for(total), kernels::kThreads, 0, stream>>>(src, width, index, scale,
                                                                                             total, dst);
  } else {
    const std::size_t total = rows * width;
    kernels::scaled_rows<T, 1><<<kernels::blocks_for(total), kernels::kThreads, 0, stream>>>(src, width, index, scale,
                                                                                            total, dst);
  }
  DISAGMOE_CUDA_CHECK_LAUNCH();
}

template <class T>
void combine_rows(cudaStream_t stream, const T* src, std::size_t width, const std::int64_t* seg, std::size_t rows,
                  const std::int64_t* idx, const float* w, T* out) {
  if (rows == 0 || width == 0) return;
  // Two packs per thread, unguarded where the packs split evenly: measured fastest of the
  // variants in bench/RESULTS.md (session 21) on an H200.
  constexpr int kP = 16 / sizeof(T), kU = 2;
  if (width % kP == 0 && kernels::aligned(src, 16) && kernels::aligned(out, 16)) {
    const std::size_t per_row = (width / kP + kU - 1) / kU, total = rows * per_row;
    const unsigned blocks = kernels::blocks_for(total);
    if ((width / kP) % kU == 0)
      kernels::combine<T, kP, kU, true>
          <<<blocks, kernels::kThreads, 0, stream>>>(src, width, seg, idx, w, per_row, total, out);
    else
      kernels::combine<T, kP, kU, false>
          <<<blocks, kernels::kThreads, 0, stream>>>(src, width, seg, idx, w, per_row, total, out);
  } else {
    const std::size_t total = rows * width;
    kernels::combine<T, 1, 1, true><<<kernels::blocks_for(total), kernels::kThreads, 0, stream>>>(
        src, width, seg, idx, w, width, total, out);
  }
  DISAGMOE_CUDA_CHECK_LAUNCH();
}

template <class T>
void gate_gradients(cudaStream_t stream, const T* outputs, const T* grad, std::size_t width, const std::int64_t* seg,
                    std::size_t rows, const std::int64_t* pos, const std::int32_t* slot, std::size_t top_k,
                    float* out) {
  const std::size_t total = rows * top_k;
  if (total == 0) return;
  // One warp per entry: blocks_for counts threads, so ask for 32 per entry (capped).
  const unsigned blocks =
      kernels::blocks_for(std::min(total, kernels::kMaxBlocks * kernels::kThreads / 32) * 32);
  const bool packed = width % kDotChunk == 0 && (width * sizeof(T)) % 16 == 0 &&
                      kernels::aligned(outputs, 16) && kernels::aligned(grad, 16);
  if (packed)
    kernels::gate_grad<T, true>
        <<<blocks, kernels::kThreads, 0, stream>>>(outputs, grad, width, seg, pos, slot, top_k, total, out);
  else
    kernels::gate_grad<T, false>
        <<<blocks, kernels::kThreads, 0, stream>>>(outputs, grad, width, seg, pos, slot, top_k, total, out);
  DISAGMOE_CUDA_CHECK_LAUNCH();
}

template <class Bin>
void histogram(cudaStream_t stream, const Bin* bins, std::size_t n, std::int64_t* counts, std::size_t nbins) {
  static_assert(sizeof(std::int64_t) == sizeof(unsigned long long));
  if (nbins == 0) return;
  DISAGMOE_CUDA_CHECK(cudaMemsetAsync(counts, 0, nbins * sizeof(std::int64_t), stream));
  if (n == 0) return;
  kernels::count_bins<Bin><<<kernels::blocks_for(n), kernels::kThreads, 0, stream>>>(
      bins, n, reinterpret_cast<unsigned long long*>(counts), nbins);
  DISAGMOE_CUDA_CHECK_LAUNCH();
}

template <class Count>
std::size_t exclusive_offsets_temp_bytes(std::size_t n) {
  std::size_t bytes = 0;
  DISAGMOE_CUDA_CHECK(cubw::DeviceScan::InclusiveSum(nullptr, bytes, static_cast<const Count*>(nullptr),
                                                     static_cast<std::int64_t*>(nullptr), static_cast<std::int64_t>(n)));
  return bytes;
}

template <class Count>
void exclusive_offsets(cudaStream_t stream, const Count* counts, std::size_t n, std::int64_t* offsets, void* temp,
                       std::size_t temp_bytes) {
  DISAGMOE_CUDA_CHECK(cudaMemsetAsync(offsets, 0, sizeof(std::int64_t), stream));
  if (n == 0) return;
  DISAGMOE_CUDA_CHECK(cubw::DeviceScan::InclusiveSum(temp, temp_bytes, counts, offsets + 1, static_cast<std::int64_t>(n),
                                                     stream));
}

template <class Id>
std::size_t send_once_layout_workspace_bytes(std::size_t tokens, int top_k, int ranks) {
  return kernels::carve_layout<Id>(nullptr, tokens, top_k, ranks).bytes;
}

template <class Id>
void send_once_layout(cudaStream_t stream, const Id* topk_ids, std::size_t tokens, int top_k,
                      const std::int32_t* expert_rank, int ranks, void* workspace, std::size_t workspace_bytes,
                      std::int64_t* offsets, std::int64_t* token_offsets, std::int64_t* token_rows,
                      std::int64_t* row_token) {
  const auto w = kernels::carve_layout<Id>(workspace, tokens, top_k, ranks);
  if (workspace_bytes < w.bytes)
    fail("send_once_layout workspace_bytes", workspace_bytes,
         "at least send_once_layout_workspace_bytes (" + std::to_string(w.bytes) + ")");
  const std::size_t cells = static_cast<std::size_t>(ranks) * tokens + 1;
  DISAGMOE_CUDA_CHECK(cudaMemsetAsync(w.flags, 0, cells * sizeof(std::int64_t), stream));
  if (tokens > 0) {
    kernels::token_destinations<Id><<<kernels::blocks_for(tokens), kernels::kThreads, 0, stream>>>(
        topk_ids, tokens, top_k, expert_rank, w.token_dest, w.degree, w.flags);
    DISAGMOE_CUDA_CHECK_LAUNCH();
  }
  std::size_t temp_bytes = w.temp_bytes;
  DISAGMOE_CUDA_CHECK(cubw::DeviceScan::ExclusiveSum(w.temp, temp_bytes, static_cast<const std::int64_t*>(w.flags), w.pos,
                                                     static_cast<std::int64_t>(cells), stream));
  exclusive_offsets<std::int64_t>(stream, w.degree, tokens, token_offsets, w.temp, w.temp_bytes);
  if (tokens > 0) {
    kernels::place_rows<std::int64_t><<<kernels::blocks_for(tokens), kernels::kThreads, 0, stream>>>(
        tokens, top_k, w.token_dest, w.pos, token_offsets, token_rows, row_token);
    DISAGMOE_CUDA_CHECK_LAUNCH();
  }
  kernels::destination_offsets<std::int64_t><<<kernels::blocks_for(static_cast<std::size_t>(ranks) + 1), kernels::kThreads, 0,
                                 stream>>>(tokens, ranks, w.pos, offsets);
  DISAGMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace disagmoe::cuda::launch
