// SPDX-License-Identifier: Apache-2.0
/// @file cub.cuh
/// CUB and Thrust inside a namespace of our own, so that a program linking this library
/// and another copy of CUB (a different CCCL, PyTorch's, a user's) cannot mix their
/// kernels or template instances. This is CUB's documented mechanism
/// (cub/util_namespace.cuh, THRUST_CUB_WRAPPED_NAMESPACE), the one MegaBlocks and
/// PyTorch extensions use. A TU that defines its own wrapping keeps it; a TU that
/// included CUB unwrapped before this header is an error (its instances would be the
/// global ones). Device code: nvcc only.
#pragma once

#if defined(CUB_VERSION) && !defined(CUB_WRAPPED_NAMESPACE)
#error "disagmoe: include disagmoe/backend/cuda/*.cuh before any CUB or Thrust header, or define THRUST_CUB_WRAPPED_NAMESPACE"
#endif
#if !defined(CUB_WRAPPED_NAMESPACE) && !defined(THRUST_CUB_WRAPPED_NAMESPACE)
#define THRUST_CUB_WRAPPED_NAMESPACE disagmoe_cccl
#endif

#include <cub/device/device_scan.cuh>

namespace disagmoe::cuda {
/// The (wrapped) CUB namespace.
namespace cubw = CUB_NS_QUALIFIER;
}  // namespace disagmoe::cuda
