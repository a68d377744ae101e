// SPDX-License-Identifier: Apache-2.0
/// @file memory.hpp
/// Device and pinned host memory for the CUDA back end:
///  - `CachingAllocator`: stream-ordered reuse of device (or pinned host) blocks, the
///    scheme of PyTorch's CUDACachingAllocator reduced to what the token kernels need
///    (CUB temp storage, staged index arrays): a block released on stream s is reused at
///    once by later work on s (in-order), by another stream only once an event recorded
///    at release has completed. cudaMalloc runs only when no cached block fits, so
///    after warm-up (or `reserve`) no call allocates.
///  - `DeviceBuffer<E>`: the back end's `Buffer<E>` (comm/backend.hpp `device_buffer`):
///    a growable array in device memory. Growing synchronises the device: it is meant
///    for `M2NChannel::reserve` (sizes from `workspace_bytes`), never the critical path.
///  - `PinnedBuffer<E>`: page-locked host memory (cudaMallocHost) that a stream copies
///    to and from asynchronously, e.g. the routing counts the host reads back.
/// Host code (compiles with a host compiler alone); needs `disagmoe::cuda`.
#pragma once

#include <disagmoe/backend/cuda/check.hpp>
#include <disagmoe/backend/cuda/stream.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <new>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

namespace disagmoe::cuda {

/// True when the device can dereference `p` (device or managed memory); false for
/// pageable or pinned host memory (pinned memory is device-readable but over PCIe, so
/// it is staged too). Never throws.
inline bool is_device_pointer(const void* p) noexcept {
  if (p == nullptr) return false;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

/// Which memory a `CachingAllocator` hands out.
enum class MemoryKind { kDevice, kPinnedHost };

/// See the file comment. Thread-safe. Blocks live until the allocator is destroyed
/// (or `trim`); the allocator must outlive the work that uses its blocks.
class CachingAllocator {
 public:
  /// Blocks are rounded up to this many bytes (CUB and vector loads want 256-byte alignment,
  /// which cudaMalloc gives every block).
  static constexpr std::size_t kGranule = 512;

  explicit CachingAllocator(EventPool& events, MemoryKind kind = MemoryKind::kDevice) : events_(events), kind_(kind) {}
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;
  /// Frees every block; waits for the device first (blocks may still be in use).
  ~CachingAllocator() {
    (void)cudaDeviceSynchronize();
    for (auto& b : free_) free_block(b);
    for (auto& [p, bytes] : live_) free_raw(p);
  }

  /// A block of at least `bytes` bytes for work on stream `s` (nullptr for 0 bytes).
  /// Best fit among the cached blocks usable on `s`; else a new cudaMalloc /
  /// cudaMallocHost. O(cached blocks).
  void* allocate(std::size_t bytes, cudaStream_t s) {
    if (bytes == 0) return nullptr;
    bytes = round_up(bytes);
    std::lock_guard lock(mu_);
    std::size_t best = free_.size();
    for (std::size_t i = 0; i < free_.size(); ++i) {
      const Block& b = free_[i];
      if (b.bytes < bytes || (best < free_.size() && b.bytes >= free_[best].bytes)) continue;
      if (b.bytes > 2 * bytes + (std::size_t{1} << 20)) continue;  // keep big blocks for big requests
      if (usable_on(b, s)) best = i;
    }
    if (best < free_.size()) {
      Block b = free_[best];
      free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(best));
      if (b.event != nullptr) events_.release(b.event);
      live_.emplace(b.ptr, b.bytes);
      return b.ptr;
    }
    void* p = allocate_raw(bytes);
    try {
      live_.emplace(p, bytes);
    } catch (...) {
      free_raw(p);
      throw;
    }
    ++allocations_;
    allocated_bytes_ += bytes;
    return p;
  }

  /// Returns block `p` (from `allocate`) once the work enqueued on `s` so far is done with
  /// it: an event is recorded on `s` now. For pinned host memory the host may write the
  /// block again only after that event, so its reuse always waits for it.
  void release(void* p, cudaStream_t s) {
    if (p == nullptr) return;
    std::lock_guard lock(mu_);
    auto it = live_.find(p);
    if (it == live_.end()) fail("CachingAllocator.release pointer", "unknown", "a block from allocate()");
    Block b{p, it->second, s, events_.acquire()};
    live_.erase(it);
    const cudaError_t rec = cudaEventRecord(b.event, s);
    if (rec != cudaSuccess) {
      events_.release(b.event);
      b.event = nullptr;
      free_.push_back(b);  // never reused (see usable_on); freed by trim or the destructor
      check(rec, "cudaEventRecord(release event)", __FILE__, __LINE__);
      return;
    }
    free_.push_back(b);
  }

  /// Allocates (and caches) a block of `bytes` now, off the critical path: the second
  /// phase of a two-phase workspace query. Leaves it free for `allocate`.
  void reserve(std::size_t bytes, cudaStream_t s) { release(allocate(bytes, s), s); }

  /// Frees every cached block not in use (after waiting for the device).
  void trim() {
    std::lock_guard lock(mu_);
    DISAGMOE_CUDA_CHECK(cudaDeviceSynchronize());
    for (auto& b : free_) {
      allocated_bytes_ -= b.bytes;
      free_block(b);
    }
    free_.clear();
  }

  /// cudaMalloc (or cudaMallocHost) calls so far: constant in steady state.
  std::size_t allocations() const {
    std::lock_guard lock(mu_);
    return allocations_;
  }
  /// Bytes held (in use or cached).
  std::size_t allocated_bytes() const {
    std::lock_guard lock(mu_);
    return allocated_bytes_;
  }

 private:
  struct Block {
    void* ptr;
    std::size_t bytes;
    cudaStream_t stream;  // where it was released
    cudaEvent_t event;    // recorded at release; nullptr: the record failed
  };
  static std::size_t round_up(std::size_t bytes) { return (bytes + kGranule - 1) / kGranule * kGranule; }
  bool usable_on(const Block& b, cudaStream_t s) const {
    if (b.event == nullptr) return false;
    if (kind_ == MemoryKind::kDevice && b.stream == s) return true;  // stream order
    const cudaError_t q = cudaEventQuery(b.event);
    if (q == cudaSuccess) return true;
    if (q != cudaErrorNotReady) (void)cudaGetLastError();  // reported by the stream's own checks
    return false;
  }
  void* allocate_raw(std::size_t bytes) {
    void* p = nullptr;
    cudaError_t st = kind_ == MemoryKind::kDevice ? cudaMalloc(&p, bytes) : cudaMallocHost(&p, bytes);
    if (st == cudaErrorMemoryAllocation && !free_.empty()) {
      // Out of memory with blocks cached: give them back and try once more.
      (void)cudaGetLastError();
      DISAGMOE_CUDA_CHECK(cudaDeviceSynchronize());
      for (auto& b : free_) {
        allocated_bytes_ -= b.bytes;
        free_block(b);
      }
      free_.clear();
      st = kind_ == MemoryKind::kDevice ? cudaMalloc(&p, bytes) : cudaMallocHost(&p, bytes);
    }
    check(st, kind_ == MemoryKind::kDevice ? "cudaMalloc" : "cudaMallocHost", __FILE__, __LINE__);
    return p;
  }
  void free_raw(void* p) noexcept {
    if (kind_ == MemoryKind::kDevice)
      (void)cudaFree(p);
    else
      (void)cudaFreeHost(p);
  }
  void free_block(Block& b) noexcept {
    if (b.event != nullptr) events_.release(b.event);
    free_raw(b.ptr);
  }

  EventPool& events_;
  MemoryKind kind_;
  mutable std::mutex mu_;
  std::vector<Block> free_;
  std::unordered_map<void*, std::size_t> live_;
  std::size_t allocations_ = 0, allocated_bytes_ = 0;
};

namespace detail {
/// Frees with `Free` after waiting for every stream of the device (the old block may still
/// be read or written by enqueued work).
template <cudaError_t (*Free)(void*)>
void free_after_device(void* p) noexcept {
  if (p == nullptr) return;
  (void)cudaDeviceSynchronize();
  (void)Free(p);
}
inline cudaError_t free_device(void* p) { return cudaFree(p); }
inline cudaError_t free_pinned(void* p) { return cudaFreeHost(p); }
}  // namespace detail

/// A growable array of `E` in device memory (see the file comment). `data()` is a device
/// pointer: the host must not dereference it. Elements are not initialised.
template <class E>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)), capacity_(std::exchange(o.capacity_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      detail::free_after_device<detail::free_device>(data_);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      capacity_ = std::exchange(o.capacity_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { detail::free_after_device<detail::free_device>(data_); }

  /// Sets the size to `n`, keeping the first min(size(), n) elements. Shrinking keeps the
  /// block; growing allocates, copies and synchronises the device (off the critical path).
  void resize(std::size_t n) {
    if (n <= capacity_) {
      size_ = n;
      return;
    }
    void* p = nullptr;
    DISAGMOE_CUDA_CHECK(cudaMalloc(&p, n * sizeof(E)));
    try {
      DISAGMOE_CUDA_CHECK(cudaDeviceSynchronize());  // work on the old block is done
      if (size_ > 0) DISAGMOE_CUDA_CHECK(cudaMemcpy(p, data_, size_ * sizeof(E), cudaMemcpyDeviceToDevice));
      DISAGMOE_CUDA_CHECK(cudaDeviceSynchronize());
    } catch (...) {
      (void)cudaFree(p);
      throw;
    }
    detail::free_after_device<detail::free_device>(data_);
    data_ = static_cast<E*>(p);
    size_ = capacity_ = n;
  }
  /// Resizes to `host.size()` and copies `host` in; returns once every stream can read it
  /// (a pageable cudaMemcpy may return before its DMA lands, and non-blocking streams do
  /// not order after the legacy default stream). Set-up, not the critical path.
  void assign(std::span<const E> host) {
    resize(host.size());
    if (host.empty()) return;
    DISAGMOE_CUDA_CHECK(cudaDeviceSynchronize());  // work still reading or writing the old contents
    DISAGMOE_CUDA_CHECK(cudaMemcpy(data_, host.data(), host.size_bytes(), cudaMemcpyHostToDevice));
    DISAGMOE_CUDA_CHECK(cudaDeviceSynchronize());
  }
  E* data() { return data_; }
  const E* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  E* data_ = nullptr;
  std::size_t size_ = 0, capacity_ = 0;
};

/// A growable array of `E` in page-locked host memory (readable by the host; copies to and
/// from the device run asynchronously). Growing synchronises the device.
template <class E>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::size_t n) { resize(n); }
  PinnedBuffer(PinnedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)), capacity_(std::exchange(o.capacity_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    if (this != &o) {
      detail::free_after_device<detail::free_pinned>(data_);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      capacity_ = std::exchange(o.capacity_, 0);
    }
    return *this;
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() { detail::free_after_device<detail::free_pinned>(data_); }

  /// As DeviceBuffer::resize, in pinned host memory.
  void resize(std::size_t n) {
    if (n <= capacity_) {
      size_ = n;
      return;
    }
    void* p = nullptr;
    DISAGMOE_CUDA_CHECK(cudaMallocHost(&p, n * sizeof(E)));
    try {
      DISAGMOE_CUDA_CHECK(cudaDeviceSynchronize());
    } catch (...) {
      (void)cudaFreeHost(p);
      throw;
    }
    if (size_ > 0) std::memcpy(p, data_, size_ * sizeof(E));
    detail::free_after_device<detail::free_pinned>(data_);
    data_ = static_cast<E*>(p);
    size_ = capacity_ = n;
  }
  E* data() { return data_; }
  const E* data() const { return data_; }
  std::size_t size() const { return size_; }
  E& operator[](std::size_t i) { return data_[i]; }
  const E& operator[](std::size_t i) const { return data_[i]; }

 private:
  E* data_ = nullptr;
  std::size_t size_ = 0, capacity_ = 0;
};

}  // namespace disagmoe::cuda
