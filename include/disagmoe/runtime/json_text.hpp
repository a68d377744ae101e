// SPDX-License-Identifier: Apache-2.0
/// @file json_text.hpp
/// The JSON text of safetensors headers: UTF-8 validation (RFC 3629), string escaping
/// (RFC 8259) and a strict byte cursor whose errors name the byte offset.
#pragma once

#include <disagmoe/runtime/file_io.hpp>
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


namespace disagmoe::runtime::detail {

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
}  // namespace disagmoe::runtime::detail
