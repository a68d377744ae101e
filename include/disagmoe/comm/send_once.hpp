// SPDX-License-Identifier: Apache-2.0
/// @file send_once.hpp
/// The send-once rule of MoE dispatch (DeepEP "normal" dispatch; Expert Coupling, arXiv
/// 2610.09372): a token row goes once to every rank that holds any of its top-k experts,
/// not once per expert. This is the one implementation of it: the channel's layout
/// (comm/layout.hpp), the placement's dispatch plan and its metrics all call it.
#pragma once

#include <cstdint>

namespace disagmoe::comm {

/// Writes the distinct values of `dest[0..k)` ascending to `out` (room for k); returns
/// how many. Insertion into a sorted prefix: O(k^2), fastest for the k <= 16 of real
/// routers.
inline int distinct_destinations(const std::int32_t* dest, int k, std::int32_t* out) noexcept {
  int n = 0;
  for (int i = 0; i < k; ++i) {
    const std::int32_t d = dest[i];
    int j = n;
    while (j > 0 && out[j - 1] > d) --j;
    if (j > 0 && out[j - 1] == d) continue;
    for (int m = n; m > j; --m) out[m] = out[m - 1];
    out[j] = d;
    ++n;
  }
  return n;
}

}  // namespace disagmoe::comm
