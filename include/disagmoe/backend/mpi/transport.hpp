// SPDX-License-Identifier: Apache-2.0
/// @file transport.hpp
/// `mpi::Transport`: the `comm::transport` concept over MPI non-blocking
/// point-to-point (MPI_Isend / MPI_Irecv / MPI_Test), one rank per process. Needs
/// the `disagmoe::mpi` target. Errors are returned (MPI_ERRORS_RETURN), never fatal,
/// and thrown as MpiError naming the call; a receive whose size differs from its
/// send is an IoError, as on the loopback transport.
///
/// Deadlines: every collective the library issues (MPI_Init, communicator creation and
/// release, MPI_Finalize) is bounded by `collective_timeout()`; a peer that stops (SIGSTOP, a hung node)
/// turns into a TimeoutError or, where MPI gives no way back (MPI_Init, MPI_Comm_free,
/// MPI_Finalize), into an exit with status 2 after one line on stderr. `Environment::fail_job` then ends the
/// whole job with MPI_Abort on MPI_COMM_WORLD, so no rank waits for a dead peer in
/// MPI_Finalize (MPI 4.0 §11.2: Finalize is collective over connected processes).
#pragma once

#include <disagmoe/comm/transport.hpp>
#include <disagmoe/error.hpp>

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace disagmoe::mpi {

/// Throws MpiError naming `call` and MPI's own description unless `code` is MPI_SUCCESS.
inline void check(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  fail<MpiError>(call, std::string(text, static_cast<std::size_t>(len)), "MPI_SUCCESS");
}

/// Deadline of every collective the library issues (process-wide; set it before
/// creating the Environment). Default 60 s.
inline std::chrono::milliseconds& collective_timeout() {
  static std::chrono::milliseconds t{60000};
  return t;
}

namespace detail {
/// Runs `blocking()`, a call MPI offers no deadline for; when it has not returned
/// within `timeout`, prints one line naming `what` and ends this process with
/// status 2 (mpirun then ends the job). The watchdog thread makes no MPI call.
template <class F>
void with_watchdog(const char* what, std::chrono::milliseconds timeout, F&& blocking) {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::thread dog([&] {
    std::unique_lock lock(m);
    if (!cv.wait_for(lock, timeout, [&] { return done; })) {
      std::fprintf(stderr, "error: %s = not finished after %lld ms: expected every rank to join (a peer is stopped or lost)\n",
                   what, static_cast<long long>(timeout.count()));
      std::fflush(stderr);
      std::_Exit(2);
    }
  });
  blocking();
  {
    std::lock_guard lock(m);
    done = true;
  }
  cv.notify_one();
  dog.join();
}
}  // namespace detail

/// RAII MPI_Init_thread (funneled: one thread per process talks to MPI) / MPI_Finalize.
/// Does nothing when MPI is already initialised by the caller. MPI_Init is bounded by
/// collective_timeout() (see detail::with_watchdog).
class Environment {
 public:
  Environment(int& argc, char**& argv) {
    int initialised = 0;
    MPI_Initialized(&initialised);
    if (initialised) return;
    int provided = 0;
    int rc = MPI_SUCCESS;
    detail::with_watchdog("MPI_Init_thread", collective_timeout(),
                          [&] { rc = MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided); });
    check(rc, "MPI_Init_thread");
    owned_ = true;
  }
  Environment(const Environment&) = delete;
  Environment& operator=(const Environment&) = delete;
  /// MPI_Finalize, bounded by collective_timeout(): a peer that stopped before it would
  /// otherwise hold this rank forever (Finalize is collective).
  ~Environment() {
    if (owned_) detail::with_watchdog("MPI_Finalize", collective_timeout(), [] { MPI_Finalize(); });
  }

  /// When false, fail_job returns instead of aborting (the caller ends the job itself).
  bool abort_on_error = true;

  /// Ends the whole job after this rank reported an error: MPI_Abort(MPI_COMM_WORLD,
  /// code), which returns `code` from mpirun; returns with abort_on_error off, and in a
  /// world of one rank (nothing else to end: the caller exits, without MPI's banner).
  void fail_job(int code) const {
    int ranks = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    if (!abort_on_error || ranks <= 1) return;
    std::fflush(stderr);
    std::fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, code);
  }

 private:
  bool owned_ = false;
};

/// One process's endpoint in an MPI communicator. Move-only. Posting is O(1) plus
/// MPI's own matching cost; `wait` polls MPI_Test (yield, then 20 us sleeps).
class Transport {
 public:
  using transport_concept = comm::transport_tag;

  /// Completion handle; empty (MPI_REQUEST_NULL) when default-constructed or consumed.
  struct Request {
    MPI_Request handle = MPI_REQUEST_NULL;
    std::size_t bytes = 0;
    int peer = -1;
    int tag = -1;
    bool is_send = false;
  };

  /// MPI_COMM_WORLD (not freed by this object). Precondition: MPI is initialised.
  static Transport world() { return Transport(MPI_COMM_WORLD, false); }

  /// Wraps `comm`; frees it at destruction when `owned`.
  explicit Transport(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
    check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
    int flag = 0;
    int* ub = nullptr;
    check(MPI_Comm_get_attr(comm_, MPI_TAG_UB, &ub, &flag), "MPI_Comm_get_attr(MPI_TAG_UB)");
    max_tag_ = flag && ub ? *ub : 32767;
  }
  Transport(Transport&& o) noexcept
      : comm_(o.comm_), owned_(o.owned_), rank_(o.rank_), size_(o.size_), max_tag_(o.max_tag_),
        group_depth_(o.group_depth_) {
    o.comm_ = MPI_COMM_NULL;
    o.owned_ = false;
  }
  Transport& operator=(Transport&& o) noexcept {
    if (this != &o) {
      release();
      comm_ = o.comm_;
      owned_ = o.owned_;
      rank_ = o.rank_;
      size_ = o.size_;
      max_tag_ = o.max_tag_;
      group_depth_ = o.group_depth_;
      o.comm_ = MPI_COMM_NULL;
      o.owned_ = false;
    }
    return *this;
  }
  ~Transport() { release(); }

  /// Rank in this communicator.
  int rank() const { return rank_; }
  /// Size of this communicator.
  int size() const { return size_; }
  /// MPI_TAG_UB of this communicator (>= 32767).
  int max_tag() const { return max_tag_; }
  /// The underlying communicator (for interoperation).
  MPI_Comm comm() const { return comm_; }

  /// MPI_Isend of `data` to `peer`.
  Request isend(int peer, int tag, std::span<const std::byte> data) {
    Request r = prepare(peer, tag, data.size(), true);
    check(MPI_Isend(data.data(), static_cast<int>(data.size()), MPI_BYTE, peer, tag, comm_, &r.handle),
          "MPI_Isend");
    return r;
  }

  /// MPI_Irecv into `data` from `peer`.
  Request irecv(int peer, int tag, std::span<std::byte> data) {
    Request r = prepare(peer, tag, data.size(), false);
    check(MPI_Irecv(data.data(), static_cast<int>(data.size()), MPI_BYTE, peer, tag, comm_, &r.handle),
          "MPI_Irecv");
    return r;
  }

  /// MPI matches non-blocking posts in any order without deadlock, so a group only
  /// tracks nesting (the posts are already submitted).
  void group_begin() { ++group_depth_; }
  /// Closes a group opened by `group_begin()`.
  void group_end() {
    expect(group_depth_ > 0, "mpi::Transport.group_end() depth", group_depth_, "a preceding group_begin()");
    --group_depth_;
  }

  /// True (request consumed) when `req` completed.
  bool test(Request& req) {
    expect(req.handle != MPI_REQUEST_NULL, "mpi::Transport.test request", "empty or consumed",
           "a pending request");
    int flag = 0;
    MPI_Status status;
    const int rc = MPI_Test(&req.handle, &flag, &status);
    if (rc != MPI_SUCCESS) report(req, rc, status);
    if (!flag) return false;
    if (!req.is_send) check_count(req, status);
    req = Request{};
    return true;
  }

  /// Polls until `req` completes (true) or `deadline` passes (false, still pending).
  bool wait(Request& req, comm::Deadline deadline) {
    for (int spin = 0;; ++spin) {
      if (test(req)) return true;
      if (comm::Clock::now() >= deadline) return false;
      if (spin < 64) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    }
  }

  /// MPI_Ibarrier polled until every rank of this communicator arrived or
  /// collective_timeout() passed (TimeoutError naming `what`; the barrier is left
  /// pending: the job is expected to end, see Environment::fail_job).
  void fence(const char* what) {
    MPI_Request r = MPI_REQUEST_NULL;
    check(MPI_Ibarrier(comm_, &r), "MPI_Ibarrier");
    const auto deadline = comm::Clock::now() + collective_timeout();
    for (int spin = 0;; ++spin) {
      int flag = 0;
      check(MPI_Test(&r, &flag, MPI_STATUS_IGNORE), "MPI_Test (barrier)");
      if (flag) return;
      if (comm::Clock::now() >= deadline) {
        std::ostringstream os;
        os << "every one of its " << size_ << " ranks within " << collective_timeout().count()
           << " ms (a peer is stopped or lost)";
        fail<TimeoutError>(std::string("mpi::Transport ") + what + " on rank " + std::to_string(rank_), "not joined",
                           os.str());
      }
      if (spin < 64) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
  }

  /// MPI_Cancel; a receive is then completed (bounded), a send request freed.
  void cancel(Request& req) {
    if (req.handle == MPI_REQUEST_NULL) return;
    MPI_Cancel(&req.handle);
    if (req.is_send) {
      MPI_Request_free(&req.handle);
    } else {
      MPI_Wait(&req.handle, MPI_STATUS_IGNORE);
    }
    req = Request{};
  }

  /// MPI_Comm_create over this communicator (collective): the sub-group of
  /// `members` (ranks of this communicator) or std::nullopt on non-members.
  std::optional<Transport> split(std::span<const int> members) {
    expect(!members.empty(), "split.members.size()", 0, ">= 1");
    std::vector<int> seen;
    for (int m : members) {
      expect(m >= 0 && m < size_, "split.members[i]", m, "a rank of the parent group");
      expect(std::find(seen.begin(), seen.end(), m) == seen.end(), "split.members[i]", m, "distinct ranks");
      seen.push_back(m);
    }
    MPI_Group parent = MPI_GROUP_NULL, sub = MPI_GROUP_NULL;
    check(MPI_Comm_group(comm_, &parent), "MPI_Comm_group");
    const int rc_incl = MPI_Group_incl(parent, static_cast<int>(members.size()), members.data(), &sub);
    MPI_Group_free(&parent);
    check(rc_incl, "MPI_Group_incl");
    // MPI_Comm_create has no deadline; a non-blocking barrier first proves every rank
    // is here, so a stopped peer is a TimeoutError instead of a hang.
    try {
      fence("MPI_Comm_create (split)");
    } catch (...) {
      MPI_Group_free(&sub);
      throw;
    }
    MPI_Comm created = MPI_COMM_NULL;
    const int rc = MPI_Comm_create(comm_, sub, &created);
    MPI_Group_free(&sub);
    check(rc, "MPI_Comm_create");
    if (created == MPI_COMM_NULL) return std::nullopt;
    return Transport(created, true);
  }

 private:
  Request prepare(int peer, int tag, std::size_t bytes, bool is_send) const {
    expect(comm_ != MPI_COMM_NULL, "mpi::Transport", "moved-from", "a live endpoint");
    expect(peer >= 0 && peer < size_, "mpi::Transport peer", peer, "a rank in [0, size()) of the group");
    expect(tag >= 0 && tag <= max_tag_, "mpi::Transport tag", tag, "in [0, MPI_TAG_UB]");
    expect(bytes <= static_cast<std::size_t>(INT_MAX), "mpi::Transport message bytes", bytes,
           "<= INT_MAX (split larger messages)");
    return Request{MPI_REQUEST_NULL, bytes, peer, tag, is_send};
  }

  /// `got` < 0: MPI truncated the message (the send was larger than the receive).
  [[noreturn]] void size_mismatch(const Request& req, long long got) const {
    std::ostringstream field, want;
    field << "mpi::Transport message (rank " << req.peer << ", tag " << req.tag << ") size";
    if (got < 0) {
      want << "the send size (the send was larger: truncated)";
    } else {
      want << "the send size " << got << " bytes";
    }
    fail<IoError>(field.str(), req.bytes, want.str());
  }

  void check_count(const Request& req, const MPI_Status& status) const {
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    if (static_cast<std::size_t>(count) != req.bytes) size_mismatch(req, count);
  }

  [[noreturn]] void report(Request& req, int rc, const MPI_Status& status) {
    int cls = 0;
    MPI_Error_class(rc == MPI_ERR_IN_STATUS ? status.MPI_ERROR : rc, &cls);
    const Request copy = req;
    req = Request{};  // MPI frees a request that completed in error
    if (cls == MPI_ERR_TRUNCATE) size_mismatch(copy, -1);
    check(rc, copy.is_send ? "MPI_Test (send)" : "MPI_Test (receive)");
    fail<MpiError>("MPI_Test", rc, "MPI_SUCCESS");
  }

  void release() noexcept {  // MPI_Comm_free is collective: bounded as the others
    if (owned_ && comm_ != MPI_COMM_NULL)
      detail::with_watchdog("MPI_Comm_free", collective_timeout(), [this] { MPI_Comm_free(&comm_); });
    comm_ = MPI_COMM_NULL;
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  bool owned_ = false;
  int rank_ = 0, size_ = 0, max_tag_ = 32767;
  int group_depth_ = 0;
};

static_assert(comm::transport<Transport>);

}  // namespace disagmoe::mpi
