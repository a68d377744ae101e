// SPDX-License-Identifier: Apache-2.0
/// @file check.hpp
/// DISAGMOE_CUDA_CHECK(call): throws disagmoe::CudaError naming the call, the file:line
/// and CUDA's error name and string; a sticky error (one that leaves the context
/// unusable, CUDA Programming Guide §"Error Checking") throws `CudaFatalError`, marked
/// "fatal" in its message. DISAGMOE_CUDA_CHECK_LAUNCH() checks the last kernel launch.
/// Host code; needs `disagmoe::cuda`.
#pragma once

#include <disagmoe/error.hpp>

#include <cuda_runtime_api.h>

#include <string>

namespace disagmoe {

/// A sticky CUDA error: the context is corrupt and every later CUDA call of the process
/// fails, so the only recovery is a new process (as PyTorch reports "CUDA error: an
/// illegal memory access ... may be asynchronously reported"). Catching `CudaError`
/// catches it too.
class CudaFatalError : public CudaError {
 public:
  using CudaError::CudaError;
};

}  // namespace disagmoe

namespace disagmoe::cuda {

/// True for the errors the runtime documents as leaving the context unusable ("the
/// process must be terminated and relaunched"): faults raised by a kernel.
inline bool is_sticky(cudaError_t status) noexcept {
  switch (status) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorLaunchTimeout:
      return true;
    default:
      return false;
  }
}

/// Throws CudaError (CudaFatalError when sticky) for any status but cudaSuccess; clears
/// the last error first so a later, unrelated check does not report this one again.
inline void check(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) return;
  (void)cudaGetLastError();
  std::string msg = std::string(file) + ":" + std::to_string(line) + ": " + call + " = " + cudaGetErrorName(status) +
                    ": expected cudaSuccess (" + cudaGetErrorString(status) + ")";
  if (is_sticky(status)) throw CudaFatalError(msg + " [fatal: sticky error, the CUDA context is unusable]");
  throw CudaError(msg);
}

/// Number of visible CUDA devices; 0 when there is no driver or no device (never throws).
inline int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) == cudaSuccess) return n;
  (void)cudaGetLastError();
  return 0;
}

/// Why device_count() is 0, for a skip or an error message: "cudaErrorNoDevice (...)", or
/// a driver older than the runtime (cudaErrorInsufficientDriver), which must not pass
/// for a machine without a GPU; "" when a device is visible.
inline std::string no_device_reason() {
  int n = 0;
  const cudaError_t st = cudaGetDeviceCount(&n);
  if (st == cudaSuccess) return n > 0 ? std::string() : "no device";
  (void)cudaGetLastError();
  return std::string(cudaGetErrorName(st)) + " (" + cudaGetErrorString(st) + ")";
}

}  // namespace disagmoe::cuda

#define DISAGMOE_CUDA_CHECK(call) ::disagmoe::cuda::check((call), #call, __FILE__, __LINE__)
/// Checks the launch of the kernel just enqueued (a bad configuration is reported at launch).
#define DISAGMOE_CUDA_CHECK_LAUNCH() ::disagmoe::cuda::check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
