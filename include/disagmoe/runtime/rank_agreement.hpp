// SPDX-License-Identifier: Apache-2.0
/// @file rank_agreement.hpp
/// What the ranks of a multi-worker run (runtime/disaggregated_trainer.hpp) agree on
/// through collectives over their world: the same program everywhere (fingerprints),
/// the canonical list of parameter names, and sums whose every entry has exactly one
/// contributing rank (so the sum is exact and the same on every rank).
#pragma once

#include <disagmoe/comm/all_gather.hpp>
#include <disagmoe/comm/transport.hpp>
#include <disagmoe/error.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace disagmoe::runtime {

/// What a fingerprint covers and, when ranks differ, why they must not.
struct FingerprintMeaning {
  const char* field;
  const char* why;
};

/// Collective: throws ConfigError naming the first rank whose fingerprints differ from
/// this rank's (`what[i]` describes fingerprint i).
template <comm::transport Transport, std::size_t N>
void check_same_fingerprints(Transport& world, const std::array<std::int64_t, N>& mine,
                             const std::array<FingerprintMeaning, N>& what, std::chrono::milliseconds timeout) {
  const auto all = comm::all_gather(world, std::as_bytes(std::span(mine)), world.max_tag(),
                                    comm::deadline_after(timeout), "program fingerprints");
  for (std::size_t r = 0; r < all.size(); ++r) {
    std::array<std::int64_t, N> theirs{};
    expect(all[r].size() == sizeof theirs, "program fingerprint bytes of rank " + std::to_string(r), all[r].size(),
           std::to_string(sizeof theirs));
    std::memcpy(theirs.data(), all[r].data(), sizeof theirs);
    for (std::size_t i = 0; i < N; ++i)
      expect(theirs[i] == mine[i], std::string(what[i].field) + " of rank " + std::to_string(r), theirs[i],
             std::to_string(mine[i]) + " as on rank " + std::to_string(world.rank()) + " (" + what[i].why + ")");
  }
}

/// Collective: the sorted union of every rank's parameter names (ConfigError if a name is
/// held twice) and the sum of the ranks' scalar counts.
template <comm::transport Transport>
std::pair<std::vector<std::string>, std::int64_t> agree_on_parameter_names(Transport& world,
                                                                           const std::vector<std::string>& mine,
                                                                           std::int64_t count,
                                                                           std::chrono::milliseconds timeout) {
  std::string text;
  for (const auto& n : mine) text += n + '\n';
  text += std::to_string(count);
  const auto all = comm::all_gather(world, std::as_bytes(std::span(text.data(), text.size())), world.max_tag(),
                                    comm::deadline_after(timeout), "parameter names");
  std::vector<std::string> names;
  std::int64_t total = 0;
  for (const auto& bytes : all) {
    const std::string theirs(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    std::size_t start = 0;
    for (std::size_t nl; (nl = theirs.find('\n', start)) != std::string::npos; start = nl + 1)
      names.push_back(theirs.substr(start, nl - start));
    total += std::stoll(theirs.substr(start));
  }
  std::sort(names.begin(), names.end());
  for (std::size_t i = 1; i < names.size(); ++i)
    expect(names[i] != names[i - 1], "parameter name", names[i], "held by exactly one worker");
  return {std::move(names), total};
}

/// Collective: the elementwise sum over ranks of `v` (the same length everywhere). With
/// one contributing rank per entry, as the callers arrange, the sum is exact.
template <comm::transport Transport>
std::vector<double> sum_over_ranks(Transport& world, const std::vector<double>& v, std::chrono::milliseconds timeout,
                                   const char* what) {
  const auto all = comm::all_gather(world, std::as_bytes(std::span(v)), world.max_tag(),
                                    comm::deadline_after(timeout), what);
  std::vector<double> sum(v.size(), 0.0), x(v.size());
  for (const auto& bytes : all) {
    expect(bytes.size() == v.size() * sizeof(double), std::string(what) + " bytes", bytes.size(),
           "the same on every worker");
    std::memcpy(x.data(), bytes.data(), bytes.size());
    for (std::size_t i = 0; i < v.size(); ++i) sum[i] += x[i];
  }
  return sum;
}

}  // namespace disagmoe::runtime
