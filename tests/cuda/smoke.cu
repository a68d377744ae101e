// SPDX-License-Identifier: Apache-2.0
// Compiles every host header plus the device headers under nvcc (C++20), then, when a
// GPU is present, checks a device reduction against the closed form n(n-1)/2.
#include <disagmoe/disagmoe.hpp>
#include <disagmoe/backend/cuda/check.hpp>
#include <disagmoe/backend/cuda/fill.cuh>
#if DISAGMOE_HAS_NCCL()
#include <disagmoe/backend/nccl/check.hpp>
#endif

#include <cstdint>
#include <cstdio>

int main() {
  static_assert(DISAGMOE_CUDA_COMPILATION() == 1);
#if DISAGMOE_HAS_NCCL()
  std::printf("NCCL %d\n", disagmoe::nccl::version());
#endif
  if (disagmoe::cuda::device_count() == 0) {
    std::printf("cuda_smoke: skipped: no CUDA device: %s\n", disagmoe::cuda::no_device_reason().c_str());
    return 77;
  }
  const std::int64_t n = 1 << 20;
  const auto sum = disagmoe::cuda::device_iota_sum<std::int64_t>(n);
  const bool ok = sum == n * (n - 1) / 2;
  std::printf("cuda_smoke: sum %lld, expected %lld: %s\n", static_cast<long long>(sum),
              static_cast<long long>(n * (n - 1) / 2), ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
