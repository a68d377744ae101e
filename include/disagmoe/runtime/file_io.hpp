// SPDX-License-Identifier: Apache-2.0
/// @file file_io.hpp
/// Byte-level file helpers of the checkpoint formats (safetensors.hpp, state_file.hpp):
/// little-endian integers, exact reads, fsync and atomic replacement of a file, and the
/// one IoError shape "<file>: <field> = <value>: expected <what>".
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/limits.hpp>

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

namespace disagmoe::runtime::detail {

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

/// Opens the regular file `path` for binary reading or throws IoError naming it.
inline std::ifstream open_for_reading(const std::filesystem::path& path) {
  expect_regular_file("file", path);
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
}  // namespace disagmoe::runtime::detail
