// SPDX-License-Identifier: Apache-2.0
/// @file launch.hpp
/// Host launch functions of the CUDA token kernels: declared here for host code
/// (compiled by a host compiler alone), defined in token_kernels.cuh, and instantiated
/// for float and __nv_bfloat16 rows in one nvcc-compiled TU of the program by
/// including backend/cuda/instantiate.cuh there.
///
/// Every function enqueues on `stream` and returns at once; every pointer is device
/// memory (or managed); element counts may be 0 (nothing is launched). Index arguments
/// are valid by precondition (comm/backend.hpp), as for any device kernel: an index
/// out of range is undefined behaviour, typically a sticky cudaErrorIllegalAddress.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace disagmoe::cuda::launch {

/// dst row i = src row index[i], i < rows; rows are `width` elements (a bit copy,
/// 16-byte accesses where alignment allows). O(rows * width).
template <class T>
void gather_rows(cudaStream_t stream, const T* src, std::size_t width, const std::int64_t* index, std::size_t rows,
                 T* dst);

/// dst row i = scale[i] * src row index[i] (row_math.hpp scaled_pack). O(rows * width).
template <class T>
void gather_rows_scaled(cudaStream_t stream, const T* src, std::size_t width, const std::int64_t* index,
                        const float* scale, std::size_t rows, T* dst);

/// Output row r (r < rows) = the weighted combine of row_math.hpp combine_packs over
/// q in [seg[r], seg[r+1]); `w` may be null (unweighted). O(seg[rows] * width).
template <class T>
void combine_rows(cudaStream_t stream, const T* src, std::size_t width, const std::int64_t* seg, std::size_t rows,
                  const std::int64_t* idx, const float* w, T* out);

/// out[r * top_k + s] = row_math.hpp gate_gradient(r, s) for r < rows, s < top_k: one
/// warp per entry, its lanes summing row_dot's partials with coalesced loads, then its
/// butterfly. O(rows * top_k * width) work, O(width / 32) depth.
template <class T>
void gate_gradients(cudaStream_t stream, const T* outputs, const T* grad, std::size_t width, const std::int64_t* seg,
                    std::size_t rows, const std::int64_t* pos, const std::int32_t* slot, std::size_t top_k,
                    float* out);

/// counts[b] = number of i < n with bins[i] == b, b < nbins (zeroes counts first; integer
/// atomics, so the result is exact and order-free). Bins outside [0, nbins) are not
/// counted. O(n + nbins).
template <class Bin>
void histogram(cudaStream_t stream, const Bin* bins, std::size_t n, std::int64_t* counts, std::size_t nbins);

/// Bytes of temp storage `exclusive_offsets` needs for n counts (CUB's first phase).
template <class Count>
std::size_t exclusive_offsets_temp_bytes(std::size_t n);
/// offsets[0] = 0, offsets[i+1] = offsets[i] + counts[i] for i < n (cub::DeviceScan::
/// InclusiveSum into offsets + 1). `temp` holds exclusive_offsets_temp_bytes(n) bytes. O(n).
template <class Count>
void exclusive_offsets(cudaStream_t stream, const Count* counts, std::size_t n, std::int64_t* offsets, void* temp,
                       std::size_t temp_bytes);

/// Bytes of workspace `send_once_layout` needs (flags, scans, CUB temp storage).
template <class Id>
std::size_t send_once_layout_workspace_bytes(std::size_t tokens, int top_k, int ranks);
/// The send-once layout of comm/layout.hpp `SendOnceLayout::build`, on the device:
/// a token is sent once to each distinct rank holding one of its top_k experts; rows are
/// numbered destination-major and, within a destination, in token order (a stable
/// permute by destination). Outputs (device, int64):
///   offsets [ranks + 1]     first row of each destination, offsets[ranks] = total rows;
///   token_offsets [tokens + 1], token_rows [tokens * top_k]: the rows of token t are
///                           token_rows[token_offsets[t] .. token_offsets[t+1]), ascending;
///   row_token [tokens * min(top_k, ranks)]: the token of every row.
/// Precondition: ids in [0, experts), expert_rank entries in [0, ranks), top_k <= 64.
/// Deterministic (scans, no atomics). O(tokens * (top_k^2 + ranks)).
template <class Id>
void send_once_layout(cudaStream_t stream, const Id* topk_ids, std::size_t tokens, int top_k,
                      const std::int32_t* expert_rank, int ranks, void* workspace, std::size_t workspace_bytes,
                      std::int64_t* offsets, std::int64_t* token_offsets, std::int64_t* token_rows,
                      std::int64_t* row_token);

}  // namespace disagmoe::cuda::launch
