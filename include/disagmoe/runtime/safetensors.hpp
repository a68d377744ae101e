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

#if defined(__unix__) || defined(__APPLE__)
#include <fcntl.h>
#include <unistd.h>
#endif

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

/// Throws IoError "<file>: <field> = <value>: expected <expected>".
template <class T>
[[noreturn]] void file_fail(std::string_view file, std::string_view field, const T& value,
                            std::string_view expected) {
  throw IoError(std::string(file) + ": " + describe(field, value, expected));
}

inline std::uint64_t load_le64(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

inline std::uint32_t load_le32(const unsigned char* p) {
  return static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
         (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
}

inline std::array<unsigned char, 8> le64_bytes(std::uint64_t v) {
  std::array<unsigned char, 8> b{};
  for (auto& c : b) {
    c = static_cast<unsigned char>(v & 0xffu);
    v >>= 8;
  }
  return b;
}

inline std::array<unsigned char, 4> le32_bytes(std::uint32_t v) {
  return {static_cast<unsigned char>(v), static_cast<unsigned char>(v >> 8),
          static_cast<unsigned char>(v >> 16), static_cast<unsigned char>(v >> 24)};
}

/// Length of the well-formed UTF-8 sequence starting at `s[at]`, or 0 if there is none.
/// Follows RFC 3629 section 4 (no overlong forms, no surrogates, at most U+10FFFF).
inline std::size_t utf8_sequence_length(std::string_view s, std::size_t at) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[at + i]); };
  const unsigned char b0 = byte(0);
  if (b0 < 0x80) return 1;
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // allowed range of the second byte
  if (b0 >= 0xc2 && b0 <= 0xdf) {
    n = 2;
  } else if (b0 >= 0xe0 && b0 <= 0xef) {
    n = 3;
    if (b0 == 0xe0) lo = 0xa0;  // overlong
    if (b0 == 0xed) hi = 0x9f;  // UTF-16 surrogates
  } else if (b0 >= 0xf0 && b0 <= 0xf4) {
    n = 4;
    if (b0 == 0xf0) lo = 0x90;  // overlong
    if (b0 == 0xf4) hi = 0x8f;  // above U+10FFFF
  } else {
    return 0;
  }
  if (s.size() - at < n) return 0;
  if (byte(1) < lo || byte(1) > hi) return 0;
  for (std::size_t i = 2; i < n; ++i)
    if (byte(i) < 0x80 || byte(i) > 0xbf) return 0;
  return n;
}

inline bool is_valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_sequence_length(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

/// Appends `s` as a JSON string literal (RFC 8259 section 7): quotes, backslashes and
/// control characters escaped, everything else (valid UTF-8) copied as is.
inline void append_json_string(std::string& out, std::string_view s) {
  out.push_back('"');
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (u < 0x20) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\u00";
      out.push_back(kHex[u >> 4]);
      out.push_back(kHex[u & 0xf]);
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
}

/// `s` quoted and escaped for an error message.
inline std::string json_quoted(std::string_view s) {
  std::string out;
  append_json_string(out, s.substr(0, 200));
  if (s.size() > 200) out.insert(out.size() - 1, "...");
  return out;
}

/// One byte as it should appear in an error message: 'x' or 0xNN.
inline std::string byte_display(unsigned char c) {
  if (c >= 0x20 && c < 0x7f) return std::string("'") + static_cast<char>(c) + "'";
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", c);
  return buf;
}

template <class Int>
std::string list_display(std::span<const Int> v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

/// Size of a seekable stream; the stream is left at its start.
inline std::uint64_t seekable_size(std::istream& in, std::string_view file) {
  in.clear();
  in.seekg(0, std::ios::end);
  const auto end = in.tellg();
  in.seekg(0, std::ios::beg);
  if (end < 0 || !in) file_fail(file, "stream", Verbatim{"not seekable"}, "a seekable file or stream");
  return static_cast<std::uint64_t>(end);
}

/// Reads exactly `n` bytes or throws IoError naming `what` (the stream ended early:
/// the file shrank while being read, since sizes are checked against the file size).
inline void read_exact(std::istream& in, void* dst, std::uint64_t n, std::string_view file,
                       std::string_view what) {
  auto* p = static_cast<char*>(dst);
  // Chunked so that a std::streamsize narrower than 64 bits cannot truncate a count.
  constexpr std::uint64_t kChunk = std::uint64_t{1} << 30;
  while (n > 0) {
    const std::uint64_t part = std::min(n, kChunk);
    in.read(p, static_cast<std::streamsize>(part));
    if (static_cast<std::uint64_t>(in.gcount()) != part)
      file_fail(file, what, Verbatim{"(end of file)"},
                "more bytes (the file is truncated or changed while read)");
    p += part;
    n -= part;
  }
}

/// Opens `path` for binary reading or throws IoError naming it.
inline std::ifstream open_for_reading(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) file_fail(path.string(), "open", Verbatim{"failed"}, "an existing, readable file");
  return in;
}

/// fsync(2) of `path` on POSIX systems (elsewhere a no-op), so that a rename never publishes a file
/// whose data is still only in the page cache (a crash would leave it empty).
/// `required`: throw IoError when the sync fails (for files; directories are best effort,
/// since some file systems refuse to sync a directory).
inline void sync_path(const std::filesystem::path& path, bool required) {
#if defined(__unix__) || defined(__APPLE__)
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) {
    if (required) file_fail(path.string(), "open for fsync", Verbatim{"failed"}, "the file just written");
    return;
  }
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0 && required)
    file_fail(path.string(), "fsync", Verbatim{"failed"}, "the data to reach the disk");
#else
  (void)path;
  (void)required;
#endif
}

/// Writes a file atomically: `fill(std::ostream&)` writes the contents to
/// `path` + ".tmp", which is synced and then renamed over `path` (rename(2) replaces
/// the target atomically, so readers see the old file or the new one, never a part).
/// The temporary is removed on any failure. Throws IoError naming the file.
template <class Fill>
void write_file_atomically(const std::filesystem::path& path, Fill&& fill) {
  std::filesystem::path tmp = path;
  tmp += ".tmp";
  const auto discard = [&] {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
  };
  try {
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      if (!out)
        file_fail(tmp.string(), "open for writing", Verbatim{"failed"},
                  "a writable path (does the directory exist?)");
      fill(static_cast<std::ostream&>(out));
      out.flush();
      if (!out) file_fail(tmp.string(), "write", Verbatim{"failed"}, "all bytes written (is the disk full?)");
      out.close();
      if (out.fail())
        file_fail(tmp.string(), "close", Verbatim{"failed"}, "all bytes written (is the disk full?)");
    }
    sync_path(tmp, true);
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec)
      file_fail(path.string(), "rename from " + tmp.string(), ec.message(),
                "the new file to replace the target");
  } catch (...) {
    discard();
    throw;
  }
  const auto dir = path.parent_path();
  sync_path(dir.empty() ? std::filesystem::path(".") : dir, false);
}

/// Byte cursor over the safetensors header text; every error names the byte offset.
class JsonCursor {
 public:
  JsonCursor(std::string_view file, std::string_view text) : file_(file), text_(text) {}

  [[noreturn]] void fail_here(std::string_view expected) const {
    const Verbatim found{pos_ < text_.size() ? byte_display(static_cast<unsigned char>(text_[pos_]))
                                             : std::string("(end of header)")};
    file_fail(file_, "header byte " + std::to_string(pos_), found, expected);
  }

  /// JSON whitespace (RFC 8259 section 2): space, tab, line feed, carriage return.
  void skip_ws() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }
  bool at_end() const { return pos_ >= text_.size(); }
  bool peek(char c) const { return pos_ < text_.size() && text_[pos_] == c; }
  void expect_char(char c, std::string_view expected) {
    if (!peek(c)) fail_here(expected);
    ++pos_;
  }

  /// A JSON string (RFC 8259 section 7), escapes decoded, validated as UTF-8.
  std::string parse_string(std::string_view what) {
    if (!peek('"')) fail_here(std::string(what) + " (a JSON string)");
    ++pos_;
    std::string out;
    while (true) {
      if (at_end()) fail_here("a closing '\"' of " + std::string(what));
      const auto c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c < 0x20)
        fail_here("no raw control character inside " + std::string(what) + " (JSON needs \\u escapes)");
      if (c == '\\') {
        ++pos_;
        if (at_end()) fail_here("an escape sequence");
        const char e = text_[pos_++];
        switch (e) {
          case '"':
            out.push_back('"');
            break;
          case '\\':
            out.push_back('\\');
            break;
          case '/':
            out.push_back('/');
            break;
          case 'b':
            out.push_back('\b');
            break;
          case 'f':
            out.push_back('\f');
            break;
          case 'n':
            out.push_back('\n');
            break;
          case 'r':
            out.push_back('\r');
            break;
          case 't':
            out.push_back('\t');
            break;
          case 'u':
            append_code_point(out);
            break;
          default:
            --pos_;
            fail_here("one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u after a backslash");
        }
        continue;
      }
      const std::size_t n = utf8_sequence_length(text_, pos_);
      if (n == 0) fail_here("valid UTF-8 inside " + std::string(what));
      out.append(text_.substr(pos_, n));
      pos_ += n;
    }
  }

  /// A JSON number that is a non-negative integer below 2^64 (no sign, fraction,
  /// exponent or leading zero: RFC 8259 section 6 forbids the latter).
  std::uint64_t parse_uint(std::string_view what) {
    if (peek('-')) fail_here(std::string(what) + " (a non-negative integer)");
    if (at_end() || text_[pos_] < '0' || text_[pos_] > '9') fail_here(std::string(what) + " (an integer)");
    if (text_[pos_] == '0' && pos_ + 1 < text_.size() && text_[pos_ + 1] >= '0' && text_[pos_ + 1] <= '9') {
      ++pos_;
      fail_here(std::string(what) + " without leading zeros");
    }
    std::uint64_t v = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      const auto d = static_cast<std::uint64_t>(text_[pos_] - '0');
      if (v > (std::numeric_limits<std::uint64_t>::max() - d) / 10)
        fail_here(std::string(what) + " below 2^64");
      v = v * 10 + d;
      ++pos_;
    }
    if (peek('.') || peek('e') || peek('E'))
      fail_here(std::string(what) + " as an integer (no fraction or exponent)");
    return v;
  }

  /// `[n, n, ...]` of non-negative integers.
  std::vector<std::uint64_t> parse_uint_array(std::string_view what) {
    expect_char('[', std::string(what) + " (a JSON array)");
    std::vector<std::uint64_t> v;
    skip_ws();
    if (peek(']')) {
      ++pos_;
      return v;
    }
    while (true) {
      skip_ws();
      v.push_back(parse_uint("an element of " + std::string(what)));
      skip_ws();
      if (peek(']')) {
        ++pos_;
        return v;
      }
      expect_char(',', "',' or ']' in " + std::string(what));
    }
  }

  /// `{ "key": value, ... }`; `on_member(key)` is called with the cursor on the value
  /// and must consume it.
  template <class OnMember>
  void parse_object(std::string_view what, OnMember&& on_member) {
    expect_char('{', std::string(what) + " (a JSON object)");
    skip_ws();
    if (peek('}')) {
      ++pos_;
      return;
    }
    while (true) {
      skip_ws();
      std::string key = parse_string("a key of " + std::string(what));
      skip_ws();
      expect_char(':', "':' after a key of " + std::string(what));
      skip_ws();
      on_member(std::move(key));
      skip_ws();
      if (peek('}')) {
        ++pos_;
        return;
      }
      expect_char(',', "',' or '}' in " + std::string(what));
    }
  }

 private:
  unsigned hex4() {
    unsigned v = 0;
    for (int i = 0; i < 4; ++i, ++pos_) {
      if (at_end()) fail_here("four hex digits after \\u");
      const char h = text_[pos_];
      unsigned d = 0;
      if (h >= '0' && h <= '9')
        d = static_cast<unsigned>(h - '0');
      else if (h >= 'a' && h <= 'f')
        d = static_cast<unsigned>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F')
        d = static_cast<unsigned>(h - 'A' + 10);
      else
        fail_here("four hex digits after \\u");
      v = v * 16 + d;
    }
    return v;
  }

  /// Decodes the XXXX of \uXXXX (and a following low surrogate) as UTF-8: RFC 8259
  /// section 7 writes code points above U+FFFF as a UTF-16 surrogate pair.
  void append_code_point(std::string& out) {
    unsigned cp = hex4();
    if (cp >= 0xdc00 && cp <= 0xdfff)
      fail_here("a high surrogate before a low one (lone \\u" + hex_text(cp) + ")");
    if (cp >= 0xd800 && cp <= 0xdbff) {
      if (!(peek('\\') && pos_ + 1 < text_.size() && text_[pos_ + 1] == 'u'))
        fail_here("a low surrogate \\uDC00-\\uDFFF after \\u" + hex_text(cp));
      pos_ += 2;
      const unsigned lo = hex4();
      if (lo < 0xdc00 || lo > 0xdfff) fail_here("a low surrogate \\uDC00-\\uDFFF after \\u" + hex_text(cp));
      cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
    }
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out.push_back(static_cast<char>(0xc0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else if (cp < 0x10000) {
      out.push_back(static_cast<char>(0xe0 | (cp >> 12)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else {
      out.push_back(static_cast<char>(0xf0 | (cp >> 18)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    }
  }

  static std::string hex_text(unsigned v) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "%04X", v);
    return buf;
  }

  std::string_view file_;
  std::string_view text_;
  std::size_t pos_ = 0;
};

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
