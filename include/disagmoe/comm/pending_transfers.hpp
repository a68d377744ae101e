// SPDX-License-Identifier: Apache-2.0
/// @file pending_transfers.hpp
/// `PendingTransfers<T>`: the requests an endpoint has posted on a transport and not yet
/// seen complete, each with its peer and what it carries (for error messages). Polling
/// retires completed requests; a wait has a deadline; on any error the rest is
/// cancelled, so buffers are released and peers see a timeout, not garbage.
#pragma once

#include <disagmoe/comm/transport.hpp>

#include <cstddef>
#include <optional>
#include <span>
#include <vector>

namespace disagmoe::comm {

template <transport T>
class PendingTransfers {
 public:
  /// What a request carries, as named in a timeout.
  struct Label {
    int peer = 0;
    const char* what = "";
    bool is_send = false;
  };

  explicit PendingTransfers(T& t, std::size_t expected = 0) : t_(t) { pending_.reserve(expected); }
  PendingTransfers(const PendingTransfers&) = delete;
  PendingTransfers& operator=(const PendingTransfers&) = delete;
  ~PendingTransfers() { cancel(); }

  template <class V>
  void send(int peer, int tag, std::span<V> data, const char* what) {
    pending_.push_back({isend(t_, peer, tag, std::span<const V>(data)), {peer, what, true}});
  }
  template <class V>
  void recv(int peer, int tag, std::span<V> data, const char* what) {
    pending_.push_back({irecv(t_, peer, tag, data), {peer, what, false}});
  }

  bool empty() const { return pending_.empty(); }

  /// Retires every completed request; true when none is left. An error of the
  /// transport cancels the rest and propagates.
  bool test() {
    try {
      for (std::size_t i = 0; i < pending_.size();) {
        if (!t_.test(pending_[i].req)) {
          ++i;
          continue;
        }
        pending_[i] = std::move(pending_.back());
        pending_.pop_back();
      }
    } catch (...) {
      cancel();
      throw;
    }
    return pending_.empty();
  }

  /// Waits for every request until `deadline`. Returns nothing once all completed, or
  /// the label of the first one still pending at the deadline (all are then cancelled).
  std::optional<Label> wait(Deadline deadline) {
    std::size_t i = 0;
    try {
      for (; i < pending_.size(); ++i) {
        if (!t_.wait(pending_[i].req, deadline)) {
          const Label late = pending_[i].label;
          cancel(i);  // the ones before i completed (and are consumed)
          return late;
        }
      }
    } catch (...) {
      // The request that threw may still be posted (a bad header can arrive before its
      // payload): it is withdrawn too, or its buffer would be written after release.
      cancel(i);
      throw;
    }
    pending_.clear();
    return std::nullopt;
  }

  /// Withdraws every request from index `from` on (best effort) and forgets them all.
  void cancel(std::size_t from = 0) noexcept {
    for (std::size_t i = from; i < pending_.size(); ++i) {
      try {
        t_.cancel(pending_[i].req);
      } catch (...) {  // cancelling is best effort during unwinding
      }
    }
    pending_.clear();
  }

 private:
  struct Entry {
    typename T::Request req;
    Label label;
  };
  T& t_;
  std::vector<Entry> pending_;
};

}  // namespace disagmoe::comm
