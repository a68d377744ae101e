// SPDX-License-Identifier: Apache-2.0
// Shared helpers of the placement tests: temporary files and in-memory .npy arrays.
#pragma once

#include <disagmoe/placement/npy.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

namespace placement_test {

/// A file path under the temp directory, removed when the object dies.
struct TempFile {
  std::filesystem::path path;
  explicit TempFile(const std::string& stem)
      : path(std::filesystem::temp_directory_path() /
             ("disagmoe_placement_" + std::to_string(::getpid()) + "_" + stem)) {}
  ~TempFile() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
  std::string str() const { return path.string(); }
};

/// Bytes of an .npy array of `T` with `shape` and `values`.
template <class T>
std::string npy_bytes(const std::vector<T>& values, std::vector<std::int64_t> shape) {
  std::ostringstream os;
  disagmoe::placement::write_npy<T>(os, values, shape);
  return os.str();
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

}  // namespace placement_test
