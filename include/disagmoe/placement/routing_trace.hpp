// SPDX-License-Identifier: Apache-2.0
/// @file routing_trace.hpp
/// `RoutingTrace`: the top-k expert ids every token chose at every MoE layer (and,
/// optionally, the router's gate weights), stored token-major exactly like the
/// `.npy` array `[tokens, layers, top_k]` it is read from; `TraceReader` streams such
/// files in chunks of tokens so traces larger than memory can be processed.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/limits.hpp>
#include <disagmoe/placement/npy.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace disagmoe::placement {

/// Expert id within one layer. 16 bits halve memory traffic against 32 (a 1M-token,
/// 32-layer, top-8 trace is 512 MiB); real models have at most a few hundred experts.
using ExpertId = std::uint16_t;
/// Largest supported expert count per layer.
inline constexpr int kMaxExperts = 65536;

/// Top-k routing decisions of `tokens` tokens over `layers` MoE layers.
/// Invariants (checked by the constructor and the reader): every id is in
/// [0, num_experts) and the k ids of one token at one layer are distinct.
class RoutingTrace {
 public:
  RoutingTrace() = default;

  /// Takes ownership of `ids` (size tokens*layers*top_k, C order [token][layer][slot])
  /// and optional `gates` (same size, or empty). Throws ConfigError on a bad dimension,
  /// a size mismatch, an id out of range or a repeated id within one token and layer.
  /// Complexity: O(tokens * layers * top_k^2).
  RoutingTrace(std::int64_t tokens, int layers, int top_k, int num_experts, std::vector<ExpertId> ids,
               std::vector<float> gates = {})
      : tokens_(tokens), layers_(layers), top_k_(top_k), num_experts_(num_experts), ids_(std::move(ids)),
        gates_(std::move(gates)) {
    check_dimensions(tokens, layers, top_k, num_experts);
    const auto n = static_cast<std::size_t>(tokens) * static_cast<std::size_t>(layers) * static_cast<std::size_t>(top_k);
    expect(ids_.size() == n, "RoutingTrace ids.size()", ids_.size(), "tokens*layers*top_k = " + std::to_string(n));
    expect(gates_.empty() || gates_.size() == n, "RoutingTrace gates.size()", gates_.size(),
           "0 or tokens*layers*top_k = " + std::to_string(n));
    validate_ids("RoutingTrace", 0);
  }

  /// Throws ConfigError unless 0 <= tokens, 1 <= layers, 1 <= top_k <= num_experts <= kMaxExperts.
  static void check_dimensions(std::int64_t tokens, int layers, int top_k, int num_experts) {
    expect(tokens >= 0, "RoutingTrace.tokens", tokens, ">= 0");
    expect(layers >= 1, "RoutingTrace.layers", layers, ">= 1");
    expect(num_experts >= 1 && num_experts <= kMaxExperts, "RoutingTrace.num_experts", num_experts,
           "1 <= num_experts <= 65536");
    expect(top_k >= 1 && top_k <= num_experts, "RoutingTrace.top_k", top_k,
           "1 <= top_k <= num_experts (" + std::to_string(num_experts) + ")");
  }

  std::int64_t tokens() const noexcept { return tokens_; }  ///< number of tokens
  int layers() const noexcept { return layers_; }           ///< number of MoE layers
  int top_k() const noexcept { return top_k_; }             ///< experts chosen per token per layer
  int num_experts() const noexcept { return num_experts_; } ///< experts per layer
  bool has_gates() const noexcept { return !gates_.empty(); }

  /// The k expert ids of `token` at `layer` (unchecked indices). O(1).
  std::span<const ExpertId> experts(std::int64_t token, int layer) const noexcept {
    return {ids_.data() + offset(token, layer), static_cast<std::size_t>(top_k_)};
  }
  /// The k gate weights of `token` at `layer`; precondition: has_gates(). O(1).
  std::span<const float> gates(std::int64_t token, int layer) const noexcept {
    return {gates_.data() + offset(token, layer), static_cast<std::size_t>(top_k_)};
  }
  /// All ids, C order [token][layer][slot].
  std::span<const ExpertId> ids() const noexcept { return ids_; }
  /// All gate weights (empty without gates).
  std::span<const float> gate_weights() const noexcept { return gates_; }

  /// Checks ids (range, distinct per token and layer); messages say `where`, the token
  /// (offset by `first_token`), layer and value. Throws ConfigError. O(n * top_k).
  void validate_ids(const std::string& where, std::int64_t first_token) const {
    validate_ids_as<ConfigError>(where, first_token);
  }

  /// As `validate_ids` but throwing `E` (IoError when the ids came from a file).
  template <class E>
  void validate_ids_as(const std::string& where, std::int64_t first_token) const {
    for (std::int64_t t = 0; t < tokens_; ++t) {
      for (int l = 0; l < layers_; ++l) {
        const auto e = experts(t, l);
        for (int s = 0; s < top_k_; ++s) {
          for (int r = 0; r < s; ++r) {
            if (e[r] == e[s]) {
              throw E(where + ": " + describe(position(first_token + t, l, s) + " expert id", e[s],
                                              "distinct ids within one token's top-k (also in slot " +
                                                  std::to_string(r) + ")"));
            }
          }
        }
      }
    }
    // Range: ExpertId cannot be negative; only the upper end needs a check here.
    for (std::size_t i = 0; i < ids_.size(); ++i) {
      if (ids_[i] >= num_experts_) {
        const auto per_token = static_cast<std::size_t>(layers_) * static_cast<std::size_t>(top_k_);
        throw E(where + ": " + describe(position(first_token + static_cast<std::int64_t>(i / per_token),
                                                 static_cast<int>(i % per_token) / top_k_, static_cast<int>(i % top_k_)) +
                                            " expert id",
                                        ids_[i], "0 <= id < num_experts (" + std::to_string(num_experts_) + ")"));
      }
    }
    for (std::size_t i = 0; i < gates_.size(); ++i) {
      if (!std::isfinite(gates_[i])) {
        const auto per_token = static_cast<std::size_t>(layers_) * static_cast<std::size_t>(top_k_);
        throw E(where + ": " + describe(position(first_token + static_cast<std::int64_t>(i / per_token),
                                                 static_cast<int>(i % per_token) / top_k_, static_cast<int>(i % top_k_)) +
                                            " gate weight",
                                        gates_[i], "a finite number"));
      }
    }
  }

  /// "token T, layer L, slot S" for messages.
  static std::string position(std::int64_t token, int layer, int slot) {
    return "token " + std::to_string(token) + ", layer " + std::to_string(layer) + ", slot " + std::to_string(slot);
  }

 private:
  friend class TraceReader;
  struct Unchecked {};
  // For the reader, which range-checks while narrowing and then validates with IoError.
  RoutingTrace(Unchecked, std::int64_t tokens, int layers, int top_k, int num_experts, std::vector<ExpertId> ids,
               std::vector<float> gates)
      : tokens_(tokens), layers_(layers), top_k_(top_k), num_experts_(num_experts), ids_(std::move(ids)),
        gates_(std::move(gates)) {}

  std::size_t offset(std::int64_t token, int layer) const noexcept {
    return (static_cast<std::size_t>(token) * static_cast<std::size_t>(layers_) + static_cast<std::size_t>(layer)) *
           static_cast<std::size_t>(top_k_);
  }

  std::int64_t tokens_ = 0;
  int layers_ = 1;
  int top_k_ = 1;
  int num_experts_ = 1;
  std::vector<ExpertId> ids_;
  std::vector<float> gates_;
};

/// Streams a routing trace from `.npy` files in chunks of tokens.
/// The ids file holds an integer array `[tokens, layers, top_k]` (or `[tokens, layers]`,
/// read as top_k = 1) of any width, signed or unsigned; the optional gates file a float
/// array of the same shape. Every chunk is validated against `num_experts`; errors are
/// IoError naming the file, token, layer, slot and value.
class TraceReader {
 public:
  /// Opens `ids_path` (and `gates_path` unless empty). Throws IoError on an unreadable
  /// file, a bad header, a non-integer ids dtype, a rank other than 2 or 3, a shape
  /// mismatch between the files or a truncated file; ConfigError on a bad num_experts.
  TraceReader(const std::string& ids_path, int num_experts, const std::string& gates_path = {})
      : ids_name_(ids_path), gates_name_(gates_path), num_experts_(num_experts) {
    owned_ids_ = open(ids_path);
    ids_ = owned_ids_.get();
    if (!gates_path.empty()) {
      owned_gates_ = open(gates_path);
      gates_ = owned_gates_.get();
    }
    init();
  }

  /// Reads from caller-owned streams (e.g. in-memory buffers); `name` labels errors.
  TraceReader(std::istream& ids, std::string name, int num_experts)
      : ids_(&ids), ids_name_(std::move(name)), num_experts_(num_experts) {
    init();
  }

  std::int64_t tokens() const noexcept { return tokens_; }
  int layers() const noexcept { return layers_; }
  int top_k() const noexcept { return top_k_; }
  int num_experts() const noexcept { return num_experts_; }
  const NpyHeader& ids_header() const noexcept { return ids_header_; }

  /// Reads tokens [first, first + count) (clamped to the trace) and validates them.
  /// Complexity: O(count * layers * top_k^2); memory O(count * layers * top_k).
  RoutingTrace read(std::int64_t first, std::int64_t count) {
    expect(first >= 0 && first <= tokens_, "TraceReader.read first", first, "0 <= first <= tokens");
    expect(count >= 0, "TraceReader.read count", count, ">= 0");
    count = std::min(count, tokens_ - first);
    const std::size_t row = static_cast<std::size_t>(layers_) * static_cast<std::size_t>(top_k_);
    const std::size_t n = static_cast<std::size_t>(count) * row;
    std::vector<ExpertId> ids(n);
    {
      std::vector<unsigned char> raw(n * static_cast<std::size_t>(ids_header_.item_bytes));
      load(*ids_, ids_header_, ids_name_, first, raw);
      std::vector<std::int64_t> wide(n);
      npy_decode_integers(ids_header_, raw.data(), n, wide.data());
      for (std::size_t i = 0; i < n; ++i) {
        if (wide[i] < 0 || wide[i] >= num_experts_) {
          throw IoError(
              detail::npy_where(ids_name_) + ": " +
              describe(RoutingTrace::position(first + static_cast<std::int64_t>(i / row),
                                              static_cast<int>((i % row) / static_cast<std::size_t>(top_k_)),
                                              static_cast<int>(i % static_cast<std::size_t>(top_k_))) +
                           " expert id",
                       Verbatim{npy_integer_text(
                           ids_header_, raw.data() + i * static_cast<std::size_t>(ids_header_.item_bytes))},
                       "0 <= id < num_experts (" + std::to_string(num_experts_) + ")"));
        }
        ids[i] = static_cast<ExpertId>(wide[i]);
      }
    }
    std::vector<float> gates;
    if (gates_ != nullptr) {
      std::vector<unsigned char> raw(n * static_cast<std::size_t>(gates_header_.item_bytes));
      load(*gates_, gates_header_, gates_name_, first, raw);
      gates.resize(n);
      npy_decode_floats(gates_header_, raw.data(), n, gates.data());
    }
    RoutingTrace chunk(RoutingTrace::Unchecked{}, count, layers_, top_k_, num_experts_, std::move(ids), std::move(gates));
    chunk.validate_ids_as<IoError>(detail::npy_where(gates_ ? ids_name_ + "' / '" + gates_name_ : ids_name_), first);
    return chunk;
  }

  /// Calls `fn(chunk, first_token)` for consecutive chunks of at most `chunk_tokens`.
  void for_each_chunk(std::int64_t chunk_tokens, const std::function<void(const RoutingTrace&, std::int64_t)>& fn) {
    expect(chunk_tokens >= 1, "TraceReader chunk_tokens", chunk_tokens, ">= 1");
    for (std::int64_t first = 0; first < tokens_; first += chunk_tokens) fn(read(first, chunk_tokens), first);
  }

  /// Reads the whole trace.
  RoutingTrace read_all() { return read(0, tokens_); }

 private:
  static std::unique_ptr<std::ifstream> open(const std::string& path) {
    // A directory fails on the first read, a FIFO blocks, a device never ends.
    expect_regular_file("trace file", path);
    auto f = std::make_unique<std::ifstream>(path, std::ios::binary);
    if (!*f) throw IoError(detail::npy_where(path) + ": cannot be opened for reading");
    return f;
  }

  void init() {
    expect(num_experts_ >= 1 && num_experts_ <= kMaxExperts, "num_experts", num_experts_, "1 <= num_experts <= 65536");
    ids_header_ = read_npy_header(*ids_, ids_name_);
    if (ids_header_.kind == NpyKind::kFloat)
      detail::npy_fail(ids_name_, "header.descr", ids_header_.descr, "an integer dtype for expert ids");
    const auto& s = ids_header_.shape;
    if (s.size() != 2 && s.size() != 3) {
      std::string shape = "(";
      for (std::size_t i = 0; i < s.size(); ++i) shape += (i ? ", " : "") + std::to_string(s[i]);
      detail::npy_fail(ids_name_, "header.shape", shape + ")", "[tokens, layers, top_k] or [tokens, layers]");
    }
    tokens_ = s[0];
    expect<IoError>(s[1] >= 1 && s[1] <= (1 << 20), detail::npy_where(ids_name_) + ": layers", s[1], "1 <= layers <= 2^20");
    layers_ = static_cast<int>(s[1]);
    const std::int64_t k = s.size() == 3 ? s[2] : 1;
    expect<IoError>(k >= 1 && k <= num_experts_, detail::npy_where(ids_name_) + ": top_k", k,
                    "1 <= top_k <= num_experts (" + std::to_string(num_experts_) + ")");
    top_k_ = static_cast<int>(k);
    if (gates_ != nullptr) {
      gates_header_ = read_npy_header(*gates_, gates_name_);
      if (gates_header_.kind != NpyKind::kFloat)
        detail::npy_fail(gates_name_, "header.descr", gates_header_.descr, "a float dtype ('<f4', '<f8' or '<f2')");
      auto expected = s;
      if (expected.size() == 2) expected.push_back(1);
      auto got = gates_header_.shape;
      if (got.size() == 2) got.push_back(1);
      if (got != expected)
        detail::npy_fail(gates_name_, "header.shape", "(rank " + std::to_string(gates_header_.shape.size()) + ")",
                         "the shape of the ids file '" + ids_name_ + "'");
    }
  }

  void load(std::istream& in, const NpyHeader& h, const std::string& name, std::int64_t first,
            std::vector<unsigned char>& raw) {
    const std::int64_t row_bytes = static_cast<std::int64_t>(layers_) * top_k_ * h.item_bytes;
    in.clear();
    in.seekg(h.data_offset + first * row_bytes);
    in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(raw.size()));
    if (static_cast<std::size_t>(in.gcount()) != raw.size())
      throw IoError(detail::npy_where(name) + ": " + describe("data at token", first, "readable bytes (file truncated?)"));
  }

  std::unique_ptr<std::ifstream> owned_ids_;
  std::unique_ptr<std::ifstream> owned_gates_;
  std::istream* ids_ = nullptr;
  std::istream* gates_ = nullptr;
  std::string ids_name_;
  std::string gates_name_;
  NpyHeader ids_header_;
  NpyHeader gates_header_;
  int num_experts_ = 1;
  std::int64_t tokens_ = 0;
  int layers_ = 1;
  int top_k_ = 1;
};

/// Reads a whole trace (see TraceReader for the formats and errors).
inline RoutingTrace load_trace(const std::string& ids_path, int num_experts, const std::string& gates_path = {}) {
  TraceReader reader(ids_path, num_experts, gates_path);
  return reader.read_all();
}

/// Writes the ids of `trace` as an `.npy` array `[tokens, layers, top_k]` of '<u2'.
/// Throws IoError when the file cannot be written. Complexity: O(n).
inline void save_trace(const std::string& path, const RoutingTrace& trace) {
  std::ofstream out(path, std::ios::binary);
  if (!out) throw IoError(detail::npy_where(path) + ": cannot be opened for writing");
  const std::int64_t shape[3] = {trace.tokens(), trace.layers(), trace.top_k()};
  write_npy<ExpertId>(out, trace.ids(), shape);
  if (!out) throw IoError(detail::npy_where(path) + ": write failed");
}

/// Writes the gate weights of `trace` as '<f4' `[tokens, layers, top_k]`.
/// Throws ConfigError when the trace has no gates, IoError on a write failure.
inline void save_gates(const std::string& path, const RoutingTrace& trace) {
  expect(trace.has_gates(), "save_gates trace.has_gates()", false, "a trace with gate weights");
  std::ofstream out(path, std::ios::binary);
  if (!out) throw IoError(detail::npy_where(path) + ": cannot be opened for writing");
  const std::int64_t shape[3] = {trace.tokens(), trace.layers(), trace.top_k()};
  write_npy<float>(out, trace.gate_weights(), shape);
  if (!out) throw IoError(detail::npy_where(path) + ": write failed");
}

}  // namespace disagmoe::placement
