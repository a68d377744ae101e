// SPDX-License-Identifier: Apache-2.0
/// @file instantiate.cuh
/// The launch functions of expert_launch.hpp and compute_launch.hpp (defined in
/// expert_kernels.cuh and compute_kernels.cuh), and
/// explicit instantiations of the launch functions of launch.hpp for the row types
/// float and __nv_bfloat16, int32 routing ids and int64 counts. Include it in exactly one
/// nvcc-compiled TU of a program (a second copy is a duplicate definition at link time);
/// host code then calls the launch functions, and `cuda::Backend`, with a host
/// compiler alone. nvcc only.
#pragma once

#include <disagmoe/backend/cuda/compute_kernels.cuh>
#include <disagmoe/backend/cuda/expert_kernels.cuh>
#include <disagmoe/backend/cuda/token_kernels.cuh>

namespace disagmoe::cuda::launch {

#define DISAGMOE_CUDA_INSTANTIATE_ROWS_(T)                                                                          \
  template void gather_rows<T>(cudaStream_t, const T*, std::size_t, const std::int64_t*, std::size_t, T*);        \
  template void gather_rows_scaled<T>(cudaStream_t, const T*, std::size_t, const std::int64_t*, const float*,     \
                                      std::size_t, T*);                                                           \
  template void combine_rows<T>(cudaStream_t, const T*, std::size_t, const std::int64_t*, std::size_t,            \
                                const std::int64_t*, const float*, T*);                                           \
  template void gate_gradients<T>(cudaStream_t, const T*, const T*, std::size_t, const std::int64_t*, std::size_t, \
                                  const std::int64_t*, const std::int32_t*, std::size_t, float*);

DISAGMOE_CUDA_INSTANTIATE_ROWS_(float)
DISAGMOE_CUDA_INSTANTIATE_ROWS_(__nv_bfloat16)
#undef DISAGMOE_CUDA_INSTANTIATE_ROWS_

template void gather_rows<std::int64_t>(cudaStream_t, const std::int64_t*, std::size_t, const std::int64_t*,
                                        std::size_t, std::int64_t*);
template void histogram<std::int32_t>(cudaStream_t, const std::int32_t*, std::size_t, std::int64_t*, std::size_t);
template std::size_t exclusive_offsets_temp_bytes<std::int64_t>(std::size_t);
template void exclusive_offsets<std::int64_t>(cudaStream_t, const std::int64_t*, std::size_t, std::int64_t*, void*,
                                              std::size_t);
template std::size_t send_once_layout_workspace_bytes<std::int32_t>(std::size_t, int, int);
template void send_once_layout<std::int32_t>(cudaStream_t, const std::int32_t*, std::size_t, int, const std::int32_t*,
                                             int, void*, std::size_t, std::int64_t*, std::int64_t*, std::int64_t*,
                                             std::int64_t*);

}  // namespace disagmoe::cuda::launch
