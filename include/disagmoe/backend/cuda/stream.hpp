// SPDX-License-Identifier: Apache-2.0
/// @file stream.hpp
/// CUDA streams and events as owning handles, the device counterpart of
/// backend/host/stream.hpp (CUDA Programming Guide §"Streams", §"Events"):
///  - `Stream`: a non-blocking stream (cudaStreamNonBlocking: no implicit
///    synchronisation with the legacy default stream) at a given priority;
///  - `Event`: a timing-free event (cudaEventDisableTiming, the cheapest kind to record
///    and query) taken from an `EventPool` and returned to it on destruction, so that
///    recording in steady state creates no event. A default `Event` is complete.
/// Errors are sticky per context on a device, as on the host model per stream:
/// `synchronize` reports a failed kernel of the stream as CudaError / CudaFatalError.
/// Host code (compiles with a host compiler alone); needs `disagmoe::cuda`.
#pragma once

#include <disagmoe/backend/cuda/check.hpp>

#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace disagmoe::cuda {

/// The device's stream priority range; `greatest` is the highest priority (numerically
/// lowest, CUDA Runtime API cudaDeviceGetStreamPriorityRange).
struct PriorityRange {
  int least = 0, greatest = 0;
};

/// The current device's stream priorities.
inline PriorityRange stream_priorities() {
  PriorityRange r;
  DISAGMOE_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&r.least, &r.greatest));
  return r;
}

/// An owned non-blocking CUDA stream of the device current at creation.
class Stream {
 public:
  /// A null handle (no stream); `create` makes a real one.
  Stream() = default;
  /// A new non-blocking stream at `priority` (see `stream_priorities`).
  static Stream create(int priority) {
    Stream s;
    DISAGMOE_CUDA_CHECK(cudaStreamCreateWithPriority(&s.stream_, cudaStreamNonBlocking, priority));
    return s;
  }
  Stream(Stream&& o) noexcept : stream_(std::exchange(o.stream_, nullptr)) {}
  Stream& operator=(Stream&& o) noexcept {
    if (this != &o) {
      reset();
      stream_ = std::exchange(o.stream_, nullptr);
    }
    return *this;
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  /// Work already enqueued still runs (cudaStreamDestroy returns at once and releases the
  /// stream when its work is done).
  ~Stream() { reset(); }

  /// The CUDA handle (nullptr for a null Stream).
  cudaStream_t get() const { return stream_; }
  /// Blocks until the stream's work has run; throws the first error of the context.
  void synchronize() const { DISAGMOE_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

 private:
  void reset() noexcept {
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
    stream_ = nullptr;
  }
  cudaStream_t stream_ = nullptr;
};

/// Timing-free events for reuse. Thread-safe. Must outlive every Event it handed out.
class EventPool {
 public:
  EventPool() = default;
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;
  ~EventPool() {
    for (auto e : free_) (void)cudaEventDestroy(e);
  }
  /// A free event, created (cudaEventCreateWithFlags) only when none is free. O(1).
  cudaEvent_t acquire() {
    {
      std::lock_guard lock(mu_);
      if (!free_.empty()) {
        auto e = free_.back();
        free_.pop_back();
        return e;
      }
    }
    cudaEvent_t e = nullptr;
    DISAGMOE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }
  /// Returns `e` for reuse. A later record overwrites its state (cudaEventRecord), so an
  /// event still pending may be reused. O(1) amortised.
  void release(cudaEvent_t e) noexcept {
    std::lock_guard lock(mu_);
    try {
      free_.push_back(e);
    } catch (...) {
      (void)cudaEventDestroy(e);
    }
  }

 private:
  std::mutex mu_;
  std::vector<cudaEvent_t> free_;
};

/// A recorded point in a stream's work. Default: complete. Movable, not copyable.
class Event {
 public:
  Event() = default;
  /// Records the work enqueued on `s` so far in an event from `pool`.
  static Event record(EventPool& pool, cudaStream_t s) {
    Event ev;
    ev.pool_ = &pool;
    ev.event_ = pool.acquire();
    DISAGMOE_CUDA_CHECK(cudaEventRecord(ev.event_, s));
    return ev;
  }
  Event(Event&& o) noexcept : pool_(std::exchange(o.pool_, nullptr)), event_(std::exchange(o.event_, nullptr)) {}
  Event& operator=(Event&& o) noexcept {
    if (this != &o) {
      reset();
      pool_ = std::exchange(o.pool_, nullptr);
      event_ = std::exchange(o.event_, nullptr);
    }
    return *this;
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() { reset(); }

  /// The CUDA handle (nullptr for a default, complete Event).
  cudaEvent_t get() const { return event_; }
  /// True once the recorded work has run (cudaEventQuery; never blocks). Throws the
  /// context's error if the work failed.
  bool query() const {
    if (event_ == nullptr) return true;
    const cudaError_t s = cudaEventQuery(event_);
    if (s == cudaErrorNotReady) return false;
    DISAGMOE_CUDA_CHECK(s);
    return true;
  }
  /// Blocks until the recorded work has run (cudaEventSynchronize); throws its error.
  void synchronize() const {
    if (event_ != nullptr) DISAGMOE_CUDA_CHECK(cudaEventSynchronize(event_));
  }
  /// Later work on `s` waits for this event (cudaStreamWaitEvent; does not block the host).
  void wait_on(cudaStream_t s) const {
    if (event_ != nullptr) DISAGMOE_CUDA_CHECK(cudaStreamWaitEvent(s, event_, 0));
  }

 private:
  void reset() noexcept {
    if (event_ != nullptr) pool_->release(event_);
    event_ = nullptr;
    pool_ = nullptr;
  }
  EventPool* pool_ = nullptr;
  cudaEvent_t event_ = nullptr;
};

}  // namespace disagmoe::cuda
