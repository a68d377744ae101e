// SPDX-License-Identifier: Apache-2.0
// The one nvcc TU of the CUDA tests and bench: instantiates the token kernels' launch
// functions that the host-compiled tests call through cuda::Backend.
#include <disagmoe/backend/cuda/instantiate.cuh>

#include <disagmoe/backend/cuda/backend.hpp>

// The back end models the concept under nvcc too, not only under the host compiler.
static_assert(disagmoe::comm::backend<disagmoe::cuda::Backend>);
