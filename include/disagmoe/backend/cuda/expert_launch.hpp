// SPDX-License-Identifier: Apache-2.0
/// @file expert_launch.hpp
/// Host launch functions of the element-wise kernels of the CUDA experts: declared here
/// for host code, defined in expert_kernels.cuh (reached through instantiate.cuh in
/// one nvcc TU). Each enqueues on `stream` and returns; pointers are device memory;
/// n == 0 launches nothing. One thread per element, the arithmetic of expert_math.hpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace disagmoe::cuda::launch {

/// act[i] = silu_gate(h1[i], h3[i]) for i < n. O(n).
void silu_gate(cudaStream_t stream, const float* h1, const float* h3, std::size_t n, float* act);
/// For i < n, with g = dh1[i] on entry: silu_gate_backward(g, h1[i], h3[i], dh1[i], dh3[i]). O(n).
void silu_gate_backward(cudaStream_t stream, const float* h1, const float* h3, std::size_t n, float* dh1, float* dh3);

}  // namespace disagmoe::cuda::launch
