// SPDX-License-Identifier: Apache-2.0
/// @file limits.hpp
/// The one place for input limits: checked 64-bit size arithmetic, checks that a
/// floating-point input is finite and in range, the largest sizes a spec may have,
/// and the process-wide budgets (host memory, JSON depth and file size, decompressed
/// size) an input's cost is compared against before anything is allocated. Every
/// violation is a ConfigError (IoError for files) naming the field, e.g.
///   "--sm-fraction = nan: expected a finite number in [0, 1)".
#pragma once

#include <disagmoe/error.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <sstream>
#include <string>
#include <string_view>

namespace disagmoe {

/// Budgets of one process; programs override them from the command line
/// (`--max-memory`). The defaults admit every preset and far larger inputs.
struct Limits {
  /// Host memory a run may plan to allocate for one data structure (bytes).
  std::int64_t max_memory_bytes = std::int64_t{16} << 30;
  /// Size of one file a program writes (bytes).
  std::int64_t max_output_bytes = std::int64_t{64} << 30;
  /// Work: ops of one simulated timeline (~3 us and ~400 bytes each; the largest
  /// preset setting of bench/RESULTS.md needs 963k).
  std::int64_t max_ops = std::int64_t{1} << 22;
  /// Size of a JSON spec or plan file (bytes).
  std::int64_t max_json_file_bytes = std::int64_t{64} << 20;
  /// Nesting depth of a JSON document (specs nest 2 deep, plans 4).
  int max_json_depth = 64;
  /// Size of a file once gunzipped (bytes).
  std::int64_t max_decompressed_bytes = std::int64_t{1} << 30;
  /// Above `ratio_check_bytes` of output, a gzip stream may expand at most this much:
  /// text compresses 3-10x, a gzip bomb ~1000x (DEFLATE's limit is 1032:1, RFC 1951).
  double max_compression_ratio = 100;
  std::int64_t ratio_check_bytes = std::int64_t{16} << 20;
};

/// The process-wide limits (mutable: set once at start-up, before any input is read).
inline Limits& limits() {
  static Limits l;
  return l;
}

/// Largest spec sizes: beyond every published model and cluster by orders of
/// magnitude, small enough that the planner's per-layer and per-node work stays
/// bounded and that sizes of one layer fit 64 bits.
namespace max_size {
inline constexpr int kLayers = 4096;
inline constexpr int kHidden = 1 << 20;
inline constexpr int kHeads = 1 << 14;
inline constexpr int kHeadDim = 1 << 14;
inline constexpr int kExperts = 1 << 16;
inline constexpr int kTopK = 256;  ///< experts per token (published models: 1-16); the cost model is O(top_k)
inline constexpr int kFfn = 1 << 22;
inline constexpr int kVocab = 1 << 24;
inline constexpr int kSeqLen = 1 << 24;
inline constexpr int kMicroBatch = 1 << 20;
inline constexpr int kNodes = 1 << 16;
inline constexpr int kGpusPerNode = 1 << 10;
inline constexpr int kNicsPerNode = 1 << 10;
inline constexpr double kFlops = 1e21;            ///< FLOP/s of one GPU (a zettaFLOP/s)
inline constexpr double kBytes = 1e15;            ///< HBM bytes of one GPU (a petabyte)
inline constexpr double kBandwidth = 1e15;        ///< bytes/s of one link
inline constexpr double kMinBandwidth = 1e3;      ///< bytes/s of a link that exists
inline constexpr double kMinHbmBytes = 1 << 20;   ///< a GPU holds at least 1 MiB
inline constexpr double kLatency = 1;             ///< seconds per message
}  // namespace max_size

/// `a * b`; ConfigError naming `field` when the product does not fit 64 bits.
constexpr std::int64_t checked_mul(std::int64_t a, std::int64_t b, std::string_view field) {
  std::int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r))
    fail(field, Verbatim{std::to_string(a) + " * " + std::to_string(b)}, "a size that fits 64 bits");
  return r;
}

/// `a + b`; ConfigError naming `field` when the sum does not fit 64 bits.
constexpr std::int64_t checked_add(std::int64_t a, std::int64_t b, std::string_view field) {
  std::int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r))
    fail(field, Verbatim{std::to_string(a) + " + " + std::to_string(b)}, "a size that fits 64 bits");
  return r;
}

/// ConfigError unless `lo <= v <= hi` (integers).
inline void expect_in(std::string_view field, long long v, long long lo, long long hi) {
  expect(v >= lo && v <= hi, field, v, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

/// ConfigError unless `v` is finite and in [lo, hi] (or [lo, hi) with `hi_open`):
/// NaN compares false with everything, so every range check on a double goes here.
inline void expect_finite_in(std::string_view field, double v, double lo, double hi, bool hi_open = false) {
  std::ostringstream range;
  range.precision(17);
  range << "a finite number in [" << lo << ", " << hi << (hi_open ? ")" : "]");
  expect(std::isfinite(v) && v >= lo && (hi_open ? v < hi : v <= hi), field, v, range.str());
}

namespace detail {
template <class T>
void expect_within(std::string_view field, const T& value, double bytes, std::int64_t budget_bytes,
                   std::string_view what, std::string_view option) {
  const double budget = static_cast<double>(budget_bytes);
  if (bytes <= budget) return;
  std::ostringstream os;
  os.precision(3);
  os << "a size whose " << what << " (" << bytes / double(1 << 30) << " GiB) fits the budget ("
     << budget / double(1 << 30) << " GiB; raise it with " << option << ")";
  fail(field, value, os.str());
}
}  // namespace detail

/// ConfigError unless `bytes`, the estimated memory an input needs for `what`, fits
/// the memory budget; `field` and `value` name the input that drives the size.
template <class T>
void expect_memory(std::string_view field, const T& value, double bytes, std::string_view what) {
  detail::expect_within(field, value, bytes, limits().max_memory_bytes, what, "--max-memory");
}

/// ConfigError unless a file of `bytes` that an input asks to write fits the output budget.
template <class T>
void expect_output(std::string_view field, const T& value, double bytes, std::string_view what) {
  detail::expect_within(field, value, bytes, limits().max_output_bytes, what, "--max-output");
}

/// ConfigError unless `ops` units of work that an input asks for fit the work budget.
template <class T>
void expect_work(std::string_view field, const T& value, std::int64_t ops, std::string_view what) {
  if (ops <= limits().max_ops) return;
  fail(field, value,
       "a size whose " + std::string(what) + " (" + std::to_string(ops) + " ops) fits the work budget (" +
           std::to_string(limits().max_ops) + " ops; raise it with --max-ops)");
}

/// IoError when a gzip stream of `compressed` bytes has inflated to `decompressed`
/// bytes so far beyond the budget or the ratio of real data; call while inflating, so
/// that a gzip bomb stops at the limit instead of exhausting memory.
inline void expect_decompressed(std::string_view field, std::string_view file, std::int64_t compressed,
                                std::int64_t decompressed) {
  const Limits& l = limits();
  if (decompressed > l.max_decompressed_bytes)
    fail<IoError>(field, file, "a file that decompresses to at most " + std::to_string(l.max_decompressed_bytes) +
                                   " bytes");
  if (decompressed > l.ratio_check_bytes &&
      static_cast<double>(decompressed) > l.max_compression_ratio * static_cast<double>(compressed))
    fail<IoError>(field, file, "a gzip file that decompresses at most " +
                                   std::to_string(static_cast<int>(l.max_compression_ratio)) +
                                   "x (this one inflates further: a gzip bomb?)");
}

/// IoError naming `field` and the path when `path` exists but is not a regular file: a
/// directory, FIFO or device (such as /dev/zero) would fail late, block or never end, so
/// readers check here before they open (so /dev/stdin and process substitution are
/// refused too). A missing file is left to the opener's message.
inline void expect_regular_file(std::string_view field, const std::filesystem::path& path) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (std::filesystem::exists(st) && !std::filesystem::is_regular_file(st))
    fail<IoError>(field, path.string(), "a regular file");
}

}  // namespace disagmoe
