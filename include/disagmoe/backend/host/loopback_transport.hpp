// SPDX-License-Identifier: Apache-2.0
/// @file loopback_transport.hpp
/// `host::LoopbackTransport`: a `comm::transport` whose ranks are threads of one
/// process. Messages are matched MPI-style (per receiver: context, source, tag, in
/// posting order) and copied once, sender buffer to receiver buffer, by whichever
/// thread completes the match (rendezvous: a send completes only when received).
/// With a `NetworkConfig`, a matched message becomes a flow of the `NetworkModel` and is
/// visible only once the model delivers it, so communication costs wall time and
/// overlapping it with compute shows up in measurements.
#pragma once

#include <disagmoe/backend/host/network_model.hpp>
#include <disagmoe/comm/transport.hpp>
#include <disagmoe/error.hpp>

#include <algorithm>
#include <atomic>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

namespace disagmoe::host {

namespace detail {

/// One posted send or receive. Owned by the posting transport's pool; the matching
/// thread writes its completion fields (`flow`, then the atomics, `state` last with
/// release order) and never touches it afterwards.
struct LoopOp {
  enum class Kind : std::uint8_t { kSend, kRecv };
  static constexpr int kPosted = 0, kDone = 2, kSizeMismatch = 3;
  Kind kind = Kind::kSend;
  int src = 0, dst = 0;  // world ranks
  std::uint64_t ctx = 0;
  int tag = 0;
  const std::byte* sdata = nullptr;
  std::byte* rdata = nullptr;
  std::size_t bytes = 0;
  std::size_t peer_bytes = 0;  // size of the matched counterpart (for the error message)
  std::atomic<int> state{kPosted};
  std::atomic<std::int64_t> ready_ticks{0};  // steady_clock ticks when visible (no network)
  NetworkModel::Flow flow = -1;              // its flow in the emulated network (written before state)
  std::uint32_t generation = 0;
  bool live = false;      // handed out and not yet released (owner thread only)
  bool deferred = false;  // issued inside an open group, not yet posted
};

/// Mailbox of one world rank: receives it posted and sends addressed to it that
/// found no receive yet. `mu` also guards the owner's condition variable.
struct LoopRank {
  /// Parked messages before a mailbox grows; how many park depends on thread timing,
  /// so reserving keeps the steady state free of allocations in practice.
  static constexpr std::size_t kReserved = 256;
  LoopRank() {
    posted_recvs.reserve(kReserved);
    unexpected_sends.reserve(kReserved);
  }
  std::mutex mu;
  std::condition_variable cv;
  std::vector<LoopOp*> posted_recvs;
  std::vector<LoopOp*> unexpected_sends;
};

struct LoopWorld {
  explicit LoopWorld(int n, std::optional<NetworkConfig> net_config) {
    for (int r = 0; r < n; ++r) ranks.push_back(std::make_unique<LoopRank>());
    if (net_config) net = std::make_unique<NetworkModel>(std::move(*net_config), n);
  }
  std::vector<std::unique_ptr<LoopRank>> ranks;
  std::unique_ptr<NetworkModel> net;
};

inline std::uint64_t mix_context(std::uint64_t parent, std::uint64_t count) {
  // splitmix64 finaliser (Steele et al., "Fast splittable PRNGs", OOPSLA 2014).
  std::uint64_t z = parent * 0x9E3779B97F4A7C15ull + count + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace detail

/// One rank's endpoint in a `LoopbackWorld` (or a group split from it). Move-only;
/// use it from one thread at a time. Posting is O(pending messages at the peer).
class LoopbackTransport {
 public:
  using transport_concept = comm::transport_tag;

  /// Completion handle; empty when default-constructed or consumed.
  struct Request {
    detail::LoopOp* op = nullptr;
    std::uint32_t generation = 0;
  };

  LoopbackTransport(LoopbackTransport&&) noexcept = default;
  LoopbackTransport& operator=(LoopbackTransport&& other) noexcept {
    if (this != &other) {
      withdraw_all();
      world_ = std::move(other.world_);
      members_ = std::move(other.members_);
      rank_ = other.rank_;
      ctx_ = other.ctx_;
      splits_ = other.splits_;
      group_depth_ = other.group_depth_;
      pool_ = std::move(other.pool_);
      free_ = std::move(other.free_);
      deferred_ = std::move(other.deferred_);
    }
    return *this;
  }
  ~LoopbackTransport() { withdraw_all(); }

  /// This endpoint's rank in its group.
  int rank() const { return rank_; }
  /// Number of ranks in the group.
  int size() const { return static_cast<int>(members_.size()); }
  /// Largest valid tag.
  int max_tag() const { return INT_MAX; }
  /// World rank of group rank `r` (for diagnostics).
  int world_rank(int r) const { return members_.at(static_cast<std::size_t>(r)); }

  /// Posts a send of `data` to group rank `peer`.
  Request isend(int peer, int tag, std::span<const std::byte> data) {
    auto* op = acquire(peer, tag);
    op->kind = detail::LoopOp::Kind::kSend;
    op->src = members_[static_cast<std::size_t>(rank_)];
    op->dst = members_[static_cast<std::size_t>(peer)];
    op->sdata = data.data();
    op->bytes = data.size();
    return submit(op);
  }

  /// Posts a receive into `data` from group rank `peer`.
  Request irecv(int peer, int tag, std::span<std::byte> data) {
    auto* op = acquire(peer, tag);
    op->kind = detail::LoopOp::Kind::kRecv;
    op->src = members_[static_cast<std::size_t>(peer)];
    op->dst = members_[static_cast<std::size_t>(rank_)];
    op->rdata = data.data();
    op->bytes = data.size();
    return submit(op);
  }

  /// Opens a group: later posts are deferred to the matching `group_end()`.
  void group_begin() { ++group_depth_; }

  /// Closes a group; the outermost close posts all deferred receives, then sends.
  void group_end() {
    expect(group_depth_ > 0, "LoopbackTransport.group_end() depth", group_depth_,
           "a preceding group_begin()");
    if (--group_depth_ > 0) return;
    for (auto* op : deferred_)
      if (op->kind == detail::LoopOp::Kind::kRecv) post(op);
    for (auto* op : deferred_)
      if (op->kind == detail::LoopOp::Kind::kSend) post(op);
    deferred_.clear();
  }

  /// True (and the request consumed) when `req` completed.
  bool test(Request& req) {
    auto* op = checked(req, "test");
    auto& me = own_mailbox();
    std::unique_lock lock(me.mu);
    return finish_if_ready(req, op, lock, comm::Clock::now());
  }

  /// Blocks until `req` completes (true) or `deadline` passes (false, still pending).
  bool wait(Request& req, comm::Deadline deadline) {
    auto* op = checked(req, "wait");
    auto& me = own_mailbox();
    std::unique_lock lock(me.mu);
    for (;;) {
      const auto now = comm::Clock::now();
      if (finish_if_ready(req, op, lock, now)) return true;
      if (now >= deadline) return false;
      auto until = deadline;
      if (op->state.load(std::memory_order_acquire) >= detail::LoopOp::kDone)
        until = std::min(until, op->flow >= 0 ? world_->net->poll(op->flow, now).at : ready_time(op));
      me.cv.wait_until(lock, until);
    }
  }

  /// Withdraws `req` if still pending (also inside an open group); waits out a copy
  /// already in flight.
  void cancel(Request& req) {
    if (req.op == nullptr) return;
    auto* op = checked(req, "cancel", /*deferred_ok=*/true);
    withdraw(op);
    req = Request{};
  }

  /// Collective split (see `comm::transport`): the group of `members` (group ranks).
  std::optional<LoopbackTransport> split(std::span<const int> members) {
    const auto ctx = detail::mix_context(ctx_, ++splits_);
    std::vector<int> world;
    int mine = -1;
    for (std::size_t i = 0; i < members.size(); ++i) {
      const int m = members[i];
      expect(m >= 0 && m < size(), "split.members[i]", m, "a rank of the parent group");
      expect(std::find(world.begin(), world.end(), members_[static_cast<std::size_t>(m)]) ==
                 world.end(),
             "split.members[i]", m, "distinct ranks");
      world.push_back(members_[static_cast<std::size_t>(m)]);
      if (m == rank_) mine = static_cast<int>(i);
    }
    expect(!members.empty(), "split.members.size()", 0, ">= 1");
    if (mine < 0) return std::nullopt;
    return LoopbackTransport(world_, std::move(world), mine, ctx);
  }

 private:
  friend class LoopbackWorld;
  LoopbackTransport(std::shared_ptr<detail::LoopWorld> world, std::vector<int> members, int rank,
                    std::uint64_t ctx)
      : world_(std::move(world)), members_(std::move(members)), rank_(rank), ctx_(ctx) {}

  detail::LoopRank& mailbox(int world_rank) {
    return *world_->ranks[static_cast<std::size_t>(world_rank)];
  }
  detail::LoopRank& own_mailbox() { return mailbox(members_[static_cast<std::size_t>(rank_)]); }

  detail::LoopOp* acquire(int peer, int tag) {
    expect(world_ != nullptr, "LoopbackTransport", "moved-from", "a live endpoint");
    expect(peer >= 0 && peer < size(), "LoopbackTransport peer", peer,
           "a rank in [0, size()) of the group");
    expect(tag >= 0, "LoopbackTransport tag", tag, ">= 0");
    if (free_.empty()) {
      pool_.push_back(std::make_unique<detail::LoopOp>());
      free_.push_back(pool_.back().get());
    }
    auto* op = free_.back();
    free_.pop_back();
    op->ctx = ctx_;
    op->tag = tag;
    op->sdata = nullptr;
    op->rdata = nullptr;
    op->peer_bytes = 0;
    op->flow = -1;
    op->state.store(detail::LoopOp::kPosted, std::memory_order_relaxed);
    op->live = true;
    return op;
  }

  Request submit(detail::LoopOp* op) {
    if (group_depth_ > 0) {
      op->deferred = true;
      deferred_.push_back(op);
    } else {
      post(op);
    }
    return Request{op, op->generation};
  }

  static bool matches(const detail::LoopOp* a, const detail::LoopOp* b) {
    return a->ctx == b->ctx && a->tag == b->tag && a->src == b->src;
  }

  /// Matches `op` against the receiver's mailbox or parks it there.
  void post(detail::LoopOp* op) {
    op->deferred = false;
    auto& box = mailbox(op->dst);
    detail::LoopOp* peer = nullptr;
    {
      std::lock_guard lock(box.mu);
      const bool is_send = op->kind == detail::LoopOp::Kind::kSend;
      auto& other = is_send ? box.posted_recvs : box.unexpected_sends;
      auto it = std::find_if(other.begin(), other.end(),
                             [&](const detail::LoopOp* o) { return matches(o, op); });
      if (it == other.end()) {
        (is_send ? box.unexpected_sends : box.posted_recvs).push_back(op);
        return;
      }
      peer = *it;
      other.erase(it);  // keeps the order of the rest: non-overtaking
    }
    auto* send = op->kind == detail::LoopOp::Kind::kSend ? op : peer;
    auto* recv = op->kind == detail::LoopOp::Kind::kSend ? peer : op;
    transfer(send, recv);
  }

  void transfer(detail::LoopOp* send, detail::LoopOp* recv) {
    int state = detail::LoopOp::kDone;
    if (send->bytes != recv->bytes) {
      state = detail::LoopOp::kSizeMismatch;
    } else if (send->bytes > 0) {
      std::memcpy(recv->rdata, send->sdata, send->bytes);
    }
    send->peer_bytes = recv->bytes;
    recv->peer_bytes = send->bytes;
    const auto now = comm::Clock::now();
    const NetworkModel::Flow flow =
        world_->net && state == detail::LoopOp::kDone ? world_->net->start(send->src, send->dst, send->bytes, now) : -1;
    const auto ticks = now.time_since_epoch().count();
    const int src = send->src, dst = send->dst;
    for (auto* o : {send, recv}) {
      o->flow = flow;
      o->ready_ticks.store(ticks, std::memory_order_relaxed);
      o->state.store(state, std::memory_order_release);
    }
    // The ops may be recycled from here on; only the mailboxes are touched.
    for (int r : {src, dst}) {
      auto& box = mailbox(r);
      std::lock_guard lock(box.mu);
      box.cv.notify_all();
    }
  }

  static comm::Clock::time_point ready_time(const detail::LoopOp* op) {
    return comm::Clock::time_point(
        comm::Clock::duration(op->ready_ticks.load(std::memory_order_relaxed)));
  }

  detail::LoopOp* checked(const Request& req, const char* what, bool deferred_ok = false) {
    // Messages are built only on failure: the steady state must not allocate.
    if (req.op == nullptr || !req.op->live || req.op->generation != req.generation)
      fail(std::string("LoopbackTransport.") + what + " request", "empty or consumed",
           "a pending request of this endpoint");
    if (req.op->deferred && !deferred_ok)
      fail(std::string("LoopbackTransport.") + what + " request", "inside an open group",
           "group_end() before waiting");
    return req.op;
  }

  bool finish_if_ready(Request& req, detail::LoopOp* op, std::unique_lock<std::mutex>& lock,
                       comm::Clock::time_point now) {
    const int state = op->state.load(std::memory_order_acquire);
    if (state < detail::LoopOp::kDone) return false;
    if (op->flow >= 0 ? !world_->net->poll(op->flow, now).delivered : now < ready_time(op)) return false;
    lock.unlock();
    const auto mine = op->bytes, theirs = op->peer_bytes;
    const bool send = op->kind == detail::LoopOp::Kind::kSend;
    const int peer_world = send ? op->dst : op->src;
    const int tag = op->tag;
    release(op);
    req = Request{};
    if (state == detail::LoopOp::kSizeMismatch) {
      std::ostringstream field;
      field << "LoopbackTransport message (world rank " << peer_world << ", tag " << tag
            << ") size";
      std::ostringstream want;
      want << "the " << (send ? "receive" : "send") << " size " << theirs << " bytes";
      fail<IoError>(field.str(), mine, want.str());
    }
    return true;
  }

  void release(detail::LoopOp* op) {
    if (op->flow >= 0) world_->net->release(op->flow);
    op->flow = -1;
    op->live = false;
    ++op->generation;
    free_.push_back(op);
  }

  void withdraw(detail::LoopOp* op) {
    if (op->deferred) {
      deferred_.erase(std::find(deferred_.begin(), deferred_.end(), op));
      op->deferred = false;
      release(op);
      return;
    }
    auto& box = mailbox(op->dst);
    {
      std::lock_guard lock(box.mu);
      auto& list = op->kind == detail::LoopOp::Kind::kSend ? box.unexpected_sends : box.posted_recvs;
      auto it = std::find(list.begin(), list.end(), op);
      if (it != list.end()) {
        list.erase(it);
        release(op);
        return;
      }
    }
    // Matched: another thread is copying (a bounded memcpy) or has finished.
    while (op->state.load(std::memory_order_acquire) < detail::LoopOp::kDone)
      std::this_thread::yield();
    release(op);
  }

  void withdraw_all() {
    if (!world_) return;
    for (auto& op : pool_)
      if (op->live) withdraw(op.get());
    deferred_.clear();
  }

  std::shared_ptr<detail::LoopWorld> world_;
  std::vector<int> members_;  // group rank -> world rank
  int rank_ = 0;
  std::uint64_t ctx_ = 0;
  std::uint64_t splits_ = 0;
  int group_depth_ = 0;
  std::vector<std::unique_ptr<detail::LoopOp>> pool_;
  std::vector<detail::LoopOp*> free_;
  std::vector<detail::LoopOp*> deferred_;
};

static_assert(comm::transport<LoopbackTransport>);

/// A world of `size` in-process ranks, optionally over an emulated network.
class LoopbackWorld {
 public:
  /// Precondition: size >= 1. Throws ConfigError otherwise or on a bad `network`.
  explicit LoopbackWorld(int size, std::optional<NetworkConfig> network = std::nullopt)
      : size_(size) {
    expect(size >= 1, "LoopbackWorld.size", size, ">= 1");
    world_ = std::make_shared<detail::LoopWorld>(size, std::move(network));
  }

  /// Number of ranks.
  int size() const { return size_; }

  /// The emulated network, or nullptr when the world has none.
  const NetworkModel* network() const { return world_->net.get(); }

  /// The world endpoint of `rank`; call once per rank and use it from that rank's thread.
  LoopbackTransport transport(int rank) const {
    expect(rank >= 0 && rank < size_, "LoopbackWorld.transport rank", rank, "in [0, size())");
    std::vector<int> members(static_cast<std::size_t>(size_));
    for (int r = 0; r < size_; ++r) members[static_cast<std::size_t>(r)] = r;
    return LoopbackTransport(world_, std::move(members), rank, 1);
  }

 private:
  int size_;
  std::shared_ptr<detail::LoopWorld> world_;
};

/// Runs `body(LoopbackTransport&)` on one thread per rank of `world` and joins them.
/// Rethrows the exception of the lowest failing rank, if any.
template <class Body>
void run_ranks(const LoopbackWorld& world, Body&& body) {
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(world.size()));
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(world.size()));
  for (int r = 0; r < world.size(); ++r) {
    threads.emplace_back([&, r] {
      try {
        auto t = world.transport(r);
        body(t);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace disagmoe::host
