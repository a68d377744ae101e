// SPDX-License-Identifier: Apache-2.0
// Checkpoint files: safetensors and the state file. Round trips are checked against the
// test's own byte-level parsing (and Python's json module when present); every kind of
// corruption, exhaustively where the file is small, must end in IoError, never a crash.
#include <disagmoe/runtime/safetensors.hpp>
#include <disagmoe/runtime/state_file.hpp>

#include "temp_dir.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

using namespace disagmoe::runtime;
namespace fs = std::filesystem;
using disagmoe::test::TempDir;

namespace {

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::uint64_t le64_at(const std::string& b, std::size_t at) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + static_cast<std::size_t>(i)]);
  return v;
}
std::uint32_t le32_at(const std::string& b, std::size_t at) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + static_cast<std::size_t>(i)]);
  return v;
}
std::string le64(std::uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<std::size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}
std::string le32(std::uint32_t v) { return le64(v).substr(0, 4); }

/// The message of the IoError `f` throws, or "(no error)". Any other exception escapes
/// (and fails the test).
template <class F>
std::string io_error_of(F&& f) {
  try {
    f();
  } catch (const disagmoe::IoError& e) {
    return e.what();
  }
  return "(no error)";
}

template <class F>
std::string config_error_of(F&& f) {
  try {
    f();
  } catch (const disagmoe::ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  // memcmp needs non-null pointers even for 0 bytes; an empty vector's data() may be null.
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size_bytes()) == 0);
}

struct Owned {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<float> data;
};

std::vector<TensorView> views(const std::vector<Owned>& v) {
  std::vector<TensorView> out;
  for (const auto& t : v) out.push_back({t.name, t.shape, t.data});
  return out;
}

Owned make_tensor(std::string name, std::vector<std::int64_t> shape, float seed) {
  std::int64_t n = 1;
  for (const auto d : shape) n *= d;
  Owned t{std::move(name), std::move(shape), {}};
  for (std::int64_t i = 0; i < n; ++i) t.data.push_back(seed + 0.25f * static_cast<float>(i) - 1.0f);
  return t;
}

/// The test's own reading of a "[a,b,...]" list starting at `at` (just after '[').
std::vector<std::uint64_t> parse_list(const std::string& s, std::size_t at) {
  std::vector<std::uint64_t> v;
  const std::size_t close = s.find(']', at);
  std::string body = s.substr(at, close - at);
  std::size_t i = 0;
  while (i < body.size()) {
    std::size_t used = 0;
    v.push_back(std::stoull(body.substr(i), &used));
    i += used;
    if (i < body.size() && body[i] == ',') ++i;
  }
  return v;
}

/// A safetensors file made by hand: header text as given (no padding) + `data`.
std::string hand_made(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

std::string floats_bytes(std::initializer_list<float> v) {
  std::string s;
  for (const float f : v) {
    const auto u = std::bit_cast<std::uint32_t>(f);
    s += le32(u);
  }
  return s;
}

// ---------------------------------------------------------------------------------
// FNV-1a 64, the test's own copy (the oracle for the state file's checksum).
std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (const char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return h;
}
std::string seal(const std::string& body) { return body + le64(fnv1a(body)); }

// The exhaustive corruption loops read from memory through the stream overloads (the
// path overloads only open the file and delegate): thousands of rewrites of one file
// would mostly measure the file system.
constexpr const char* kMemName = "mem.file";
std::map<std::string, Tensor> read_safetensors_bytes(const std::string& bytes) {
  std::istringstream in(bytes, std::ios::binary);
  return read_safetensors(in, kMemName);
}
void read_state_bytes(const std::string& bytes) {
  std::istringstream in(bytes, std::ios::binary);
  const StateReader r(in, kMemName);
}

}  // namespace

TEST_CASE("safetensors: round trip, byte layout checked by hand") {
  TempDir dir;
  const fs::path p = dir / "model.safetensors";
  std::vector<Owned> ts = {make_tensor("embed.weight", {4, 3}, 1.0f), make_tensor("empty", {0, 4}, 0.0f),
                           make_tensor("scale", {}, 7.0f), make_tensor("layers.0.bias", {5}, -3.0f),
                           make_tensor("experts.w", {2, 3, 2}, 0.5f)};
  // Special values must survive bit for bit.
  ts[3].data[0] = -0.0f;
  ts[3].data[1] = std::numeric_limits<float>::infinity();
  ts[3].data[2] = std::numeric_limits<float>::quiet_NaN();
  ts[3].data[3] = std::numeric_limits<float>::denorm_min();
  const std::map<std::string, std::string> meta = {
      {"format", "pt"}, {"note", "quote \" backslash \\ newline \n tab \t \xc3\xa9"}};
  const auto tv = views(ts);
  write_safetensors(p, tv, meta);
  CHECK_FALSE(fs::exists(dir / "model.safetensors.tmp"));

  // The oracle: the test's own minimal parsing of the bytes.
  const std::string b = read_bytes(p);
  REQUIRE(b.size() >= 8);
  const std::uint64_t n = le64_at(b, 0);
  REQUIRE(8 + n <= b.size());
  CHECK(n % 8 == 0);  // padded so that the byte buffer is 8-aligned
  const std::string header = b.substr(8, n);
  CHECK(header.front() == '{');
  const std::size_t last = header.find_last_not_of(' ');
  CHECK(header[last] == '}');
  CHECK(header.size() - last - 1 < 8);
  CHECK(header.find("\"__metadata__\":{") != std::string::npos);
  CHECK(header.find("\"format\":\"pt\"") != std::string::npos);
  const std::size_t data_start = 8 + n;
  std::uint64_t offset = 0;
  for (const auto& t : ts) {
    CAPTURE(t.name);
    const std::size_t at = header.find("\"" + t.name + "\":{");
    REQUIRE(at != std::string::npos);
    const std::size_t close = header.find('}', at);
    const std::string obj = header.substr(at, close - at + 1);
    CHECK(obj.find("\"dtype\":\"F32\"") != std::string::npos);
    const std::size_t s = obj.find("\"shape\":[");
    const std::size_t o = obj.find("\"data_offsets\":[");
    REQUIRE(s != std::string::npos);
    REQUIRE(o != std::string::npos);
    const auto shape = parse_list(obj, s + 9);
    const auto off = parse_list(obj, o + 16);
    CHECK(std::vector<std::int64_t>(shape.begin(), shape.end()) == t.shape);
    REQUIRE(off.size() == 2);
    CHECK(off[0] == offset);  // packed contiguously in the order written
    CHECK(off[1] - off[0] == 4 * t.data.size());
    REQUIRE(data_start + off[1] <= b.size());
    CHECK((t.data.empty() ||
           std::memcmp(b.data() + data_start + off[0], t.data.data(), 4 * t.data.size()) == 0));
    offset = off[1];
  }
  CHECK(data_start + offset == b.size());

  // Read back.
  const auto got = read_safetensors_with_metadata(p);
  CHECK(got.metadata == meta);
  REQUIRE(got.tensors.size() == ts.size());
  for (const auto& t : ts) {
    CAPTURE(t.name);
    REQUIRE(got.tensors.count(t.name) == 1);
    const Tensor& r = got.tensors.at(t.name);
    CHECK(r.shape == t.shape);
    CHECK(same_bits(r.data, t.data));
  }
  CHECK(read_safetensors(p).size() == ts.size());

  // A second, independent JSON parser where one exists.
  if (!fs::exists("/usr/bin/python3")) {
    MESSAGE("skipped: /usr/bin/python3 not found, header not checked by Python's json module");
    return;
  }
  const fs::path out = dir / "python.txt";
  const std::string script =
      "import json,os,struct,sys\n"
      "p=sys.argv[1]\n"
      "f=open(p,'rb')\n"
      "n=struct.unpack('<Q',f.read(8))[0]\n"
      "h=json.loads(f.read(n).decode('utf-8'))\n"
      "m=h.pop('__metadata__')\n"
      "assert 8+n+max(v['data_offsets'][1] for v in h.values())==os.path.getsize(p)\n"
      "print(json.dumps({k:[v['dtype'],v['shape'],v['data_offsets']] for k,v in h.items()},sort_keys=True))\n"
      "print(json.dumps(m,sort_keys=True))\n";
  const fs::path script_path = dir / "check.py";
  write_bytes(script_path, script);
  const std::string cmd =
      "/usr/bin/python3 '" + script_path.string() + "' '" + p.string() + "' > '" + out.string() + "' 2>&1";
  const int rc = std::system(cmd.c_str());
  const std::string said = read_bytes(out);
  INFO("python said: " << said);
  REQUIRE(rc == 0);
  const std::string expected =
      R"({"embed.weight": ["F32", [4, 3], [0, 48]], "empty": ["F32", [0, 4], [48, 48]], )"
      R"("experts.w": ["F32", [2, 3, 2], [72, 120]], "layers.0.bias": ["F32", [5], [52, 72]], )"
      R"("scale": ["F32", [], [48, 52]]})"
      "\n"
      R"({"format": "pt", "note": "quote \" backslash \\ newline \n tab \t \u00e9"})"
      "\n";
  CHECK(said == expected);
}

TEST_CASE("safetensors: the writer validates its arguments and replaces files atomically") {
  TempDir dir;
  const fs::path p = dir / "w.safetensors";
  const std::vector<float> six(6, 1.0f);
  const auto bad = [&](std::vector<TensorView> v) {
    return config_error_of([&] { write_safetensors(p, v); });
  };
  CHECK(bad({{"a", {2, 2}, six}})
            .find("tensors[0].shape = [2, 2]: expected a product equal to data.size() (6)") !=
        std::string::npos);
  CHECK(bad({{"a", {-2, -3}, six}}).find("dimensions >= 0") != std::string::npos);
  CHECK(bad({{"a", {6}, six}, {"a", {6}, six}}).find("tensors[1].name = \"a\": expected unique") !=
        std::string::npos);
  CHECK(bad({{"", {6}, six}}).find("non-empty") != std::string::npos);
  CHECK(bad({{"__metadata__", {6}, six}}).find("reserved") != std::string::npos);
  CHECK(bad({{"\xff", {6}, six}}).find("valid UTF-8") != std::string::npos);
  CHECK(bad({{"a", {1ll << 62, 1ll << 62}, six}}).find("product") != std::string::npos);
  CHECK(config_error_of([&] {
          write_safetensors(p, std::vector<TensorView>{}, {{"k", "\xc3"}});
        }).find("valid UTF-8") != std::string::npos);
  CHECK_FALSE(fs::exists(p));  // validation happens before the disk is touched
  CHECK_FALSE(fs::exists(dir / "w.safetensors.tmp"));

  // Overwriting replaces the file; no temporary is left behind.
  const std::vector<TensorView> first = {{"a", {6}, six}};
  write_safetensors(p, first);
  const std::vector<float> two = {5.0f, 6.0f};
  const std::vector<TensorView> second = {{"b", {2}, two}};
  write_safetensors(p, second, {{"step", "2"}});
  const auto got = read_safetensors_with_metadata(p);
  CHECK(got.tensors.size() == 1);
  CHECK(got.tensors.at("b").data == two);
  CHECK(got.metadata.at("step") == "2");
  CHECK_FALSE(fs::exists(dir / "w.safetensors.tmp"));

  // An empty file set is legal: header "{}" padded, no data.
  write_safetensors(p, std::vector<TensorView>{});
  CHECK(read_bytes(p) == le64(8) + "{}      ");
  CHECK(read_safetensors(p).empty());

  // A directory that does not exist: IoError naming the temporary file.
  const fs::path nowhere = dir / "missing" / "x.safetensors";
  const std::string msg = io_error_of([&] { write_safetensors(nowhere, first); });
  CHECK(msg.find(nowhere.string() + ".tmp: open for writing") != std::string::npos);
  // Reading a file that does not exist names it.
  CHECK(io_error_of([&] { read_safetensors(nowhere); }).find(nowhere.string() + ": open") == 0);
}

TEST_CASE("safetensors: every truncation and every header byte flip is caught") {
  TempDir dir;
  const fs::path src = dir / "small.safetensors";
  const fs::path p = dir / "bad.safetensors";
  // No zero-sized dimension: a flipped digit in such a shape would be a valid file.
  const std::vector<Owned> ts = {make_tensor("w1", {2, 3}, 1.0f), make_tensor("bb", {3}, 2.0f),
                                 make_tensor("qq", {1, 2, 1}, 3.0f)};
  write_safetensors(src, views(ts), {{"kk", "v1"}});
  const std::string good = read_bytes(src);
  const std::size_t n = le64_at(good, 0);
  const std::string header = good.substr(8, n);

  // Every strict prefix: the last tensor is not empty, so none of them is a valid file.
  int unexpected = 0;
  for (std::size_t cut = 0; cut < good.size(); ++cut) {
    const std::string msg = io_error_of([&] { read_safetensors_bytes(good.substr(0, cut)); });
    if (msg.rfind(std::string(kMemName) + ": ", 0) != 0) {
      ++unexpected;
      MESSAGE("cut at " << cut << ": " << msg);
    }
  }
  CHECK(unexpected == 0);
  // The same through real files at the interesting cut points.
  for (const std::size_t cut :
       {std::size_t{0}, std::size_t{7}, std::size_t{8}, std::size_t{9}, 8 + n - 1, 8 + n, good.size() - 1}) {
    write_bytes(p, good.substr(0, cut));
    CHECK(io_error_of([&] { read_safetensors(p); }).rfind(p.string() + ": ", 0) == 0);
  }
  // One more byte is a trailing byte no tensor covers.
  write_bytes(p, good + "x");
  CHECK(io_error_of([&] { read_safetensors(p); }).find("data buffer size") != std::string::npos);

  // Header bytes where a flip may legitimately still give a valid file: the inside of
  // a tensor name or of a metadata key / value (the file then has another name).
  std::vector<bool> free_text(header.size(), false);
  for (const std::string s : {"\"w1\"", "\"bb\"", "\"qq\"", "\"kk\"", "\"v1\""}) {
    const std::size_t at = header.find(s);
    REQUIRE(at != std::string::npos);
    for (std::size_t i = at + 1; i + 1 < at + s.size(); ++i) free_text[i] = true;
  }
  std::vector<std::pair<std::vector<std::int64_t>, std::vector<float>>> want;
  for (const auto& t : ts) want.emplace_back(t.shape, t.data);
  std::sort(want.begin(), want.end());
  int still_valid = 0;
  for (std::size_t pos = 0; pos < 8 + n; ++pos) {
    for (const unsigned mask : {0x01u, 0x02u, 0x04u, 0x08u, 0x10u, 0x20u, 0x40u, 0x80u, 0xffu}) {
      std::string b = good;
      b[pos] = static_cast<char>(static_cast<unsigned char>(b[pos]) ^ mask);
      std::map<std::string, Tensor> got;
      const std::string msg = io_error_of([&] { got = read_safetensors_bytes(b); });
      if (msg != "(no error)") continue;
      const bool allowed = pos >= 8 && free_text[pos - 8];
      std::vector<std::pair<std::vector<std::int64_t>, std::vector<float>>> have;
      for (const auto& [name, t] : got) have.emplace_back(t.shape, t.data);
      std::sort(have.begin(), have.end());
      if (!allowed || have != want) {
        ++unexpected;
        MESSAGE("flip " << mask << " at byte " << pos << " was accepted");
      }
      ++still_valid;
    }
  }
  CHECK(unexpected == 0);
  CHECK(still_valid > 0);  // the renamed-file path of the oracle was exercised

  // Data bytes are not checksummed by the format: a flip there changes a value.
  std::string b = good;
  b[8 + n] = static_cast<char>(b[8 + n] ^ 0x01);
  write_bytes(p, b);
  CHECK(read_safetensors(p).size() == 3);
}

TEST_CASE("safetensors: absurd header lengths") {
  TempDir dir;
  const fs::path p = dir / "model.safetensors";
  const std::string body = "{}      ";
  for (const std::uint64_t len : {std::uint64_t{100'000'001}, std::uint64_t{1} << 63, ~std::uint64_t{0}}) {
    write_bytes(p, le64(len) + body);
    const std::string msg = io_error_of([&] { read_safetensors(p); });
    CHECK(msg == p.string() + ": header length = " + std::to_string(len) +
                     ": expected at most 100000000 (the safetensors limit of 100 MB)");
  }
  write_bytes(p, le64(999999) + body);
  CHECK(io_error_of([&] { read_safetensors(p); }) ==
        p.string() + ": header length = 999999: expected at most 8 (the file size - 8)");
  write_bytes(p, std::string("\x08\0\0\0", 4));
  CHECK(io_error_of([&] { read_safetensors(p); }) ==
        p.string() + ": file size = 4: expected at least 8 bytes (the header length)");
}

TEST_CASE("safetensors: hand-made headers, valid and invalid") {
  TempDir dir;
  const fs::path p = dir / "h.safetensors";
  const auto read = [&](const std::string& bytes) {
    write_bytes(p, bytes);
    return read_safetensors_with_metadata(p);
  };

  SUBCASE("valid: other key order, whitespace, escapes, offsets not in header order") {
    const std::string h =
        "{ \"b\" : { \"shape\" : [ 2 ] , \"data_offsets\" : [ 4 , 12 ] , \"dtype\" : \"F32\" } ,\n"
        "\t\"caf\\u00e9 \\ud83d\\ude00\\/\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
        "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[12,12]},"
        "\"__metadata__\":{}}\r\n  ";
    const auto got = read(hand_made(h, floats_bytes({1.5f, 2.5f, 3.5f})));
    REQUIRE(got.tensors.size() == 3);
    CHECK(got.tensors.at("b").data == std::vector<float>{2.5f, 3.5f});
    const Tensor& s = got.tensors.at("caf\xc3\xa9 \xf0\x9f\x98\x80/");
    CHECK(s.shape.empty());
    CHECK(s.data == std::vector<float>{1.5f});
    CHECK(got.tensors.at("z").data.empty());
    CHECK(got.tensors.at("z").shape == std::vector<std::int64_t>{0});
  }
  SUBCASE("valid: empty object, no data") { CHECK(read(hand_made("{}", "")).tensors.empty()); }

  SUBCASE("invalid") {
    const std::string f4 = floats_bytes({1, 2, 3, 4, 5, 6});  // 24 bytes
    const auto t = [](const std::string& name, const std::string& shape, const std::string& off) {
      return "\"" + name + "\":{\"dtype\":\"F32\",\"shape\":" + shape + ",\"data_offsets\":" + off + "}";
    };
    struct Case {
      std::string header;
      std::string data;
      std::string expect;
    };
    const std::vector<Case> cases = {
        {"", "", "header byte 0 = (end of header): expected '{' (the header must begin"},
        {" {}", "", "header byte 0 = ' ': expected '{'"},
        {"[]", "", "expected '{'"},
        {"{", "", "header byte 1 = (end of header): expected a key of the header"},
        {"{\"a\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[0,2]}}", "ab",
         "tensor \"a\" dtype = \"BF16\": expected \"F32\""},
        {"{" + t("a", "[4]", "[0,16]") + "," + t("b", "[4]", "[8,24]") + "}", f4,
         "tensor \"b\" data_offsets = [8, 24]: expected a begin of 16 (tensors may not overlap: \"a\" ends "
         "at 16)"},
        {"{" + t("a", "[2]", "[0,8]") + "," + t("b", "[1]", "[12,16]") + "}", f4.substr(0, 16),
         "tensor \"b\" data_offsets = [12, 16]: expected a begin of 8 (the data buffer may have no holes"},
        {"{" + t("a", "[2]", "[0,8]") + "," + t("z", "[0]", "[4,4]") + "}", f4.substr(0, 8),
         "may not overlap"},
        {"{" + t("a", "[2]", "[0,8]") + "}", f4.substr(0, 12), "data buffer size = 12: expected 8"},
        {"{" + t("a", "[4]", "[0,16]") + "}", f4.substr(0, 8), "expected an end at most 8"},
        {"{" + t("a", "[0]", "[8,0]") + "}", f4.substr(0, 8), "begin <= end"},
        {"{" + t("a", "[3]", "[0,8]") + "}", f4.substr(0, 8),
         "a span of 4 * product of shape [3] bytes (12)"},
        {"{" + t("a", "[4294967296,4294967296]", "[0,8]") + "}", f4.substr(0, 8), "(more than 2^64)"},
        {"{" + t("a", "[9223372036854775808,0]", "[0,0]") + "}", "", "dimensions below 2^63"},
        {"{" + t("a", "[18446744073709551616]", "[0,0]") + "}", "", "below 2^64"},
        {"{" + t("a", "[-1]", "[0,0]") + "}", "", "non-negative integer"},
        {"{" + t("a", "[1.0]", "[0,4]") + "}", "abcd", "no fraction or exponent"},
        {"{" + t("a", "[1e0]", "[0,4]") + "}", "abcd", "no fraction or exponent"},
        {"{" + t("a", "[01]", "[0,4]") + "}", "abcd", "without leading zeros"},
        {"{" + t("a", "[1,]", "[0,4]") + "}", "abcd", "an integer"},
        {"{" + t("a", "[1]", "[0,4,8]") + "}", "abcd", "data_offsets = [0, 4, 8]: expected two integers"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", "abcd", "without \"data_offsets\""},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", "abcd",
         "only \"dtype\""},
        {"{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", "abcd",
         "each key once"},
        {"{" + t("a", "[1]", "[0,4]") + "," + t("a", "[1]", "[4,8]") + "}", f4.substr(0, 8),
         "tensor name = \"a\": expected unique tensor names"},
        {"{\"__metadata__\":{},\"__metadata__\":{}}", "", "at most one \"__metadata__\""},
        {"{\"__metadata__\":{\"a\":1}}", "", "a JSON string"},
        {"{\"__metadata__\":\"x\"}", "", "a JSON object"},
        {"{\"__metadata__\":{\"a\":\"1\",\"a\":\"2\"}}", "", "unique keys"},
        {"{} x", "", "header byte 3 = 'x': expected only whitespace padding"},
        {std::string("{}\0", 3), "", "header byte 2 = 0x00: expected only whitespace padding"},
        {"{" + t("a", "[1]", "[0,4]") + ",}", "abcd", "a key of the header"},
        {"{\"\xff\":{}}", "", "valid UTF-8"},
        {"{\"\xc0\x80\":{}}", "", "valid UTF-8"},          // overlong NUL
        {"{\"\xed\xa0\x80\":{}}", "", "valid UTF-8"},      // encoded surrogate
        {"{\"\xf4\x90\x80\x80\":{}}", "", "valid UTF-8"},  // above U+10FFFF
        {"{\"\xe2\x82\":{}}", "", "valid UTF-8"},          // cut sequence
        {"{\"a\nb\":{}}", "", "no raw control character"},
        {"{\"a\\x\":{}}", "", "after a backslash"},
        {"{\"\\udc00\":{}}", "", "lone \\uDC00"},
        {"{\"\\ud800x\":{}}", "", "a low surrogate"},
        {"{\"\\u12g4\":{}}", "", "four hex digits"},
        {"{\"a", "", "a closing '\"'"},
        {"{\"a\":{\"dtype\":32,\"shape\":[1],\"data_offsets\":[0,4]}}", "abcd", "a JSON string"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":3,\"data_offsets\":[0,4]}}", "abcd", "a JSON array"},
        {"{\"a\":[1]}", "", "a JSON object"},
        {"{\"a\":true}", "", "a JSON object"},
        {"{\"a\" {}}", "", "':' after a key"},
        {"{}{}", "", "header byte 2 = '{': expected only whitespace padding"},
    };
    for (const auto& c : cases) {
      CAPTURE(c.header);
      const std::string msg = io_error_of([&] { read(hand_made(c.header, c.data)); });
      CHECK(msg.rfind(p.string() + ": ", 0) == 0);
      CHECK_MESSAGE(msg.find(c.expect) != std::string::npos, msg);
    }
  }
}

TEST_CASE("state file: FNV-1a oracle matches published test vectors") {
  // From the FNV reference test suite (isthe.com/chongo/tech/comp/fnv, test_fnv.c).
  CHECK(fnv1a("") == 0xcbf29ce484222325ull);
  CHECK(fnv1a("a") == 0xaf63dc4c8601ec8cull);
  CHECK(fnv1a("foobar") == 0x85944171f73967e8ull);
}

TEST_CASE("state file: round trip, byte layout checked by hand") {
  TempDir dir;
  const fs::path p = dir / "state.bin";
  std::vector<float> m(100), v(100);
  for (int i = 0; i < 100; ++i) {
    m[static_cast<std::size_t>(i)] = 0.01f * static_cast<float>(i) - 0.3f;
    v[static_cast<std::size_t>(i)] = std::ldexp(1.0f, -i);
  }
  m[5] = std::numeric_limits<float>::quiet_NaN();
  m[6] = -0.0f;
  m[7] = -std::numeric_limits<float>::infinity();
  const std::vector<std::uint64_t> step = {12345};
  const std::vector<std::uint64_t> rng = {~std::uint64_t{0}, 0, 42, 0x0123456789abcdefull};
  const std::vector<std::uint64_t> pos = {7, 3};
  StateWriter w;
  w.put("adam.m", m);
  w.put("adam.v", v);
  w.put("step", step);
  w.put("rng", rng);
  w.put("empty", std::span<const float>{});
  w.put("data.position", pos);
  w.write(p);
  CHECK_FALSE(fs::exists(dir / "state.bin.tmp"));

  // The oracle: walk the documented layout by hand.
  const std::string b = read_bytes(p);
  REQUIRE(b.size() >= 28);
  CHECK(b.substr(0, 8) == "DMOESTAT");
  CHECK(le32_at(b, 8) == 1);
  CHECK(le64_at(b, 12) == 6);
  CHECK(le64_at(b, b.size() - 8) == fnv1a(b.substr(0, b.size() - 8)));
  std::size_t at = 20;
  struct Seen {
    std::string name;
    int kind;
    std::string payload;
  };
  std::vector<Seen> seen;
  for (int i = 0; i < 6; ++i) {
    const std::uint32_t len = le32_at(b, at);
    at += 4;
    Seen s{b.substr(at, len), 0, {}};
    at += len;
    s.kind = static_cast<unsigned char>(b[at++]);
    const std::uint64_t count = le64_at(b, at);
    at += 8;
    const std::size_t bytes = count * (s.kind == 1 ? 4 : 8);
    s.payload = b.substr(at, bytes);
    at += bytes;
    seen.push_back(s);
  }
  CHECK(at == b.size() - 8);
  const auto raw = [](const auto& vec) {
    return std::string(reinterpret_cast<const char*>(vec.data()), vec.size() * sizeof(vec[0]));
  };
  REQUIRE(seen.size() == 6);
  CHECK((seen[0].name == "adam.m" && seen[0].kind == 1 && seen[0].payload == raw(m)));
  CHECK((seen[1].name == "adam.v" && seen[1].kind == 1 && seen[1].payload == raw(v)));
  CHECK((seen[2].name == "step" && seen[2].kind == 2 && seen[2].payload == raw(step)));
  CHECK((seen[3].name == "rng" && seen[3].kind == 2 && seen[3].payload == raw(rng)));
  CHECK((seen[4].name == "empty" && seen[4].kind == 1 && seen[4].payload.empty()));
  CHECK((seen[5].name == "data.position" && seen[5].kind == 2 && seen[5].payload == raw(pos)));

  const StateReader r(p);
  CHECK(same_bits(r.f32("adam.m", 100), m));
  CHECK(same_bits(r.f32("adam.v", 100), v));
  CHECK(r.u64("step", 1)[0] == 12345);
  const auto rr = r.u64("rng", 4);
  CHECK(std::vector<std::uint64_t>(rr.begin(), rr.end()) == rng);
  CHECK(r.f32("empty", 0).empty());
  CHECK(r.contains("data.position"));
  CHECK_FALSE(r.contains("adam"));
  CHECK(r.names() == std::vector<std::string>{"adam.m", "adam.v", "data.position", "empty", "rng", "step"});

  // What the accessors say when the caller expects something else.
  CHECK(io_error_of([&] { r.f32("nope", 1); }).find(p.string() + ": entry \"nope\" = (missing): expected") ==
        0);
  CHECK(io_error_of([&] { r.f32("adam.m", 99); }) ==
        p.string() + ": entry \"adam.m\" length = 100: expected 99");
  CHECK(io_error_of([&] { r.f32("step", 1); }) ==
        p.string() + ": entry \"step\" kind = a u64 array: expected an f32 array");
  CHECK(io_error_of([&] { r.u64("adam.v", 100); }).find("entry \"adam.v\" kind") != std::string::npos);

  // An empty writer is a valid file too.
  StateWriter none;
  none.write(p);
  CHECK(read_bytes(p).size() == 28);
  CHECK(StateReader(p).names().empty());

  // The writer's own checks.
  StateWriter dup;
  dup.put("x", step);
  CHECK(config_error_of([&] { dup.put("x", m); }).find("a name not put before") != std::string::npos);
  CHECK(config_error_of([&] { dup.put("", m); }).find("non-empty") != std::string::npos);
  CHECK(config_error_of([&] { dup.put(std::string(4097, 'a'), m); }).find("at most 4096") !=
        std::string::npos);
  CHECK(config_error_of([&] { dup.put("\xfe", m); }).find("valid UTF-8") != std::string::npos);
  CHECK(io_error_of([&] { StateReader(dir / "nope.bin"); }).find("nope.bin: open") != std::string::npos);
}

TEST_CASE("state file: every bit flip and every truncation is caught") {
  TempDir dir;
  const fs::path src = dir / "s.bin";
  const fs::path p = dir / "bad.bin";
  StateWriter w;
  const std::vector<float> m = {1.0f, -2.0f, 3.5f};
  const std::vector<std::uint64_t> step = {9};
  w.put("m", m);
  w.put("step", step);
  w.write(src);
  const std::string good = read_bytes(src);
  CHECK(StateReader(src).f32("m", 3).size() == 3);

  int unexpected = 0;
  for (std::size_t pos = 0; pos < good.size(); ++pos) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string b = good;
      b[pos] = static_cast<char>(b[pos] ^ (1 << bit));
      const std::string msg = io_error_of([&] { read_state_bytes(b); });
      const char* want = pos < 8 ? ": magic = " : pos < 12 ? ": version = " : ": checksum = ";
      if (msg.rfind(std::string(kMemName) + want, 0) != 0) {
        ++unexpected;
        MESSAGE("bit " << bit << " of byte " << pos << ": " << msg);
      }
    }
  }
  CHECK(unexpected == 0);
  for (std::size_t cut = 0; cut < good.size(); ++cut) {
    const std::string msg = io_error_of([&] { read_state_bytes(good.substr(0, cut)); });
    if (msg.rfind(std::string(kMemName) + ": ", 0) != 0) {
      ++unexpected;
      MESSAGE("cut at " << cut << ": " << msg);
    }
  }
  CHECK(unexpected == 0);
  for (const std::size_t cut : {std::size_t{0}, std::size_t{27}, std::size_t{28}, good.size() - 1}) {
    write_bytes(p, good.substr(0, cut));
    CHECK(io_error_of([&] { StateReader r(p); }).rfind(p.string() + ": ", 0) == 0);
  }
  write_bytes(p, good + std::string(1, '\0'));
  CHECK(io_error_of([&] { StateReader r(p); }).find(": checksum = ") != std::string::npos);
  write_bytes(p, good.substr(0, 27));
  CHECK(io_error_of([&] { StateReader r(p); }) ==
        p.string() + ": file size = 27: expected at least 28 bytes (magic, version, entry count, checksum)");
}

TEST_CASE("state file: wrong version and bad structure under a valid checksum") {
  TempDir dir;
  const fs::path p = dir / "s.bin";
  const auto error_of_bytes = [&](const std::string& bytes) {
    write_bytes(p, bytes);
    return io_error_of([&] { StateReader r(p); });
  };
  const std::string head = "DMOESTAT" + le32(1);
  const auto entry = [](const std::string& name, int kind, std::uint64_t n, const std::string& payload) {
    return le32(static_cast<std::uint32_t>(name.size())) + name + std::string(1, static_cast<char>(kind)) +
           le64(n) + payload;
  };
  const std::string one_f32 = entry("a", 1, 1, std::string(4, '\0'));

  // A well-formed hand-made file reads, so the cases below fail for their one defect.
  CHECK(StateReader([&] {
          write_bytes(p, seal(head + le64(1) + one_f32));
          return p;
        }())
            .f32("a", 1)[0] == 0.0f);

  // The version is checked before the checksum, so a newer file says what it is.
  CHECK(error_of_bytes(seal("DMOESTAT" + le32(2) + le64(0))) ==
        p.string() + ": version = 2: expected 1 (the only state-file version this reader knows)");
  CHECK(error_of_bytes("DMOESTAT" + le32(7) + le64(0) + le64(0)).find("version = 7") != std::string::npos);
  CHECK(
      error_of_bytes(seal("DMOESTAX" + le32(1) + le64(0))).find("magic = 'D' 'M' 'O' 'E' 'S' 'T' 'A' 'X'") !=
      std::string::npos);

  struct Case {
    std::string body;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {head + le64(1000), "entry count = 1000: expected at most 0"},
      {head + le64(~std::uint64_t{0}) + one_f32, "entry count = 18446744073709551615: expected at most 1"},
      {head + le64(1) + le32(0) + std::string(10, 'x'), "entry 0 name length = 0: expected 1 to 4096"},
      {head + le64(1) + le32(5000) + std::string(10, 'x'), "entry 0 name length = 5000"},
      {head + le64(1) + le32(100) + std::string(10, 'x'),
       "entry 0 name = 100 bytes at offset 24: expected at most 10"},
      {head + le64(1) + entry("a", 3, 0, ""), "entry \"a\" kind = 3: expected 1 (f32) or 2 (u64)"},
      {head + le64(1) + entry("a", 1, 1ull << 61, ""),
       "entry \"a\" length = 2305843009213693952: expected at most 0"},
      {head + le64(1) + entry("a", 2, 1, std::string(4, '\0')), "entry \"a\" length = 1: expected at most 0"},
      {head + le64(2) + one_f32 + one_f32, "entry 1 name = \"a\": expected unique entry names"},
      {head + le64(1) + one_f32 + "zz", "bytes after the last entry = 2: expected 0"},
      {head + le64(1) + entry("\xff", 1, 0, ""), "entry 0 name = \"\\xff\": expected valid UTF-8"},
  };
  for (const auto& c : cases) {
    const std::string msg = error_of_bytes(seal(c.body));
    CHECK(msg.rfind(p.string() + ": ", 0) == 0);
    CHECK_MESSAGE(msg.find(c.expect) != std::string::npos, msg);
  }
}
