// SPDX-License-Identifier: Apache-2.0
/// @file row_math.hpp
/// The per-element arithmetic of the CUDA token kernels as `DISAGMOE_HOST_DEVICE`
/// functions, so the host compiles and tests the very code the device runs
/// (tests/cuda/test_row_math.cpp checks it against backend/host/token_kernels.hpp).
///
/// Rounding: products and sums use `mul_rn` / `add_rn`, which nvcc never contracts into
/// an FMA (__fmul_rn / __fadd_rn, CUDA Math API "Single Precision Intrinsics"); with the
/// host's uncontracted fp32 this makes fp32 results bitwise equal to the host kernels.
/// bf16 rows are converted to fp32, computed in fp32 in the same order and rounded to
/// bf16 once (round to nearest even): deterministic, more accurate than bf16 arithmetic
/// at every step, equal to the host kernels within bf16 tolerance only.
/// Host code (a host compiler alone can include it); needs the CUDA include path.
#pragma once

#include <disagmoe/comm/backend.hpp>
#include <disagmoe/config.hpp>

#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace disagmoe::cuda {

/// The row element types of the CUDA token kernels.
template <class T>
inline constexpr bool is_row_element_v = std::is_same_v<T, float> || std::is_same_v<T, __nv_bfloat16>;

/// x as fp32 (exact for both row types).
DISAGMOE_HOST_DEVICE inline float to_float(float x) { return x; }
DISAGMOE_HOST_DEVICE inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

/// x rounded to T (round to nearest even).
template <class T>
DISAGMOE_HOST_DEVICE inline T from_float(float x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else {
    return __float2bfloat16_rn(x);
  }
}

/// a * b rounded once (never fused with a following add).
DISAGMOE_HOST_DEVICE inline float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
/// a + b rounded once (never fused with a preceding multiply).
DISAGMOE_HOST_DEVICE inline float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

/// `P` consecutive elements of a row, loaded and stored as one aligned access (16 bytes
/// for the packed kernels, as MegaBlocks' and CUTLASS' vectorised copies do).
template <class T, int P>
struct alignas(sizeof(T) * P) Pack {
  T v[P];
};

/// Packs u < U at columns c + u * stride (those that start below `width`) of row `r` of
/// the un-permute with weighted combine (the contract of host::combine_rows): acc = t_q0 +
/// t_q1 + ... left to right over q in [seg[r], seg[r+1]), t_q = w[q] * src[idx[q]][col]
/// (src[idx[q]][col] when `w` is null); an empty segment gives zeros. Writes them to
/// `out_row` (row r of the output). U > 1 puts U independent loads in flight per term;
/// `full` says every pack starts below `width` (no guard on the loads, which lets them
/// issue together). `c` and `stride` are multiples of P; the row pointers are P-aligned.
/// O((seg[r+1]-seg[r]) * U * P).
template <class T, int P, int U = 1, bool full = false>
DISAGMOE_HOST_DEVICE inline void combine_packs(const T* src, std::size_t width, const std::int64_t* seg,
                                               const std::int64_t* idx, const float* w, std::size_t r,
                                               std::size_t c, std::size_t stride, T* out_row) {
  float acc[U][P];
  for (int u = 0; u < U; ++u)
    for (int i = 0; i < P; ++i) acc[u][i] = 0.0f;
  const std::int64_t q0 = seg[r], q1 = seg[r + 1];
  for (std::int64_t q = q0; q < q1; ++q) {
    const T* row = src + static_cast<std::size_t>(idx[q]) * width;
    Pack<T, P> in[U]{};
    for (int u = 0; u < U; ++u)
      if (full || c + u * stride < width) in[u] = *reinterpret_cast<const Pack<T, P>*>(row + c + u * stride);
    for (int u = 0; u < U; ++u)
      for (int i = 0; i < P; ++i) {
        const float t = w != nullptr ? mul_rn(w[q], to_float(in[u].v[i])) : to_float(in[u].v[i]);
        acc[u][i] = q == q0 ? t : add_rn(acc[u][i], t);  // the first term is taken as is (no 0 + t)
      }
  }
  for (int u = 0; u < U; ++u) {
    if (!full && c + u * stride >= width) continue;
    Pack<T, P> o;
    for (int i = 0; i < P; ++i) o.v[i] = from_float<T>(acc[u][i]);
    *reinterpret_cast<Pack<T, P>*>(out_row + c + u * stride) = o;
  }
}

/// Columns [c, c + P) of row i of the scaled gather: scale[i] * src[index[i]][c].
template <class T, int P>
DISAGMOE_HOST_DEVICE inline Pack<T, P> scaled_pack(const T* src, std::size_t width, const std::int64_t* index,
                                                   const float* scale, std::size_t i, std::size_t c) {
  const auto in = *reinterpret_cast<const Pack<T, P>*>(src + static_cast<std::size_t>(index[i]) * width + c);
  Pack<T, P> out;
  for (int j = 0; j < P; ++j) out.v[j] = from_float<T>(mul_rn(scale[i], to_float(in.v[j])));
  return out;
}

/// The dL/dgate dot product's summation order (host::row_dot's): column c goes to lane
/// (c / kDotChunk) % kDotLanes, each lane sums its columns in ascending order, and the
/// lanes' partials meet in a butterfly (row_dot_tree). A warp computes it with one lane
/// per partial and coalesced 16-byte loads; any launch gives the same bits.
inline constexpr int kDotLanes = 32;
inline constexpr std::size_t kDotChunk = 8;

/// Lane `lane`'s partial of row_dot(a, b, width) in fp32. `packed`: the rows are 16-byte
/// aligned and width is a multiple of kDotChunk (16-byte loads). O(width / kDotLanes).
template <class T, bool packed = false>
DISAGMOE_HOST_DEVICE inline float row_dot_partial(const T* a, const T* b, std::size_t width, int lane) {
  float acc = 0.0f;
  for (std::size_t c0 = static_cast<std::size_t>(lane) * kDotChunk; c0 < width; c0 += kDotLanes * kDotChunk) {
    if constexpr (packed) {
      constexpr int P = 16 / sizeof(T);
      for (std::size_t p = 0; p < kDotChunk; p += P) {
        const auto x = *reinterpret_cast<const Pack<T, P>*>(a + c0 + p);
        const auto y = *reinterpret_cast<const Pack<T, P>*>(b + c0 + p);
        for (int i = 0; i < P; ++i) acc = add_rn(acc, mul_rn(to_float(x.v[i]), to_float(y.v[i])));
      }
    } else {
      const std::size_t end = c0 + kDotChunk < width ? c0 + kDotChunk : width;
      for (std::size_t c = c0; c < end; ++c) acc = add_rn(acc, mul_rn(to_float(a[c]), to_float(b[c])));
    }
  }
  return acc;
}

/// The lanes' partials summed as a butterfly: for h = 16, 8, 4, 2, 1, partial[l] +=
/// partial[l ^ h] (what a warp's xor shuffles give; fp32 addition commutes, so every lane
/// ends with the same value). Overwrites `partial`; returns the total.
DISAGMOE_HOST_DEVICE inline float row_dot_tree(float* partial) {
  for (int h = kDotLanes / 2; h >= 1; h /= 2)
    for (int l = 0; l < h; ++l) partial[l] = add_rn(partial[l], partial[l + h]);
  return partial[0];
}

/// dL/dgate of one term: the dot product of two rows in fp32, in the order above
/// (serially: the host's reference of the warp kernel). O(width).
template <class T>
DISAGMOE_HOST_DEVICE inline float row_dot(const T* a, const T* b, std::size_t width) {
  float partial[kDotLanes];
  for (int l = 0; l < kDotLanes; ++l) partial[l] = row_dot_partial<T>(a, b, width, l);
  return row_dot_tree(partial);
}

/// The last term q of row r with slot[q] == s (-1 when none): the term whose dot product
/// is entry (r, s) of the dL/dgate reduction.
DISAGMOE_HOST_DEVICE inline std::int64_t gate_term(const std::int64_t* seg, const std::int32_t* slot,
                                                   std::size_t r, std::int32_t s) {
  for (std::int64_t q = seg[r + 1] - 1; q >= seg[r]; --q)
    if (slot[q] == s) return q;
  return -1;
}

/// Entry (r, s) of the dL/dgate reduction (host::gate_gradients): row_dot(outputs row
/// pos[q], grad row r) for q = gate_term(r, s), else 0.
template <class T>
DISAGMOE_HOST_DEVICE inline float gate_gradient(const T* outputs, const T* grad, std::size_t width,
                                                const std::int64_t* seg, const std::int64_t* pos,
                                                const std::int32_t* slot, std::size_t r, std::int32_t s) {
  const std::int64_t q = gate_term(seg, slot, r, s);
  return q < 0 ? 0.0f : row_dot(outputs + static_cast<std::size_t>(pos[q]) * width, grad + r * width, width);
}

}  // namespace disagmoe::cuda

namespace disagmoe::comm {
/// bf16 rows travel through channels (comm::row_element).
template <>
inline constexpr bool enable_row_element<__nv_bfloat16> = true;
}  // namespace disagmoe::comm
