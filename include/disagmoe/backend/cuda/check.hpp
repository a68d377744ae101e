// SPDX-License-Identifier: Apache-2.0
/// @file check.hpp
/// DISAGMOE_CUDA_CHECK(call): throws disagmoe::CudaError naming the call, the file:line
/// and CUDA's error name and string. Host code; needs `disagmoe::cuda`.
#pragma once

#include <disagmoe/error.hpp>

#include <cuda_runtime_api.h>

#include <string>

namespace disagmoe::cuda {

/// Throws CudaError for any status but cudaSuccess; clears the sticky last error first
/// so a later, unrelated check does not report this one again.
inline void check(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) return;
  (void)cudaGetLastError();
  throw CudaError(std::string(file) + ":" + std::to_string(line) + ": " + call + " = " + cudaGetErrorName(status) +
                  ": expected cudaSuccess (" + cudaGetErrorString(status) + ")");
}

/// Number of visible CUDA devices; 0 when there is no driver or no device (never throws).
inline int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

}  // namespace disagmoe::cuda

#define DISAGMOE_CUDA_CHECK(call) ::disagmoe::cuda::check((call), #call, __FILE__, __LINE__)
