// SPDX-License-Identifier: Apache-2.0
// `InOrderTransport<T>`: a host model of NCCL point-to-point matching over any transport
// (the loopback one in the tests), so the NCCL-specific ordering rules run without a GPU.
// NCCL has no tags: the k-th send from rank a to rank b is matched with the k-th receive
// that b posts from a, whatever either side meant (NCCL docs, "Point-to-point
// communication"). This model matches the same way, one inner message sequence per
// peer and direction, and carries the intended (tag, bytes) in a header: where NCCL
// would silently deliver another channel's bytes or hang, `test` / `wait` throw
// NcclError naming the peer, both tags and both sizes.
#pragma once

#include <disagmoe/comm/transport.hpp>
#include <disagmoe/error.hpp>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace nccl_model {

template <disagmoe::comm::transport T>
class InOrderTransport {
 public:
  using transport_concept = disagmoe::comm::transport_tag;
  static constexpr bool matches_tags = false;

  /// What a message says it is, sent ahead of its bytes.
  struct Header {
    std::int64_t tag = 0, bytes = 0;
  };
  class Request {
   public:
    Request() = default;

   private:
    friend class InOrderTransport;
    struct State {
      Header mine, theirs;  // theirs: the header a receive got
      bool send = false, header_done = false;
      int peer = -1;
      std::uint64_t index = 0;  // position in the peer's sequence
      typename T::Request header, payload;
    };
    std::unique_ptr<State> s_;
  };

  explicit InOrderTransport(T inner) : inner_(std::move(inner)) {
    sent_.assign(static_cast<std::size_t>(inner_.size()), 0);
    received_.assign(static_cast<std::size_t>(inner_.size()), 0);
  }

  int rank() const { return inner_.rank(); }
  int size() const { return inner_.size(); }
  int max_tag() const { return INT_MAX; }  // tags only label, as in nccl::Transport

  Request isend(int peer, int tag, std::span<const std::byte> buf) { return post(true, peer, tag, buf.data(), buf.size()); }
  Request irecv(int peer, int tag, std::span<std::byte> buf) { return post(false, peer, tag, buf.data(), buf.size()); }
  void group_begin() { inner_.group_begin(); }
  void group_end() { inner_.group_end(); }

  bool test(Request& r) {
    auto& s = *r.s_;
    if (!s.header_done) {
      if (!inner_.test(s.header)) return false;
      header_arrived(s);
    }
    if (!inner_.test(s.payload)) return false;
    r.s_.reset();
    return true;
  }
  bool wait(Request& r, disagmoe::comm::Deadline deadline) {
    auto& s = *r.s_;
    if (!s.header_done) {
      if (!inner_.wait(s.header, deadline)) return false;
      header_arrived(s);
    }
    if (!inner_.wait(s.payload, deadline)) return false;
    r.s_.reset();
    return true;
  }
  void cancel(Request& r) {
    if (r.s_ == nullptr) return;
    if (!r.s_->header_done) inner_.cancel(r.s_->header);
    inner_.cancel(r.s_->payload);
    r.s_.reset();
  }
  /// A sub-group is a new communicator: sequences start again at 0.
  std::optional<InOrderTransport> split(std::span<const int> members) {
    auto sub = inner_.split(members);
    if (!sub) return std::nullopt;
    return InOrderTransport(std::move(*sub));
  }

 private:
  Request post(bool send, int peer, int tag, const std::byte* data, std::size_t bytes) {
    auto& seq = (send ? sent_ : received_).at(static_cast<std::size_t>(peer));
    const std::uint64_t k = seq++;
    const int inner_tag = static_cast<int>((2 * k) % (static_cast<std::uint64_t>(inner_.max_tag()) + 1));
    Request r;
    r.s_ = std::make_unique<typename Request::State>();
    auto& s = *r.s_;
    s.mine = {tag, static_cast<std::int64_t>(bytes)};
    s.send = send;
    s.peer = peer;
    s.index = k;
    if (send) {
      s.header = disagmoe::comm::isend(inner_, peer, inner_tag, std::span<const Header>(&s.mine, 1));
      s.header_done = false;
      s.payload = inner_.isend(peer, inner_tag + 1, std::span<const std::byte>(data, bytes));
    } else {
      s.header = disagmoe::comm::irecv(inner_, peer, inner_tag, std::span<Header>(&s.theirs, 1));
      s.payload = inner_.irecv(peer, inner_tag + 1, std::span<std::byte>(const_cast<std::byte*>(data), bytes));
    }
    return r;
  }

  void header_arrived(typename Request::State& s) {
    s.header_done = true;
    if (s.send || (s.theirs.tag == s.mine.tag && s.theirs.bytes == s.mine.bytes)) return;
    disagmoe::fail<disagmoe::NcclError>(
        "in-order transport: receive #" + std::to_string(s.index) + " from rank " + std::to_string(s.peer) + " (tag " +
            std::to_string(s.mine.tag) + ", " + std::to_string(s.mine.bytes) + " bytes)",
        "matched a send of tag " + std::to_string(s.theirs.tag) + ", " + std::to_string(s.theirs.bytes) + " bytes",
        "the same message: NCCL matches per peer in issue order, so both ranks must post in the same order");
  }

  T inner_;
  std::vector<std::uint64_t> sent_, received_;  // next sequence number per peer
};

}  // namespace nccl_model
