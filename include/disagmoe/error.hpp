// SPDX-License-Identifier: Apache-2.0
/// @file error.hpp
/// Exceptions thrown by the host API. Every message names the bad field, the value
/// it had and what was expected, e.g.
///   "ModelSpec.top_k = 9: expected 1 <= top_k <= experts (64)".
/// Expected outcomes (an infeasible MILP, a time limit) are values, never exceptions.
#pragma once

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

/// A value printed as is by `describe` (not quoted), e.g. a JSON literal.
struct Verbatim {
  std::string text;
  friend std::ostream& operator<<(std::ostream& os, const Verbatim& v) { return os << v.text; }
};

namespace detail {
template <class T>
void append_value(std::ostringstream& os, const T& value) {
  if constexpr (std::is_convertible_v<const T&, std::string_view>) {
    os << '"' << std::string_view(value) << '"';
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
