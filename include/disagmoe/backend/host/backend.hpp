// SPDX-License-Identifier: Apache-2.0
/// @file backend.hpp
/// `host::Backend`, the host model of `comm::backend`: host streams and events
/// (backend/host/stream.hpp), buffers in host memory (std::vector), and the host token
/// kernels (backend/host/token_kernels.hpp) enqueued on a stream, their threads drawn
/// from a `ThreadPool`. On a caller-served stream a kernel has run when its call returns.
#pragma once

#include <disagmoe/backend/host/stream.hpp>
#include <disagmoe/backend/host/token_kernels.hpp>
#include <disagmoe/comm/backend.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace disagmoe::host {

class Backend {
 public:
  using backend_concept = comm::backend_tag;
  using Stream = host::Stream;
  using Event = host::Event;
  template <class E>
  using Buffer = std::vector<E>;
  static constexpr bool host_accessible = true;

  /// `kernels`: threads per kernel call and their pool (results do not depend on it).
  explicit Backend(KernelOptions kernels = {}) : kernels_(kernels) {}
  const KernelOptions& kernels() const { return kernels_; }

  /// The comm stream of a host worker: served by the thread that drives the exchange.
  Stream comm_stream() const { return Stream::caller(); }
  Event record(Stream& s) const { return s.record(); }
  void wait(Stream& s, const Event& e) const { s.wait(e); }
  bool query(const Event& e) const { return e.query(); }
  void synchronize(const Event& e) const { e.synchronize(); }

  /// counts[b] = occurrences of b in bins (host::histogram).
  void histogram(Stream& s, std::span<const std::int32_t> bins, std::span<std::int64_t> counts) const {
    s.enqueue([=] { host::histogram(bins, counts); });
  }
  /// Exclusive scan of counts into offsets (host::exclusive_offsets).
  void exclusive_offsets(Stream& s, std::span<const std::int64_t> counts, std::span<std::int64_t> offsets) const {
    s.enqueue([=] { host::exclusive_offsets(counts, offsets); });
  }
  /// dst row i = src row index[i] (host::gather_rows, indices unchecked).
  template <class T>
  void gather_rows(Stream& s, std::span<const T> src, std::size_t width, std::span<const std::int64_t> index,
                   std::span<T> dst) const {
    s.enqueue([=, this] { host::gather_rows<T>(src, width, index, dst, kernels_, false); });
  }
  /// dst row i = scale[i] * src row index[i] (host::gather_rows_scaled).
  template <class T, class W>
  void gather_rows_scaled(Stream& s, std::span<const T> src, std::size_t width,
                          std::span<const std::int64_t> index, std::span<const W> scale, std::span<T> dst) const {
    s.enqueue([=, this] { host::gather_rows_scaled<T, W>(src, width, index, scale, dst, kernels_); });
  }
  /// The gate-weighted combine in the contract's order (host::combine_rows).
  template <class T, class W>
  void combine_rows(Stream& s, std::span<const T> src, std::size_t width, std::span<const std::int64_t> seg,
                    std::span<const std::int64_t> idx, std::span<const W> w, std::span<T> out) const {
    s.enqueue([=, this] { host::combine_rows<T, W>(src, width, seg, idx, w, out, kernels_); });
  }
  /// The dL/dgate reduction (host::gate_gradients).
  template <class T>
  void gate_gradients(Stream& s, std::span<const T> outputs, std::span<const T> grad, std::size_t width,
                      std::span<const std::int64_t> seg, std::span<const std::int64_t> pos,
                      std::span<const std::int32_t> slot, std::size_t top_k, std::span<float> out) const {
    s.enqueue([=] { host::gate_gradients<T>(outputs, grad, width, seg, pos, slot, top_k, out); });
  }

 private:
  KernelOptions kernels_;
};

static_assert(comm::backend<Backend>);

}  // namespace disagmoe::host
