// SPDX-License-Identifier: Apache-2.0
/// @file laned_transport.hpp
/// `LanedTransport<T>`: a transport whose channels each get a communicator of their
/// own, so that channels in flight at once cannot cross on a transport without tags
/// (`matches_tags<T>` false: NCCL).
///
/// Why: NCCL matches the sends and receives between two ranks in the order each side
/// issues them (NCCL docs, "Point-to-point communication"); the tag of the `transport`
/// concept only labels errors there (backend/nccl/transport.hpp). The channels of one layer
/// (one per micro-batch, comm/m2n_connection.hpp), and of the layers of one pair group,
/// share that group. When an A-rank posts the dispatch of micro-batch 0 and then of
/// micro-batch 1 while an F-rank, driven by its own schedule, waits on micro-batch 1
/// first, the F-rank's first receive matches micro-batch 0's header: wrong rows, or a
/// size mismatch that hangs until the deadline. MPI and the loopback transport match
/// by tag and never see it.
///
/// Fix: `lanes` duplicates of the group (each a `split` of every member, i.e. a
/// ncclCommSplit: traffic of one never matches another's), and a message of tag `t` in
/// [0, kHandshakeTag) travels on lane t / kTagsPerChannel: one lane per channel's tag
/// range. Within a channel the posts follow the channel's protocol, the same sequence on
/// both sides. Tags from kHandshakeTag up (connection handshakes, which complete before
/// any channel traffic, and `all_gather` at `max_tag()`) travel on lane 0. A tag
/// beyond the lanes is an error naming it, never a silent share.
/// Cost: `lanes` communicators per group (NCCL buffers per peer each); create the pair
/// groups with as many lanes as channels share them (MoE layers of the pair times
/// micro-batches in flight) and other groups with 1.
///
/// Generic over the transport (host code): runtime/channel_exchange.hpp lays the channels
/// of a disaggregated run on lanes wherever its transport does not match tags, and the
/// host model of NCCL matching in the tests (tests/comm/in_order_transport.hpp) checks it
/// without a GPU.
#pragma once

#include <disagmoe/comm/channel_config.hpp>
#include <disagmoe/comm/transport.hpp>
#include <disagmoe/error.hpp>

#include <cstddef>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace disagmoe::comm {

/// See the file comment. Movable.
template <transport T>
class LanedTransport {
 public:
  using transport_concept = transport_tag;
  /// Still issue-order matching within a lane.
  static constexpr bool matches_tags = false;
  /// A request of the lane that carries it.
  struct Request {
    typename T::Request inner{};
    int lane = -1;
  };

  /// Collective over `group`: lanes - 1 splits of every member (`lanes` >= 1).
  LanedTransport(T group, int lanes) {
    expect(lanes >= 1 && lanes <= kHandshakeTag / kTagsPerChannel, "comm::LanedTransport lanes", lanes,
           "in [1, " + std::to_string(kHandshakeTag / kTagsPerChannel) + "] (one per channel)");
    std::vector<int> all(static_cast<std::size_t>(group.size()));
    std::iota(all.begin(), all.end(), 0);
    lanes_.reserve(static_cast<std::size_t>(lanes));
    lanes_.push_back(std::move(group));
    for (int i = 1; i < lanes; ++i) lanes_.push_back(std::move(*lanes_.front().split(all)));
  }

  int rank() const { return lanes_.front().rank(); }
  int size() const { return lanes_.front().size(); }
  int max_tag() const { return lanes_.front().max_tag(); }
  int lanes() const { return static_cast<int>(lanes_.size()); }
  /// The lane of `tag` (see the file comment); ConfigError for a tag beyond the lanes.
  int lane_of(int tag) const {
    expect(tag >= 0, "comm::LanedTransport tag", tag, ">= 0");
    if (tag >= kHandshakeTag) return 0;
    const int lane = tag / kTagsPerChannel;
    expect(lane < lanes(), "comm::LanedTransport tag", tag,
           "< lanes * kTagsPerChannel (" + std::to_string(lanes() * kTagsPerChannel) +
               "): create the group with one lane per channel that shares it");
    return lane;
  }

  Request isend(int peer, int tag, std::span<const std::byte> data) {
    const int l = lane_of(tag);
    return {lane(l).isend(peer, tag, data), l};
  }
  Request irecv(int peer, int tag, std::span<std::byte> data) {
    const int l = lane_of(tag);
    return {lane(l).irecv(peer, tag, data), l};
  }
  /// Brackets every lane (a group may post on several).
  void group_begin() {
    for (auto& l : lanes_) l.group_begin();
  }
  void group_end() {
    for (auto it = lanes_.rbegin(); it != lanes_.rend(); ++it) it->group_end();
  }
  bool test(Request& r) { return lane_of_request(r).test(r.inner); }
  bool wait(Request& r, Deadline deadline) { return lane_of_request(r).wait(r.inner, deadline); }
  void cancel(Request& r) {
    if (r.lane >= 0) lane_of_request(r).cancel(r.inner);
  }
  /// Collective over this group: the sub-group of `members`, with as many lanes.
  std::optional<LanedTransport> split(std::span<const int> members) {
    auto sub = lanes_.front().split(members);
    if (!sub) return std::nullopt;
    return LanedTransport(std::move(*sub), lanes());
  }

 private:
  T& lane(int l) { return lanes_[static_cast<std::size_t>(l)]; }
  T& lane_of_request(const Request& r) {
    expect(r.lane >= 0 && r.lane < lanes(), "comm::LanedTransport request", "empty", "a request this transport posted");
    return lane(r.lane);
  }

  std::vector<T> lanes_;
};

}  // namespace disagmoe::comm
