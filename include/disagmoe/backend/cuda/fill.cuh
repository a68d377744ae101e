// SPDX-License-Identifier: Apache-2.0
/// @file fill.cuh
/// Device code (nvcc only): an iota fill through CUB/Thrust, the smallest kernel that
/// proves the toolkit's CCCL, C++20 under nvcc and our error checks work together.
/// Used by tests/cuda and scripts/gpu-check.
#pragma once

#include <disagmoe/backend/cuda/check.hpp>
#include <disagmoe/backend/cuda/cub.cuh>  // first: wraps CUB and Thrust

#include <thrust/device_vector.h>
#include <thrust/reduce.h>
#include <thrust/sequence.h>

#include <concepts>
#include <cstdint>

namespace disagmoe::cuda {

/// Sum of 0..n-1 computed on the device (Thrust sequence + reduce on the default stream).
template <std::integral T>
T device_iota_sum(std::int64_t n) {
  namespace thr = THRUST_NS_QUALIFIER;  // wrapped (cub.cuh)
  thr::device_vector<T> v(static_cast<std::size_t>(n));
  thr::sequence(v.begin(), v.end(), T{0});
  const T sum = thr::reduce(v.begin(), v.end(), T{0});
  DISAGMOE_CUDA_CHECK(cudaDeviceSynchronize());
  return sum;
}

}  // namespace disagmoe::cuda
