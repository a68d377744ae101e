// SPDX-License-Identifier: Apache-2.0
// The one nvcc TU of disagmoe-train in a cuda-preset build: the kernels cuda::Attention
// and cuda::Experts launch (--device cuda).
#include <disagmoe/backend/cuda/instantiate.cuh>
