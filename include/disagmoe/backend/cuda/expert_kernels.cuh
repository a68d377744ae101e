// SPDX-License-Identifier: Apache-2.0
/// @file expert_kernels.cuh
/// Device code and definitions of the launch functions of expert_launch.hpp. Included
/// once per program, through instantiate.cuh. nvcc only.
#pragma once

#include <disagmoe/backend/cuda/check.hpp>
#include <disagmoe/backend/cuda/expert_launch.hpp>
#include <disagmoe/backend/cuda/expert_math.hpp>
#include <disagmoe/backend/cuda/token_kernels.cuh>  // kernels::blocks_for, kThreads

#include <cuda_runtime.h>

namespace disagmoe::cuda::kernels {

__global__ void silu_gate(const float* __restrict__ h1, const float* __restrict__ h3, std::size_t n,
                          float* __restrict__ act) {
  for (std::size_t i = blockIdx.x * std::size_t{kThreads} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * kThreads)
    act[i] = cuda::silu_gate(h1[i], h3[i]);
}

__global__ void silu_gate_backward(const float* __restrict__ h1, const float* __restrict__ h3, std::size_t n,
                                   float* __restrict__ dh1, float* __restrict__ dh3) {
  for (std::size_t i = blockIdx.x * std::size_t{kThreads} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * kThreads)
    cuda::silu_gate_backward(dh1[i], h1[i], h3[i], dh1[i], dh3[i]);
}

}  // namespace disagmoe::cuda::kernels

namespace disagmoe::cuda::launch {

void silu_gate(cudaStream_t stream, const float* h1, const float* h3, std::size_t n, float* act) {
  if (n == 0) return;
  kernels::silu_gate<<<kernels::blocks_for(n), kernels::kThreads, 0, stream>>>(h1, h3, n, act);
  DISAGMOE_CUDA_CHECK_LAUNCH();
}

void silu_gate_backward(cudaStream_t stream, const float* h1, const float* h3, std::size_t n, float* dh1, float* dh3) {
  if (n == 0) return;
  kernels::silu_gate_backward<<<kernels::blocks_for(n), kernels::kThreads, 0, stream>>>(h1, h3, n, dh1, dh3);
  DISAGMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace disagmoe::cuda::launch
