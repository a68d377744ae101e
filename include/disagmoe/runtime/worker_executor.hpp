// SPDX-License-Identifier: Apache-2.0
/// @file worker_executor.hpp
/// Runs one worker's lowered program (schedule/lowering.hpp) on its three streams
/// (DisagMoE, arXiv 2605.11005, AF-Pipe "asynchronous execution"): the forward and
/// backward streams on two threads of their own, each an in-order queue, and the comm
/// stream on the calling thread, which alone touches the transport (so MPI may be
/// initialised MPI_THREAD_FUNNELED). The comm stream posts its transfers in the
/// program's order (the order all peers agree on) and keeps them in flight: a receive
/// is posted as soon as it heads the stream, a send as soon as its dependencies are
/// done, and completions are polled between posts, so one comm stream serves many
/// micro-batches at once.
///
/// What an op does is the caller's: a handler supplies compute, the bytes of a send,
/// the buffer of a receive, and what to do when it arrives (`op_handler`). Exchanges
/// that are more than one message (`comm::M2NChannel`) come as an `async_comm_handler`
/// (started in order, then polled until done, many in flight). Every op's start and end
/// are recorded (the measured timeline).
///
/// Faults: an exception in any stream stops the worker's other streams and cancels its
/// transfers; the error names the worker, the op and the step. A worker on which
/// nothing starts or completes for `timeout` (a dead or silent peer) stops with a
/// TimeoutError naming the op it waits for, never a hang.
#pragma once

#include <disagmoe/comm/transport.hpp>
#include <disagmoe/error.hpp>
#include <disagmoe/schedule/lowering.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <concepts>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace disagmoe::runtime {

/// Measured start and end of an op, in seconds since the run began (-1: not run here).
struct MeasuredOp {
  double start = -1;
  double end = -1;
  /// Compute ops: CPU time of the thread that ran the op (its cost at the full rate of
  /// one core, whatever else shared the core meanwhile). Transfers and collectives: the
  /// CPU time the comm stream's thread spent while they were in flight (split evenly
  /// among those in flight), so that a worker's comm ops add up to its comm thread's CPU
  /// time (polling, the transport, the token kernels). -1: nothing charged.
  double cpu = -1;
  /// Comm ops: the payload bytes this rank posted for the op (an all-to-all's messages to
  /// the rank itself included; 0 where it only receives); for a transfer between workers,
  /// what the calibrated simulation moves instead of the schedule's modelled bytes
  /// (runtime::with_measured_bytes). -1: not measured (compute ops, `op_handler`
  /// collectives, and an async handler without `bytes_posted()`).
  double bytes = -1;
};
static_assert(std::is_trivially_copyable_v<MeasuredOp>);  // gathered between ranks as raw bytes

namespace detail {
/// CPU time consumed by the calling thread, in seconds (POSIX CLOCK_THREAD_CPUTIME_ID).
inline double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

/// The comm thread's CPU time, charged in equal parts to the ops that were in flight
/// during each round of the comm loop (MeasuredOp::cpu), so that a worker's comm ops add
/// up to its comm thread's CPU time. A round without ops in flight carries over.
class CommCpuMeter {
 public:
  /// Charges the CPU time since the last call to the ops touched in the round (then
  /// forgotten: the next round starts with what is still in flight).
  void close_round(std::vector<MeasuredOp>& times) {
    const double now = thread_cpu_seconds();
    pending_ += now - last_;
    last_ = now;
    if (touched_.empty()) return;
    for (int op : touched_) {
      auto& cpu = times[static_cast<std::size_t>(op)].cpu;
      cpu = std::max(cpu, 0.0) + pending_ / static_cast<double>(touched_.size());
    }
    pending_ = 0;
    touched_.clear();
  }
  /// `op` was in flight during this round.
  void touch(int op) { touched_.push_back(op); }

 private:
  double last_ = thread_cpu_seconds();
  double pending_ = 0;
  std::vector<int> touched_;
};
}  // namespace detail

/// What the executor asks of the caller, per op. Compute runs on the op's stream
/// thread; everything else on the comm stream (the calling thread).
///  - `compute(op)`: run compute op `op`;
///  - `send_payload(op)`: the bytes of transfer `op` (valid until `sent(op)`; their size
///    is the op's MeasuredOp::bytes on the sender, 0 on the receiver);
///  - `recv_buffer(op)`: where transfer `op` lands (exactly as large as the send);
///  - `received(op)` / `sent(op)`: the transfer completed on this end;
///  - `collective(op)`: a comm op inside the worker (all-reduce, all-to-all).
template <class H>
concept op_handler = requires(H& h, int op) {
  h.compute(op);
  { h.send_payload(op) } -> std::convertible_to<std::span<const std::byte>>;
  { h.recv_buffer(op) } -> std::convertible_to<std::span<std::byte>>;
  h.received(op);
  h.sent(op);
  h.collective(op);
};

/// Knobs of a run.
struct ExecutorOptions {
  /// Longest a worker may go without starting or completing anything before it reports a
  /// fault: longer than its longest op and than any wait on a peer's chain of ops.
  std::chrono::milliseconds timeout{30000};
  /// Step number used in error messages.
  std::int64_t step = 0;
  /// Time zero of the measured timeline (default: when the run starts). Workers of one
  /// process pass one epoch so their timelines share a clock.
  std::optional<std::chrono::steady_clock::time_point> epoch;
};

namespace detail {

/// Done flags of one worker's ops, with a condition variable to wait on them.
class DoneSet {
 public:
  explicit DoneSet(std::size_t ops) : done_(ops, 0) {}
  void mark(int op) {
    {
      std::lock_guard lock(mu_);
      done_[static_cast<std::size_t>(op)] = 1;
      last_progress_ = std::chrono::steady_clock::now();
    }
    cv_.notify_all();
  }
  bool all_done(const std::vector<int>& deps) {
    std::lock_guard lock(mu_);
    return ready(deps);
  }
  /// Waits until `deps` are done or `stop` is set; false when stopped.
  bool wait(const std::vector<int>& deps, const std::atomic<bool>& stop) {
    std::unique_lock lock(mu_);
    while (!ready(deps)) {
      if (stop.load()) return false;
      cv_.wait_for(lock, std::chrono::milliseconds(20));
    }
    return true;
  }
  /// Waits up to `d` for any completion (the comm stream's idle wait).
  void wait_for_change(std::chrono::microseconds d) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, d);
  }
  void notify() { cv_.notify_all(); }
  std::chrono::steady_clock::time_point last_progress() {
    std::lock_guard lock(mu_);
    return last_progress_;
  }
  void touch() {
    std::lock_guard lock(mu_);
    last_progress_ = std::chrono::steady_clock::now();
  }

 private:
  bool ready(const std::vector<int>& deps) const {
    for (int d : deps)
      if (!done_[static_cast<std::size_t>(d)]) return false;
    return true;
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<char> done_;
  std::chrono::steady_clock::time_point last_progress_ = std::chrono::steady_clock::now();
};

}  // namespace detail

namespace detail {

/// The comm stream's view of a run: the clock, the done set, the stop flag, the
/// measured times, and where an error is recorded (from inside a catch block).
struct CommContext {
  std::function<double()> since;
  DoneSet& done;
  std::atomic<bool>& stop;
  std::vector<MeasuredOp>& times;
  const ExecutorOptions& options;
};

/// Runs the compute streams of `program` on two threads and `comm_loop(ctx, current)`
/// (the comm stream) on the calling thread; `current` names the op a failure is
/// reported against. Joins, then rethrows the first failure with its context.
template <class Compute, class CommLoop>
std::vector<MeasuredOp> run_streams(const schedule::Schedule& schedule, const schedule::WorkerProgram& program,
                                    Compute&& compute, const ExecutorOptions& options, CommLoop&& comm_loop) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = options.epoch.value_or(Clock::now());
  const auto since = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  std::vector<MeasuredOp> times(schedule.ops.size());
  detail::DoneSet done(schedule.ops.size());
  std::atomic<bool> stop{false};
  std::mutex error_mu;
  std::exception_ptr error;
  const std::string& me = schedule.workers.at(static_cast<std::size_t>(program.worker)).name;
  auto context = [&](int op) {
    return "worker " + me + ", step " + std::to_string(options.step) + ", " + schedule::describe_op(schedule, op);
  };
  // Records the first failure, prefixed with where it happened (keeping its type), and
  // stops every stream. Called from inside a catch block.
  auto record_failure = [&](int op) {
    std::lock_guard lock(error_mu);
    if (!error) {
      const std::string where = op >= 0 ? context(op) : "worker " + me + ", step " + std::to_string(options.step);
      try {
        throw;
      } catch (const TimeoutError& e) {
        error = std::make_exception_ptr(TimeoutError(where + ": " + e.what()));
      } catch (const ConfigError& e) {
        error = std::make_exception_ptr(ConfigError(where + ": " + e.what()));
      } catch (const IoError& e) {
        error = std::make_exception_ptr(IoError(where + ": " + e.what()));
      } catch (const std::exception& e) {
        error = std::make_exception_ptr(Error(where + ": " + e.what()));
      } catch (...) {
        error = std::make_exception_ptr(Error(where + ": unknown exception"));
      }
    }
    stop = true;
    done.notify();
  };

  auto compute_stream = [&](const std::vector<schedule::Task>& tasks) {
    for (const auto& t : tasks) {
      if (!done.wait(t.deps, stop)) return;
      try {
        auto& m = times[static_cast<std::size_t>(t.op)];
        done.touch();  // starting an op is progress: a long op is not a silent peer
        const double cpu0 = detail::thread_cpu_seconds();
        m.start = since();
        compute(t.op);
        m.end = since();
        m.cpu = detail::thread_cpu_seconds() - cpu0;
      } catch (...) {
        record_failure(t.op);
        return;
      }
      done.mark(t.op);
    }
  };
  std::thread fwd(compute_stream, std::cref(program.streams[0]));
  std::thread bwd;
  try {
    bwd = std::thread(compute_stream, std::cref(program.streams[1]));
  } catch (...) {  // no second thread: stop the first before reporting
    stop = true;
    done.notify();
    fwd.join();
    throw;
  }

  int current = -1;
  try {
    CommContext ctx{since, done, stop, times, options};
    comm_loop(ctx, current);
  } catch (...) {
    record_failure(current);
  }
  // Done: the compute streams finish their remaining ops (their dependencies are all
  // local now). Failed: record_failure has stopped them.
  fwd.join();
  bwd.join();
  if (error) std::rethrow_exception(error);
  return times;
}

/// The TimeoutError of a worker on which nothing completed for `options.timeout`.
[[noreturn]] inline void no_progress(const ExecutorOptions& options) {
  throw TimeoutError(describe("no progress", std::to_string(options.timeout.count()) + " ms",
                              "a completion within ExecutorOptions.timeout (is a peer dead, silent or failed, or one transfer "
                              "longer than that on a slow network?)"));
}

}  // namespace detail

/// Runs `program` (worker `program.worker` of `schedule`) over `transport`, whose rank
/// r is worker r. Returns the measured timeline of every op (indexed by op id). See the
/// file comment for faults. O(tasks) plus the handler's work.
template <comm::transport T, op_handler H>
std::vector<MeasuredOp> run_worker(const schedule::Schedule& schedule, const schedule::WorkerProgram& program,
                                   T& transport, H& handler, const ExecutorOptions& options = {}) {
  using schedule::TaskKind;
  using Clock = std::chrono::steady_clock;
  const auto& tasks = program.streams[static_cast<std::size_t>(schedule::Stream::kComm)];
  const std::int64_t tag_range = static_cast<std::int64_t>(transport.max_tag());  // max_tag itself stays free
  const auto tag_of = [&](int op) { return static_cast<int>(op % tag_range); };
  auto comm_loop = [&](detail::CommContext& cx, int& current) {
    struct InFlight {
      typename T::Request req;
      int op;
      bool is_send;
    };
    std::vector<InFlight> flight;
    auto at = [&](int op) -> MeasuredOp& { return cx.times[static_cast<std::size_t>(op)]; };
    // Whatever way the loop ends with transfers posted (an error here, or a compute
    // stream's failure stopping it), they are withdrawn: no peer may later write into
    // buffers the handler frees, and no later run may match them.
    struct Withdraw {
      T& transport;
      std::vector<InFlight>& flight;
      ~Withdraw() {
        for (auto& f : flight) {
          try {
            transport.cancel(f.req);
          } catch (...) {  // best effort while unwinding
          }
        }
      }
    } withdraw{transport, flight};
    {
      std::size_t next = 0;
      detail::CommCpuMeter meter;
      while (!cx.stop.load() && (next < tasks.size() || !flight.empty())) {
        meter.close_round(cx.times);
        for (const auto& f : flight) meter.touch(f.op);
        bool progressed = false;
        for (std::size_t i = 0; i < flight.size();) {  // completions
          if (!transport.test(flight[i].req)) {
            ++i;
            continue;
          }
          const int op = current = flight[i].op;
          flight[i].is_send ? handler.sent(op) : handler.received(op);
          at(op).end = cx.since();
          flight[i] = std::move(flight.back());
          flight.pop_back();
          cx.done.mark(op);
          progressed = true;
        }
        if (next < tasks.size()) {  // the head of the comm stream
          const auto& t = tasks[next];
          current = t.op;
          if (t.kind == TaskKind::kRecv) {
            at(t.op).start = cx.since();
            at(t.op).bytes = 0;
            meter.touch(t.op);
            flight.push_back({comm::irecv(transport, t.peer, tag_of(t.op), handler.recv_buffer(t.op)), t.op, false});
            ++next;
            progressed = true;
          } else if (cx.done.all_done(t.deps)) {
            at(t.op).start = cx.since();
            meter.touch(t.op);
            if (t.kind == TaskKind::kSend) {
              const std::span<const std::byte> payload = handler.send_payload(t.op);
              at(t.op).bytes = static_cast<double>(payload.size());
              flight.push_back({comm::isend(transport, t.peer, tag_of(t.op), payload), t.op, true});
            } else {
              handler.collective(t.op);
              at(t.op).end = cx.since();
              cx.done.mark(t.op);
            }
            ++next;
            progressed = true;
          }
        }
        if (progressed) continue;
        if (Clock::now() - cx.done.last_progress() > options.timeout) {
          // Name a receive in flight (its sender is silent) first, else the head task
          // (its local dependencies never finished), else a send (its receiver is silent).
          current = next < tasks.size() ? tasks[next].op : -1;
          for (const auto& f : flight)
            if (f.is_send && current < 0) current = f.op;
          for (const auto& f : flight)
            if (!f.is_send) current = f.op;
          detail::no_progress(options);
        }
        cx.done.wait_for_change(std::chrono::microseconds(flight.empty() ? 200 : 20));
      }
      meter.close_round(cx.times);
    }
  };
  return detail::run_streams(schedule, program, [&](int op) { handler.compute(op); }, options, comm_loop);
}

/// A handler whose comm tasks are exchanges that progress without blocking (e.g.
/// `comm::M2NChannel`'s try_ calls): `compute(op)` as for `op_handler`; `start(task)` when
/// the task heads the comm stream and its dependencies are done (in the program's order:
/// it posts what it can), then `progress(task)` until it returns true (done). Optionally
/// `bytes_posted()`: the payload bytes the handler has posted so far, so that what a
/// task's start and progress calls post is its MeasuredOp::bytes.
template <class H>
concept async_comm_handler = requires(H& h, int op, const schedule::Task& t) {
  h.compute(op);
  h.start(t);
  { h.progress(t) } -> std::same_as<bool>;
};

namespace detail {
/// Runs `call` (one of `handler`'s calls for a task) and adds what it posted to `m.bytes`.
template <class H, class Call>
auto counting_posts(H& handler, MeasuredOp& m, Call&& call) {
  if constexpr (requires { handler.bytes_posted(); }) {
    static_assert(std::same_as<decltype(handler.bytes_posted()), std::int64_t>,
                  "async_comm_handler::bytes_posted() returns the bytes posted so far, as std::int64_t");
    const std::int64_t before = handler.bytes_posted();
    const auto count = [&] {
      m.bytes = std::max(0.0, m.bytes) + static_cast<double>(handler.bytes_posted() - before);
    };
    if constexpr (std::is_void_v<decltype(call())>) {
      call();
      count();
    } else {
      auto result = call();
      count();
      return result;
    }
  } else {
    return call();
  }
}
}  // namespace detail

/// Runs `program` with an async-comm handler: tasks start strictly in order and then
/// progress concurrently, so one comm stream serves many exchanges in flight. A worker
/// on which no task starts, completes or progresses for `options.timeout` reports a
/// TimeoutError naming the oldest task in flight. Faults as for run_worker.
template <async_comm_handler H>
std::vector<MeasuredOp> run_worker(const schedule::Schedule& schedule, const schedule::WorkerProgram& program,
                                   H& handler, const ExecutorOptions& options = {}) {
  using Clock = std::chrono::steady_clock;
  const auto& tasks = program.streams[static_cast<std::size_t>(schedule::Stream::kComm)];
  auto comm_loop = [&](detail::CommContext& cx, int& current) {
    std::vector<const schedule::Task*> flight;  // started, oldest first
    std::size_t next = 0;
    detail::CommCpuMeter meter;
    while (!cx.stop.load() && (next < tasks.size() || !flight.empty())) {
      meter.close_round(cx.times);
      for (const auto* t : flight) meter.touch(t->op);
      bool progressed = false;
      for (std::size_t i = 0; i < flight.size();) {
        const schedule::Task& t = *flight[i];
        current = t.op;
        if (!detail::counting_posts(handler, cx.times[static_cast<std::size_t>(t.op)],
                                    [&] { return handler.progress(t); })) {
          ++i;
          continue;
        }
        cx.times[static_cast<std::size_t>(t.op)].end = cx.since();
        flight.erase(flight.begin() + static_cast<std::ptrdiff_t>(i));
        cx.done.mark(t.op);
        progressed = true;
      }
      if (next < tasks.size() && cx.done.all_done(tasks[next].deps)) {
        const schedule::Task& t = tasks[next++];
        current = t.op;
        cx.times[static_cast<std::size_t>(t.op)].start = cx.since();
        meter.touch(t.op);
        cx.done.touch();  // starting a task is progress
        detail::counting_posts(handler, cx.times[static_cast<std::size_t>(t.op)], [&] { handler.start(t); });
        flight.push_back(&t);
        progressed = true;
      }
      if (progressed) continue;
      if (Clock::now() - cx.done.last_progress() > options.timeout) {
        current = !flight.empty() ? flight.front()->op : tasks[next].op;
        detail::no_progress(options);
      }
      cx.done.wait_for_change(std::chrono::microseconds(flight.empty() ? 200 : 20));
    }
    meter.close_round(cx.times);
  };
  return detail::run_streams(schedule, program, [&](int op) { handler.compute(op); }, options, comm_loop);
}

}  // namespace disagmoe::runtime
