// SPDX-License-Identifier: Apache-2.0
/// @file check.hpp
/// DISAGMOE_NCCL_CHECK(call): throws disagmoe::NcclError naming the call, the file:line
/// and NCCL's error string. Host code; needs `disagmoe::nccl`.
#pragma once

#include <disagmoe/error.hpp>

#include <nccl.h>

#include <string>

namespace disagmoe::nccl {

/// Throws NcclError for any result but ncclSuccess, with NCCL's last error detail.
inline void check(ncclResult_t result, const char* call, const char* file, int line) {
  if (result == ncclSuccess) return;
  throw NcclError(std::string(file) + ":" + std::to_string(line) + ": " + call + " = " +
                  ncclGetErrorString(result) + ": expected ncclSuccess (" + ncclGetLastError(nullptr) + ")");
}

/// NCCL's version as major * 10000 + minor * 100 + patch (NCCL_VERSION_CODE style).
inline int version() {
  int v = 0;
  check(ncclGetVersion(&v), "ncclGetVersion", __FILE__, __LINE__);
  return v;
}

}  // namespace disagmoe::nccl

#define DISAGMOE_NCCL_CHECK(call) ::disagmoe::nccl::check((call), #call, __FILE__, __LINE__)
