// SPDX-License-Identifier: Apache-2.0
// A one-line progress bar on stderr (step, loss, tokens/s, ETA), drawn only when stderr
// is a terminal so that logs and pipes stay clean.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>

namespace disagmoe::cli {

/// Redraws "\r[#####     ] step 12/200  loss 2.314  4.1k tok/s  ETA 0:41" on stderr.
class ProgressBar {
 public:
  explicit ProgressBar(std::int64_t total) : total_(total), tty_(isatty(STDERR_FILENO) == 1) {}

  /// Called after each step with the step's loss and the tokens/s measured so far.
  void update(std::int64_t step, double loss, double tokens_per_second, double eta_seconds) {
    if (!tty_ || total_ <= 0) return;
    constexpr int kWidth = 24;
    const int filled = static_cast<int>(kWidth * step / total_);
    char bar[kWidth + 1];
    for (int i = 0; i < kWidth; ++i) bar[i] = i < filled ? '#' : ' ';
    bar[kWidth] = '\0';
    const auto eta = static_cast<long long>(eta_seconds + 0.5);
    std::fprintf(stderr, "\r[%s] step %lld/%lld  loss %.3f  %.1fk tok/s  ETA %lld:%02lld ", bar,
                 static_cast<long long>(step), static_cast<long long>(total_), loss, tokens_per_second / 1e3,
                 eta / 60, eta % 60);
    std::fflush(stderr);
    drawn_ = true;
  }
  /// Ends the line so that later output starts on a fresh one.
  void clear() {
    if (drawn_) std::fputc('\n', stderr);
    drawn_ = false;
  }

 private:
  std::int64_t total_;
  bool tty_;
  bool drawn_ = false;
};

}  // namespace disagmoe::cli
