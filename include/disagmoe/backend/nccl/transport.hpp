// SPDX-License-Identifier: Apache-2.0
/// @file transport.hpp
/// `nccl::Transport`: the `comm::transport` concept over NCCL point-to-point
/// (ncclSend / ncclRecv in groups) on non-blocking communicators (ncclConfig_t.blocking
/// = 0, NCCL docs "Communicator Creation", "Fault Tolerance"). Needs the `disagmoe::nccl`
/// target; host code.
///
/// Buffers: device memory travels as is. Host memory (a channel's headers, routing slots
/// and handshake) is staged, since NCCL reads and writes only device-accessible memory:
/// a send is copied at the post into pinned memory and uploaded on the transport's
/// stream ahead of the group; a receive lands in device staging, is copied to pinned
/// memory after the group and into the caller's buffer when a `test` or `wait` first
/// sees the group complete. Staging comes from caching allocators (no allocation once
/// warm).
///
/// What NCCL offers and how the concept maps onto it:
///  - Matching: NCCL has no tags. Operations between two ranks are matched in the order
///    each side issues them, per direction. The concept's (peer, tag) matching therefore
///    holds when both sides post their messages to a peer in the same order, as one
///    M2NChannel does; `tag` only labels errors, and `max_tag()` is INT_MAX. Channels that
///    share a group and are in flight at once need a communicator each (comm/laned_transport.hpp); `matches_tags` is false.
///  - Groups: `group_begin` / `group_end` are ncclGroupStart / ncclGroupEnd; a post
///    outside a group is a group of its own. NCCL's group depth is per thread and spans
///    communicators: nested groups launch only at the thread's outermost ncclGroupEnd
///    (NCCL docs, "Group Calls"), so a group bracketing several transports (the lanes of
///    comm/laned_transport.hpp, comm::DualRoleGroup) completes every transport's group there, and
///    each records its completion event only then. A transport must not be moved or
///    destroyed inside an open group. NCCL runs the groups of a communicator in
///    issue order on one stream: a group must not wait for a message its own rank sends
///    in a later group (post the receives of a reply in the group of the request, or
///    after it). MPI and the loopback transport have no such rule.
///  - Completion: at the outermost `group_end` a CUDA event is recorded on the transport's
///    stream; every request of the group completes with it. `test` / `wait` poll the event
///    and ncclCommGetAsyncError, so an asynchronous NCCL error (a peer's network failure)
///    is thrown as NcclError naming the request's peer and tag.
///  - Deadlines: `wait(req, deadline)` returns false at the deadline, the request still
///    pending; the caller then cancels (M2NChannel does, and throws TimeoutError naming
///    the peer, the channel and the step). Creation, split and finalisation have their
///    own deadline (`Options::timeout`); at expiry the communicator is aborted and
///    TimeoutError thrown. This is the watchdog of PyTorch's ProcessGroupNCCL
///    (TORCH_NCCL_ASYNC_ERROR_HANDLING: poll the async error, abort on timeout) moved
///    into the waits the caller already makes, and DeepEP's timeouts on its receives.
///  - Cancel: NCCL cannot withdraw one operation. Cancelling a request that has not
///    completed calls ncclCommAbort: every pending operation of the communicator stops,
///    and every later call on this transport throws NcclError("aborted"). Cancelling
///    a completed request only consumes it.
///  - split: ncclCommSplit (color 0 for members, NCCL_SPLIT_NOCOLOR for the others, key =
///    position in `members`), non-blocking, bounded by the same deadline.
#pragma once

#include <disagmoe/backend/cuda/check.hpp>
#include <disagmoe/backend/cuda/memory.hpp>
#include <disagmoe/backend/cuda/stream.hpp>
#include <disagmoe/backend/nccl/check.hpp>
#include <disagmoe/comm/transport.hpp>
#include <disagmoe/error.hpp>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace disagmoe::nccl {

/// Creation options.
struct Options {
  /// Deadline of communicator creation, split and finalisation.
  std::chrono::milliseconds timeout{60000};
  /// Connect to every peer at creation (one 1-byte exchange with each), so that the first
  /// step does not pay NCCL's lazy connection set-up (NCCL_RUNTIME_CONNECT).
  bool connect_eagerly = true;
  /// Name shown in NCCL's logs and in our errors.
  std::string name = "disagmoe";
};

/// Rank 0 creates an NCCL unique id and publishes it at `path` (written to a temporary
/// file, then renamed, so a reader never sees half of it); the other ranks read it,
/// waiting up to `timeout`. Every rank of one communicator passes the same path; the
/// file must be new (delete it between runs). Throws TimeoutError naming the path.
inline ncclUniqueId unique_id_from_file(const std::string& path, int rank,
                                        std::chrono::milliseconds timeout = std::chrono::milliseconds{60000}) {
  ncclUniqueId id{};
  if (rank == 0) {
    DISAGMOE_NCCL_CHECK(ncclGetUniqueId(&id));
    const std::string tmp = path + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(id.internal, sizeof(id.internal));
      if (!out) fail<IoError>("nccl unique id file", tmp, "a writable path");
    }
    std::filesystem::rename(tmp, path);
    return id;
  }
  const auto deadline = comm::deadline_after(timeout);
  while (true) {
    std::ifstream in(path, std::ios::binary);
    if (in && in.read(id.internal, sizeof(id.internal)) && in.gcount() == sizeof(id.internal)) return id;
    if (comm::Clock::now() > deadline)
      fail<TimeoutError>("nccl unique id file", path, "written by rank 0 within " + std::to_string(timeout.count()) + " ms");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

/// See the file comment. Movable; one communicator and one stream per transport.
class Transport {
  struct Group;

 public:
  using transport_concept = comm::transport_tag;
  /// Matching by issue order per peer (see the file comment).
  static constexpr bool matches_tags = false;

  /// A posted send or receive (default: none). Must not outlive its transport.
  class Request {
   public:
    Request() = default;

   private:
    friend class Transport;
    std::shared_ptr<Group> group_;
    int peer_ = -1, tag_ = 0;
    bool send_ = false;
  };

  /// Rank `rank` of `size` of the communicator of `id` (collective over its ranks), on the
  /// current CUDA device; NCCL work runs on a new highest-priority stream. Throws
  /// TimeoutError when not every rank joins within `opts.timeout`, NcclError on failure.
  static Transport create(const ncclUniqueId& id, int rank, int size, Options opts = {}) {
    expect(size >= 1 && rank >= 0 && rank < size, "nccl::Transport rank", rank,
           "in [0, size) (size " + std::to_string(size) + ")");
    Transport t(std::move(opts));
    ncclConfig_t config = t.config();
    const ncclResult_t r = ncclCommInitRankConfig(&t.s_->comm, size, id, rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) check(r, "ncclCommInitRankConfig", __FILE__, __LINE__);
    t.settle(t.s_->comm, "ncclCommInitRankConfig");
    t.s_->rank = rank;
    t.s_->size = size;
    if (t.s_->opts.connect_eagerly) t.connect_all();
    return t;
  }

  Transport(Transport&&) noexcept = default;
  Transport& operator=(Transport&&) noexcept = default;
  ~Transport() = default;

  int rank() const { return s_->rank; }
  int size() const { return s_->size; }
  /// Tags only label errors (see the file comment): any int is accepted.
  int max_tag() const { return INT_MAX; }
  /// The stream NCCL work runs on.
  cudaStream_t stream() const { return s_->stream.get(); }
  /// True once a cancel aborted the communicator.
  bool aborted() const { return s_->aborted; }

  /// Posts a send of `buf` (device memory) to `peer`. O(1) host work.
  Request isend(int peer, int tag, std::span<const std::byte> buf) { return post(true, peer, tag, buf.data(), buf.size()); }
  /// Posts a receive into `buf` (device memory) from `peer`. Precondition: as large as the
  /// matching send. NCCL does not check it (a mismatch is undefined there, at best a wait
  /// that reaches its deadline), so the channel's headers carry the row counts.
  Request irecv(int peer, int tag, std::span<std::byte> buf) { return post(false, peer, tag, buf.data(), buf.size()); }

  /// ncclGroupStart (nestable).
  void group_begin() {
    usable("group_begin");
    DISAGMOE_NCCL_CHECK(ncclGroupStart());
    ThreadGroups& tg = thread_groups();
    ++tg.depth;
    if (s_->depth++ == 0) tg.open.push_back(s_.get());
  }
  /// ncclGroupEnd; the thread's outermost one launches the groups of every transport
  /// opened since and records their completion events (see the file comment). The group
  /// is closed even on an aborted communicator (NCCL's group depth is per thread: an
  /// unmatched ncclGroupStart would hold back every later call of the thread), and at the
  /// outermost end every transport in it is completed or aborted, so that its requests can
  /// be cancelled; the first error is thrown after, there only (an inner end that threw
  /// would keep a wrapper from closing its other lanes).
  void group_end() {
    expect(s_->depth > 0, "nccl::Transport.group_end depth", s_->depth, "> 0 (a group_begin first)");
    const ncclResult_t r = ncclGroupEnd();
    --s_->depth;
    ThreadGroups& tg = thread_groups();
    std::vector<State*> opened;
    const bool outermost = --tg.depth == 0;
    if (outermost) opened.swap(tg.open);
    if (r != ncclSuccess && r != ncclInProgress) {
      for (State* st : opened) abort(*st);  // their operations are in the failed group
      check(r, "ncclGroupEnd", __FILE__, __LINE__);
    }
    std::exception_ptr first;
    for (State* st : opened) {
      if (st->aborted) {
        abort(*st);  // one deferred while its group was open
        continue;
      }
      try {
        complete_group(*st);  // settle() aborts `st` on an NCCL error or a timeout
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    if (first) std::rethrow_exception(first);  // the cause (a timeout, NCCL's detail), not "aborted"
    if (outermost) usable("group_end");
  }

  /// True once `req` completed (consumed); throws NcclError naming its peer and tag on an
  /// asynchronous NCCL error.
  bool test(Request& req) {
    expect(req.group_ != nullptr, "nccl::Transport.test request", "empty", "a pending request");
    usable(req.send_ ? "send" : "receive");  // an aborted group is never posted: say why
    expect(req.group_->posted, "nccl::Transport.test request", "inside an open group", "group_end() first");
    async_error(req);
    if (!req.group_->event.query()) return false;
    async_error(req);
    deliver(*req.group_);
    req.group_.reset();
    return true;
  }
  /// Polls `req` until it completes (true) or `deadline` passes (false; still pending).
  bool wait(Request& req, comm::Deadline deadline) {
    for (int spins = 0;; ++spins) {
      if (test(req)) return true;
      if (comm::Clock::now() > deadline) return false;
      if (spins < 64)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  /// Consumes a completed request; aborts the communicator for a pending one (see the file
  /// comment), also for one of a group still open: the abort then waits for the group's
  /// ncclGroupEnd, which NCCL needs to release its operations, and stops them right after.
  /// Never blocks on the peer.
  void cancel(Request& req) {
    if (req.group_ == nullptr) return;
    const bool done = req.group_->posted && !s_->aborted && query_quietly(*req.group_);
    if (done) deliver(*req.group_);  // the caller may release the buffers after this
    req.group_.reset();
    if (done || s_->aborted) return;
    abort();
  }

  /// Collective over this group: the sub-group of `members` (group ranks; members[i] gets
  /// rank i), or nullopt on the ranks not in it. ncclCommSplit, bounded by the timeout.
  std::optional<Transport> split(std::span<const int> members) {
    usable("split");
    int key = -1;
    for (std::size_t i = 0; i < members.size(); ++i) {
      expect(members[i] >= 0 && members[i] < size(), "nccl::Transport.split member", members[i], "a rank of the group");
      for (std::size_t j = 0; j < i; ++j)
        expect(members[j] != members[i], "nccl::Transport.split member", members[i], "distinct members");
      if (members[i] == rank()) key = static_cast<int>(i);
    }
    Transport sub(s_->opts);
    ncclConfig_t config = sub.config();
    const ncclResult_t r = ncclCommSplit(s_->comm, key >= 0 ? 0 : NCCL_SPLIT_NOCOLOR, key, &sub.s_->comm, &config);
    if (r != ncclSuccess && r != ncclInProgress) check(r, "ncclCommSplit", __FILE__, __LINE__);
    settle(s_->comm, "ncclCommSplit");
    if (key < 0) return std::nullopt;
    sub.settle(sub.s_->comm, "ncclCommSplit (new communicator)");
    sub.s_->rank = key;
    sub.s_->size = static_cast<int>(members.size());
    if (sub.s_->opts.connect_eagerly) sub.connect_all();
    return sub;
  }

  /// Aborts the communicator (ncclCommAbort): pending operations stop; every later call
  /// throws. Inside an open group of the thread, the ncclCommAbort itself waits for the
  /// group's end (group_end). Idempotent.
  void abort() noexcept {
    if (s_ != nullptr) abort(*s_);
  }

 private:
  /// Completion of one group's operations.
  struct Group {
    /// A receive into host memory: device staging -> pinned (on the stream) -> user.
    struct HostRecv {
      void *device, *pinned;
      std::byte* user;
      std::size_t bytes;
    };
    cuda::Event event;
    bool posted = false, delivered = false;
    std::vector<HostRecv> host_recvs;
    std::vector<void*> device_blocks;  // device staging released at group_end
  };
  struct State {
    explicit State(Options o)
        : opts(std::move(o)), device_staging(events, cuda::MemoryKind::kDevice),
          pinned_staging(events, cuda::MemoryKind::kPinnedHost),
          stream(cuda::Stream::create(cuda::stream_priorities().greatest)), open(std::make_shared<Group>()) {}
    State(const State&) = delete;
    State& operator=(const State&) = delete;
    /// Flushes and frees the communicator (ncclCommFinalize, bounded by the timeout;
    /// aborted on expiry), then waits for the stream.
    ~State() {
      if (comm != nullptr && !aborted) {
        const ncclResult_t f = ncclCommFinalize(comm);
        bool clean = f == ncclSuccess || f == ncclInProgress;
        const auto deadline = comm::deadline_after(opts.timeout);
        ncclResult_t st = ncclInProgress;
        while (clean && st == ncclInProgress) {
          if (ncclCommGetAsyncError(comm, &st) != ncclSuccess) break;
          if (st == ncclInProgress && comm::Clock::now() > deadline) clean = false;
          if (st == ncclInProgress) std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
        if (clean && st == ncclSuccess)
          (void)ncclCommDestroy(comm);
        else
          (void)ncclCommAbort(comm);
      }
      if (comm != nullptr && aborted) (void)ncclCommAbort(comm);  // deferred by an unclosed group
      (void)cudaStreamSynchronize(stream.get());
    }
    Options opts;
    cuda::EventPool events;  // before the allocators and `open`, which return events to it
    cuda::CachingAllocator device_staging, pinned_staging;
    cuda::Stream stream;
    ncclComm_t comm = nullptr;
    int rank = 0, size = 1, depth = 0;
    bool aborted = false;
    std::shared_ptr<Group> open;  // the group being posted
  };

  explicit Transport(Options opts) : s_(std::make_unique<State>(std::move(opts))) {}

  static void abort(State& s) noexcept {
    s.aborted = true;
    // Inside an open group (its own, or another transport's that it posted into) NCCL
    // still holds the group's operations on this communicator: it is aborted after the
    // thread's outermost ncclGroupEnd (group_end).
    const std::vector<State*>& open = thread_groups().open;
    if (s.comm == nullptr || s.depth > 0 || std::ranges::find(open, &s) != open.end()) return;
    (void)ncclCommAbort(s.comm);
    s.comm = nullptr;
  }

  ncclConfig_t config() const {
    ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
    c.blocking = 0;  // every call returns; we poll with deadlines
    c.commName = s_->opts.name.c_str();
    return c;
  }

  static void check(ncclResult_t r, const char* call, const char* file, int line) { nccl::check(r, call, file, line); }

  void usable(const char* call) const {
    if (s_->aborted)
      fail<NcclError>(std::string("nccl::Transport '") + s_->opts.name + "' " + call, "aborted",
                      "a communicator that no cancel or timeout aborted (create a new one)");
  }

  /// Polls `c` (this transport's communicator) until it is not ncclInProgress; aborts and
  /// throws TimeoutError at the deadline, NcclError on an error.
  void settle(ncclComm_t c, const char* call) { settle(*s_, c, call); }
  static void settle(State& s, ncclComm_t c, const char* call) {
    const auto deadline = comm::deadline_after(s.opts.timeout);
    while (true) {
      ncclResult_t st = ncclSuccess;
      DISAGMOE_NCCL_CHECK(ncclCommGetAsyncError(c, &st));
      if (st == ncclSuccess) return;
      if (st != ncclInProgress) {
        const std::string detail = ncclGetLastError(c);
        abort(s);
        fail<NcclError>(std::string("nccl::Transport '") + s.opts.name + "' " + call, ncclGetErrorString(st),
                        "ncclSuccess (" + detail + ")");
      }
      if (comm::Clock::now() > deadline) {
        abort(s);
        fail<TimeoutError>(std::string("nccl::Transport '") + s.opts.name + "' " + call,
                           "in progress after " + std::to_string(s.opts.timeout.count()) + " ms",
                           "every rank to take part (is a peer stopped or lost?)");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  /// This thread's NCCL group depth and the transports with a group open in it.
  struct ThreadGroups {
    int depth = 0;
    std::vector<State*> open;
  };
  static ThreadGroups& thread_groups() {
    thread_local ThreadGroups g;
    return g;
  }

  /// After the outermost ncclGroupEnd: once `s`'s group is enqueued, queues the copies of
  /// its host receives, releases its staging and records its completion event.
  static void complete_group(State& s) {
    settle(s, s.comm, "ncclGroupEnd");  // non-blocking: the group is enqueued once settled
    Group& g = *s.open;
    const cudaStream_t st = s.stream.get();
    for (auto& h : g.host_recvs)  // after the group's kernel on the stream
      DISAGMOE_CUDA_CHECK(cudaMemcpyAsync(h.pinned, h.device, h.bytes, cudaMemcpyDeviceToHost, st));
    for (void* d : g.device_blocks) s.device_staging.release(d, st);  // stream-ordered: after the group
    g.device_blocks.clear();
    g.event = cuda::Event::record(s.events, st);
    g.posted = true;
    s.open = std::make_shared<Group>();
  }

  Request post(bool send, int peer, int tag, const std::byte* data, std::size_t bytes) {
    usable(send ? "isend" : "irecv");
    expect(peer >= 0 && peer < size(), send ? "nccl::Transport.isend peer" : "nccl::Transport.irecv peer", peer,
           "a rank of the group [0, " + std::to_string(size()) + ")");
    const bool implicit = s_->depth == 0;
    if (implicit) group_begin();
    const void* buf = bytes > 0 && !cuda::is_device_pointer(data) ? stage(send, data, bytes) : data;
    const ncclResult_t r = send ? ncclSend(buf, bytes, ncclUint8, peer, s_->comm, s_->stream.get())
                                : ncclRecv(const_cast<void*>(buf), bytes, ncclUint8, peer, s_->comm, s_->stream.get());
    if (r != ncclSuccess && r != ncclInProgress) {
      if (implicit) {  // unwind the group of this post alone
        (void)ncclGroupEnd();
        --s_->depth;
        ThreadGroups& tg = thread_groups();
        --tg.depth;
        std::erase(tg.open, s_.get());
      }
      check(r, send ? "ncclSend" : "ncclRecv", __FILE__, __LINE__);
    }
    Request req;
    req.group_ = s_->open;
    req.peer_ = peer;
    req.tag_ = tag;
    req.send_ = send;
    if (implicit) group_end();
    return req;
  }

  /// Device staging for host memory `data` in the open group (see the file comment): a
  /// send's bytes are uploaded now, ahead of the group on the stream.
  const void* stage(bool send, const std::byte* data, std::size_t bytes) {
    const cudaStream_t st = s_->stream.get();
    void* dev = s_->device_staging.allocate(bytes, st);
    s_->open->device_blocks.push_back(dev);
    void* pinned = s_->pinned_staging.allocate(bytes, st);
    if (send) {
      std::memcpy(pinned, data, bytes);
      DISAGMOE_CUDA_CHECK(cudaMemcpyAsync(dev, pinned, bytes, cudaMemcpyHostToDevice, st));
      s_->pinned_staging.release(pinned, st);  // free again once the upload has run
    } else {
      s_->open->host_recvs.push_back({dev, pinned, const_cast<std::byte*>(data), bytes});
    }
    return dev;
  }

  /// Copies a completed group's host receives into the callers' buffers (once).
  void deliver(Group& g) {
    if (g.delivered) return;
    g.delivered = true;
    for (auto& h : g.host_recvs) {
      std::memcpy(h.user, h.pinned, h.bytes);
      s_->pinned_staging.release(h.pinned, s_->stream.get());
    }
    g.host_recvs.clear();
  }

  /// Throws NcclError naming `req` if the communicator reports an asynchronous error.
  void async_error(const Request& req) {
    usable(req.send_ ? "send" : "receive");
    ncclResult_t st = ncclSuccess;
    DISAGMOE_NCCL_CHECK(ncclCommGetAsyncError(s_->comm, &st));
    if (st == ncclSuccess || st == ncclInProgress) return;
    const std::string detail = ncclGetLastError(s_->comm);
    abort();
    fail<NcclError>(std::string("nccl::Transport '") + s_->opts.name + "' " + (req.send_ ? "send to rank " : "receive from rank ") +
                        std::to_string(req.peer_) + " tag " + std::to_string(req.tag_),
                    ncclGetErrorString(st), "ncclSuccess (" + detail + ")");
  }

  bool query_quietly(const Group& g) const {
    try {
      return g.event.query();
    } catch (...) {
      return false;
    }
  }

  /// One 1-byte exchange with every peer (self included), so connections exist before the
  /// first step. Bounded by the timeout.
  void connect_all() {
    const auto n = static_cast<std::size_t>(size());
    void* buf = nullptr;
    DISAGMOE_CUDA_CHECK(cudaMallocAsync(&buf, 2 * n, s_->stream.get()));
    auto* bytes = static_cast<std::byte*>(buf);
    std::vector<Request> reqs;
    reqs.reserve(2 * n);
    group_begin();
    for (int p = 0; p < size(); ++p) {
      reqs.push_back(isend(p, 0, std::span<const std::byte>(bytes + p, 1)));
      reqs.push_back(irecv(p, 0, std::span<std::byte>(bytes + n + static_cast<std::size_t>(p), 1)));
    }
    group_end();
    const auto deadline = comm::deadline_after(s_->opts.timeout);
    for (auto& r : reqs) {
      if (!wait(r, deadline)) {
        abort();
        fail<TimeoutError>(std::string("nccl::Transport '") + s_->opts.name + "' connect to rank " + std::to_string(r.peer_),
                           "pending after " + std::to_string(s_->opts.timeout.count()) + " ms",
                           "every rank to create its communicator");
      }
    }
    DISAGMOE_CUDA_CHECK(cudaFreeAsync(buf, s_->stream.get()));
  }

  std::unique_ptr<State> s_;
};

static_assert(comm::transport<Transport> && !comm::matches_tags<Transport>);

}  // namespace disagmoe::nccl
