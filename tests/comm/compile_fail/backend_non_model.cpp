// SPDX-License-Identifier: Apache-2.0
// Compiled by ctest (tests/comm/CMakeLists.txt) with one CASE_* macro: CASE_model must
// compile; every other case is a near-miss of the `backend` concept and must fail.
#include <disagmoe/comm/backend.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace {

/// A buffer whose data() is missing its const overload.
template <class E>
struct HalfBuffer {
  std::vector<E> v;
  void resize(std::size_t n) { v.resize(n); }
  E* data() { return v.data(); }
  std::size_t size() const { return v.size(); }
};

struct Model {
#ifndef CASE_no_tag
  using backend_concept = disagmoe::comm::backend_tag;
#endif
  struct Stream {};
  struct Event {};
#ifdef CASE_wrong_buffer
  template <class E>
  using Buffer = HalfBuffer<E>;
#else
  template <class E>
  using Buffer = std::vector<E>;
#endif
  static constexpr bool host_accessible = true;
  Stream comm_stream() { return {}; }
  Event record(Stream&) { return {}; }
  void wait(Stream&, const Event&) {}
#ifndef CASE_no_query
  bool query(const Event&) { return true; }
#endif
  void synchronize(const Event&) {}
  void histogram(Stream&, std::span<const std::int32_t>, std::span<std::int64_t>) {}
  void exclusive_offsets(Stream&, std::span<const std::int64_t>, std::span<std::int64_t>) {}
  template <class T>
  void gather_rows(Stream&, std::span<const T>, std::size_t, std::span<const std::int64_t>, std::span<T>) {}
  template <class T, class W>
  void gather_rows_scaled(Stream&, std::span<const T>, std::size_t, std::span<const std::int64_t>, std::span<const W>,
                          std::span<T>) {}
  template <class T, class W>
  void combine_rows(Stream&, std::span<const T>, std::size_t, std::span<const std::int64_t>,
                    std::span<const std::int64_t>, std::span<const W>, std::span<T>) {}
#ifndef CASE_no_gate_gradients
  template <class T>
  void gate_gradients(Stream&, std::span<const T>, std::span<const T>, std::size_t, std::span<const std::int64_t>,
                      std::span<const std::int64_t>, std::span<const std::int32_t>, std::size_t, std::span<float>) {}
#endif
};

}  // namespace

static_assert(disagmoe::comm::backend<Model>, "Model must satisfy disagmoe::comm::backend");
