// SPDX-License-Identifier: Apache-2.0
// A fresh directory under the temp directory, removed with everything in it.
#pragma once

#include <filesystem>
#include <random>
#include <string>
#include <system_error>
#include <unistd.h>

namespace disagmoe::test {

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static int counter = 0;
    std::random_device rd;
    path = std::filesystem::temp_directory_path() / ("disagmoe_ckpt_" + std::to_string(::getpid()) + "_" +
                                                     std::to_string(counter++) + "_" + std::to_string(rd()));
    std::filesystem::create_directories(path);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::filesystem::path operator/(const std::string& name) const { return path / name; }
};

}  // namespace disagmoe::test
