// SPDX-License-Identifier: Apache-2.0
/// @file dual_role.hpp
/// `DualRoleGroup<T>`: a group of G ranks seen as a pair group of 2G ranks in which every
/// rank is both A-rank r and F-rank r, so that colocated expert parallelism (attention and
/// experts on the same ranks, all-to-all dispatch and combine inside the group) runs
/// through the very `M2NChannel` that AF-Pipe's disaggregated exchange uses: the same
/// send-once layout, kernels and summation contract (a rank's rows for its own experts
/// are messages to itself, free on every transport).
///
/// Each rank holds one `DualRoleGroup` and takes two endpoints from it, `attention()`
/// (pair rank r) and `ffn()` (pair rank G + r), each a `transport` of size 2G. A message
/// travels on one of four sub-groups of the group chosen by (sender's role, receiver's
/// role), so A -> F and F -> A traffic between the same two ranks never match each other.
/// A channel's two endpoints on one rank are created with a deferred handshake
/// (`M2NChannel(pair, config, DeferHandshake{})`, then `complete_handshake()` on both),
/// since one thread serves both.
#pragma once

#include <disagmoe/comm/transport.hpp>
#include <disagmoe/error.hpp>

#include <memory>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace disagmoe::comm {

template <transport T>
class DualRoleGroup;

/// One role's endpoint of a `DualRoleGroup` (see the file comment). Valid while its
/// group lives. `split` is not offered (ConfigError): split the underlying group instead.
template <transport T>
class DualRoleTransport {
 public:
  using transport_concept = transport_tag;
  /// A request of the sub-group (lane) that carries it.
  struct Request {
    typename T::Request inner{};
    int lane = -1;
  };

  DualRoleTransport() = default;

  [[nodiscard]] int rank() const { return role_ * size_ + lanes_->front().rank(); }
  [[nodiscard]] int size() const { return 2 * size_; }
  [[nodiscard]] int max_tag() const { return lanes_->front().max_tag(); }

  Request isend(int peer, int tag, std::span<const std::byte> data) {
    const int lane = lane_of(role_, role_of(peer));
    return {(*lanes_)[static_cast<std::size_t>(lane)].isend(peer % size_, tag, data), lane};
  }
  Request irecv(int peer, int tag, std::span<std::byte> data) {
    const int lane = lane_of(role_of(peer), role_);
    return {(*lanes_)[static_cast<std::size_t>(lane)].irecv(peer % size_, tag, data), lane};
  }
  void group_begin() {
    for (auto& l : *lanes_) l.group_begin();
  }
  void group_end() {
    for (auto& l : *lanes_) l.group_end();
  }
  bool test(Request& r) { return lane(r).test(r.inner); }
  bool wait(Request& r, Deadline deadline) { return lane(r).wait(r.inner, deadline); }
  void cancel(Request& r) {
    if (r.lane >= 0) lane(r).cancel(r.inner);  // an empty request: nothing to withdraw
  }
  std::optional<DualRoleTransport> split(std::span<const int>) {
    fail("DualRoleTransport.split", "called", "a split of the underlying group (a dual-role view has no sub-groups)");
  }

 private:
  friend class DualRoleGroup<T>;
  DualRoleTransport(std::vector<T>* lanes, int role, int size) : lanes_(lanes), role_(role), size_(size) {}

  int role_of(int peer) const {
    expect(peer >= 0 && peer < 2 * size_, "DualRoleTransport peer", peer,
           "a pair rank in [0, " + std::to_string(2 * size_) + ")");
    return peer / size_;
  }
  static int lane_of(int from_role, int to_role) { return 2 * from_role + to_role; }
  T& lane(const Request& r) {
    expect(r.lane >= 0 && r.lane < 4, "DualRoleTransport request", "empty", "a request this endpoint posted");
    return (*lanes_)[static_cast<std::size_t>(r.lane)];
  }

  std::vector<T>* lanes_ = nullptr;
  int role_ = 0;   // 0: attention (pair ranks [0, G)), 1: FFN (pair ranks [G, 2G))
  int size_ = 1;   // G
};

/// See the file comment. Collective over `group` (four splits); not movable once its
/// endpoints exist (they point into it), so it lives behind a unique_ptr or in place.
template <transport T>
class DualRoleGroup {
 public:
  explicit DualRoleGroup(T& group) : size_(group.size()) {
    std::vector<int> all(static_cast<std::size_t>(size_));
    std::iota(all.begin(), all.end(), 0);
    lanes_.reserve(4);  // never grows after: the endpoints point at it
    for (int i = 0; i < 4; ++i) lanes_.push_back(std::move(*group.split(all)));
  }
  DualRoleGroup(const DualRoleGroup&) = delete;
  DualRoleGroup& operator=(const DualRoleGroup&) = delete;

  /// Pair ranks [0, G): this rank as A-rank `group.rank()`.
  [[nodiscard]] DualRoleTransport<T> attention() { return {&lanes_, 0, size_}; }
  /// Pair ranks [G, 2G): this rank as F-rank `group.rank()`.
  [[nodiscard]] DualRoleTransport<T> ffn() { return {&lanes_, 1, size_}; }

 private:
  int size_;
  std::vector<T> lanes_;  // indexed 2 * sender role + receiver role
};

}  // namespace disagmoe::comm
