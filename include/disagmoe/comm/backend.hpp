// SPDX-License-Identifier: Apache-2.0
/// @file backend.hpp
/// The `backend` concept: where a channel's rows live and how its token kernels run.
/// A back end has
///  - streams (`B::Stream`): in-order queues of work; every kernel is enqueued on one;
///    `comm_stream()` makes one for a worker's comm work (on the host served by the thread
///    that drives the exchange; on a device, a high-priority stream);
///  - events (`B::Event`): `record(s)` marks the work enqueued on `s` so far, `query(e)`
///    polls it, `synchronize(e)` waits for it (and reports the stream's error),
///    `wait(s, e)` makes later work on `s` wait for it (streams of one worker meet so);
///  - buffers (`B::Buffer<E>`) of its memory space: `resize`, `data`, `size`; readable by
///    the host only where `B::host_accessible` (a transport that moves host memory
///    needs it);
///  - the token kernels of MoE dispatch, each enqueued on a stream and reading and
///    writing its memory space: routing histogram and exclusive offsets, row gather
///    (the permute by destination of a send-once layout), gather scaled by the gate,
///    the gate-weighted combine in the summation order of backend/host/token_kernels.hpp,
///    and the dL/dgate reduction. Index arguments are valid by precondition (the
///    channel builds them), as for a device kernel.
/// Models: `host::Backend` (backend/host/backend.hpp), the CUDA back end. Opt in as a
/// transport does: `using backend_concept = disagmoe::comm::backend_tag;`.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

namespace disagmoe::comm {

/// Opt-in tag: a back end declares `using backend_concept = backend_tag;`.
struct backend_tag {};

/// True when `B` opted in with a `backend_concept` tag derived from `backend_tag`.
template <class B>
inline constexpr bool enable_backend = requires {
  typename B::backend_concept;
  requires std::derived_from<typename B::backend_concept, backend_tag>;
};

/// Opt-in for row element types that are not `std::is_floating_point` (bf16, fp16):
/// specialise to true next to the type's kernels (backend/cuda/row_math.hpp does so for
/// __nv_bfloat16).
template <class E>
inline constexpr bool enable_row_element = false;

/// The element types of a channel's rows: trivially copyable floating-point numbers.
template <class E>
concept row_element = std::is_trivially_copyable_v<E> && (std::is_floating_point_v<E> || enable_row_element<E>);

/// A resizable array of `E` in some memory space (std::vector is one, host side).
template <class Buf, class E>
concept device_buffer = std::default_initializable<Buf> && std::movable<Buf> &&
                        requires(Buf& b, const Buf& cb, std::size_t n) {
                          b.resize(n);
                          { b.data() } -> std::same_as<E*>;
                          { cb.data() } -> std::same_as<const E*>;
                          { cb.size() } -> std::convertible_to<std::size_t>;
                        };

/// See the file comment. Checked with float rows; kernels are templates over the row type.
template <class B>
concept backend =
    enable_backend<std::remove_cvref_t<B>> &&
    requires(std::remove_cvref_t<B>& b, typename std::remove_cvref_t<B>::Stream& s,
             const typename std::remove_cvref_t<B>::Event& e, std::span<const std::int32_t> bins,
             std::span<std::int64_t> counts, std::span<const std::int64_t> index, std::span<const float> src,
             std::span<float> dst, std::span<const std::int32_t> slot, std::size_t width) {
      { b.comm_stream() } -> std::same_as<typename std::remove_cvref_t<B>::Stream>;
      requires std::movable<typename std::remove_cvref_t<B>::Event>;
      requires device_buffer<typename std::remove_cvref_t<B>::template Buffer<float>, float>;
      requires device_buffer<typename std::remove_cvref_t<B>::template Buffer<std::int64_t>, std::int64_t>;
      { std::remove_cvref_t<B>::host_accessible } -> std::convertible_to<bool>;
      { b.record(s) } -> std::same_as<typename std::remove_cvref_t<B>::Event>;
      b.wait(s, e);
      { b.query(e) } -> std::same_as<bool>;
      b.synchronize(e);
      b.histogram(s, bins, counts);
      b.exclusive_offsets(s, index, counts);
      b.gather_rows(s, src, width, index, dst);
      b.gather_rows_scaled(s, src, width, index, src, dst);
      b.combine_rows(s, src, width, index, index, src, dst);
      b.gate_gradients(s, src, src, width, index, index, slot, width, dst);
    };

}  // namespace disagmoe::comm
