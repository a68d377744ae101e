// SPDX-License-Identifier: Apache-2.0
// Compiled by ctest (tests/runtime/CMakeLists.txt) with one CASE_* macro: CASE_model
// must compile; every other case is a near-miss of `attention_compute` and must fail.
#include <disagmoe/runtime/attention_compute.hpp>

#include <span>
#include <vector>

namespace {

namespace rt = disagmoe::runtime;
using M = disagmoe::model::Matrix<float>;

struct Compute {
#ifndef CASE_no_tag
  using attention_compute_concept = rt::attention_compute_tag;
#endif
  using scalar_type = float;
  struct Weights {};
  struct EdgeWeights {};
  struct Saved {};
  struct HeadSaved {};
  Weights init(int, disagmoe::model::Rng&) const { return {}; }
  EdgeWeights init_edges(disagmoe::model::Rng&) const { return {}; }
  std::vector<rt::NamedParameter<float>> parameters(Weights&) const { return {}; }
  std::vector<rt::NamedParameter<float>> edge_parameters(EdgeWeights&) const { return {}; }
  void forward(const Weights&, int, const M&, rt::AttentionOutput<float>&, Saved&) const {}
  void backward_input(const Weights&, int, const rt::AttentionGradients<float>&, Saved&, M&) const {}
#ifndef CASE_no_backward_weight
  void backward_weight(const Weights&, int, const Saved&, Weights&) const {}
#endif
  void embed(const EdgeWeights&, std::span<const int>, M&) const {}
  void embed_backward(std::span<const int>, const M&, EdgeWeights&) const {}
#ifdef CASE_wrong_loss_type
  double head_forward(const EdgeWeights&, const M&, std::span<const int>, HeadSaved&) const { return 0; }
#else
  float head_forward(const EdgeWeights&, const M&, std::span<const int>, HeadSaved&) const { return 0; }
#endif
  float head_loss(const EdgeWeights&, const M&, std::span<const int>) const { return 0; }
  void head_logits(const EdgeWeights&, const M&, M&) const {}
  void head_backward_input(const EdgeWeights&, float, HeadSaved&, M&) const {}
  void head_backward_weight(const HeadSaved&, EdgeWeights&) const {}
};

}  // namespace

static_assert(rt::attention_compute<Compute>, "Compute must satisfy disagmoe::runtime::attention_compute");
