// SPDX-License-Identifier: Apache-2.0
// Decorators that time every call of an attention or expert compute by op kind (the
// schedule's op kinds), so the benchmark can report each kind's share of a step. They
// model the same concepts as what they wrap: a user's compute can be wrapped the same way.
#pragma once

#include <disagmoe/runtime/attention_compute.hpp>
#include <disagmoe/runtime/expert_compute.hpp>

#include <array>
#include <chrono>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

namespace bench {

/// Seconds spent per op kind.
enum class Kind { kAttnFwd, kAttnBwd, kAttnWgrad, kExpertFwd, kExpertBwd, kExpertWgrad, kEmbed, kHead, kCount };
inline constexpr std::array<std::string_view, 8> kKindNames{"attn_fwd",   "attn_bwd",   "attn_wgrad", "expert_fwd",
                                                            "expert_bwd", "expert_wgrad", "embed",    "head"};
using Times = std::array<double, static_cast<std::size_t>(Kind::kCount)>;

/// Adds the wall time of its scope to one entry of a Times.
class Scope {
 public:
  Scope(Times& t, Kind k) : t_(t), k_(k), start_(std::chrono::steady_clock::now()) {}
  ~Scope() {
    t_[static_cast<std::size_t>(k_)] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  Times& t_;
  Kind k_;
  std::chrono::steady_clock::time_point start_;
};

template <disagmoe::runtime::attention_compute C>
class TimedAttention {
 public:
  using attention_compute_concept = disagmoe::runtime::attention_compute_tag;
  using scalar_type = typename C::scalar_type;
  using Weights = typename C::Weights;
  using EdgeWeights = typename C::EdgeWeights;
  using Saved = typename C::Saved;
  using HeadSaved = typename C::HeadSaved;
  using M = disagmoe::model::Matrix<scalar_type>;

  TimedAttention(C c, std::shared_ptr<Times> t) : c_(std::move(c)), t_(std::move(t)) {}
  Weights init(int l, disagmoe::model::Rng& r) const { return c_.init(l, r); }
  EdgeWeights init_edges(disagmoe::model::Rng& r) const { return c_.init_edges(r); }
  auto parameters(Weights& w) const { return c_.parameters(w); }
  auto edge_parameters(EdgeWeights& e) const { return c_.edge_parameters(e); }
  void forward(const Weights& w, int l, const M& h, disagmoe::runtime::AttentionOutput<scalar_type>& o, Saved& s) const {
    Scope sc(*t_, Kind::kAttnFwd);
    c_.forward(w, l, h, o, s);
  }
  void backward_input(const Weights& w, int l, const disagmoe::runtime::AttentionGradients<scalar_type>& g, Saved& s,
                      M& dh) const {
    Scope sc(*t_, Kind::kAttnBwd);
    c_.backward_input(w, l, g, s, dh);
  }
  void backward_weight(const Weights& w, int l, const Saved& s, Weights& dw) const {
    Scope sc(*t_, Kind::kAttnWgrad);
    c_.backward_weight(w, l, s, dw);
  }
  void embed(const EdgeWeights& e, std::span<const int> ids, M& h) const {
    Scope sc(*t_, Kind::kEmbed);
    c_.embed(e, ids, h);
  }
  void embed_backward(std::span<const int> ids, const M& dh, EdgeWeights& de) const {
    Scope sc(*t_, Kind::kEmbed);
    c_.embed_backward(ids, dh, de);
  }
  scalar_type head_forward(const EdgeWeights& e, const M& h, std::span<const int> y, HeadSaved& s) const {
    Scope sc(*t_, Kind::kHead);
    return c_.head_forward(e, h, y, s);
  }
  scalar_type head_loss(const EdgeWeights& e, const M& h, std::span<const int> y) const { return c_.head_loss(e, h, y); }
  void head_logits(const EdgeWeights& e, const M& h, M& logits) const { c_.head_logits(e, h, logits); }
  void head_backward_input(const EdgeWeights& e, scalar_type scale, HeadSaved& s, M& dh) const {
    Scope sc(*t_, Kind::kHead);
    c_.head_backward_input(e, scale, s, dh);
  }
  void head_backward_weight(const HeadSaved& s, EdgeWeights& de) const {
    Scope sc(*t_, Kind::kHead);
    c_.head_backward_weight(s, de);
  }

 private:
  C c_;
  std::shared_ptr<Times> t_;
};

template <disagmoe::runtime::expert_compute C>
class TimedExperts {
 public:
  using expert_compute_concept = disagmoe::runtime::expert_compute_tag;
  using scalar_type = typename C::scalar_type;
  using Weights = typename C::Weights;
  using Saved = typename C::Saved;
  using M = disagmoe::model::Matrix<scalar_type>;

  TimedExperts(C c, std::shared_ptr<Times> t) : c_(std::move(c)), t_(std::move(t)) {}
  Weights init(int l, int e, disagmoe::model::Rng& r) const { return c_.init(l, e, r); }
  auto parameters(Weights& w) const { return c_.parameters(w); }
  void forward(std::span<const Weights> ws, std::span<const std::int64_t> off, const M& x, M& y, Saved& s) const {
    Scope sc(*t_, Kind::kExpertFwd);
    c_.forward(ws, off, x, y, s);
  }
  void backward_input(std::span<const Weights> ws, const M& dy, Saved& s, M& dx) const {
    Scope sc(*t_, Kind::kExpertBwd);
    c_.backward_input(ws, dy, s, dx);
  }
  void backward_weight(const Saved& s, std::span<Weights> gs) const {
    Scope sc(*t_, Kind::kExpertWgrad);
    c_.backward_weight(s, gs);
  }

 private:
  C c_;
  std::shared_ptr<Times> t_;
};

}  // namespace bench
