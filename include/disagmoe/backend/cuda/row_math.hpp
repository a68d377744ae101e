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

/// Columns [c, c + P) of row `r` of the un-permute with weighted combine (the contract of
/// host::combine_rows): acc = t_q0 + t_q1 + ... left to right over q in [seg[r], seg[r+1]),
/// t_q = w[q] * src[idx[q]][c] (src[idx[q]][c] when `w` is null); an empty segment gives
/// zeros. `c` is a multiple of P; the row pointers are P-aligned. O((seg[r+1]-seg[r]) * P).
template <class T, int P>
DISAGMOE_HOST_DEVICE inline Pack<T, P> combine_pack(const T* src, std::size_t width, const std::int64_t* seg,
                                                    const std::int64_t* idx, const float* w, std::size_t r,
                                                    std::size_t c) {
  float acc[P];
  for (int i = 0; i < P; ++i) acc[i] = 0.0f;
  const std::int64_t q0 = seg[r], q1 = seg[r + 1];
  for (std::int64_t q = q0; q < q1; ++q) {
    const auto in = *reinterpret_cast<const Pack<T, P>*>(src + static_cast<std::size_t>(idx[q]) * width + c);
    for (int i = 0; i < P; ++i) {
      const float t = w != nullptr ? mul_rn(w[q], to_float(in.v[i])) : to_float(in.v[i]);
      acc[i] = q == q0 ? t : add_rn(acc[i], t);  // the first term is taken as is (no 0 + t)
    }
  }
  Pack<T, P> out;
  for (int i = 0; i < P; ++i) out.v[i] = from_float<T>(acc[i]);
  return out;
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

/// dL/dgate of one term: sum over c ascending of a[c] * b[c] (host::row_dot's order), in
/// fp32. O(width).
template <class T>
DISAGMOE_HOST_DEVICE inline float row_dot(const T* a, const T* b, std::size_t width) {
  float acc = 0.0f;
  for (std::size_t c = 0; c < width; ++c) acc = add_rn(acc, mul_rn(to_float(a[c]), to_float(b[c])));
  return acc;
}

/// Entry (r, s) of the dL/dgate reduction (host::gate_gradients): row_dot(outputs row
/// pos[q], grad row r) for the last term q of row r with slot[q] == s, else 0.
template <class T>
DISAGMOE_HOST_DEVICE inline float gate_gradient(const T* outputs, const T* grad, std::size_t width,
                                                const std::int64_t* seg, const std::int64_t* pos,
                                                const std::int32_t* slot, std::size_t r, std::int32_t s) {
  for (std::int64_t q = seg[r + 1] - 1; q >= seg[r]; --q)
    if (slot[q] == s) return row_dot(outputs + static_cast<std::size_t>(pos[q]) * width, grad + r * width, width);
  return 0.0f;
}

}  // namespace disagmoe::cuda

namespace disagmoe::comm {
/// bf16 rows travel through channels (comm::row_element).
template <>
inline constexpr bool enable_row_element<__nv_bfloat16> = true;
}  // namespace disagmoe::comm
