// SPDX-License-Identifier: Apache-2.0
/// @file byte_corpus.hpp
/// Byte-level training data for the demo trainer: reading a (possibly gzipped) text
/// file, a train/validation split, seeded sampling of training windows, deterministic
/// validation windows, and the unigram/bigram entropy baselines a model must beat.
///
/// A window is seq_len + 1 consecutive bytes w: the inputs are w[0, seq_len) and the
/// targets w[1, seq_len + 1), so target j is the byte that follows input j.
#pragma once

#include <disagmoe/config.hpp>
#include <disagmoe/error.hpp>
#include <disagmoe/limits.hpp>
#include <disagmoe/model/random.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <span>
#include <sstream>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#if DISAGMOE_HAS_ZLIB()
#include <zlib.h>
#endif

namespace disagmoe::runtime {

/// The demo trainer's default corpus: the Jargon File 4.4.7 (public domain), as
/// Debian's `jargon-text` package installs it (`scripts/setup` does).
inline constexpr const char* kDefaultCorpus = "/usr/share/doc/jargon-text/jargon.txt.gz";

/// The default limit on a corpus' size once read (and decompressed): a byte-level demo
/// needs far less, and the limit turns a gzip bomb into an IoError instead of an
/// out-of-memory abort.
inline constexpr std::size_t kMaxCorpusBytes = std::size_t{1} << 30;

namespace detail {

/// The one-line message for a missing corpus; for the default corpus it says how to
/// get it, since that is the file a first run looks for.
inline std::string missing_corpus_message(const std::filesystem::path& path) {
  const bool is_default = path == std::filesystem::path(kDefaultCorpus);
  return describe("corpus", path.string(),
                  is_default ? "an existing file; install Debian's jargon-text "
                               "(scripts/setup) or pass --corpus FILE"
                             : "an existing file");
}

#if DISAGMOE_HAS_ZLIB()
/// Inflates a whole gzip file held in memory. Unlike gzread, which reports a stream
/// that ends early as a plain end of file, this rejects truncation, bad data, bad
/// CRC/length trailers and trailing garbage. Concatenated members (gzip's own
/// semantics, RFC 1952 §2.2) are decompressed one after another.
inline std::vector<std::uint8_t> gunzip(std::span<const std::uint8_t> in,
                                        const std::string& name, std::size_t max_bytes) {
  z_stream zs{};
  // 15 + 16: the largest window, gzip wrapper only (zlib.h, inflateInit2).
  if (inflateInit2(&zs, 15 + 16) != Z_OK) fail<IoError>("corpus", name, "zlib to initialise");
  struct End {
    z_stream* s;
    ~End() { inflateEnd(s); }
  } end{&zs};
  constexpr std::size_t kChunk = std::size_t{1} << 16;
  // avail_in is a uInt, so very large inputs are fed in pieces.
  constexpr std::size_t kMaxIn = std::size_t{1} << 30;
  std::vector<std::uint8_t> out;
  std::size_t fed = 0;  // input bytes handed to zlib so far
  for (;;) {
    if (zs.avail_in == 0 && fed < in.size()) {
      const std::size_t n = std::min(in.size() - fed, kMaxIn);
      // zlib declares next_in non-const unless ZLIB_CONST; it never writes through it.
      zs.next_in = const_cast<Bytef*>(in.data() + fed);
      zs.avail_in = static_cast<uInt>(n);
      fed += n;
    }
    const std::size_t produced = out.size();
    out.resize(produced + kChunk);
    zs.next_out = out.data() + produced;
    zs.avail_out = static_cast<uInt>(kChunk);
    const int rc = inflate(&zs, Z_NO_FLUSH);
    out.resize(produced + (kChunk - zs.avail_out));
    if (out.size() > max_bytes)
      fail<IoError>("corpus", name,
                    "at most " + std::to_string(max_bytes) + " bytes once decompressed");
    expect_decompressed("corpus", name, static_cast<std::int64_t>(in.size()), static_cast<std::int64_t>(out.size()));
    if (rc == Z_OK) continue;
    const bool input_done = zs.avail_in == 0 && fed == in.size();
    if (rc == Z_STREAM_END) {
      if (input_done) return out;
      const std::size_t next = fed - zs.avail_in;  // offset of the byte after the member
      if (in.size() - next < 2 || in[next] != 0x1f || in[next + 1] != 0x8b)
        fail<IoError>("corpus", name,
                      "nothing after the gzip stream (trailing bytes at offset " +
                          std::to_string(next) + ")");
      if (inflateReset(&zs) != Z_OK) fail<IoError>("corpus", name, "zlib to reset");
      continue;
    }
    if (rc == Z_BUF_ERROR && input_done)
      fail<IoError>("corpus", name, "a complete gzip stream (it ends early: truncated?)");
    fail<IoError>("corpus", name,
                  std::string("valid gzip data (zlib: ") +
                      (zs.msg != nullptr ? zs.msg : "error " + std::to_string(rc)) + ")");
  }
}
#endif

}  // namespace detail

/// Reads a whole text file, or a gzip file (recognised by its magic bytes 1f 8b, not
/// by its name) when built with zlib. Throws IoError, in one line naming the file,
/// when it is missing (for `kDefaultCorpus`, saying how to get it), not a regular
/// file, unreadable, larger than `max_bytes` (after decompression), a truncated or
/// corrupt gzip stream, or gzipped in a build without zlib. O(file size) time and memory.
inline std::vector<std::uint8_t> read_corpus(const std::filesystem::path& path,
                                             std::size_t max_bytes = kMaxCorpusBytes) {
  namespace fs = std::filesystem;
  const std::string name = path.string();
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (st.type() == fs::file_type::not_found) throw IoError(detail::missing_corpus_message(path));
  if (ec) fail<IoError>("corpus", name, "an accessible file (" + ec.message() + ")");
  expect_regular_file("corpus", path);
  const std::uintmax_t size = fs::file_size(path, ec);
  if (ec) fail<IoError>("corpus", name, "a readable file (" + ec.message() + ")");
  if (size > max_bytes)
    fail<IoError>("corpus", name, "at most " + std::to_string(max_bytes) + " bytes");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail<IoError>("corpus", name, "a readable file");
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(size));
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (static_cast<std::uintmax_t>(in.gcount()) != size)
    fail<IoError>("corpus", name, "a readable file (it changed size while being read)");
  if (bytes.size() < 2 || bytes[0] != 0x1f || bytes[1] != 0x8b) return bytes;
#if DISAGMOE_HAS_ZLIB()
  return detail::gunzip(bytes, name, max_bytes);
#else
  fail<IoError>("corpus", name,
                "an uncompressed file (it is gzipped and this build has no zlib; gunzip it)");
#endif
}

/// Token windows for a byte-level model, row-major [sequences, seq_len]: row r is
/// inputs[r * seq_len, (r + 1) * seq_len). Every value is a byte, 0..255; the targets
/// are the inputs shifted by one byte (targets[r][j] is the byte after inputs[r][j]).
struct Batch {
  std::vector<int> inputs;
  std::vector<int> targets;
  int sequences = 0;
  int seq_len = 0;
};

/// A byte corpus split into a training part (the first bytes) and a validation part
/// (the last bytes), with seeded training batches and fixed validation windows.
class ByteCorpus {
 public:
  /// Splits `bytes` into validation = the last round(val_fraction * size) bytes and
  /// train = the rest. val_fraction = 0 means no validation split (`validation()` is
  /// then empty). Throws ConfigError when seq_len < 1, val_fraction is not in
  /// [0, 0.5], or the train split (or, with val_fraction > 0, the validation split) is
  /// shorter than one window, seq_len + 1 bytes; that message names the corpus size.
  ByteCorpus(std::vector<std::uint8_t> bytes, int seq_len, double val_fraction = 0.1)
      : bytes_(std::move(bytes)), seq_len_(seq_len) {
    expect(seq_len >= 1, "ByteCorpus.seq_len", seq_len, ">= 1");
    // Written so that NaN fails too.
    expect(val_fraction >= 0.0 && val_fraction <= 0.5, "ByteCorpus.val_fraction", val_fraction,
           "0 <= val_fraction <= 0.5");
    const std::size_t n = bytes_.size();
    const auto val = static_cast<std::size_t>(std::llround(val_fraction * static_cast<double>(n)));
    train_bytes_ = n - std::min(val, n);
    const std::size_t window = static_cast<std::size_t>(seq_len) + 1;
    if (train_bytes_ < window || (val_fraction > 0.0 && validation_bytes() < window)) {
      std::ostringstream what;
      what << n << " bytes (train split " << train_bytes_ << ", validation split "
           << validation_bytes() << " at val_fraction " << val_fraction << ")";
      fail("corpus", Verbatim{what.str()},
           "at least seq_len + 1 = " + std::to_string(window) + " bytes in " +
               (val_fraction > 0.0 ? "each split" : "the train split"));
    }
  }

  /// `sequences` windows whose start is drawn uniformly from the train_bytes() - seq_len
  /// possible ones, one `rng.below` per row in row order (so a restored Rng state gives
  /// the same batch). Throws ConfigError when sequences < 1. O(sequences * seq_len).
  [[nodiscard]] Batch sample_train(int sequences, model::Rng& rng) const {
    expect(sequences >= 1, "sample_train.sequences", sequences, ">= 1");
    const auto s = static_cast<std::size_t>(seq_len_);
    Batch b = empty_batch(sequences, seq_len_);
    for (std::size_t r = 0; r < static_cast<std::size_t>(sequences); ++r) {
      const std::size_t start = rng.below(train_bytes_ - s);
      fill_row(b, r, bytes_.data() + start);
    }
    return b;
  }

  /// The first min(max_windows, all) non-overlapping validation windows:
  /// inputs row i = val[i*S, (i+1)*S), targets row i = val[i*S+1, (i+1)*S+1) with
  /// S = seq_len, for every i with (i+1)*S+1 <= validation_bytes(). Deterministic.
  /// Empty (sequences = 0) without a validation split. ConfigError if max_windows < 1.
  [[nodiscard]] Batch validation(int max_windows = std::numeric_limits<int>::max()) const {
    if (validation_bytes() == 0) {
      expect(max_windows >= 1, "validation.max_windows", max_windows, ">= 1");
      return empty_batch(0, seq_len_);
    }
    return windows(validation_split(), seq_len_, max_windows);
  }

  /// Every full non-overlapping window of `bytes`, by the rule of `validation()`
  /// (for evaluating a model on a given text), at most `max_windows` of them. Throws
  /// ConfigError when seq_len < 1, max_windows < 1 or `bytes` is shorter than one
  /// window (the message names its size). O(windows * seq_len).
  [[nodiscard]] static Batch windows(std::span<const std::uint8_t> bytes, int seq_len,
                                     int max_windows = std::numeric_limits<int>::max()) {
    expect(seq_len >= 1, "windows.seq_len", seq_len, ">= 1");
    expect(max_windows >= 1, "windows.max_windows", max_windows, ">= 1");
    const auto s = static_cast<std::size_t>(seq_len);
    if (bytes.size() < s + 1)
      fail("text", Verbatim{std::to_string(bytes.size()) + " bytes"},
           "at least seq_len + 1 = " + std::to_string(s + 1) + " bytes (one full window)");
    // (i+1)*S+1 <= size  <=>  i+1 <= (size-1)/S.
    const std::size_t all = (bytes.size() - 1) / s;
    const int count = static_cast<int>(std::min(all, static_cast<std::size_t>(max_windows)));
    Batch b = empty_batch(count, seq_len);
    for (std::size_t i = 0; i < static_cast<std::size_t>(count); ++i)
      fill_row(b, i, bytes.data() + i * s);
    return b;
  }

  /// Bytes in the train split (the first ones).
  [[nodiscard]] std::size_t train_bytes() const { return train_bytes_; }
  /// Bytes in the validation split (the last ones).
  [[nodiscard]] std::size_t validation_bytes() const { return bytes_.size() - train_bytes_; }
  /// The train split.
  [[nodiscard]] std::span<const std::uint8_t> train_split() const {
    return {bytes_.data(), train_bytes_};
  }
  /// The validation split.
  [[nodiscard]] std::span<const std::uint8_t> validation_split() const {
    return {bytes_.data() + train_bytes_, validation_bytes()};
  }
  /// Tokens per sequence.
  [[nodiscard]] int seq_len() const { return seq_len_; }

 private:
  static Batch empty_batch(int sequences, int seq_len) {
    Batch b;
    b.sequences = sequences;
    b.seq_len = seq_len;
    const std::size_t n = static_cast<std::size_t>(sequences) * static_cast<std::size_t>(seq_len);
    b.inputs.resize(n);
    b.targets.resize(n);
    return b;
  }
  // Row r from the seq_len + 1 bytes at `w`.
  static void fill_row(Batch& b, std::size_t r, const std::uint8_t* w) {
    const auto s = static_cast<std::size_t>(b.seq_len);
    for (std::size_t j = 0; j < s; ++j) {
      b.inputs[r * s + j] = w[j];
      b.targets[r * s + j] = w[j + 1];
    }
  }

  std::vector<std::uint8_t> bytes_;
  int seq_len_;
  std::size_t train_bytes_ = 0;
};

/// Empirical entropies of a byte string, in nats per byte.
struct EntropyBaselines {
  /// H1 = -sum_a p(a) ln p(a) over the byte frequencies: the loss of the best model
  /// that ignores context.
  double unigram = 0;
  /// H2 = -sum_{a,b} p(a,b) ln p(b|a) over adjacent pairs, p(b|a) = n(a,b) / n(a,.):
  /// the loss of the best model that sees only the previous byte.
  double bigram = 0;
};

/// Unigram and bigram (conditional) entropy of `bytes` (Shannon 1948; conditional
/// entropy as in Cover & Thomas, "Elements of Information Theory", 2nd ed., §2.2),
/// from the maximum-likelihood (plug-in) frequencies of `bytes` itself. Both are 0 for
/// fewer than two bytes' worth of data (bigram) or one (unigram). O(size + 65536).
inline EntropyBaselines entropy_baselines(std::span<const std::uint8_t> bytes) {
  EntropyBaselines h;
  const std::size_t n = bytes.size();
  if (n == 0) return h;
  std::array<std::uint64_t, 256> uni{};
  std::array<std::uint64_t, 256> row{};  // n(a, .): a as the first byte of a pair
  std::vector<std::uint64_t> pair(256 * 256);
  for (std::size_t i = 0; i < n; ++i) ++uni[bytes[i]];
  for (std::size_t i = 0; i + 1 < n; ++i) {
    ++pair[std::size_t{bytes[i]} * 256 + bytes[i + 1]];
    ++row[bytes[i]];
  }
  const auto dn = static_cast<double>(n);
  for (const std::uint64_t c : uni)
    if (c != 0) h.unigram += static_cast<double>(c) / dn * std::log(dn / static_cast<double>(c));
  if (n >= 2) {
    const auto pairs = static_cast<double>(n - 1);
    for (std::size_t a = 0; a < 256; ++a)
      for (std::size_t b = 0; b < 256; ++b)
        if (const std::uint64_t c = pair[a * 256 + b]; c != 0)
          h.bigram += static_cast<double>(c) / pairs *
                      std::log(static_cast<double>(row[a]) / static_cast<double>(c));
  }
  return h;
}

}  // namespace disagmoe::runtime
