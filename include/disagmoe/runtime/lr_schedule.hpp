// SPDX-License-Identifier: Apache-2.0
/// @file lr_schedule.hpp
/// Learning rate: linear warm-up, then cosine decay to a floor (Loshchilov and Hutter,
/// "SGDR", ICLR 2017, without restarts; the schedule of nanoGPT's `get_lr`).
#pragma once

#include <disagmoe/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace disagmoe::runtime {

/// Peak rate `lr` reached after `warmup_steps`, then cosine decay to `min_lr` at `total_steps`.
struct LrSchedule {
  double lr = 3e-3;
  double min_lr = 3e-4;
  std::int64_t warmup_steps = 10;
  std::int64_t total_steps = 100;

  /// Rate of 0-based step `s`: lr (s + 1) / warmup during warm-up, then
  /// min_lr + (lr - min_lr) (1 + cos(pi r)) / 2 with r the fraction of the decay done.
  [[nodiscard]] double at(std::int64_t s) const {
    if (s < warmup_steps) return lr * static_cast<double>(s + 1) / static_cast<double>(warmup_steps);
    const auto span = std::max<std::int64_t>(total_steps - warmup_steps, 1);
    const double r = std::clamp(static_cast<double>(s - warmup_steps) / static_cast<double>(span), 0.0, 1.0);
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(3.141592653589793 * r));
  }
};

/// Throws ConfigError naming the first invalid field.
inline void validate(const LrSchedule& s) {
  expect(s.lr > 0 && std::isfinite(s.lr), "LrSchedule.lr", s.lr, "a positive finite value");
  expect(s.min_lr >= 0 && s.min_lr <= s.lr, "LrSchedule.min_lr", s.min_lr, "a value in [0, lr]");
  expect(s.warmup_steps >= 0, "LrSchedule.warmup_steps", s.warmup_steps, "an integer >= 0");
  expect(s.total_steps >= 0, "LrSchedule.total_steps", s.total_steps, "an integer >= 0");
}

}  // namespace disagmoe::runtime
