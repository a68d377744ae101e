// SPDX-License-Identifier: Apache-2.0
/// @file stream.hpp
/// Host streams and events, the host model of a device's in-order queues (CUDA streams
/// and events, CUDA Programming Guide §"Streams" and §"Events"):
///  - a `Stream` runs its work in the order it was enqueued. `Stream::threaded(name)` is
///    served by a thread of its own; `Stream::caller()` by the one thread that enqueues
///    (its work runs inside `enqueue`), which is what the executor's comm stream is.
///  - `record()` marks the work enqueued so far; the `Event` completes when that work has
///    run. `wait(event)` makes the stream's later work wait for it (another stream's).
///  - Errors are sticky per stream, as CUDA's are per context: once a task throws, the
///    stream skips the rest of its work and every `synchronize()` on it (or on one of
///    its events) rethrows that error. A caller-served stream throws from `enqueue`.
/// Events hold no memory of their own (a stream and a ticket), so recording is free of
/// allocation; an event must not outlive its stream.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace disagmoe::host {

class Stream;

/// A point in a stream's work (see the file comment). Default: already complete.
class Event {
 public:
  Event() = default;
  /// True once the marked work has run (successfully or not: synchronize() tells).
  bool query() const;
  /// Blocks until the marked work has run; rethrows the stream's error, if any.
  void synchronize() const;

 private:
  friend class Stream;
  struct Queue;
  Event(Queue* q, std::uint64_t ticket) : queue_(q), ticket_(ticket) {}
  Queue* queue_ = nullptr;
  std::uint64_t ticket_ = 0;
};

/// A threaded stream's queue and the state its events read.
struct Event::Queue {
  std::string name;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> work;
  std::uint64_t enqueued = 0, completed = 0;
  std::exception_ptr error;
  bool stopping = false;
  std::jthread thread;  // last member: joined first

  void push(std::function<void()> f) {
    {
      std::lock_guard lock(mu);
      work.push_back(std::move(f));
      ++enqueued;
    }
    cv.notify_all();
  }
  void serve() {
    std::unique_lock lock(mu);
    while (true) {
      cv.wait(lock, [&] { return stopping || !work.empty(); });
      if (work.empty()) return;  // stopping, and nothing left to run
      auto f = std::move(work.front());
      work.pop_front();
      const bool skip = error != nullptr;
      lock.unlock();
      std::exception_ptr failed;
      if (!skip) {
        try {
          f();
        } catch (...) {
          failed = std::current_exception();
        }
      }
      f = nullptr;  // release captures outside the lock
      lock.lock();
      if (failed && !error) error = failed;
      ++completed;
      cv.notify_all();
    }
  }
  void stop() {
    {
      std::lock_guard lock(mu);
      stopping = true;
    }
    cv.notify_all();
    if (thread.joinable() && thread.get_id() != std::this_thread::get_id()) thread.join();
  }
};

class Stream {
 public:
  /// A stream served by the one thread that enqueues to it.
  static Stream caller() { return Stream(); }
  /// A stream served by a thread of its own, named `name` in error messages.
  static Stream threaded(std::string name) {
    Stream s;
    s.queue_ = std::make_unique<Event::Queue>();
    s.queue_->name = std::move(name);
    s.queue_->thread = std::jthread([q = s.queue_.get()] { q->serve(); });
    return s;
  }
  Stream(Stream&&) noexcept = default;
  Stream& operator=(Stream&& other) noexcept {
    if (this != &other) {
      if (queue_) queue_->stop();
      queue_ = std::move(other.queue_);
    }
    return *this;
  }
  /// Runs the work already enqueued, then stops (a threaded stream's thread is joined).
  ~Stream() {
    if (queue_) queue_->stop();
  }

  /// True for a stream with a thread of its own.
  bool is_threaded() const { return queue_ != nullptr; }

  /// Appends `work` (a callable with no arguments). On a caller-served stream it runs now.
  template <class F>
  void enqueue(F&& work) {
    if (!queue_) {
      std::forward<F>(work)();
      return;
    }
    queue_->push(std::function<void()>(std::forward<F>(work)));
  }

  /// An event that completes when the work enqueued so far has run.
  Event record() const {
    if (!queue_) return {};
    std::lock_guard lock(queue_->mu);
    return Event(queue_.get(), queue_->enqueued);
  }

  /// Later work on this stream waits for `e` (an event of any stream).
  void wait(const Event& e) {
    if (!e.queue_ || e.queue_ == queue_.get()) return;  // in-order already
    enqueue([e] { e.synchronize(); });
  }

  /// Blocks until everything enqueued has run; rethrows the stream's error.
  void synchronize() const { record().synchronize(); }

 private:
  Stream() = default;
  std::unique_ptr<Event::Queue> queue_;
};

inline bool Event::query() const {
  if (!queue_) return true;
  std::lock_guard lock(queue_->mu);
  return queue_->completed >= ticket_;
}

inline void Event::synchronize() const {
  if (!queue_) return;
  std::unique_lock lock(queue_->mu);
  queue_->cv.wait(lock, [&] { return queue_->completed >= ticket_; });
  if (queue_->error) std::rethrow_exception(queue_->error);
}

}  // namespace disagmoe::host
