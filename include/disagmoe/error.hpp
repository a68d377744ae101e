// SPDX-License-Identifier: Apache-2.0
/// @file error.hpp
/// Exceptions thrown by the host API. Every message names the bad field, the value
/// it had and what was expected, e.g.
///   "ModelSpec.top_k = 9: expected 1 <= top_k <= experts (64)".
/// Expected outcomes (an infeasible MILP, a time limit) are values, never exceptions.
#pragma once

#include <cstddef>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

namespace disagmoe {

/// Base of every exception the library throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
/// A specification, option or argument is invalid.
class ConfigError : public Error {
 public:
  using Error::Error;
};
/// A file or stream could not be read or written, or its contents are malformed.
class IoError : public Error {
 public:
  using Error::Error;
};
/// The MILP/LP solver failed internally (not: infeasible or unbounded, which are results).
class SolverError : public Error {
 public:
  using Error::Error;
};
/// A communication peer or operation did not complete within its deadline.
class TimeoutError : public Error {
 public:
  using Error::Error;
};
/// An MPI call failed.
class MpiError : public Error {
 public:
  using Error::Error;
};
/// A CUDA runtime call failed.
class CudaError : public Error {
 public:
  using Error::Error;
};
/// An NCCL call failed.
class NcclError : public Error {
 public:
  using Error::Error;
};

namespace detail {

/// Length of the well-formed UTF-8 sequence starting at s[i] (2 to 4), 0 if there is none.
inline std::size_t utf8_sequence(std::string_view s, std::size_t i) {
  const auto lead = static_cast<unsigned char>(s[i]);
  const std::size_t n = lead >= 0xC2 && lead <= 0xDF   ? 2
                        : lead >= 0xE0 && lead <= 0xEF ? 3
                        : lead >= 0xF0 && lead <= 0xF4 ? 4
                                                       : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
  return n;
}

/// `s` with control bytes and bytes outside well-formed UTF-8 written as \xNN, so that
/// a value read from a binary or corrupt file cannot garble the terminal or the log.
inline void write_text(std::ostream& os, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t n = c >= 0x80 ? utf8_sequence(s, i) : 0;
    if (n > 0) {
      os << s.substr(i, n);
      i += n;
      continue;
    }
    if (c < 0x20 || c >= 0x7F)
      os << "\\x" << kHex[c >> 4] << kHex[c & 0xF];
    else
      os << s[i];
    ++i;
  }
}

}  // namespace detail

/// A value printed as is by `describe` (not quoted), e.g. a JSON literal.
struct Verbatim {
  std::string text;
  friend std::ostream& operator<<(std::ostream& os, const Verbatim& v) {
    detail::write_text(os, v.text);
    return os;
  }
};

namespace detail {
template <class T>
void append_value(std::ostringstream& os, const T& value) {
  if constexpr (std::is_convertible_v<const T&, std::string_view>) {
    os << '"';
    write_text(os, std::string_view(value));
    os << '"';
  } else if constexpr (std::is_same_v<T, bool>) {
    os << (value ? "true" : "false");
  } else {
    os << value;
  }
}
}  // namespace detail

/// Formats "field = value: expected what".
template <class T>
std::string describe(std::string_view field, const T& value, std::string_view expected) {
  std::ostringstream os;
  os.precision(17);
  os << field << " = ";
  detail::append_value(os, value);
  os << ": expected " << expected;
  return os.str();
}

/// Throws `E` with the message of `describe(field, value, expected)`.
template <class E = ConfigError, class T>
[[noreturn]] void fail(std::string_view field, const T& value, std::string_view expected) {
  throw E(describe(field, value, expected));
}

/// Throws `E` naming field, value and expectation unless `ok`.
template <class E = ConfigError, class T>
void expect(bool ok, std::string_view field, const T& value, std::string_view expected) {
  if (!ok) fail<E>(field, value, expected);
}

}  // namespace disagmoe
