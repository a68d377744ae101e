// SPDX-License-Identifier: Apache-2.0
/// @file state_file.hpp
/// A versioned, checksummed binary file of named arrays for the trainer state that
/// safetensors does not hold well: optimizer moments, the step, RNG state and the data
/// position. Written atomically; read strictly (any corruption is an IoError).
///
/// Layout, version 1 (every integer little-endian, no padding):
///
///   offset   size     field
///   0        8        magic "DMOESTAT"
///   8        4        u32 version = 1
///   12       8        u64 entry count E
///   20       ...      E entries, each:
///                       u32  name length L, 1 <= L <= 4096
///                       L    name bytes (UTF-8, unique in the file)
///                       u8   kind: 1 = f32 array (IEEE 754 binary32), 2 = u64 array
///                       u64  element count n
///                       n*4 (f32) or n*8 (u64) payload bytes
///   size-8   8        u64 checksum: FNV-1a 64 of bytes [0, size-8)
///
/// The checksum is FNV-1a with 64-bit offset basis 0xcbf29ce484222325 and prime
/// 0x100000001b3 (Fowler, Noll, Vo; http://www.isthe.com/chongo/tech/comp/fnv/ and
/// draft-eastlake-fnv). Each FNV-1a step `h = (h ^ byte) * prime` is a bijection of
/// `h` for a fixed byte, so any change confined to one byte (every single-bit flip)
/// always changes the checksum; other damage escapes with probability about 2^-64.
/// The reader checks, in this order: size, magic, version (so a file from a newer
/// writer says so), checksum, then the structure.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/runtime/file_io.hpp>
#include <disagmoe/runtime/json_text.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <istream>
#include <map>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace disagmoe::runtime {

/// The state-file format version this code writes and the only one it reads.
inline constexpr std::uint32_t kStateFileVersion = 1;
/// Longest entry name (bytes).
inline constexpr std::size_t kStateMaxNameBytes = 4096;

namespace detail {

inline constexpr std::array<char, 8> kStateMagic{'D', 'M', 'O', 'E', 'S', 'T', 'A', 'T'};
inline constexpr std::uint64_t kFnvOffsetBasis = 0xcbf29ce484222325ull;
inline constexpr std::uint64_t kFnvPrime = 0x100000001b3ull;
/// magic + version + entry count.
inline constexpr std::uint64_t kStatePrefixBytes = 8 + 4 + 8;
/// The smallest entry: name length, a 1-byte name, kind, element count.
inline constexpr std::uint64_t kStateMinEntryBytes = 4 + 1 + 1 + 8;

enum class StateKind : std::uint8_t { kF32 = 1, kU64 = 2 };

inline const char* state_kind_name(StateKind k) {
  return k == StateKind::kF32 ? "an f32 array" : "a u64 array";
}

/// FNV-1a 64 of `n` bytes at `p`, continuing from `h`.
inline std::uint64_t fnv1a64(std::uint64_t h, const void* p, std::size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * kFnvPrime;
  return h;
}

inline std::string hex64(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

/// An ostream that also hashes what passes through it.
struct HashingWriter {
  std::ostream& out;
  std::uint64_t hash = kFnvOffsetBasis;
  void put(const void* p, std::size_t n) {
    hash = fnv1a64(hash, p, n);
    out.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
  }
};

/// Reads the entry section [pos, end) with bounds checks that name the entry.
struct BoundedReader {
  std::istream& in;
  std::string_view file;
  std::uint64_t pos;
  std::uint64_t end;
  std::uint64_t remaining() const { return end - pos; }
  void read(void* dst, std::uint64_t n, const std::string& what) {
    if (n > remaining())
      file_fail(file, what, Verbatim{std::to_string(n) + " bytes at offset " + std::to_string(pos)},
                "at most " + std::to_string(remaining()) + " bytes (the entries end at offset " +
                    std::to_string(end) + ", before the checksum)");
    read_exact(in, dst, n, file, what);
    pos += n;
  }
};

}  // namespace detail

/// Collects named f32 / u64 arrays and writes them as one state file (layout in the
/// file comment). `put` copies the data, so the spans may die before `write`.
class StateWriter {
 public:
  /// Adds an f32 array. Throws ConfigError for an empty, over-long (> 4096 bytes),
  /// non-UTF-8 or already used name. Complexity: O(values.size()).
  void put(std::string name, std::span<const float> values) {
    check_name(name);
    f32_.emplace_back(name, std::vector<float>(values.begin(), values.end()));
    order_.emplace_back(detail::StateKind::kF32, f32_.size() - 1);
    names_.insert(std::move(name));
  }
  /// Adds a u64 array (the step, RNG words, data position...). Same rules as above.
  void put(std::string name, std::span<const std::uint64_t> values) {
    check_name(name);
    u64_.emplace_back(name, std::vector<std::uint64_t>(values.begin(), values.end()));
    order_.emplace_back(detail::StateKind::kU64, u64_.size() - 1);
    names_.insert(std::move(name));
  }

  /// Writes every entry, in `put` order, to `path` atomically (via `path` + ".tmp",
  /// fsync, rename). Throws IoError naming the file when it cannot be written.
  /// Complexity: O(total bytes).
  void write(const std::filesystem::path& path) const {
    detail::write_file_atomically(path, [&](std::ostream& out) {
      detail::HashingWriter w{out};
      w.put(detail::kStateMagic.data(), 8);
      w.put(detail::le32_bytes(kStateFileVersion).data(), 4);
      w.put(detail::le64_bytes(order_.size()).data(), 8);
      for (const auto& [kind, index] : order_) {
        const std::string& name = kind == detail::StateKind::kF32 ? f32_[index].first : u64_[index].first;
        w.put(detail::le32_bytes(static_cast<std::uint32_t>(name.size())).data(), 4);
        w.put(name.data(), name.size());
        const auto k = static_cast<unsigned char>(kind);
        w.put(&k, 1);
        if (kind == detail::StateKind::kF32) {
          const auto& v = f32_[index].second;
          w.put(detail::le64_bytes(v.size()).data(), 8);
          w.put(v.data(), v.size() * sizeof(float));
        } else {
          const auto& v = u64_[index].second;
          w.put(detail::le64_bytes(v.size()).data(), 8);
          w.put(v.data(), v.size() * sizeof(std::uint64_t));
        }
      }
      const auto sum = detail::le64_bytes(w.hash);
      out.write(reinterpret_cast<const char*>(sum.data()), 8);
    });
  }

 private:
  void check_name(const std::string& name) const {
    expect(!name.empty(), "StateWriter.put name", name, "a non-empty name");
    expect(name.size() <= kStateMaxNameBytes, "StateWriter.put name length", name.size(),
           "at most " + std::to_string(kStateMaxNameBytes) + " bytes");
    expect(detail::is_valid_utf8(name), "StateWriter.put name", Verbatim{detail::json_quoted(name)},
           "valid UTF-8");
    expect(!names_.contains(name), "StateWriter.put name", Verbatim{detail::json_quoted(name)},
           "a name not put before");
  }

  std::vector<std::pair<std::string, std::vector<float>>> f32_;
  std::vector<std::pair<std::string, std::vector<std::uint64_t>>> u64_;
  std::vector<std::pair<detail::StateKind, std::size_t>> order_;  ///< put order: (kind, index)
  std::set<std::string, std::less<>> names_;
};

/// Reads and verifies a whole state file; the accessors then check what the caller
/// expects (kind, length) and name the entry when it differs.
class StateReader {
 public:
  /// Reads the file at `path` (named in errors); see the stream constructor.
  explicit StateReader(const std::filesystem::path& path) : file_(path.string()) {
    std::ifstream in = detail::open_for_reading(path);
    load(in);
  }
  /// Reads a seekable stream (`file` names it in errors). Throws IoError for: a size
  /// below 28 bytes, a wrong magic, a version other than 1, a checksum mismatch, or a
  /// structure that does not parse (bad name length or UTF-8, duplicate name, unknown
  /// kind, a payload running past the checksum, trailing bytes). Allocates only sizes
  /// already checked against the file size. Complexity: O(file size), two passes.
  StateReader(std::istream& in, std::string_view file) : file_(file) { load(in); }

  /// Whether an entry called `name` exists (of either kind).
  bool contains(std::string_view name) const { return entries_.find(name) != entries_.end(); }

  /// The names of all entries, sorted.
  std::vector<std::string> names() const {
    std::vector<std::string> v;
    for (const auto& [name, e] : entries_) v.push_back(name);
    return v;
  }

  /// The f32 array `name`, which must hold `expected_len` elements. Throws IoError
  /// naming the entry when it is missing, a u64 array, or of another length. The span
  /// lives as long as this reader.
  std::span<const float> f32(std::string_view name, std::size_t expected_len) const {
    const Entry& e = find(name, detail::StateKind::kF32, expected_len);
    return e.f32;
  }
  /// The u64 array `name`; see `f32`.
  std::span<const std::uint64_t> u64(std::string_view name, std::size_t expected_len) const {
    const Entry& e = find(name, detail::StateKind::kU64, expected_len);
    return e.u64;
  }

 private:
  struct Entry {
    detail::StateKind kind = detail::StateKind::kF32;
    std::vector<float> f32;
    std::vector<std::uint64_t> u64;
    std::size_t size() const { return kind == detail::StateKind::kF32 ? f32.size() : u64.size(); }
  };

  const Entry& find(std::string_view name, detail::StateKind kind, std::size_t expected_len) const {
    const auto it = entries_.find(name);
    const std::string field = "entry " + detail::json_quoted(name);
    if (it == entries_.end()) {
      std::string have;
      std::size_t shown = 0;
      for (const auto& [n, e] : entries_) {
        if (shown++ == 8) {
          have += ", ...";
          break;
        }
        have += (have.empty() ? "" : ", ") + detail::json_quoted(n);
      }
      detail::file_fail(file_, field, Verbatim{"(missing)"},
                        "an entry of that name (the file has " + std::to_string(entries_.size()) + ": " +
                            (have.empty() ? "none" : have) + ")");
    }
    const Entry& e = it->second;
    if (e.kind != kind)
      detail::file_fail(file_, field + " kind", Verbatim{detail::state_kind_name(e.kind)},
                        detail::state_kind_name(kind));
    if (e.size() != expected_len)
      detail::file_fail(file_, field + " length", e.size(), std::to_string(expected_len));
    return e;
  }

  void load(std::istream& in) {
    const std::uint64_t size = detail::seekable_size(in, file_);
    const std::uint64_t min_size = detail::kStatePrefixBytes + 8;
    if (size < min_size)
      detail::file_fail(
          file_, "file size", size,
          "at least " + std::to_string(min_size) + " bytes (magic, version, entry count, checksum)");
    std::array<unsigned char, detail::kStatePrefixBytes> prefix{};
    detail::read_exact(in, prefix.data(), prefix.size(), file_, "file prefix");
    if (std::memcmp(prefix.data(), detail::kStateMagic.data(), 8) != 0) {
      std::string shown;
      for (int i = 0; i < 8; ++i)
        shown += detail::byte_display(prefix[static_cast<std::size_t>(i)]) + (i < 7 ? " " : "");
      detail::file_fail(file_, "magic", Verbatim{shown}, "\"DMOESTAT\" (not a disagmoe state file)");
    }
    const std::uint32_t version = detail::load_le32(prefix.data() + 8);
    if (version != kStateFileVersion)
      detail::file_fail(
          file_, "version", version,
          std::to_string(kStateFileVersion) + " (the only state-file version this reader knows)");

    // Pass 1: the checksum, before the structure is trusted at all.
    in.seekg(0);
    std::uint64_t hash = detail::kFnvOffsetBasis;
    {
      std::vector<unsigned char> buf(std::size_t{1} << 16);
      for (std::uint64_t left = size - 8; left > 0;) {
        const std::uint64_t n = std::min<std::uint64_t>(left, buf.size());
        detail::read_exact(in, buf.data(), n, file_, "checksummed bytes");
        hash = detail::fnv1a64(hash, buf.data(), static_cast<std::size_t>(n));
        left -= n;
      }
    }
    std::array<unsigned char, 8> sum{};
    detail::read_exact(in, sum.data(), 8, file_, "checksum");
    const std::uint64_t stored = detail::load_le64(sum.data());
    if (stored != hash)
      detail::file_fail(
          file_, "checksum", Verbatim{detail::hex64(stored)},
          detail::hex64(hash) + " (FNV-1a 64 of the preceding bytes; the file is corrupt or truncated)");

    // Pass 2: the entries, every length bounded by what is left before the checksum.
    in.seekg(static_cast<std::streamoff>(detail::kStatePrefixBytes));
    detail::BoundedReader r{in, file_, detail::kStatePrefixBytes, size - 8};
    const std::uint64_t count = detail::load_le64(prefix.data() + 12);
    if (count > r.remaining() / detail::kStateMinEntryBytes)
      detail::file_fail(file_, "entry count", count,
                        "at most " + std::to_string(r.remaining() / detail::kStateMinEntryBytes) + " (" +
                            std::to_string(detail::kStateMinEntryBytes) + "+ bytes each in " +
                            std::to_string(r.remaining()) + " bytes)");
    for (std::uint64_t i = 0; i < count; ++i) {
      const std::string where = "entry " + std::to_string(i);
      std::array<unsigned char, 8> b{};
      r.read(b.data(), 4, where + " name length");
      const std::uint32_t len = detail::load_le32(b.data());
      if (len == 0 || len > kStateMaxNameBytes)
        detail::file_fail(file_, where + " name length", len, "1 to " + std::to_string(kStateMaxNameBytes));
      std::string name(len, '\0');
      r.read(name.data(), len, where + " name");
      if (!detail::is_valid_utf8(name))
        detail::file_fail(file_, where + " name", Verbatim{detail::json_quoted(name)}, "valid UTF-8");
      const std::string field = "entry " + detail::json_quoted(name);
      if (entries_.find(name) != entries_.end())
        detail::file_fail(file_, where + " name", Verbatim{detail::json_quoted(name)}, "unique entry names");
      r.read(b.data(), 1, field + " kind");
      Entry e;
      if (b[0] != 1 && b[0] != 2)
        detail::file_fail(file_, field + " kind", static_cast<int>(b[0]), "1 (f32) or 2 (u64)");
      e.kind = static_cast<detail::StateKind>(b[0]);
      r.read(b.data(), 8, field + " length");
      const std::uint64_t n = detail::load_le64(b.data());
      const std::uint64_t item = e.kind == detail::StateKind::kF32 ? 4 : 8;
      if (n > r.remaining() / item)
        detail::file_fail(file_, field + " length", n,
                          "at most " + std::to_string(r.remaining() / item) +
                              " elements (what is left before the checksum)");
      if (e.kind == detail::StateKind::kF32) {
        e.f32.resize(static_cast<std::size_t>(n));
        r.read(e.f32.data(), n * item, field + " data");
      } else {
        e.u64.resize(static_cast<std::size_t>(n));
        r.read(e.u64.data(), n * item, field + " data");
      }
      entries_.emplace(std::move(name), std::move(e));
    }
    if (r.remaining() != 0)
      detail::file_fail(file_, "bytes after the last entry", r.remaining(),
                        "0 (the checksum follows the last entry)");
  }

  std::string file_;
  std::map<std::string, Entry, std::less<>> entries_;
};

}  // namespace disagmoe::runtime
