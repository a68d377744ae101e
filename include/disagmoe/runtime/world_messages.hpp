// SPDX-License-Identifier: Apache-2.0
/// @file world_messages.hpp
/// `WorldMessages<Transport>`: the point-to-point messages a disaggregated rank posts on
/// the world itself (beside the M2NChannel exchange): residual-stream hand-offs between
/// attention workers, and the residual and dL/dy that travel beside a channel's hand-off.
/// Sends are posted and waited for together at the end of the step; a receive is keyed
/// by its op, posted on the first poll and polled until it arrived. Tags are op ids
/// modulo the transport's largest tag.
#pragma once

#include <disagmoe/comm/transport.hpp>
#include <disagmoe/error.hpp>

#include <cstddef>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace disagmoe::runtime {

template <comm::transport Transport>
class WorldMessages {
 public:
  explicit WorldMessages(Transport& world) : world_(world) {}
  WorldMessages(const WorldMessages&) = delete;
  WorldMessages& operator=(const WorldMessages&) = delete;
  ~WorldMessages() { cancel(); }

  /// Posts `bytes` (valid until finish()) to world rank `peer`, tagged by op `id`.
  void send(int id, int peer, std::span<const std::byte> bytes) {
    sends_.push_back(world_.isend(peer, id % world_.max_tag(), bytes));
  }
  /// True once the message of op `id` from world rank `peer` arrived; the first call posts
  /// the receive into `buffer()` (a span of bytes, valid until it arrived).
  template <class Buffer>
  bool received(int id, int peer, Buffer&& buffer) {
    auto it = recvs_.find(id);
    if (it == recvs_.end()) {
      const std::span<std::byte> bytes = buffer();
      it = recvs_.emplace(id, world_.irecv(peer, id % world_.max_tag(), bytes)).first;
    }
    if (it->second && world_.test(*it->second)) it->second.reset();
    return !it->second;
  }
  /// The end of a step: waits for every send until `deadline` (TimeoutError naming
  /// `what`) and forgets the receives (all arrived).
  void finish(comm::Deadline deadline, const std::string& what) {
    for (auto& r : sends_)
      if (!world_.wait(r, deadline))
        fail<TimeoutError>(what, "pending", "completion within the deadline (is the receiving rank dead?)");
    sends_.clear();
    recvs_.clear();
  }
  /// Withdraws everything still in flight (a failed step), before its buffers go.
  void cancel() noexcept {
    for (auto& r : sends_) cancel_one(r);
    for (auto& [id, r] : recvs_)
      if (r) cancel_one(*r);
    sends_.clear();
    recvs_.clear();
  }

 private:
  void cancel_one(typename Transport::Request& r) noexcept {
    try {
      world_.cancel(r);
    } catch (...) {  // best effort while unwinding
    }
  }

  Transport& world_;
  std::vector<typename Transport::Request> sends_;
  std::map<int, std::optional<typename Transport::Request>> recvs_;  // by op; empty once arrived
};

}  // namespace disagmoe::runtime
