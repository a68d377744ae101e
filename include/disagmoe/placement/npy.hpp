// SPDX-License-Identifier: Apache-2.0
/// @file npy.hpp
/// Minimal NumPy `.npy` reader and writer (format versions 1.0, 2.0 and 3.0) for the
/// routing-trace arrays of the placement module: little-endian, C-order, integer
/// (any width, signed or unsigned) or floating point (16, 32, 64 bit) elements.
///
/// Format reference: numpy/lib/format.py ("A Simple File Format for NumPy Arrays",
/// NEP 1): 6-byte magic "\x93NUMPY", 2 version bytes, a little-endian header length
/// (uint16 in 1.0, uint32 in 2.0/3.0), then an ASCII Python dict literal with keys
/// 'descr', 'fortran_order' and 'shape', padded with spaces and ended by '\n' so that
/// the data starts on a 64-byte boundary.
#pragma once

#include <disagmoe/error.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <istream>
#include <limits>
#include <ostream>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace disagmoe::placement {

/// Element kind of an `.npy` array.
enum class NpyKind { kSigned, kUnsigned, kFloat };

/// What the header of an `.npy` file says, plus where its data begins.
struct NpyHeader {
  NpyKind kind = NpyKind::kSigned;     ///< element kind ('i', 'u' or 'f' in `descr`)
  int item_bytes = 0;                  ///< bytes per element: 1, 2, 4 or 8 (2, 4, 8 for floats)
  std::string descr;                   ///< the dtype string as written, e.g. "<i4"
  std::vector<std::int64_t> shape;     ///< dimensions, outermost first (C order)
  std::int64_t data_offset = 0;        ///< byte offset of the first element
  std::int64_t element_count = 0;      ///< product of `shape` (1 for a 0-d array)
};

namespace detail {

/// `what` of the file for error messages, e.g. "file 'fit.npy'".
inline std::string npy_where(std::string_view name) {
  return "file '" + std::string(name) + "'";
}

[[noreturn]] inline void npy_fail(std::string_view name, std::string_view field, std::string_view value,
                                  std::string_view expected) {
  throw IoError(npy_where(name) + ": " + describe(field, std::string(value), expected));
}

/// Returns the value text of `key` in the header dict, or an empty view when absent.
inline std::string_view npy_dict_value(std::string_view dict, std::string_view key) {
  for (const char quote : {'\'', '"'}) {
    const std::string needle = std::string(1, quote) + std::string(key) + std::string(1, quote);
    const auto at = dict.find(needle);
    if (at == std::string_view::npos) continue;
    auto rest = dict.substr(at + needle.size());
    const auto colon = rest.find(':');
    if (colon == std::string_view::npos) return {};
    rest = rest.substr(colon + 1);
    while (!rest.empty() && std::isspace(static_cast<unsigned char>(rest.front()))) rest.remove_prefix(1);
    if (rest.empty()) return {};
    if (rest.front() == '(') {  // the shape tuple
      const auto close = rest.find(')');
      return close == std::string_view::npos ? std::string_view{} : rest.substr(0, close + 1);
    }
    if (rest.front() == '\'' || rest.front() == '"') {
      const auto close = rest.find(rest.front(), 1);
      return close == std::string_view::npos ? std::string_view{} : rest.substr(0, close + 1);
    }
    const auto end = rest.find_first_of(",}");
    auto v = rest.substr(0, end);
    while (!v.empty() && std::isspace(static_cast<unsigned char>(v.back()))) v.remove_suffix(1);
    return v;
  }
  return {};
}

inline std::vector<std::int64_t> npy_parse_shape(std::string_view name, std::string_view text) {
  if (text.size() < 2 || text.front() != '(' || text.back() != ')')
    npy_fail(name, "header.shape", text, "a tuple of non-negative integers such as (1000, 32, 8)");
  std::vector<std::int64_t> shape;
  std::string_view body = text.substr(1, text.size() - 2);
  while (true) {
    while (!body.empty() && (std::isspace(static_cast<unsigned char>(body.front())))) body.remove_prefix(1);
    if (body.empty()) break;
    std::int64_t v = 0;
    std::size_t digits = 0;
    while (digits < body.size() && std::isdigit(static_cast<unsigned char>(body[digits]))) {
      if (v > (std::numeric_limits<std::int64_t>::max() - 9) / 10)
        npy_fail(name, "header.shape", text, "dimensions below 2^63");
      v = v * 10 + (body[digits] - '0');
      ++digits;
    }
    if (digits == 0) npy_fail(name, "header.shape", text, "a tuple of non-negative integers such as (1000, 32, 8)");
    // Python writes long integers as "3L" in format 1.0 files made by Python 2.
    if (digits < body.size() && body[digits] == 'L') ++digits;
    shape.push_back(v);
    body.remove_prefix(digits);
    while (!body.empty() && std::isspace(static_cast<unsigned char>(body.front()))) body.remove_prefix(1);
    if (body.empty()) break;
    if (body.front() != ',') npy_fail(name, "header.shape", text, "a tuple of non-negative integers such as (1000, 32, 8)");
    body.remove_prefix(1);
  }
  return shape;
}

inline std::uint64_t stream_size(std::istream& in) {
  const auto here = in.tellg();
  in.seekg(0, std::ios::end);
  const auto end = in.tellg();
  in.seekg(here);
  return end < 0 ? 0 : static_cast<std::uint64_t>(end);
}

}  // namespace detail

/// Reads and validates the header of an `.npy` stream positioned at its start; leaves
/// the stream at the first data byte. `name` appears in error messages.
/// Throws IoError naming the file and the bad header field on: a bad magic string, an
/// unknown version, a missing or malformed key, Fortran order, a big-endian or
/// non-numeric dtype, or a data section shorter than the shape requires (truncation).
/// Complexity: O(header length).
inline NpyHeader read_npy_header(std::istream& in, std::string_view name) {
  std::array<char, 8> pre{};
  in.read(pre.data(), 8);
  if (in.gcount() != 8 || std::memcmp(pre.data(), "\x93NUMPY", 6) != 0)
    detail::npy_fail(name, "magic", "(first 6 bytes)", "\"\\x93NUMPY\" (not a NumPy .npy file)");
  const int major = static_cast<unsigned char>(pre[6]);
  if (major < 1 || major > 3)
    detail::npy_fail(name, "version", std::to_string(major), "1, 2 or 3");
  std::uint32_t header_len = 0;
  if (major == 1) {
    std::array<unsigned char, 2> b{};
    in.read(reinterpret_cast<char*>(b.data()), 2);
    if (in.gcount() != 2) detail::npy_fail(name, "header_len", "(missing)", "a 2-byte length");
    header_len = b[0] | (static_cast<std::uint32_t>(b[1]) << 8);
  } else {
    std::array<unsigned char, 4> b{};
    in.read(reinterpret_cast<char*>(b.data()), 4);
    if (in.gcount() != 4) detail::npy_fail(name, "header_len", "(missing)", "a 4-byte length");
    header_len = b[0] | (static_cast<std::uint32_t>(b[1]) << 8) | (static_cast<std::uint32_t>(b[2]) << 16) |
                 (static_cast<std::uint32_t>(b[3]) << 24);
  }
  const std::uint64_t total = detail::stream_size(in);
  const std::uint64_t prefix = (major == 1 ? 10u : 12u);
  if (header_len > (1u << 20) || prefix + header_len > total)
    detail::npy_fail(name, "header_len", std::to_string(header_len), "a header that fits in the file (truncated?)");
  std::string dict(header_len, '\0');
  in.read(dict.data(), static_cast<std::streamsize>(header_len));
  if (static_cast<std::uint32_t>(in.gcount()) != header_len)
    detail::npy_fail(name, "header", "(truncated)", "a complete header");

  NpyHeader h;
  h.data_offset = static_cast<std::int64_t>(prefix + header_len);
  const std::string_view descr_q = detail::npy_dict_value(dict, "descr");
  if (descr_q.size() < 2) detail::npy_fail(name, "header.descr", descr_q, "a dtype string such as '<i4'");
  h.descr = std::string(descr_q.substr(1, descr_q.size() - 2));
  const std::string& d = h.descr;
  const bool little = !d.empty() && (d[0] == '<' || d[0] == '|' ||
                                     (d[0] == '=' && std::endian::native == std::endian::little));
  if (d.size() < 3 || !little)
    detail::npy_fail(name, "header.descr", d, "a little-endian numeric dtype such as '<i4', '|u1' or '<f4'");
  const char kind = d[1];
  int bytes = 0;
  for (std::size_t i = 2; i < d.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(d[i])) || bytes > 100)
      detail::npy_fail(name, "header.descr", d, "a little-endian numeric dtype such as '<i4', '|u1' or '<f4'");
    bytes = bytes * 10 + (d[i] - '0');
  }
  if (kind == 'i' || kind == 'u') {
    h.kind = kind == 'i' ? NpyKind::kSigned : NpyKind::kUnsigned;
    if (bytes != 1 && bytes != 2 && bytes != 4 && bytes != 8)
      detail::npy_fail(name, "header.descr", d, "an integer width of 1, 2, 4 or 8 bytes");
  } else if (kind == 'f') {
    h.kind = NpyKind::kFloat;
    if (bytes != 2 && bytes != 4 && bytes != 8)
      detail::npy_fail(name, "header.descr", d, "a float width of 2, 4 or 8 bytes");
  } else {
    detail::npy_fail(name, "header.descr", d, "an integer ('i', 'u') or float ('f') dtype");
  }
  h.item_bytes = bytes;

  const std::string_view fortran = detail::npy_dict_value(dict, "fortran_order");
  if (fortran == "True") detail::npy_fail(name, "header.fortran_order", "True", "False (C order)");
  if (fortran != "False") detail::npy_fail(name, "header.fortran_order", fortran, "False");
  h.shape = detail::npy_parse_shape(name, detail::npy_dict_value(dict, "shape"));

  // Truncation check before anyone allocates: the product must fit in the file (an
  // empty dimension needs no bytes, whatever the others say).
  const std::uint64_t available = total - static_cast<std::uint64_t>(h.data_offset);
  std::uint64_t count = 1;
  for (const std::int64_t dim : h.shape) {
    const auto u = static_cast<std::uint64_t>(dim);
    if (u != 0 && count > available / u) {
      count = std::numeric_limits<std::uint64_t>::max();
      break;
    }
    count *= u;
  }
  if (std::find(h.shape.begin(), h.shape.end(), std::int64_t{0}) != h.shape.end()) count = 0;
  const bool fits = count != std::numeric_limits<std::uint64_t>::max() &&
                    count <= available / static_cast<std::uint64_t>(h.item_bytes);
  if (!fits) {
    std::ostringstream os;
    os << "(";
    for (std::size_t i = 0; i < h.shape.size(); ++i) os << (i ? ", " : "") << h.shape[i];
    os << ") of " << d << " with " << available << " data bytes";
    detail::npy_fail(name, "data", os.str(), "as many bytes as the shape needs (file truncated?)");
  }
  h.element_count = static_cast<std::int64_t>(count);
  return h;
}

/// The `bytes` (1 to 8) little-endian bytes at `src` as an unsigned integer.
inline std::uint64_t npy_load_le(const unsigned char* src, int bytes) {
  std::uint64_t u = 0;
  for (int j = 0; j < bytes; ++j) u |= static_cast<std::uint64_t>(src[j]) << (8 * j);
  return u;
}

/// Decodes `count` elements of `h`'s dtype from `src` (raw little-endian bytes) into
/// 64-bit signed integers. Unsigned 64-bit values above 2^63-1 map to -1 (they are
/// invalid ids either way). Floats are rejected by the caller. Complexity: O(count).
inline void npy_decode_integers(const NpyHeader& h, const unsigned char* src, std::size_t count,
                                std::int64_t* dst) {
  const int b = h.item_bytes;
  const bool sign = h.kind == NpyKind::kSigned;
  for (std::size_t i = 0; i < count; ++i, src += b) {
    std::uint64_t u = npy_load_le(src, b);
    if (sign && b < 8 && (u >> (8 * b - 1)) != 0) u |= ~std::uint64_t{0} << (8 * b);  // sign-extend
    if (!sign && b == 8 && u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      dst[i] = -1;
      continue;
    }
    dst[i] = static_cast<std::int64_t>(u);
  }
}

/// The element of `h`'s integer dtype at `src` in decimal, as the file holds it (an
/// unsigned 64-bit value above 2^63-1 too, which npy_decode_integers maps to -1).
inline std::string npy_integer_text(const NpyHeader& h, const unsigned char* src) {
  if (h.kind != NpyKind::kSigned) return std::to_string(npy_load_le(src, h.item_bytes));
  std::int64_t v = 0;
  npy_decode_integers(h, src, 1, &v);
  return std::to_string(v);
}

/// IEEE 754 binary16 to float (numpy 'f2'); handles subnormals, infinities and NaN.
inline float npy_half_to_float(std::uint16_t h) {
  const std::uint32_t sign = (h >> 15) & 1u, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    v = mant ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    v = std::ldexp(static_cast<float>(mant | 0x400u), static_cast<int>(exp) - 25);
  }
  return sign ? -v : v;
}

/// Decodes `count` float elements (f2, f4 or f8) into float. Complexity: O(count).
inline void npy_decode_floats(const NpyHeader& h, const unsigned char* src, std::size_t count, float* dst) {
  for (std::size_t i = 0; i < count; ++i, src += h.item_bytes) {
    const std::uint64_t u = npy_load_le(src, h.item_bytes);
    if (h.item_bytes == 2) {
      dst[i] = npy_half_to_float(static_cast<std::uint16_t>(u));
    } else if (h.item_bytes == 4) {
      dst[i] = std::bit_cast<float>(static_cast<std::uint32_t>(u));
    } else {
      dst[i] = static_cast<float>(std::bit_cast<double>(u));
    }
  }
}

namespace detail {
template <class T>
constexpr std::string_view npy_descr() {
  if constexpr (std::is_same_v<T, float>) return "<f4";
  else if constexpr (std::is_same_v<T, double>) return "<f8";
  else if constexpr (std::is_same_v<T, std::int8_t>) return "|i1";
  else if constexpr (std::is_same_v<T, std::uint8_t>) return "|u1";
  else if constexpr (std::is_same_v<T, std::int16_t>) return "<i2";
  else if constexpr (std::is_same_v<T, std::uint16_t>) return "<u2";
  else if constexpr (std::is_same_v<T, std::int32_t>) return "<i4";
  else if constexpr (std::is_same_v<T, std::uint32_t>) return "<u4";
  else if constexpr (std::is_same_v<T, std::int64_t>) return "<i8";
  else return "<u8";
}
}  // namespace detail

/// Element types `write_npy` accepts.
template <class T>
concept npy_element = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                      (std::is_integral_v<T> && !std::is_same_v<T, bool> && !std::is_same_v<T, char> &&
                       (sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8));

/// Writes an `.npy` version 1.0 header for `shape` with element type `T` (data must
/// follow, little-endian, C order). Complexity: O(rank).
template <npy_element T>
void write_npy_header(std::ostream& out, std::span<const std::int64_t> shape) {
  std::ostringstream dict;
  dict << "{'descr': '" << detail::npy_descr<T>() << "', 'fortran_order': False, 'shape': (";
  for (std::size_t i = 0; i < shape.size(); ++i) dict << shape[i] << (shape.size() == 1 || i + 1 < shape.size() ? "," : "");
  dict << "), }";
  std::string header = dict.str();
  // Pad with spaces so that magic + version + length + header is a multiple of 64.
  const std::size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  expect<IoError>(header.size() <= 65535, "npy header length", header.size(), "at most 65535 bytes");
  out.write("\x93NUMPY\x01\x00", 8);
  const char len[2] = {static_cast<char>(header.size() & 0xff), static_cast<char>(header.size() >> 8)};
  out.write(len, 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
}

/// Appends `values` to an `.npy` stream as little-endian elements. Complexity: O(n).
template <npy_element T>
void write_npy_data(std::ostream& out, std::span<const T> values) {
  if constexpr (std::endian::native == std::endian::little) {
    out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size_bytes()));
  } else {
    for (const T v : values) {
      auto bytes = std::bit_cast<std::array<char, sizeof(T)>>(v);
      std::reverse(bytes.begin(), bytes.end());
      out.write(bytes.data(), sizeof(T));
    }
  }
}

/// Writes a whole array: `values.size()` must equal the product of `shape`.
/// Throws ConfigError on a size mismatch. Complexity: O(n).
template <npy_element T>
void write_npy(std::ostream& out, std::span<const T> values, std::span<const std::int64_t> shape) {
  std::int64_t n = 1;
  for (const auto d : shape) n *= d;
  expect(static_cast<std::int64_t>(values.size()) == n, "write_npy values.size()", values.size(),
         "the product of the shape (" + std::to_string(n) + ")");
  write_npy_header<T>(out, shape);
  write_npy_data<T>(out, values);
}

}  // namespace disagmoe::placement
