// SPDX-License-Identifier: Apache-2.0
// Compiled by ctest (tests/runtime/CMakeLists.txt) with one CASE_* macro: CASE_model
// must compile; every other case is a near-miss of `expert_compute` and must fail.
#include <disagmoe/runtime/expert_compute.hpp>

#include <cstdint>
#include <span>
#include <vector>

namespace {

namespace rt = disagmoe::runtime;
using M = disagmoe::model::Matrix<float>;

struct Compute {
#ifndef CASE_no_tag
  using expert_compute_concept = rt::expert_compute_tag;
#endif
#ifdef CASE_integer_scalar
  using scalar_type = int;
#else
  using scalar_type = float;
#endif
  struct Weights {};
  struct Saved {};
  Weights init(int, int, disagmoe::model::Rng&) const { return {}; }
  std::vector<rt::NamedParameter<scalar_type>> parameters(Weights&) const { return {}; }
#ifdef CASE_ungrouped_forward
  void forward(std::span<const Weights>, const M&, M&, Saved&) const {}  // no offsets
#else
  void forward(std::span<const Weights>, std::span<const std::int64_t>, const M&, M&, Saved&) const {}
#endif
  void backward_input(std::span<const Weights>, const M&, Saved&, M&) const {}
  void backward_weight(const Saved&, std::span<Weights>) const {}
};

}  // namespace

static_assert(rt::expert_compute<Compute>, "Compute must satisfy disagmoe::runtime::expert_compute");
