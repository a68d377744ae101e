// SPDX-License-Identifier: Apache-2.0
#include <disagmoe/error.hpp>

#include <doctest/doctest.h>

using namespace disagmoe;

TEST_CASE("describe names the field, the value and the expectation") {
  CHECK(describe("ModelSpec.top_k", 9, "1 <= top_k <= experts (8)") ==
        "ModelSpec.top_k = 9: expected 1 <= top_k <= experts (8)");
  CHECK(describe("ClusterSpec.name", "x", "a preset") == "ClusterSpec.name = \"x\": expected a preset");
  CHECK(describe("flag", true, "false") == "flag = true: expected false");
}

TEST_CASE("expect throws the requested type only when the condition fails") {
  CHECK_NOTHROW(expect(true, "a", 1, "anything"));
  CHECK_THROWS_AS(expect(false, "a", 1, "positive"), ConfigError);
  CHECK_THROWS_AS(expect<IoError>(false, "file", "x.mps", "readable"), IoError);
  try {
    fail<SolverError>("basis", 3, "nonsingular");
    FAIL("fail returned");
  } catch (const Error& e) {  // every library exception derives from Error
    CHECK(std::string(e.what()) == "basis = 3: expected nonsingular");
  }
}

TEST_CASE("Verbatim values are printed without quotes") {
  CHECK(describe("$.layers", Verbatim{"2.5"}, "an integer") == "$.layers = 2.5: expected an integer");
  CHECK(describe("$.name", Verbatim{"\"x\""}, "a number") == "$.name = \"x\": expected a number");
}
