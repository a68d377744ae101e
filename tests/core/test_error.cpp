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

TEST_CASE("control bytes and bytes outside UTF-8 are escaped; UTF-8 text is kept") {
  // Oracle: the expected strings written out by hand.
  const std::string controls = std::string("a\x01") + "b\tc\x7f";
  CHECK(describe("MPS.row", controls, "a name") == "MPS.row = \"a\\x01b\\x09c\\x7f\": expected a name");
  CHECK(describe("f", std::string("\xff\xfe\xc3"), "text") == "f = \"\\xff\\xfe\\xc3\": expected text");
  CHECK(describe("f", std::string("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), "text") ==
        "f = \"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\": expected text");  // é, €, an emoji
  CHECK(describe("f", std::string("\xe2\x82x"), "text") ==
        "f = \"\\xe2\\x82x\": expected text");  // cut short
  CHECK(describe("$.x", Verbatim{"\x1b[31m"}, "a number") == "$.x = \\x1b[31m: expected a number");
}
