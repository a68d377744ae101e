// SPDX-License-Identifier: Apache-2.0
/// @file attention_compute.hpp
/// The `attention_compute` concept: the math of the attention side of an MoE decoder
/// (DisagMoE's attention workers): per layer, attention plus router (plus the FFN of a
/// dense layer), and the embedding and LM head that the first and last attention stage
/// own. `AttentionStage` owns the tensors; a compute only does arithmetic on them.
///
/// Forward, backward-input and backward-weight are separate calls because schedules
/// have separate ops for them (`schedule::OpKind::kAttentionBackwardInput` and
/// `kAttentionBackwardWeight`, the B/W split of zero-bubble pipelines, Qi et al. 2024).
/// A disaggregated run calls one compute object from its worker's forward and backward
/// streams at once (runtime/worker_executor.hpp): the const member functions must be
/// safe to call concurrently (no shared mutable scratch).
///
/// Shape taken from stdexec: a model opts in with
/// `using attention_compute_concept = disagmoe::runtime::attention_compute_tag;` and
/// must satisfy the structural `requires`-clause below.
#pragma once

#include <disagmoe/model/random.hpp>
#include <disagmoe/model/tensor.hpp>
#include <disagmoe/runtime/parameter.hpp>

#include <concepts>
#include <span>
#include <type_traits>
#include <vector>

namespace disagmoe::runtime {

/// Opt-in tag: a compute declares `using attention_compute_concept = attention_compute_tag;`.
struct attention_compute_tag {};

/// What the forward of one attention layer produces for one micro-batch.
template <class T>
struct AttentionOutput {
  /// h + attention(norm(h)); on a dense layer, the whole layer's output.
  model::Matrix<T> residual;
  /// norm(residual): the rows the experts consume ([tokens, hidden]; empty on a dense layer).
  model::Matrix<T> tokens;
  /// [tokens, top_k] routed expert ids, slot 0 the most probable.
  model::IndexMatrix topk_ids;
  /// [tokens, top_k] gate weights of the chosen experts.
  model::Matrix<T> gates;
  T aux_loss = 0;  ///< load-balancing term this layer adds to the loss (coefficient applied)
  T z_loss = 0;    ///< router z-loss term this layer adds to the loss (coefficient applied)
};

/// The gradients an attention layer's backward consumes.
template <class T>
struct AttentionGradients {
  const model::Matrix<T>* d_output = nullptr;  ///< dL/d(layer output) [tokens, hidden]
  const model::Matrix<T>* d_tokens = nullptr;  ///< dL/d tokens from the experts (MoE layers)
  const model::Matrix<T>* d_gates = nullptr;   ///< dL/d gates [tokens, top_k] (MoE layers)
  T loss_scale = 1;  ///< weight of this micro-batch's router losses in the step's loss
};

/// True when `C` opted in with an `attention_compute_concept` tag.
template <class C>
inline constexpr bool enable_attention_compute = requires {
  typename C::attention_compute_concept;
  requires std::derived_from<typename C::attention_compute_concept, attention_compute_tag>;
};

/// A compute `C` for the attention side, on scalar `C::scalar_type`:
///  - `Weights` (one layer), `EdgeWeights` (embedding, final norm, LM head), `Saved`
///    (what one layer keeps for one micro-batch) and `HeadSaved` (same for the head);
///  - `init(layer, rng)` / `init_edges(rng)` return freshly initialised weights;
///    `parameters(w)` lists a layer's tensors (names relative to the layer),
///    `edge_parameters(e)` the edge tensors (full names);
///  - `forward(w, layer, h, out, saved)`, then `backward_input(w, layer, grads, saved, dh)`
///    (dh = dL/dh), then `backward_weight(w, layer, saved, dw)` (accumulates into dw);
///  - `embed(e, ids, h)` / `embed_backward(ids, dh, de)`;
///    `head_forward(e, h, targets, hs) -> mean loss`, `head_backward_input(e, scale, hs, dh)`,
///    `head_backward_weight(hs, de)`; `head_loss(e, h, targets)` evaluates without state
///    and `head_logits(e, h, logits)` gives the next-token logits (for sampling).
template <class C>
concept attention_compute =
    enable_attention_compute<C> && std::copy_constructible<C> &&
    requires(const C& c, typename C::Weights& w, const typename C::Weights& cw,
             typename C::EdgeWeights& e, const typename C::EdgeWeights& ce, typename C::Saved& s,
             typename C::HeadSaved& hs, int layer, model::Rng& rng,
             const model::Matrix<typename C::scalar_type>& x, model::Matrix<typename C::scalar_type>& y,
             AttentionOutput<typename C::scalar_type>& out,
             const AttentionGradients<typename C::scalar_type>& g, std::span<const int> ids,
             typename C::scalar_type scale) {
      requires std::floating_point<typename C::scalar_type>;
      requires std::default_initializable<typename C::Saved>;
      requires std::default_initializable<typename C::HeadSaved>;
      { c.init(layer, rng) } -> std::same_as<typename C::Weights>;
      { c.init_edges(rng) } -> std::same_as<typename C::EdgeWeights>;
      { c.parameters(w) } -> std::same_as<std::vector<NamedParameter<typename C::scalar_type>>>;
      { c.edge_parameters(e) } -> std::same_as<std::vector<NamedParameter<typename C::scalar_type>>>;
      c.forward(cw, layer, x, out, s);
      c.backward_input(cw, layer, g, s, y);
      c.backward_weight(cw, layer, s, w);
      c.embed(ce, ids, y);
      c.embed_backward(ids, x, e);
      { c.head_forward(ce, x, ids, hs) } -> std::same_as<typename C::scalar_type>;
      { c.head_loss(ce, x, ids) } -> std::same_as<typename C::scalar_type>;
      c.head_logits(ce, x, y);
      c.head_backward_input(ce, scale, hs, y);
      c.head_backward_weight(hs, e);
    };

}  // namespace disagmoe::runtime
