// SPDX-License-Identifier: Apache-2.0
// doctest main of the GPU tests: exit 77 (ctest's SKIP_RETURN_CODE) without a device.
#define DOCTEST_CONFIG_IMPLEMENT
#include <disagmoe/backend/cuda/check.hpp>

#include <doctest/doctest.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (disagmoe::cuda::device_count() == 0) {
    std::printf("skipped: no CUDA device: %s\n", disagmoe::cuda::no_device_reason().c_str());
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
