// SPDX-License-Identifier: Apache-2.0
/// @file transport.hpp
/// The `transport` concept: non-blocking point-to-point messages between the ranks of
/// a group, grouped submission, completion handles waited on with deadlines, and
/// sub-groups split from a world (the A-group, the F-group, the A+F pair).
///
/// Shape taken from stdexec (`__detail/__sender_concepts.hpp`): a model opts in with
/// `using transport_concept = disagmoe::comm::transport_tag;` and must also satisfy a
/// structural `requires`-clause, so an unrelated type with similar member names is
/// never a transport by accident. Message semantics follow MPI point-to-point
/// (MPI 4.0 §3.5): messages between one sender and one receiver with the same tag in
/// the same group are matched in the order they were posted (non-overtaking).
/// Grouped submission follows NCCL groups (ncclGroupStart/End): operations issued
/// between `group_begin()` and `group_end()` are posted together at `group_end()`, so a
/// rank may issue sends and receives to many peers in any order without deadlock.
#pragma once

#include <chrono>
#include <concepts>
#include <cstddef>
#include <exception>
#include <optional>
#include <span>
#include <type_traits>

namespace disagmoe::comm {

/// Opt-in tag: a transport declares `using transport_concept = transport_tag;`.
struct transport_tag {};

/// The clock every deadline refers to (monotonic).
using Clock = std::chrono::steady_clock;
/// An absolute point in time after which a wait gives up.
using Deadline = Clock::time_point;

/// True when `T` opted in with a `transport_concept` tag derived from `transport_tag`.
template <class T>
inline constexpr bool enable_transport = requires {
  typename T::transport_concept;
  requires std::derived_from<typename T::transport_concept, transport_tag>;
};

/// A transport `T` connects the ranks `0 .. size()-1` of one group.
///  - `isend(peer, tag, bytes)` / `irecv(peer, tag, bytes)` post a non-blocking
///    transfer and return a `T::Request`; the buffer must stay valid and untouched
///    until the request completes or is cancelled. A receive must be exactly as large
///    as the matching send (a mismatch is an error of the model, never a truncation).
///  - `group_begin()` / `group_end()` bracket a batch of posts (nestable).
///  - `test(req)` polls; `wait(req, deadline)` blocks until completion (true) or until
///    `deadline` passes (false; the request is still pending). A completed request is
///    consumed: testing or waiting on it again is a precondition violation.
///  - `cancel(req)` withdraws a pending request and releases its buffer; on an empty or
///    consumed request it does nothing. A request whose `test` or `wait` threw may still
///    be pending: cancel it before its buffer goes.
///  - `split(members)` is collective over the group (every rank calls it, in the same
///    order, with the same list of group ranks); it returns the sub-group transport in
///    which `members[i]` has rank `i`, or `std::nullopt` on ranks not in `members`.
///    Traffic of a sub-group never matches traffic of its parent or of a sibling.
template <class T>
concept transport =
    enable_transport<std::remove_cvref_t<T>> && std::movable<std::remove_cvref_t<T>> &&
    requires(std::remove_cvref_t<T>& t, const std::remove_cvref_t<T>& ct,
             typename std::remove_cvref_t<T>::Request& req, int peer, int tag,
             std::span<const std::byte> sbuf, std::span<std::byte> rbuf, Deadline deadline,
             std::span<const int> members) {
      requires std::movable<typename std::remove_cvref_t<T>::Request>;
      requires std::default_initializable<typename std::remove_cvref_t<T>::Request>;
      { ct.rank() } -> std::same_as<int>;
      { ct.size() } -> std::same_as<int>;
      { ct.max_tag() } -> std::same_as<int>;
      { t.isend(peer, tag, sbuf) } -> std::same_as<typename std::remove_cvref_t<T>::Request>;
      { t.irecv(peer, tag, rbuf) } -> std::same_as<typename std::remove_cvref_t<T>::Request>;
      t.group_begin();
      t.group_end();
      { t.test(req) } -> std::same_as<bool>;
      { t.wait(req, deadline) } -> std::same_as<bool>;
      t.cancel(req);
      { t.split(members) } -> std::same_as<std::optional<std::remove_cvref_t<T>>>;
    };

/// True unless `T` declares `static constexpr bool matches_tags = false;`: a transport
/// that matches the messages between two ranks by issue order alone, per direction, and
/// uses tags only to label errors (NCCL point-to-point: NCCL docs, "Point-to-point
/// communication"). On such a transport two exchanges in flight on one group must be posted
/// in the same order on both ends, or travel on a communicator each (comm/laned_transport.hpp).
template <class T>
inline constexpr bool matches_tags = true;
template <class T>
  requires requires { T::matches_tags; }
inline constexpr bool matches_tags<T> = T::matches_tags;

/// Element types that may travel as raw bytes (no pointers are fixed up on arrival).
template <class E>
concept wire_element = std::is_trivially_copyable_v<E> && !std::is_pointer_v<E>;

/// Typed non-blocking send of `data` to group rank `peer`. O(1) to post.
template <transport T, wire_element E>
[[nodiscard]] typename T::Request isend(T& t, int peer, int tag, std::span<const E> data) {
  return t.isend(peer, tag, std::as_bytes(data));
}

/// Typed non-blocking receive into `data` from group rank `peer`. O(1) to post.
template <transport T, wire_element E>
[[nodiscard]] typename T::Request irecv(T& t, int peer, int tag, std::span<E> data) {
  return t.irecv(peer, tag, std::as_writable_bytes(data));
}

/// RAII bracket for grouped submission: `group_begin()` now, `group_end()` at scope exit.
/// A failing `group_end()` throws from the destructor, unless the scope is already
/// unwinding from an exception: then the group is still closed (so that what it posted
/// can be cancelled) and the second error dropped in favour of the first.
template <transport T>
class GroupGuard {
 public:
  explicit GroupGuard(T& t) : t_(t), unwinding_(std::uncaught_exceptions()) { t_.group_begin(); }
  GroupGuard(const GroupGuard&) = delete;
  GroupGuard& operator=(const GroupGuard&) = delete;
  ~GroupGuard() noexcept(false) {
    try {
      t_.group_end();
    } catch (...) {
      if (std::uncaught_exceptions() == unwinding_)
        throw;  // else the exception in flight is the one to report
    }
  }

 private:
  T& t_;
  int unwinding_;
};

/// A deadline `timeout` from now.
inline Deadline deadline_after(std::chrono::nanoseconds timeout) { return Clock::now() + timeout; }

}  // namespace disagmoe::comm
