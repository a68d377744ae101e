// SPDX-License-Identifier: Apache-2.0
/// @file dtype.hpp
/// Numeric formats of training tensors and their sizes.
#pragma once

#include <disagmoe/error.hpp>

#include <array>
#include <string>
#include <string_view>

namespace disagmoe {

/// Element format of activations and weights in the compute path.
enum class DType { kFp32, kBf16, kFp16, kFp8 };

namespace detail {
struct DTypeInfo {
  DType dtype;
  std::string_view name;
  double bytes;
};
inline constexpr std::array<DTypeInfo, 4> kDTypes{{
    {DType::kFp32, "fp32", 4.0},
    {DType::kBf16, "bf16", 2.0},
    {DType::kFp16, "fp16", 2.0},
    {DType::kFp8, "fp8", 1.0},
}};
}  // namespace detail

/// Bytes per element.
constexpr double bytes_of(DType t) {
  for (const auto& i : detail::kDTypes)
    if (i.dtype == t) return i.bytes;
  return 0.0;
}

/// Lower-case name ("bf16").
constexpr std::string_view to_string(DType t) {
  for (const auto& i : detail::kDTypes)
    if (i.dtype == t) return i.name;
  return "?";
}

/// Parses "fp32" | "bf16" | "fp16" | "fp8"; `field` names the source in the error.
inline DType parse_dtype(std::string_view s, std::string_view field = "dtype") {
  for (const auto& i : detail::kDTypes)
    if (i.name == s) return i.dtype;
  fail(field, s, "one of fp32, bf16, fp16, fp8");
}

}  // namespace disagmoe
