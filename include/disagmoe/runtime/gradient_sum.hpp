// SPDX-License-Identifier: Apache-2.0
/// @file gradient_sum.hpp
/// The gradient sum of parameters that several ranks of a group hold: data-parallel
/// attention replicas, and redundant experts (DeepSeek's EPLB copies of hot experts,
/// github.com/deepseek-ai/EPLB), each copy of which saw a share of its expert's tokens.
/// Every rank sends its copies by name and every holder adds the copies of a name in
/// ascending group rank, so all holders get the same bits and their (elementwise)
/// optimizers keep the copies identical. An all-gather rather than a ring reduce: a ring
/// adds in a different order on each rank.
#pragma once

#include <disagmoe/comm/all_gather.hpp>
#include <disagmoe/comm/transport.hpp>
#include <disagmoe/error.hpp>
#include <disagmoe/runtime/parameter_set.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace disagmoe::runtime {

/// Collective over `group` (every rank calls it, with any number of slots, none
/// included): each gradient of `slots` becomes the sum of the gradients of the slots of
/// the same name on all ranks of the group that pass one, added in ascending group rank.
/// ConfigError when two ranks' slots of one name differ in size. `what` names the
/// exchange in a timeout. O(group size x bytes of the slots).
template <comm::transport Transport, class T>
void sum_gradients_by_name(Transport& group, std::span<ParameterSlot<T>* const> slots,
                           std::chrono::milliseconds timeout, const std::string& what) {
  if (group.size() == 1) return;
  // Per slot: name length and elements (u64), the name, the gradient.
  std::vector<std::byte> mine;
  auto put = [&](const void* data, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(data);
    mine.insert(mine.end(), b, b + n);
  };
  for (const auto* s : slots) {
    const std::uint64_t len = s->name.size(), n = static_cast<std::uint64_t>(s->grad->size());
    for (const std::uint64_t x : {len, n}) put(&x, sizeof x);
    put(s->name.data(), len);
    put(s->grad->data(), static_cast<std::size_t>(n) * sizeof(T));
  }
  const auto all = comm::all_gather(group, std::span<const std::byte>(mine), group.max_tag(),
                                    comm::deadline_after(timeout), what);
  // Where each rank's gradient of each name sits in its message.
  std::vector<std::map<std::string, std::pair<std::size_t, std::uint64_t>, std::less<>>> at(all.size());
  for (std::size_t r = 0; r < all.size(); ++r) {
    const auto& bytes = all[r];
    for (std::size_t pos = 0; pos < bytes.size();) {
      std::uint64_t len = 0, n = 0;
      expect<IoError>(pos + 2 * sizeof len <= bytes.size(), what + " bytes of rank " + std::to_string(r), bytes.size(),
                      "a complete message");
      std::memcpy(&len, bytes.data() + pos, sizeof len);
      std::memcpy(&n, bytes.data() + pos + sizeof len, sizeof n);
      pos += 2 * sizeof len;
      expect<IoError>(len <= bytes.size() - pos && n <= (bytes.size() - pos - len) / sizeof(T),
                      what + " bytes of rank " + std::to_string(r), bytes.size(), "a complete message");
      std::string name(reinterpret_cast<const char*>(bytes.data() + pos), static_cast<std::size_t>(len));
      pos += static_cast<std::size_t>(len);
      at[r].emplace(std::move(name), std::pair{pos, n});
      pos += static_cast<std::size_t>(n) * sizeof(T);
    }
  }
  std::vector<T> sum, part;
  for (auto* s : slots) {
    const auto n = static_cast<std::size_t>(s->grad->size());
    sum.assign(n, T{0});
    part.resize(n);
    bool first = true;
    for (std::size_t r = 0; r < all.size(); ++r) {
      const auto it = at[r].find(s->name);
      if (it == at[r].end()) continue;
      expect(it->second.second == n, what + ": elements of " + s->name + " on rank " + std::to_string(r),
             it->second.second, "the same on every rank holding it (" + std::to_string(n) + ")");
      std::memcpy(part.data(), all[r].data() + it->second.first, n * sizeof(T));
      for (std::size_t i = 0; i < n; ++i) sum[i] = first ? part[i] : sum[i] + part[i];
      first = false;
    }
    std::memcpy(s->grad->data(), sum.data(), n * sizeof(T));
  }
}

}  // namespace disagmoe::runtime
