// SPDX-License-Identifier: Apache-2.0
/// @file safetensors.hpp
/// Strict reader and atomic writer of `.safetensors` checkpoint files (F32 tensors),
/// with no third-party dependency: the header JSON is written and parsed here.
///
/// Format reference: https://github.com/huggingface/safetensors, README "Format":
///   - 8 bytes: N, an unsigned little-endian 64-bit integer, the size of the header;
///   - N bytes: a UTF-8 JSON object that MUST begin with '{' and may be padded at the
///     end with whitespace (0x20). Each key is a tensor name mapped to
///     {"dtype":"F32","shape":[...],"data_offsets":[begin,end]}, offsets relative to
///     the start of the byte buffer, end exclusive; the special key "__metadata__"
///     maps to an object of string -> string. Duplicate keys are not allowed.
///   - the rest of the file: the byte buffer, raw little-endian, C order. It must be
///     entirely indexed by the tensors, without holes or overlaps.
/// The reference implementation caps N at 100 000 000 bytes; so does this reader.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/runtime/file_io.hpp>
#include <disagmoe/runtime/json_text.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <istream>
#include <limits>
#include <map>
#include <numeric>
#include <ostream>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>


namespace disagmoe::runtime {

// The checkpoint formats are little-endian and the readers and writers copy the raw
// bytes of float / uint64 arrays. Every machine the project targets (x86-64, aarch64
// Linux) is little-endian, so a byte-swapping path would be dead, untested code.
static_assert(std::endian::native == std::endian::little,
              "disagmoe::runtime checkpoint files assume a little-endian host");
// safetensors "F32" is IEEE 754 binary32.
static_assert(sizeof(float) == 4 && std::numeric_limits<float>::is_iec559,
              "disagmoe::runtime checkpoint files assume IEEE 754 binary32 float");

/// A tensor to write: a borrowed view of `data`, which must outlive the write call.
/// `shape` is outermost first (C order); its product must equal `data.size()`
/// (an empty shape is a scalar holding one element).
struct TensorView {
  std::string name;                 ///< unique, non-empty UTF-8, not "__metadata__"
  std::vector<std::int64_t> shape;  ///< dimensions, each >= 0
  std::span<const float> data;      ///< the elements in C order
};

/// A tensor read back: owns its elements.
struct Tensor {
  std::vector<std::int64_t> shape;  ///< dimensions, outermost first
  std::vector<float> data;          ///< the elements in C order; size = product of shape
};

/// Everything a `.safetensors` file holds that this reader understands.
struct SafetensorsContents {
  std::map<std::string, Tensor> tensors;        ///< by name
  std::map<std::string, std::string> metadata;  ///< the "__metadata__" object (may be empty)
};

/// Largest header the reader accepts (bytes); the reference implementation's limit.
inline constexpr std::uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

namespace detail {

/// One tensor entry of a parsed header.
struct SafetensorsEntry {
  std::string name;
  std::string dtype;
  std::vector<std::uint64_t> shape;
  std::uint64_t begin = 0, end = 0;
};

/// Parses the header JSON; checks syntax, key sets, types and duplicates (not offsets).
inline std::vector<SafetensorsEntry> parse_safetensors_header(std::string_view file, std::string_view text,
                                                              std::map<std::string, std::string>& metadata) {
  JsonCursor cur(file, text);
  // The format requires '{' as the very first byte (no leading whitespace).
  if (!cur.peek('{')) cur.fail_here("'{' (the header must begin with a JSON object)");
  std::vector<SafetensorsEntry> entries;
  std::set<std::string, std::less<>> names;
  bool have_metadata = false;
  cur.parse_object("the header", [&](std::string key) {
    if (key == "__metadata__") {
      if (have_metadata)
        file_fail(file, "header key", Verbatim{json_quoted(key)}, "at most one \"__metadata__\" object");
      have_metadata = true;
      cur.parse_object("\"__metadata__\"", [&](std::string mkey) {
        std::string value = cur.parse_string("the value of __metadata__ key " + json_quoted(mkey));
        const std::string shown = json_quoted(mkey);
        if (!metadata.emplace(std::move(mkey), std::move(value)).second)
          file_fail(file, "__metadata__ key", Verbatim{shown}, "unique keys (it appears more than once)");
      });
      return;
    }
    if (!names.insert(key).second)
      file_fail(file, "tensor name", Verbatim{json_quoted(key)},
                "unique tensor names (it appears more than once)");
    SafetensorsEntry e;
    e.name = std::move(key);
    const std::string what = "tensor " + json_quoted(e.name);
    bool has_dtype = false, has_shape = false, has_offsets = false;
    cur.parse_object(what, [&](std::string member) {
      bool* seen = member == "dtype"          ? &has_dtype
                   : member == "shape"        ? &has_shape
                   : member == "data_offsets" ? &has_offsets
                                              : nullptr;
      if (seen == nullptr)
        file_fail(file, what + " key", Verbatim{json_quoted(member)},
                  "only \"dtype\", \"shape\" and \"data_offsets\"");
      if (*seen) file_fail(file, what + " key", Verbatim{json_quoted(member)}, "each key once");
      *seen = true;
      if (seen == &has_dtype) {
        e.dtype = cur.parse_string("the dtype of " + what);
      } else if (seen == &has_shape) {
        e.shape = cur.parse_uint_array("the shape of " + what);
      } else {
        const auto off = cur.parse_uint_array("the data_offsets of " + what);
        if (off.size() != 2)
          file_fail(file, what + " data_offsets", Verbatim{list_display<std::uint64_t>(off)},
                    "two integers [begin, end]");
        e.begin = off[0];
        e.end = off[1];
      }
    });
    if (!has_dtype || !has_shape || !has_offsets) {
      const char* missing = !has_dtype ? "dtype" : !has_shape ? "shape" : "data_offsets";
      file_fail(file, what, Verbatim{std::string("an entry without \"") + missing + "\""},
                "an object with \"dtype\", \"shape\" and \"data_offsets\"");
    }
    entries.push_back(std::move(e));
  });
  cur.skip_ws();
  if (!cur.at_end()) cur.fail_here("only whitespace padding after the header object");
  return entries;
}

/// Checks dtype, shape, offsets and coverage of the data buffer of `buffer_size` bytes.
/// Returns the entry indices sorted by data offset.
inline std::vector<std::size_t> check_safetensors_layout(std::string_view file,
                                                         const std::vector<SafetensorsEntry>& entries,
                                                         std::uint64_t buffer_size) {
  for (const auto& e : entries) {
    const std::string what = "tensor " + json_quoted(e.name);
    if (e.dtype != "F32")
      file_fail(file, what + " dtype", Verbatim{json_quoted(e.dtype)},
                "\"F32\" (the only dtype this reader supports)");
    const std::array<std::uint64_t, 2> off{e.begin, e.end};
    const Verbatim off_text{list_display<std::uint64_t>(off)};
    if (e.begin > e.end) file_fail(file, what + " data_offsets", off_text, "begin <= end");
    if (e.end > buffer_size)
      file_fail(file, what + " data_offsets", off_text,
                "an end at most " + std::to_string(buffer_size) + " (the size of the data buffer)");
    // Product of the shape in elements, checked against the byte span before anything
    // is allocated (the span is already known to fit in the file).
    const std::uint64_t span_bytes = e.end - e.begin;
    for (const std::uint64_t d : e.shape)
      if (d > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        file_fail(file, what + " shape", Verbatim{list_display<std::uint64_t>(e.shape)},
                  "dimensions below 2^63");
    const bool empty = std::find(e.shape.begin(), e.shape.end(), std::uint64_t{0}) != e.shape.end();
    std::uint64_t count = empty ? 0 : 1;
    bool overflow = false;  // 4 * count would not fit in 64 bits
    for (const std::uint64_t d : e.shape) {
      if (empty) break;
      if (count > (std::numeric_limits<std::uint64_t>::max() / 4) / d) {
        overflow = true;
        break;
      }
      count *= d;
    }
    if (overflow || count * 4 != span_bytes)
      file_fail(file, what + " data_offsets", off_text,
                "a span of 4 * product of shape " + list_display<std::uint64_t>(e.shape) + " bytes (" +
                    (overflow ? std::string("more than 2^64") : std::to_string(count * 4)) + ")");
  }
  std::vector<std::size_t> order(entries.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return std::pair(entries[a].begin, entries[a].end) < std::pair(entries[b].begin, entries[b].end);
  });
  std::uint64_t covered = 0;  // the buffer [0, covered) is indexed so far
  const SafetensorsEntry* previous = nullptr;
  for (const std::size_t i : order) {
    const auto& e = entries[i];
    if (e.begin != covered) {
      const std::array<std::uint64_t, 2> off{e.begin, e.end};
      const std::string why = e.begin < covered
                                  ? "tensors may not overlap: " + json_quoted(previous->name) + " ends at " +
                                        std::to_string(covered)
                                  : "the data buffer may have no holes: bytes " + std::to_string(covered) +
                                        ".." + std::to_string(e.begin) + " belong to no tensor";
      file_fail(file, "tensor " + json_quoted(e.name) + " data_offsets",
                Verbatim{list_display<std::uint64_t>(off)},
                "a begin of " + std::to_string(covered) + " (" + why + ")");
    }
    covered = e.end;
    previous = &e;
  }
  if (covered != buffer_size)
    file_fail(file, "data buffer size", buffer_size,
              std::to_string(covered) + " (the end of the last tensor; every byte must belong to a tensor)");
  return order;
}

/// The header JSON of `tensors` and `metadata`, padded with spaces to a multiple of
/// 8 bytes (as the reference writer does, so the byte buffer starts 8-aligned).
/// Throws ConfigError for an invalid argument.
inline std::string safetensors_header(std::span<const TensorView> tensors,
                                      const std::map<std::string, std::string>& metadata) {
  std::string h = "{";
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      expect(is_valid_utf8(k), "write_safetensors metadata key", Verbatim{json_quoted(k)}, "valid UTF-8");
      expect(is_valid_utf8(v), "write_safetensors metadata[" + json_quoted(k) + "]", Verbatim{json_quoted(v)},
             "valid UTF-8");
      if (!first) h.push_back(',');
      first = false;
      append_json_string(h, k);
      h.push_back(':');
      append_json_string(h, v);
    }
    h += "}";
    if (!tensors.empty()) h.push_back(',');
  }
  std::set<std::string_view> names;
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const TensorView& t = tensors[i];
    const std::string field = "write_safetensors tensors[" + std::to_string(i) + "]";
    expect(!t.name.empty(), field + ".name", t.name, "a non-empty name");
    expect(t.name != "__metadata__", field + ".name", t.name,
           "a name other than the reserved \"__metadata__\"");
    expect(is_valid_utf8(t.name), field + ".name", Verbatim{json_quoted(t.name)}, "valid UTF-8");
    expect(names.insert(t.name).second, field + ".name", Verbatim{json_quoted(t.name)},
           "unique tensor names");
    std::uint64_t count = 1;
    bool overflow = false;
    for (const std::int64_t d : t.shape) {
      expect(d >= 0, field + ".shape", Verbatim{list_display<std::int64_t>(t.shape)}, "dimensions >= 0");
      const auto u = static_cast<std::uint64_t>(d);
      if (u != 0 && count > std::numeric_limits<std::uint64_t>::max() / u) overflow = true;
      count *= u;
    }
    if (std::find(t.shape.begin(), t.shape.end(), std::int64_t{0}) != t.shape.end()) overflow = false;
    expect(!overflow && count == t.data.size(), field + ".shape",
           Verbatim{list_display<std::int64_t>(t.shape)},
           "a product equal to data.size() (" + std::to_string(t.data.size()) + ")");
    if (i > 0) h.push_back(',');
    append_json_string(h, t.name);
    h += ":{\"dtype\":\"F32\",\"shape\":[";
    for (std::size_t j = 0; j < t.shape.size(); ++j) h += (j ? "," : "") + std::to_string(t.shape[j]);
    const std::uint64_t end = offset + 4 * count;
    h += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(end) + "]}";
    offset = end;
  }
  h += "}";
  h.append((8 - h.size() % 8) % 8, ' ');
  return h;
}

}  // namespace detail

/// Writes `tensors` (dtype F32, packed contiguously in the given order) and `metadata`
/// (the "__metadata__" object, omitted when empty) to `path` atomically: the bytes go
/// to `path` + ".tmp", which is fsynced and renamed over `path`.
/// Throws ConfigError for an empty, reserved, non-UTF-8 or duplicate name, a negative
/// dimension or a shape whose product is not `data.size()` (before touching the disk);
/// IoError naming the file when it cannot be written. Complexity: O(total elements).
inline void write_safetensors(const std::filesystem::path& path, std::span<const TensorView> tensors,
                              const std::map<std::string, std::string>& metadata = {}) {
  const std::string header = detail::safetensors_header(tensors, metadata);
  detail::write_file_atomically(path, [&](std::ostream& out) {
    const auto len = detail::le64_bytes(header.size());
    out.write(reinterpret_cast<const char*>(len.data()), 8);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    for (const TensorView& t : tensors)
      out.write(reinterpret_cast<const char*>(t.data.data()),
                static_cast<std::streamsize>(t.data.size_bytes()));
  });
}

/// Reads a whole `.safetensors` stream (seekable, positioned anywhere; `file` names it
/// in errors). Validates strictly: the 8-byte length (at most 100 MB and the file size
/// - 8), the header JSON (syntax, UTF-8, key sets and types, duplicate names), dtype F32
/// only, shape products against offsets, and that the tensors tile the data buffer
/// exactly (no overlap, hole or trailing byte). Throws IoError naming the file and the
/// problem; allocates only sizes already checked against the file size.
/// Complexity: O(file size).
inline SafetensorsContents read_safetensors_with_metadata(std::istream& in, std::string_view file) {
  const std::uint64_t size = detail::seekable_size(in, file);
  if (size < 8) detail::file_fail(file, "file size", size, "at least 8 bytes (the header length)");
  std::array<unsigned char, 8> len_bytes{};
  detail::read_exact(in, len_bytes.data(), 8, file, "header length");
  const std::uint64_t n = detail::load_le64(len_bytes.data());
  if (n > kSafetensorsMaxHeaderBytes)
    detail::file_fail(
        file, "header length", n,
        "at most " + std::to_string(kSafetensorsMaxHeaderBytes) + " (the safetensors limit of 100 MB)");
  if (n > size - 8)
    detail::file_fail(file, "header length", n,
                      "at most " + std::to_string(size - 8) + " (the file size - 8)");
  std::string header(static_cast<std::size_t>(n), '\0');
  detail::read_exact(in, header.data(), n, file, "header");

  SafetensorsContents out;
  const auto entries = detail::parse_safetensors_header(file, header, out.metadata);
  const auto order = detail::check_safetensors_layout(file, entries, size - 8 - n);
  // The tensors tile the buffer in `order`, so their data is read sequentially.
  for (const std::size_t i : order) {
    const auto& e = entries[i];
    Tensor t;
    t.shape.assign(e.shape.begin(), e.shape.end());
    t.data.resize(static_cast<std::size_t>((e.end - e.begin) / 4));
    detail::read_exact(in, t.data.data(), e.end - e.begin, file,
                       "data of tensor " + detail::json_quoted(e.name));
    out.tensors.emplace(e.name, std::move(t));
  }
  return out;
}

/// `read_safetensors_with_metadata` of the file at `path` (named in errors).
inline SafetensorsContents read_safetensors_with_metadata(const std::filesystem::path& path) {
  std::ifstream in = detail::open_for_reading(path);
  return read_safetensors_with_metadata(in, path.string());
}

/// The tensors of a `.safetensors` stream; see `read_safetensors_with_metadata`.
inline std::map<std::string, Tensor> read_safetensors(std::istream& in, std::string_view file) {
  return std::move(read_safetensors_with_metadata(in, file).tensors);
}

/// The tensors of the `.safetensors` file at `path`; see `read_safetensors_with_metadata`.
inline std::map<std::string, Tensor> read_safetensors(const std::filesystem::path& path) {
  return std::move(read_safetensors_with_metadata(path).tensors);
}

}  // namespace disagmoe::runtime
