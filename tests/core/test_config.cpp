// SPDX-License-Identifier: Apache-2.0
#include <disagmoe/config.hpp>

#include <doctest/doctest.h>

#include <string>

TEST_CASE("version macros agree with the version string") {
  const std::string expect = std::to_string(DISAGMOE_VERSION_MAJOR) + "." +
                             std::to_string(DISAGMOE_VERSION_MINOR) + "." +
                             std::to_string(DISAGMOE_VERSION_PATCH);
  CHECK(expect == disagmoe::kVersionString);
  CHECK(DISAGMOE_VERSION == DISAGMOE_VERSION_MAJOR * 10000 + DISAGMOE_VERSION_MINOR * 100 +
                                DISAGMOE_VERSION_PATCH);
}

TEST_CASE("feature macros reflect the linked targets") {
  CHECK(DISAGMOE_HAS_CUDA() == 0);  // this test links disagmoe::core only
  CHECK(DISAGMOE_HAS_MPI() == 0);
  CHECK(DISAGMOE_CUDA_COMPILATION() == 0);
}
