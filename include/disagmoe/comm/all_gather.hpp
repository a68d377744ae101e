// SPDX-License-Identifier: Apache-2.0
/// @file all_gather.hpp
/// A small all-gather over any `transport`: every rank contributes a byte string of any
/// length and receives everyone's (sizes first, then payloads, each phase one grouped
/// submission). Meant for per-step scalars and one-time metadata between a handful of
/// workers, not for tensors.
#pragma once

#include <disagmoe/comm/transport.hpp>
#include <disagmoe/error.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace disagmoe::comm {

/// Collective over `t`: returns every rank's `mine`, indexed by rank. `tag` must not be
/// in use by other traffic in flight between these ranks. Throws TimeoutError naming
/// the first rank that did not answer by `deadline`. O(size) messages per rank.
template <transport T>
std::vector<std::vector<std::byte>> all_gather(T& t, std::span<const std::byte> mine, int tag, Deadline deadline,
                                               std::string_view what = "all_gather") {
  const int n = t.size(), me = t.rank();
  std::vector<std::vector<std::byte>> out(static_cast<std::size_t>(n));
  out[static_cast<std::size_t>(me)].assign(mine.begin(), mine.end());
  std::vector<std::int64_t> sizes(static_cast<std::size_t>(n), 0);
  const std::int64_t my_size = static_cast<std::int64_t>(mine.size());
  struct Posted {
    typename T::Request req;
    int peer;
  };
  std::vector<Posted> posted;
  auto wait_all = [&](const char* phase) {
    std::size_t i = 0;
    try {
      for (; i < posted.size(); ++i)
        if (!t.wait(posted[i].req, deadline))
          fail<TimeoutError>(std::string(what) + " " + phase + " with rank " + std::to_string(posted[i].peer),
                             "no answer", "every rank to take part before the deadline");
    } catch (...) {  // nothing may stay posted over buffers that are about to go
      for (std::size_t k = i; k < posted.size(); ++k) t.cancel(posted[k].req);
      throw;
    }
    posted.clear();
  };
  t.group_begin();
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    posted.push_back({irecv(t, p, tag, std::span<std::int64_t>(&sizes[static_cast<std::size_t>(p)], 1)), p});
    posted.push_back({isend(t, p, tag, std::span<const std::int64_t>(&my_size, 1)), p});
  }
  t.group_end();
  wait_all("sizes");
  t.group_begin();
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    auto& buf = out[static_cast<std::size_t>(p)];
    const std::int64_t n = sizes[static_cast<std::size_t>(p)];
    if (n < 0 || n > (std::int64_t{1} << 40)) {
      t.group_end();
      for (auto& q : posted) t.cancel(q.req);
      fail<IoError>(std::string(what) + " size from rank " + std::to_string(p), n, "a byte count in [0, 2^40]");
    }
    buf.resize(static_cast<std::size_t>(n));
    if (!buf.empty()) posted.push_back({t.irecv(p, tag, std::span<std::byte>(buf)), p});
    if (!mine.empty()) posted.push_back({t.isend(p, tag, mine), p});
  }
  t.group_end();
  wait_all("payloads");
  return out;
}

}  // namespace disagmoe::comm
