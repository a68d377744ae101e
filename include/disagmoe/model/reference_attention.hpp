// SPDX-License-Identifier: Apache-2.0
/// @file reference_attention.hpp
/// `ReferenceAttention<T>`: the attention side of a Mixtral-style decoder on Eigen, a
/// model of `runtime::attention_compute`. Per layer (HF MixtralDecoderLayer):
///   r = h + Attention(RMSNorm_in(h)),   x = RMSNorm_post(r),
///   MoE layer:   ids, gates = Router(x);  the experts then add sum_j g_j E_j(x) to r;
///   dense layer: out = r + FFN(x)  (a gated-SiLU MLP, HF LlamaMLP).
/// Edges: byte embedding in, final RMSNorm + untied LM head + mean cross-entropy out.
/// Templated on the scalar so that finite differences run in double.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/model/attention.hpp>
#include <disagmoe/model/cross_entropy.hpp>
#include <disagmoe/model/decoder_options.hpp>
#include <disagmoe/model/embedding.hpp>
#include <disagmoe/model/gated_ffn.hpp>
#include <disagmoe/model/init.hpp>
#include <disagmoe/model/rms_norm.hpp>
#include <disagmoe/model/router.hpp>
#include <disagmoe/runtime/attention_compute.hpp>
#include <disagmoe/spec/model_spec.hpp>

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace disagmoe::model {

/// See the file comment. `spec` gives the shapes (its `seq_len` is the sequence length
/// the rows are cut into), `options` the numerics and loss coefficients.
template <class T>
class ReferenceAttention {
 public:
  using attention_compute_concept = runtime::attention_compute_tag;
  using scalar_type = T;

  /// One layer's tensors; `dense` is empty on MoE layers, `router` on dense ones.
  struct Weights {
    Matrix<T> input_norm;
    AttentionWeights<T> attn;
    Matrix<T> post_norm;
    Matrix<T> router;
    GatedFfnWeights<T> dense;
  };
  /// Embedding, final norm and LM head.
  struct EdgeWeights {
    Matrix<T> embed;
    Matrix<T> final_norm;
    Matrix<T> head;
  };
  /// Activations one layer keeps for one micro-batch, and the gradients that its
  /// backward-input leaves for backward-weight.
  struct Saved {
    RmsNormSaved<T> norm_in;
    AttentionSaved<T> attn;
    RmsNormSaved<T> norm_post;
    RouterSaved<T> router;
    GatedFfnSaved<T> dense;
    Matrix<T> d_norm_in_out;    ///< dL/d RMSNorm_in(h)
    Matrix<T> d_norm_post_out;  ///< dL/d x
  };
  /// What the head keeps for one micro-batch.
  struct HeadSaved {
    RmsNormSaved<T> norm;
    LmHeadSaved<T> head;
    Matrix<T> d_norm_out;
  };

  ReferenceAttention(ModelSpec spec, DecoderOptions options) : spec_(std::move(spec)), options_(options) {
    validate(spec_);
    validate(options_);
    shape_ = AttentionShape{spec_.hidden, spec_.heads, spec_.kv_heads, spec_.head_dim,
                            spec_.seq_len, spec_.sliding_window, options_.rope_theta};
    validate(shape_);
    router_ = RouterOptions{spec_.experts, spec_.top_k, options_.aux_loss_coef, options_.z_loss_coef};
    validate(router_);
  }

  [[nodiscard]] const ModelSpec& spec() const { return spec_; }
  [[nodiscard]] const DecoderOptions& options() const { return options_; }

  /// Fresh weights of `layer`, drawn from `rng` in a fixed order.
  [[nodiscard]] Weights init(int layer, Rng& rng) const {
    const int d = spec_.hidden, q = spec_.heads * spec_.head_dim, kv = spec_.kv_heads * spec_.head_dim;
    const double s = options_.init_std;
    Weights w;
    w.input_norm = ones_row<T>(d);
    w.attn.wq = normal_matrix<T>(q, d, s, rng);
    w.attn.wk = normal_matrix<T>(kv, d, s, rng);
    w.attn.wv = normal_matrix<T>(kv, d, s, rng);
    w.attn.wo = normal_matrix<T>(d, q, s, rng);
    w.post_norm = ones_row<T>(d);
    if (spec_.is_moe_layer(layer)) {
      w.router = normal_matrix<T>(spec_.experts, d, s, rng);
    } else {
      w.dense.w1 = normal_matrix<T>(spec_.dense_ffn, d, s, rng);
      w.dense.w2 = normal_matrix<T>(d, spec_.dense_ffn, s, rng);
      w.dense.w3 = normal_matrix<T>(spec_.dense_ffn, d, s, rng);
    }
    return w;
  }

  /// Fresh embedding, final norm and head.
  [[nodiscard]] EdgeWeights init_edges(Rng& rng) const {
    EdgeWeights e;
    e.embed = normal_matrix<T>(spec_.vocab, spec_.hidden, options_.init_std, rng);
    e.final_norm = ones_row<T>(spec_.hidden);
    e.head = normal_matrix<T>(spec_.vocab, spec_.hidden, options_.init_std, rng);
    return e;
  }

  /// A layer's tensors with Hugging Face names relative to "model.layers.{i}." (the
  /// dense FFN uses LlamaMLP's gate/up/down names, as DeepSeek-MoE's dense layers do).
  [[nodiscard]] std::vector<runtime::NamedParameter<T>> parameters(Weights& w) const {
    std::vector<runtime::NamedParameter<T>> p;
    auto add = [&](const char* name, Matrix<T>& m, bool vector = false) {
      p.push_back({name, &m, vector ? std::vector<std::int64_t>{m.cols()} : runtime::shape_of(m)});
    };
    add("input_layernorm.weight", w.input_norm, true);
    add("self_attn.q_proj.weight", w.attn.wq);
    add("self_attn.k_proj.weight", w.attn.wk);
    add("self_attn.v_proj.weight", w.attn.wv);
    add("self_attn.o_proj.weight", w.attn.wo);
    add("post_attention_layernorm.weight", w.post_norm, true);
    if (w.router.size() > 0) add("block_sparse_moe.gate.weight", w.router);
    if (w.dense.w1.size() > 0) {
      add("mlp.gate_proj.weight", w.dense.w1);
      add("mlp.up_proj.weight", w.dense.w3);
      add("mlp.down_proj.weight", w.dense.w2);
    }
    return p;
  }

  /// The edge tensors with their full Hugging Face names.
  [[nodiscard]] std::vector<runtime::NamedParameter<T>> edge_parameters(EdgeWeights& e) const {
    return {{"model.embed_tokens.weight", &e.embed, runtime::shape_of(e.embed)},
            {"model.norm.weight", &e.final_norm, {e.final_norm.cols()}},
            {"lm_head.weight", &e.head, runtime::shape_of(e.head)}};
  }

  /// Forward of `layer` on the residual stream `h` ([tokens, hidden], whole sequences).
  void forward(const Weights& w, int layer, const Matrix<T>& h, runtime::AttentionOutput<T>& out, Saved& s) const {
    const T eps = static_cast<T>(options_.rms_norm_eps);
    Matrix<T> n, a;
    rms_norm_forward(w.input_norm, eps, h, n, s.norm_in);
    attention_forward(shape_, w.attn, n, a, s.attn);
    out.residual = h + a;
    if (spec_.is_moe_layer(layer)) {
      rms_norm_forward(w.post_norm, eps, out.residual, out.tokens, s.norm_post);
      RouterOutput<T> r;
      router_forward(router_, w.router, out.tokens, r, s.router);
      out.topk_ids = std::move(r.topk_ids);
      out.gates = std::move(r.gates);
      out.aux_loss = static_cast<T>(options_.aux_loss_coef) * r.aux_loss;
      out.z_loss = static_cast<T>(options_.z_loss_coef) * r.z_loss;
    } else {
      Matrix<T> x, f;
      rms_norm_forward(w.post_norm, eps, out.residual, x, s.norm_post);
      const std::array<std::int64_t, 2> offsets{0, static_cast<std::int64_t>(x.rows())};
      gated_ffn_forward(std::span<const GatedFfnWeights<T>>(&w.dense, 1), offsets, x, f, s.dense);
      out.residual += f;
      out.tokens.resize(0, spec_.hidden);
      out.topk_ids.resize(0, spec_.top_k);
      out.gates.resize(0, spec_.top_k);
      out.aux_loss = out.z_loss = T{0};
    }
  }

  /// dh = dL/dh of `layer` from the gradients of its outputs.
  void backward_input(const Weights& w, int layer, const runtime::AttentionGradients<T>& g, Saved& s,
                      Matrix<T>& dh) const {
    const Matrix<T>& d_out = *g.d_output;
    Matrix<T> dx;
    if (spec_.is_moe_layer(layer)) {
      dx = *g.d_tokens;
      router_backward_input(router_, w.router, *g.d_gates, g.loss_scale, s.router, dx);
    } else {
      gated_ffn_backward_input(std::span<const GatedFfnWeights<T>>(&w.dense, 1), d_out, s.dense, dx);
    }
    Matrix<T> d_r;
    rms_norm_backward_input(w.post_norm, s.norm_post, dx, d_r);
    d_r += d_out;  // the residual branch
    s.d_norm_post_out = std::move(dx);
    attention_backward_input(shape_, w.attn, d_r, s.attn, s.d_norm_in_out);
    rms_norm_backward_input(w.input_norm, s.norm_in, s.d_norm_in_out, dh);
    dh += d_r;
  }

  /// Accumulates the weight gradients of `layer` into `dw`; after backward_input.
  void backward_weight(const Weights& /*w*/, int layer, const Saved& s, Weights& dw) const {
    rms_norm_backward_weight(s.norm_post, s.d_norm_post_out, dw.post_norm);
    if (spec_.is_moe_layer(layer)) router_backward_weight(s.router, dw.router);
    else gated_ffn_backward_weight(s.dense, std::span<GatedFfnWeights<T>>(&dw.dense, 1));
    attention_backward_weight(shape_, s.attn, dw.attn);
    rms_norm_backward_weight(s.norm_in, s.d_norm_in_out, dw.input_norm);
  }

  /// h = embedding rows of `ids`.
  void embed(const EdgeWeights& e, std::span<const int> ids, Matrix<T>& h) const { embedding_forward(e.embed, ids, h); }
  /// Accumulates the embedding gradient.
  void embed_backward(std::span<const int> ids, const Matrix<T>& dh, EdgeWeights& de) const {
    embedding_backward_weight(ids, dh, de.embed);
  }

  /// Mean next-byte cross-entropy of the final hidden states `h` against `targets`.
  T head_forward(const EdgeWeights& e, const Matrix<T>& h, std::span<const int> targets, HeadSaved& s) const {
    Matrix<T> n;
    rms_norm_forward(e.final_norm, static_cast<T>(options_.rms_norm_eps), h, n, s.norm);
    return lm_head_forward(e.head, n, targets, s.head);
  }
  /// The same loss without keeping state (evaluation).
  T head_loss(const EdgeWeights& e, const Matrix<T>& h, std::span<const int> targets) const {
    Matrix<T> n;
    RmsNormSaved<T> s;
    rms_norm_forward(e.final_norm, static_cast<T>(options_.rms_norm_eps), h, n, s);
    return lm_head_loss(e.head, n, targets);
  }
  /// logits = head(final_norm(h)), [tokens, vocab].
  void head_logits(const EdgeWeights& e, const Matrix<T>& h, Matrix<T>& logits) const {
    Matrix<T> n;
    RmsNormSaved<T> s;
    rms_norm_forward(e.final_norm, static_cast<T>(options_.rms_norm_eps), h, n, s);
    linear_forward(n, e.head, logits);
  }
  /// dh = d(scale * loss)/dh.
  void head_backward_input(const EdgeWeights& e, T scale, HeadSaved& s, Matrix<T>& dh) const {
    lm_head_backward_input(e.head, scale, s.head, s.d_norm_out);
    rms_norm_backward_input(e.final_norm, s.norm, s.d_norm_out, dh);
  }
  /// Accumulates the head and final-norm gradients.
  void head_backward_weight(const HeadSaved& s, EdgeWeights& de) const {
    lm_head_backward_weight(s.head, de.head);
    rms_norm_backward_weight(s.norm, s.d_norm_out, de.final_norm);
  }

 private:
  ModelSpec spec_;
  DecoderOptions options_;
  AttentionShape shape_;
  RouterOptions router_;
};

static_assert(runtime::attention_compute<ReferenceAttention<float>>);
static_assert(runtime::attention_compute<ReferenceAttention<double>>);

}  // namespace disagmoe::model
