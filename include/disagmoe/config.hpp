// SPDX-License-Identifier: Apache-2.0
/// @file config.hpp
/// Version and feature macros. Feature macros are function-like (as in CCCL) so a
/// misspelt one is a preprocessor error rather than a silent 0. The CMake targets
/// define the underlying DISAGMOE_HAS_*_ values: link `disagmoe::mpi` and
/// `DISAGMOE_HAS_MPI()` becomes 1.
#pragma once

#define DISAGMOE_VERSION_MAJOR 0
#define DISAGMOE_VERSION_MINOR 1
#define DISAGMOE_VERSION_PATCH 0
/// Encoded as major * 10000 + minor * 100 + patch.
#define DISAGMOE_VERSION                                                              \
  (DISAGMOE_VERSION_MAJOR * 10000 + DISAGMOE_VERSION_MINOR * 100 + DISAGMOE_VERSION_PATCH)

#ifndef DISAGMOE_HAS_IO_
#define DISAGMOE_HAS_IO_ 0
#endif
#ifndef DISAGMOE_HAS_ZLIB_
#define DISAGMOE_HAS_ZLIB_ 0
#endif
#ifndef DISAGMOE_HAS_MPI_
#define DISAGMOE_HAS_MPI_ 0
#endif
#ifndef DISAGMOE_HAS_CUDA_
#define DISAGMOE_HAS_CUDA_ 0
#endif
#ifndef DISAGMOE_HAS_NCCL_
#define DISAGMOE_HAS_NCCL_ 0
#endif

/// 1 when linked against `disagmoe::io` (nlohmann_json is available).
#define DISAGMOE_HAS_IO() DISAGMOE_HAS_IO_
/// 1 when zlib is available (gzipped MPS / traces).
#define DISAGMOE_HAS_ZLIB() DISAGMOE_HAS_ZLIB_
/// 1 when linked against `disagmoe::mpi`.
#define DISAGMOE_HAS_MPI() DISAGMOE_HAS_MPI_
/// 1 when linked against `disagmoe::cuda`.
#define DISAGMOE_HAS_CUDA() DISAGMOE_HAS_CUDA_
/// 1 when linked against `disagmoe::nccl`.
#define DISAGMOE_HAS_NCCL() DISAGMOE_HAS_NCCL_

/// 1 while nvcc (or another CUDA compiler) compiles device-capable code.
#if defined(__CUDACC__)
#define DISAGMOE_CUDA_COMPILATION() 1
#define DISAGMOE_HOST_DEVICE __host__ __device__
#else
#define DISAGMOE_CUDA_COMPILATION() 0
#define DISAGMOE_HOST_DEVICE
#endif

namespace disagmoe {
/// The library version as "major.minor.patch".
inline constexpr const char* kVersionString = "0.1.0";
}  // namespace disagmoe
