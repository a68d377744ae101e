// SPDX-License-Identifier: Apache-2.0
/// @file backend.hpp
/// `cuda::Backend`, the CUDA model of `comm::backend` (comm/backend.hpp): CUDA streams
/// and pooled events (stream.hpp), buffers in device memory (memory.hpp), and the token
/// kernels of launch.hpp enqueued on a stream. A GPU trainer changes only template
/// arguments: `M2NChannel<Transport, cuda::Backend, __nv_bfloat16>`.
///
/// Memory: rows (`src`, `dst`, `out`, `outputs`, `grad`) are device memory. Routing
/// arguments (`index`, `seg`, `idx`, `pos`, `slot`, weights, scales) may be device or
/// host memory: the channel builds its layouts on the host. Host ones are copied at
/// the call into pinned staging and uploaded on the stream ahead of the kernel
/// (cudaMemcpyAsync from pinned memory is asynchronous), so the host may change them
/// as soon as the call returns. Staging and CUB temp storage come from caching
/// allocators. Device scratch is reused in stream order, so a step of a size seen before
/// allocates none; a pinned block is reused once the call that staged through it has
/// run, so the pinned pool grows to what the calls in flight at once stage (a channel
/// keeps one step in flight) and then stays.
///
/// Streams: `worker_streams()` gives a worker's three streams, forward and backward
/// compute at the lowest priority and comm at the highest, so the comm stream's small
/// permute / combine kernels are scheduled ahead of queued compute (CUDA Programming
/// Guide §"Stream Priorities"). Kernels run on the device current when they are called.
/// Host code (compiles with a host compiler alone); the launch functions are
/// instantiated in one nvcc TU by backend/cuda/instantiate.cuh.
#pragma once

#include <disagmoe/backend/cuda/check.hpp>
#include <disagmoe/backend/cuda/launch.hpp>
#include <disagmoe/backend/cuda/memory.hpp>
#include <disagmoe/backend/cuda/row_math.hpp>
#include <disagmoe/backend/cuda/stream.hpp>
#include <disagmoe/comm/backend.hpp>
#include <disagmoe/error.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>

namespace disagmoe::cuda {

/// A worker's streams (see the file comment).
struct WorkerStreams {
  Stream forward, backward, comm;
};

/// See the file comment. Not copyable; must outlive its events, streams' work and
/// the channels that use it.
class Backend {
 public:
  using backend_concept = comm::backend_tag;
  using Stream = cuda::Stream;
  using Event = cuda::Event;
  template <class E>
  using Buffer = DeviceBuffer<E>;
  static constexpr bool host_accessible = false;

  Backend() : device_(device_memory_init()), staging_(events_, MemoryKind::kPinnedHost), scratch_(events_) {}
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  /// The device current when the back end was created.
  int device() const { return device_; }

  /// A new comm stream: non-blocking, at the device's highest priority.
  Stream comm_stream() const { return Stream::create(stream_priorities().greatest); }
  /// A new compute stream: non-blocking, at the device's lowest priority.
  Stream compute_stream() const { return Stream::create(stream_priorities().least); }
  /// Forward, backward (lowest priority) and comm (highest) streams of one worker.
  WorkerStreams worker_streams() const { return {compute_stream(), compute_stream(), comm_stream()}; }

  /// An event marking the work enqueued on `s` so far (pooled: no allocation in steady state).
  Event record(Stream& s) { return Event::record(events_, s.get()); }
  /// Later work on `s` waits for `e` (does not block the host).
  void wait(Stream& s, const Event& e) const { e.wait_on(s.get()); }
  /// True once `e`'s work has run; throws a failed kernel's error.
  bool query(const Event& e) const { return e.query(); }
  /// Blocks until `e`'s work has run; throws a failed kernel's error.
  void synchronize(const Event& e) const { e.synchronize(); }

  /// Device memory for CUB temp storage and staged routing arrays.
  CachingAllocator& scratch() { return scratch_; }
  /// Pinned host memory the routing arrays are staged in.
  CachingAllocator& staging() { return staging_; }

  /// counts[b] = occurrences of b in bins (device spans; bins outside [0, counts.size())
  /// are not counted). Enqueued on `s`. O(bins + counts).
  void histogram(Stream& s, std::span<const std::int32_t> bins, std::span<std::int64_t> counts) {
    Staged st(*this, s);
    launch::histogram<std::int32_t>(s.get(), st.up(bins), bins.size(), counts.data(), counts.size());
  }
  /// offsets[0] = 0, offsets[i+1] = offsets[i] + counts[i] (offsets: device; counts: host
  /// or device). Precondition: offsets.size() == counts.size() + 1. Enqueued on `s`. O(counts).
  void exclusive_offsets(Stream& s, std::span<const std::int64_t> counts, std::span<std::int64_t> offsets) {
    expect(offsets.size() == counts.size() + 1, "cuda::Backend.exclusive_offsets offsets.size()", offsets.size(),
           "counts.size() + 1");
    Staged st(*this, s);
    const std::size_t bytes = launch::exclusive_offsets_temp_bytes<std::int64_t>(counts.size());
    void* temp = st.scratch(bytes);
    launch::exclusive_offsets<std::int64_t>(s.get(), st.up(counts), counts.size(), offsets.data(), temp, bytes);
  }
  /// dst row i = src row index[i]. Enqueued on `s`. O(index * width).
  template <class T>
  void gather_rows(Stream& s, std::span<const T> src, std::size_t width, std::span<const std::int64_t> index,
                   std::span<T> dst) {
    static_assert(is_row_element_v<T> || std::is_same_v<T, std::int64_t>, "cuda::Backend rows: float or bf16");
    expect(dst.size() >= index.size() * width, "cuda::Backend.gather_rows dst.size()", dst.size(),
           "at least index.size() * width");
    if (index.empty() || width == 0) return;
    Staged st(*this, s);
    launch::gather_rows<T>(s.get(), src.data(), width, st.up(index), index.size(), dst.data());
  }
  /// dst row i = scale[i] * src row index[i] (row_math.hpp scaled_pack). Enqueued on `s`.
  template <class T, class W>
  void gather_rows_scaled(Stream& s, std::span<const T> src, std::size_t width, std::span<const std::int64_t> index,
                          std::span<const W> scale, std::span<T> dst) {
    static_assert(is_row_element_v<T>, "cuda::Backend rows: float or bf16");
    static_assert(std::is_same_v<W, float>, "cuda::Backend scales: float");
    expect(scale.size() == index.size(), "cuda::Backend.gather_rows_scaled scale.size()", scale.size(),
           "index.size()");
    expect(dst.size() >= index.size() * width, "cuda::Backend.gather_rows_scaled dst.size()", dst.size(),
           "at least index.size() * width");
    if (index.empty() || width == 0) return;
    Staged st(*this, s);
    launch::gather_rows_scaled<T>(s.get(), src.data(), width, st.up(index), st.up(scale), index.size(), dst.data());
  }
  /// The gate-weighted combine of row_math.hpp combine_packs (host::combine_rows' order;
  /// `w` empty: unweighted). seg.size() == out rows + 1. Enqueued on `s`.
  template <class T, class W>
  void combine_rows(Stream& s, std::span<const T> src, std::size_t width, std::span<const std::int64_t> seg,
                    std::span<const std::int64_t> idx, std::span<const W> w, std::span<T> out) {
    static_assert(is_row_element_v<T>, "cuda::Backend rows: float or bf16");
    static_assert(std::is_same_v<W, float>, "cuda::Backend weights: float");
    expect(!seg.empty(), "cuda::Backend.combine_rows seg.size()", 0, ">= 1");
    const std::size_t rows = seg.size() - 1;
    expect(out.size() >= rows * width, "cuda::Backend.combine_rows out.size()", out.size(), "at least rows * width");
    expect(w.empty() || w.size() == idx.size(), "cuda::Backend.combine_rows w.size()", w.size(), "0 or idx.size()");
    if (rows == 0 || width == 0) return;
    Staged st(*this, s);
    launch::combine_rows<T>(s.get(), src.data(), width, st.up(seg), rows, st.up(idx), st.up(w), out.data());
  }
  /// The dL/dgate reduction of row_math.hpp gate_gradient; out: [rows x top_k] (device).
  /// Enqueued on `s`. O(rows * top_k * width).
  template <class T>
  void gate_gradients(Stream& s, std::span<const T> outputs, std::span<const T> grad, std::size_t width,
                      std::span<const std::int64_t> seg, std::span<const std::int64_t> pos,
                      std::span<const std::int32_t> slot, std::size_t top_k, std::span<float> out) {
    static_assert(is_row_element_v<T>, "cuda::Backend rows: float or bf16");
    expect(!seg.empty(), "cuda::Backend.gate_gradients seg.size()", 0, ">= 1");
    const std::size_t rows = seg.size() - 1;
    expect(out.size() >= rows * top_k, "cuda::Backend.gate_gradients out.size()", out.size(), "at least rows * top_k");
    if (rows == 0 || top_k == 0) return;
    Staged st(*this, s);
    launch::gate_gradients<T>(s.get(), outputs.data(), grad.data(), width, st.up(seg), rows, st.up(pos), st.up(slot),
                              top_k, out.data());
  }

  /// Bytes of device scratch `send_once_layout` takes for `tokens` tokens (first phase).
  static std::size_t send_once_layout_bytes(std::size_t tokens, int top_k, int ranks) {
    return launch::send_once_layout_workspace_bytes<std::int32_t>(tokens, top_k, ranks);
  }
  /// The send-once layout of `tokens = topk_ids.size() / top_k` tokens on the device
  /// (launch.hpp send_once_layout; outputs in device memory, sized as documented there).
  /// topk_ids and expert_rank may be host or device memory. Enqueued on `s`.
  void send_once_layout(Stream& s, std::span<const std::int32_t> topk_ids, int top_k,
                        std::span<const std::int32_t> expert_rank, int ranks, std::span<std::int64_t> offsets,
                        std::span<std::int64_t> token_offsets, std::span<std::int64_t> token_rows,
                        std::span<std::int64_t> row_token) {
    expect(top_k >= 1 && top_k <= 64, "cuda::Backend.send_once_layout top_k", top_k, "in [1, 64]");
    expect(ranks >= 1, "cuda::Backend.send_once_layout ranks", ranks, ">= 1");
    expect(topk_ids.size() % static_cast<std::size_t>(top_k) == 0, "cuda::Backend.send_once_layout topk_ids.size()",
           topk_ids.size(), "a multiple of top_k");
    const std::size_t tokens = topk_ids.size() / static_cast<std::size_t>(top_k);
    const std::size_t max_rows = tokens * static_cast<std::size_t>(std::min(top_k, ranks));
    expect(offsets.size() == static_cast<std::size_t>(ranks) + 1, "cuda::Backend.send_once_layout offsets.size()",
           offsets.size(), "ranks + 1");
    expect(token_offsets.size() == tokens + 1, "cuda::Backend.send_once_layout token_offsets.size()",
           token_offsets.size(), "tokens + 1");
    expect(token_rows.size() >= max_rows && row_token.size() >= max_rows,
           "cuda::Backend.send_once_layout token_rows.size(), row_token.size()", std::min(token_rows.size(), row_token.size()),
           "at least tokens * min(top_k, ranks)");
    Staged st(*this, s);
    const std::size_t bytes = send_once_layout_bytes(tokens, top_k, ranks);
    void* work = st.scratch(bytes);
    launch::send_once_layout<std::int32_t>(s.get(), st.up(topk_ids), tokens, top_k, st.up(expert_rank), ranks, work,
                                           bytes, offsets.data(), token_offsets.data(), token_rows.data(),
                                           row_token.data());
  }

  /// Enqueues a copy of `src` (device) to `dst` (pinned host, e.g. a PinnedBuffer) on `s`:
  /// the routing counts a host reads back. The host reads `dst` after synchronizing on an
  /// event recorded after it.
  template <class E>
  void copy_to_host(Stream& s, std::span<const E> src, std::span<E> dst) const {
    expect(dst.size() >= src.size(), "cuda::Backend.copy_to_host dst.size()", dst.size(), "at least src.size()");
    if (!src.empty())
      DISAGMOE_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.size_bytes(), cudaMemcpyDeviceToHost, s.get()));
  }

 private:
  static int device_memory_init() {
    int d = 0;
    DISAGMOE_CUDA_CHECK(cudaGetDevice(&d));
    return d;
  }

  /// The staged routing arrays and scratch of one call, released (stream-ordered) when
  /// the call has enqueued its kernel.
  class Staged {
   public:
    Staged(Backend& b, Stream& s) : b_(b), s_(s.get()) {}
    Staged(const Staged&) = delete;
    Staged& operator=(const Staged&) = delete;
    ~Staged() {
      for (std::size_t i = 0; i < n_; ++i) {
        try {
          b_.scratch_.release(device_[i], s_);
          if (pinned_[i] != nullptr) b_.staging_.release(pinned_[i], s_);
        } catch (...) {  // reported by the stream's next check
        }
      }
    }
    /// A device copy of `v` (or `v` itself when the device can read it; nullptr when empty).
    template <class E>
    const E* up(std::span<const E> v) {
      if (v.empty()) return nullptr;
      if (is_device_pointer(v.data())) return v.data();
      void* dev = scratch(v.size_bytes());
      // Held until the call has enqueued its kernel (released in the destructor), so the
      // arrays of one call never share a block: which blocks a call reuses then depends
      // only on what completed before the call, not on how far the device has got since.
      void* pinned = b_.staging_.allocate(v.size_bytes(), s_);
      pinned_[n_ - 1] = pinned;
      std::memcpy(pinned, v.data(), v.size_bytes());
      DISAGMOE_CUDA_CHECK(cudaMemcpyAsync(dev, pinned, v.size_bytes(), cudaMemcpyHostToDevice, s_));
      return static_cast<const E*>(dev);
    }
    /// Device scratch of `bytes` for this call.
    void* scratch(std::size_t bytes) {
      if (bytes == 0) return nullptr;
      expect(n_ < device_.size(), "cuda::Backend staged arrays", n_ + 1, "at most 8 per call");
      void* p = b_.scratch_.allocate(bytes, s_);
      device_[n_++] = p;
      return p;
    }

   private:
    Backend& b_;
    cudaStream_t s_;
    std::array<void*, 8> device_{}, pinned_{};  // pinned_[i]: the staging of device_[i], if any
    std::size_t n_ = 0;
  };

  int device_;
  EventPool events_;  // before the allocators: they return events to it
  CachingAllocator staging_, scratch_;
};

static_assert(comm::backend<Backend>);

}  // namespace disagmoe::cuda
