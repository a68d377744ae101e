// SPDX-License-Identifier: Apache-2.0
// Compiled by ctest (tests/comm/CMakeLists.txt) with one CASE_* macro: CASE_model must
// compile; every other case is a near-miss of the `transport` concept and must fail.
#include <disagmoe/comm/transport.hpp>

#include <optional>
#include <span>

namespace {

struct Model {
#ifndef CASE_no_tag
  using transport_concept = disagmoe::comm::transport_tag;
#endif
  struct Request {};
  int rank() const { return 0; }
  int size() const { return 1; }
  int max_tag() const { return 0; }
  Request isend(int, int, std::span<const std::byte>) { return {}; }
  Request irecv(int, int, std::span<std::byte>) { return {}; }
  void group_begin() {}
  void group_end() {}
  bool test(Request&) { return true; }
#ifndef CASE_no_wait
  bool wait(Request&, disagmoe::comm::Deadline) { return true; }
#endif
  void cancel(Request&) {}
#ifdef CASE_wrong_split
  Model split(std::span<const int>) { return {}; }  // must be std::optional<Model>
#else
  std::optional<Model> split(std::span<const int>) { return Model{}; }
#endif
};

}  // namespace

static_assert(disagmoe::comm::transport<Model>, "Model must satisfy disagmoe::comm::transport");

// Using the typed helper with a non-model must be rejected by its constraint too.
void use(Model& m) {
  float x = 0;
  (void)disagmoe::comm::isend(m, 0, 0, std::span<const float>(&x, 1));
}
