// SPDX-License-Identifier: Apache-2.0
// .npy reading/writing and RoutingTrace validation: round trips for every integer
// width, gate weights, chunked streaming, and one clear error per kind of bad file.
#include "test_util.hpp"

#include <disagmoe/placement/routing_trace.hpp>

#include <doctest/doctest.h>

#include <cstring>
#include <random>

using namespace disagmoe::placement;
using placement_test::npy_bytes;

namespace {

template <class T>
void check_round_trip(int experts) {
  std::mt19937_64 rng(7);
  const std::int64_t tokens = 37;
  const int layers = 3, k = 2;
  std::vector<T> v;
  for (std::int64_t t = 0; t < tokens * layers; ++t) {
    const int a = static_cast<int>(rng() % static_cast<unsigned>(experts));
    int b = static_cast<int>(rng() % static_cast<unsigned>(experts - 1));
    if (b >= a) ++b;
    v.push_back(static_cast<T>(a));
    v.push_back(static_cast<T>(b));
  }
  std::istringstream in(npy_bytes(v, {tokens, layers, k}));
  TraceReader reader(in, "mem.npy", experts);
  CHECK(reader.tokens() == tokens);
  CHECK(reader.layers() == layers);
  CHECK(reader.top_k() == k);
  const RoutingTrace all = reader.read_all();
  for (std::size_t i = 0; i < v.size(); ++i) REQUIRE(all.ids()[i] == static_cast<ExpertId>(v[i]));
  // Streaming in uneven chunks yields the same ids in order.
  std::vector<ExpertId> streamed;
  reader.for_each_chunk(5, [&](const RoutingTrace& c, std::int64_t first) {
    CHECK(first == static_cast<std::int64_t>(streamed.size()) / (layers * k));
    streamed.insert(streamed.end(), c.ids().begin(), c.ids().end());
  });
  CHECK(std::equal(streamed.begin(), streamed.end(), all.ids().begin(), all.ids().end()));
}

std::string error_of(const std::string& bytes, int experts) {
  std::istringstream in(bytes);
  try {
    TraceReader reader(in, "bad.npy", experts);
    reader.read_all();
  } catch (const disagmoe::IoError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("npy round trip for every integer width") {
  check_round_trip<std::int8_t>(100);
  check_round_trip<std::uint8_t>(200);
  check_round_trip<std::int16_t>(300);
  check_round_trip<std::uint16_t>(1000);
  check_round_trip<std::int32_t>(256);
  check_round_trip<std::uint32_t>(256);
  check_round_trip<std::int64_t>(64);
  check_round_trip<std::uint64_t>(64);
}

TEST_CASE("npy header is 64-byte aligned and numpy-compatible") {
  const std::string b = npy_bytes<std::int32_t>({1, 2, 3, 4, 5, 6}, {1, 2, 3});
  CHECK((b.size() - 6 * 4) % 64 == 0);
  CHECK(b.substr(0, 6) == "\x93NUMPY");
  CHECK(b.find("{'descr': '<i4', 'fortran_order': False, 'shape': (1,2,3), }") != std::string::npos);
  CHECK(b[b.size() - 6 * 4 - 1] == '\n');
  const std::string one = npy_bytes<float>({1.0f}, {1});
  CHECK(one.find("'shape': (1,)") != std::string::npos);  // Python's one-tuple
}

TEST_CASE("2-D ids are top-1 traces and gates of every float width are read") {
  const std::vector<std::int32_t> ids = {0, 1, 2, 3, 1, 0};
  std::istringstream in(npy_bytes(ids, {3, 2}));
  TraceReader r(in, "top1.npy", 4);
  CHECK(r.top_k() == 1);
  const auto t = r.read_all();
  CHECK(t.experts(2, 1)[0] == 0);

  placement_test::TempFile fi("ids.npy"), fg("gates.npy"), fh("half.npy"), fd("double.npy");
  const std::vector<std::uint8_t> ids3 = {0, 1, 2, 3, 3, 2, 1, 0};
  placement_test::write_bytes(fi.str(), npy_bytes(ids3, {2, 2, 2}));
  placement_test::write_bytes(fg.str(), npy_bytes<float>({0.75f, 0.25f, 0.5f, 0.5f, 1, 0, 0.125f, 0.875f}, {2, 2, 2}));
  const auto g = load_trace(fi.str(), 4, fg.str());
  REQUIRE(g.has_gates());
  CHECK(g.gates(1, 1)[1] == 0.875f);
  placement_test::write_bytes(fd.str(), npy_bytes<double>({0.75, 0.25, 0.5, 0.5, 1, 0, 0.125, 0.875}, {2, 2, 2}));
  CHECK(load_trace(fi.str(), 4, fd.str()).gates(0, 0)[0] == 0.75f);
  // Half floats: 0x3C00 = 1.0, 0x3800 = 0.5, 0x0001 = 2^-24 (subnormal), 0xC000 = -2.
  std::string half = npy_bytes<std::uint16_t>({0x3C00, 0x3800, 0x0001, 0xC000, 0, 0, 0, 0}, {2, 2, 2});
  half.replace(half.find("<u2"), 3, "<f2");
  placement_test::write_bytes(fh.str(), half);
  const auto h = load_trace(fi.str(), 4, fh.str());
  CHECK(h.gates(0, 0)[0] == 1.0f);
  CHECK(h.gates(0, 0)[1] == 0.5f);
  CHECK(h.gates(0, 1)[0] == std::ldexp(1.0f, -24));
  CHECK(h.gates(0, 1)[1] == -2.0f);
  // Round trip of ids and gates through save_trace / save_gates.
  placement_test::TempFile si("saved_ids.npy"), sg("saved_gates.npy");
  save_trace(si.str(), g);
  save_gates(sg.str(), g);
  const auto back = load_trace(si.str(), 4, sg.str());
  CHECK(std::equal(back.ids().begin(), back.ids().end(), g.ids().begin(), g.ids().end()));
  CHECK(std::equal(back.gate_weights().begin(), back.gate_weights().end(), g.gate_weights().begin(), g.gate_weights().end()));
}

TEST_CASE("bad files give one clear error naming the file, field and value") {
  const std::string good = npy_bytes<std::int32_t>({0, 1, 2, 3}, {1, 2, 2});
  CHECK(error_of(good, 4) == "(no error)");

  SUBCASE("not npy") { CHECK(error_of("hello world, this is text", 4).find("magic") != std::string::npos); }
  SUBCASE("empty") { CHECK(error_of("", 4).find("file 'bad.npy'") != std::string::npos); }
  SUBCASE("truncated data") {
    const std::string e = error_of(good.substr(0, good.size() - 3), 4);
    CHECK(e.find("file 'bad.npy'") != std::string::npos);
    CHECK(e.find("truncated") != std::string::npos);
  }
  SUBCASE("truncated header") { CHECK(error_of(good.substr(0, 30), 4).find("truncated") != std::string::npos); }
  SUBCASE("wrong rank") {
    const std::string e = error_of(npy_bytes<std::int32_t>({0, 1, 2, 3}, {4}), 4);
    CHECK(e.find("header.shape = \"(4)\"") != std::string::npos);
    CHECK(e.find("[tokens, layers, top_k]") != std::string::npos);
  }
  SUBCASE("float ids") {
    const std::string e = error_of(npy_bytes<float>({0, 1, 2, 3}, {1, 2, 2}), 4);
    CHECK(e.find("\"<f4\"") != std::string::npos);
    CHECK(e.find("integer dtype") != std::string::npos);
  }
  SUBCASE("big endian") {
    std::string b = good;
    b.replace(b.find("<i4"), 3, ">i4");
    CHECK(error_of(b, 4).find("little-endian") != std::string::npos);
  }
  SUBCASE("fortran order") {
    std::string b = good;
    b.replace(b.find("False"), 5, "True ");
    CHECK(error_of(b, 4).find("fortran_order") != std::string::npos);
  }
  SUBCASE("bool dtype") {
    std::string b = good;
    b.replace(b.find("<i4"), 3, "|b1");
    CHECK(error_of(b, 4).find("header.descr") != std::string::npos);
  }
  SUBCASE("id out of range names token, layer, slot and value") {
    const std::string e = error_of(npy_bytes<std::int32_t>({0, 1, 2, 3, 0, 1, 2, 300}, {2, 2, 2}), 256);
    CHECK(e == "file 'bad.npy': token 1, layer 1, slot 1 expert id = 300: expected 0 <= id < num_experts (256)");
  }
  SUBCASE("negative id") {
    CHECK(error_of(npy_bytes<std::int8_t>({0, -1, 2, 3}, {1, 2, 2}), 8).find("expert id = -1") != std::string::npos);
  }
  SUBCASE("huge unsigned id, named as the file holds it") {
    CHECK(error_of(npy_bytes<std::uint64_t>({0, ~0ULL, 2, 3}, {1, 2, 2}), 8) ==
          "file 'bad.npy': token 0, layer 0, slot 1 expert id = 18446744073709551615: expected 0 <= id < "
          "num_experts (8)");
    CHECK(error_of(npy_bytes<std::uint8_t>({0, 255, 2, 3}, {1, 2, 2}), 8).find("expert id = 255:") !=
          std::string::npos);
    CHECK(error_of(npy_bytes<std::int16_t>({0, -300, 2, 3}, {1, 2, 2}), 8).find("expert id = -300:") !=
          std::string::npos);
  }
  SUBCASE("an empty dimension is named, not taken for truncation") {
    CHECK(error_of(npy_bytes<std::int32_t>({}, {3, 0, 2}), 8) ==
          "file 'bad.npy': layers = 0: expected 1 <= layers <= 2^20");
    CHECK(error_of(npy_bytes<std::int32_t>({}, {3, 2, 0}), 8)
              .starts_with("file 'bad.npy': top_k = 0: expected"));
  }
  SUBCASE("repeated id in one top-k") {
    const std::string e = error_of(npy_bytes<std::int32_t>({0, 1, 2, 2}, {1, 2, 2}), 4);
    CHECK(e.find("token 0, layer 1, slot 1 expert id = 2") != std::string::npos);
    CHECK(e.find("distinct") != std::string::npos);
  }
  SUBCASE("top_k larger than experts") {
    CHECK(error_of(npy_bytes<std::int32_t>({0, 1, 2, 3}, {1, 1, 4}), 3).find("top_k = 4") != std::string::npos);
  }
  SUBCASE("shape overflow") {
    std::string b = good;
    const auto at = b.find("(1,2,2)");
    b.replace(at, 7, "(9999999999999,9999999,99)");
    CHECK(error_of(b, 4).find("truncated") != std::string::npos);
  }
}

TEST_CASE("gate files must match the ids") {
  placement_test::TempFile fi("ids2.npy"), fg("gates2.npy");
  placement_test::write_bytes(fi.str(), npy_bytes<std::int32_t>({0, 1, 2, 3}, {1, 2, 2}));
  placement_test::write_bytes(fg.str(), npy_bytes<float>({0.5f, 0.5f}, {1, 2, 1}));
  CHECK_THROWS_WITH_AS(load_trace(fi.str(), 4, fg.str()), doctest::Contains("shape of the ids file"), disagmoe::IoError);
  placement_test::write_bytes(fg.str(), npy_bytes<std::int32_t>({0, 1, 2, 3}, {1, 2, 2}));
  CHECK_THROWS_WITH_AS(load_trace(fi.str(), 4, fg.str()), doctest::Contains("float dtype"), disagmoe::IoError);
  placement_test::write_bytes(fg.str(), npy_bytes<float>({0.5f, NAN, 0.5f, 0.5f}, {1, 2, 2}));
  CHECK_THROWS_WITH_AS(load_trace(fi.str(), 4, fg.str()), doctest::Contains("layer 0, slot 1 gate weight"), disagmoe::IoError);
  CHECK_THROWS_WITH_AS(load_trace("/nonexistent/x.npy", 4), doctest::Contains("file '/nonexistent/x.npy'"), disagmoe::IoError);
}

TEST_CASE("RoutingTrace constructor validates in memory") {
  CHECK_THROWS_WITH_AS(RoutingTrace(1, 1, 2, 4, {0, 4}), doctest::Contains("expert id = 4"), disagmoe::ConfigError);
  CHECK_THROWS_WITH_AS(RoutingTrace(1, 1, 2, 4, {0}), doctest::Contains("ids.size() = 1"), disagmoe::ConfigError);
  CHECK_THROWS_WITH_AS(RoutingTrace(1, 0, 2, 4, {}), doctest::Contains("layers = 0"), disagmoe::ConfigError);
  CHECK_THROWS_WITH_AS(RoutingTrace(1, 1, 5, 4, {}), doctest::Contains("top_k = 5"), disagmoe::ConfigError);
}
