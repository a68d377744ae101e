// SPDX-License-Identifier: Apache-2.0
/// @file compute_lane.hpp
/// What one call of a CUDA compute (cuda::Experts, cuda::Attention) works on: a lane of
/// (stream, cuBLAS handle, device scratch) taken from a pool that the copies of one
/// compute share, so const calls may run at once from several threads (the compute
/// concepts allow it) without sharing a handle (cuBLAS docs, "Thread Safety"); plus the
/// host <-> device copies of the host matrices the compute concepts hand in and out.
/// Host code; needs `disagmoe::cuda`.
#pragma once

#include <disagmoe/backend/cuda/blas.hpp>
#include <disagmoe/backend/cuda/check.hpp>
#include <disagmoe/backend/cuda/memory.hpp>
#include <disagmoe/backend/cuda/stream.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

namespace disagmoe::cuda {

/// The lanes of one compute and its copies: created on the device current at
/// construction, their GEMMs in `precision`.
class LanePool {
 public:
  explicit LanePool(Precision precision) : precision_(precision) { DISAGMOE_CUDA_CHECK(cudaGetDevice(&device_)); }
  [[nodiscard]] Precision precision() const { return precision_; }

  /// One call's stream, handle and scratch.
  struct State {
    explicit State(Precision p) : blas(stream.get(), p) {}
    Stream stream = Stream::create(0);
    Blas blas;
    std::deque<DeviceBuffer<float>> buffers;  // a call's temporaries at their high-water size (deque: growing keeps references)
  };

 private:
  friend class Lane;
  std::mutex mu_;
  std::vector<std::unique_ptr<State>> free_;
  int device_ = 0;
  Precision precision_;
};

/// Takes a lane from the pool (a new one when all are busy) and makes the pool's device
/// current; gives the lane back, its stream synchronised, at scope exit (a lane whose
/// stream failed is dropped).
class Lane {
 public:
  explicit Lane(LanePool& pool) : pool_(pool) {
    DISAGMOE_CUDA_CHECK(cudaSetDevice(pool.device_));
    {
      std::lock_guard lock(pool.mu_);
      if (!pool.free_.empty()) {
        state_ = std::move(pool.free_.back());
        pool.free_.pop_back();
      }
    }
    if (state_ == nullptr) state_ = std::make_unique<LanePool::State>(pool.precision_);
  }
  Lane(const Lane&) = delete;
  Lane& operator=(const Lane&) = delete;
  ~Lane() {
    if (cudaStreamSynchronize(state_->stream.get()) != cudaSuccess) return;
    std::lock_guard lock(pool_.mu_);
    pool_.free_.push_back(std::move(state_));
  }
  [[nodiscard]] cudaStream_t stream() const { return state_->stream.get(); }
  [[nodiscard]] Blas& blas() { return state_->blas; }
  /// Temporary `i` of this call (kept by the lane, so steady-state calls allocate nothing).
  [[nodiscard]] DeviceBuffer<float>& buffer(std::size_t i) {
    if (state_->buffers.size() <= i) state_->buffers.resize(i + 1);
    return state_->buffers[i];
  }
  /// Temporary `i` resized to n elements.
  [[nodiscard]] float* buffer(std::size_t i, std::size_t n) {
    buffer(i).resize(n);
    return buffer(i).data();
  }
  [[nodiscard]] DeviceBuffer<float>& scratch() { return buffer(0); }

  /// Host -> device of n elements on the lane's stream (a pageable source is staged
  /// before this returns, so the host may reuse it).
  template <class E>
  void upload(const E* src, E* dst, std::size_t n) {
    if (n > 0) DISAGMOE_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(E), cudaMemcpyHostToDevice, stream()));
  }
  /// Resizes `dst` to n and uploads n elements into it.
  template <class E>
  void upload(const E* src, DeviceBuffer<E>& dst, std::size_t n) {
    dst.resize(n);
    upload(src, dst.data(), n);
  }
  /// Device -> host of n elements after the lane's work so far; complete on return.
  template <class E>
  void download(const E* src, E* dst, std::size_t n) {
    if (n > 0) DISAGMOE_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(E), cudaMemcpyDeviceToHost, stream()));
    DISAGMOE_CUDA_CHECK(cudaStreamSynchronize(stream()));
  }

 private:
  LanePool& pool_;
  std::unique_ptr<LanePool::State> state_;
};

}  // namespace disagmoe::cuda
