// SPDX-License-Identifier: Apache-2.0
/// @file attention.hpp
/// `cuda::Attention`: the attention side of the Mixtral-style decoder on the GPU, a model
/// of `runtime::attention_compute` with the weights, names and initialisation of
/// model::ReferenceAttention<float> (it delegates `init`, `parameters` and the embedding
/// there), so a stage switches between them by template argument and checkpoints are
/// interchangeable. Per layer, as the reference:
///   r = h + Attention(RMSNorm_in(h)),  x = RMSNorm_post(r),
///   MoE layer: ids, gates = Router(x);  dense layer: out = r + FFN(x) (cuda::Experts).
/// Edges: final RMSNorm + LM head + mean cross-entropy; the embedding (a row gather and
/// its scatter-add) stays on the host, where the concept hands its rows.
///
/// On the device: projections, router and head are cuBLAS GEMMs (blas.hpp); attention
/// is batched cuBLAS products per (sequence, query-head group) -- S = Q K^T, P = softmax,
/// O = P V, and backward dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q -- around a
/// row softmax kernel that masks causally (and to the sliding window), keeps one
/// log-sum-exp per row and recomputes P from it in the backward (FlashAttention, Dao et
/// al. 2022, Alg. 4, without the tiling: the [seq_len, seq_len] scores of every head are
/// materialised). RMSNorm, rotary, router rows and cross-entropy rows are the kernels of
/// compute_launch.hpp, whose arithmetic the host tests (tests/cuda/test_compute_math.cpp).
/// The router's two losses and the head's mean are finished on the host from per-expert
/// totals and per-row terms (O(experts + rows) bytes), in the reference's order.
/// Results equal the host reference to fp32 rounding (GEMM summation order, exp/log ulps).
///
/// Precision: Precision::kBf16 multiplies bf16-rounded GEMM operands with fp32
/// accumulation (blas.hpp); norms, softmaxes, rotary and the losses stay fp32, and the
/// weights the runtime's optimizer updates stay fp32 masters on the host.
///
/// Memory: as cuda::Experts, each call uploads what it reads (inputs, the weights, the
/// gradients it accumulates into) and downloads what it writes; what the backward needs
/// stays on the device in `Saved` / `HeadSaved`. Concurrency: const calls may run at once
/// (each takes a lane, compute_lane.hpp). Host code; link CUDA::cublas and instantiate
/// the kernels once (instantiate.cuh).
#pragma once

#include <disagmoe/backend/cuda/blas.hpp>
#include <disagmoe/backend/cuda/compute_lane.hpp>
#include <disagmoe/backend/cuda/compute_launch.hpp>
#include <disagmoe/backend/cuda/experts.hpp>
#include <disagmoe/backend/cuda/memory.hpp>
#include <disagmoe/error.hpp>
#include <disagmoe/model/attention.hpp>
#include <disagmoe/model/cross_entropy.hpp>
#include <disagmoe/model/reference_attention.hpp>
#include <disagmoe/model/rms_norm.hpp>
#include <disagmoe/model/rotary.hpp>
#include <disagmoe/runtime/attention_compute.hpp>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace disagmoe::cuda {

/// See the file comment.
class Attention {
 public:
  using attention_compute_concept = runtime::attention_compute_tag;
  using scalar_type = float;
  using Reference = model::ReferenceAttention<float>;
  using Weights = Reference::Weights;
  using EdgeWeights = Reference::EdgeWeights;
  using Matrix = model::Matrix<float>;

  /// What one layer keeps on the device for one micro-batch (device arrays, row-major).
  struct Saved {
    long rows = 0;
    bool moe = false, has_forward = false, has_backward = false;
    DeviceBuffer<float> h, inv_in, x;            ///< layer input, RMSNorm_in's inverse RMS and output
    DeviceBuffer<float> q, k, v, o, lse;          ///< rotated q, k; v; P V; lse [rows, heads]
    DeviceBuffer<float> residual, inv_post, tokens;  ///< r, RMSNorm_post's inverse RMS and output
    DeviceBuffer<float> probs, gates, router_lse, selected, dlogits;
    DeviceBuffer<int> ids;
    std::vector<float> expert_fraction;           ///< f_i of the load-balancing loss
    Experts::Saved dense;                         ///< the dense FFN's (dense layers)
    DeviceBuffer<float> d_post_out, d_r, d_in_out, dq, dk, dv;  ///< set by backward_input
  };
  /// What the head keeps for one micro-batch.
  struct HeadSaved {
    long rows = 0;
    bool has_backward = false;
    DeviceBuffer<float> h, inv, n, probs, dlogits, d_norm_out;
    DeviceBuffer<int> targets;
  };

  /// `precision`: what the GEMMs multiply in (blas.hpp).
  Attention(ModelSpec spec, model::DecoderOptions options, Precision precision = Precision::kFp32)
      : host_(spec, options),
        dense_(spec, options, precision),
        spec_(std::move(spec)),
        eps_(static_cast<float>(options.rms_norm_eps)),
        shape_{spec_.hidden, spec_.heads, spec_.kv_heads, spec_.head_dim, spec_.seq_len, spec_.sliding_window,
               options.rope_theta},
        options_(options),
        rope_(model::make_rotary_table<float>(spec_.seq_len, spec_.head_dim, options.rope_theta)),
        pool_(std::make_shared<LanePool>(precision)) {}

  [[nodiscard]] Weights init(int layer, model::Rng& rng) const { return host_.init(layer, rng); }
  [[nodiscard]] EdgeWeights init_edges(model::Rng& rng) const { return host_.init_edges(rng); }
  [[nodiscard]] std::vector<runtime::NamedParameter<float>> parameters(Weights& w) const { return host_.parameters(w); }
  [[nodiscard]] std::vector<runtime::NamedParameter<float>> edge_parameters(EdgeWeights& e) const {
    return host_.edge_parameters(e);
  }

  /// Forward of `layer` on the residual stream h [tokens, hidden] (whole sequences).
  /// Preconditions as the reference's (ConfigError naming the field otherwise).
  void forward(const Weights& w, int layer, const Matrix& h, runtime::AttentionOutput<float>& out, Saved& s) const {
    check_layer(w, layer, h);
    const long n = h.rows();
    const int d = spec_.hidden;
    Lane lane(*pool_);
    s.rows = n;
    s.moe = spec_.is_moe_layer(layer);
    s.has_forward = s.has_backward = false;
    lane.upload(h.data(), s.h, h.size());
    const float* in_w = upload(lane, kInNorm, w.input_norm);
    s.inv_in.resize(n);
    s.x.resize(size(n, d));
    launch::rms_norm(lane.stream(), s.h.data(), in_w, eps_, n, d, s.x.data(), s.inv_in.data());
    float* a = attention_forward(lane, w, s);
    s.residual.resize(size(n, d));
    launch::add(lane.stream(), s.h.data(), a, size(n, d), s.residual.data());
    s.inv_post.resize(n);
    s.tokens.resize(size(n, d));
    launch::rms_norm(lane.stream(), s.residual.data(), upload(lane, kPostNorm, w.post_norm), eps_, n, d,
                     s.tokens.data(), s.inv_post.data());
    out.residual.resize(n, d);
    lane.download(s.residual.data(), out.residual.data(), out.residual.size());
    if (s.moe) {
      router_forward(lane, w, s, out);
    } else {
      Matrix x(n, d), f;
      lane.download(s.tokens.data(), x.data(), x.size());
      const std::array<std::int64_t, 2> offsets{0, n};
      dense_.forward(std::span<const model::GatedFfnWeights<float>>(&w.dense, 1), offsets, x, f, s.dense);
      out.residual += f;
      out.tokens.resize(0, d);
      out.topk_ids.resize(0, spec_.top_k);
      out.gates.resize(0, spec_.top_k);
      out.aux_loss = out.z_loss = 0.0f;
    }
    s.has_forward = true;
  }

  /// dh = dL/dh of `layer` from the gradients of its outputs (after `forward`).
  void backward_input(const Weights& w, int layer, const runtime::AttentionGradients<float>& g, Saved& s,
                      Matrix& dh) const {
    expect(s.has_forward && s.moe == spec_.is_moe_layer(layer), "cuda::Attention saved", "without forward",
           "the forward of this layer");
    const long n = s.rows;
    const int d = spec_.hidden;
    check_rows("cuda::Attention d_output", *g.d_output, n, d);
    Lane lane(*pool_);
    s.d_post_out.resize(size(n, d));
    if (s.moe) {
      check_rows("cuda::Attention d_tokens", *g.d_tokens, n, d);
      check_rows("cuda::Attention d_gates", *g.d_gates, n, spec_.top_k);
      lane.upload(g.d_tokens->data(), s.d_post_out.data(), g.d_tokens->size());
      router_backward(lane, w, g, s);
    } else {
      Matrix dx;
      dense_.backward_input(std::span<const model::GatedFfnWeights<float>>(&w.dense, 1), *g.d_output, s.dense, dx);
      lane.upload(dx.data(), s.d_post_out.data(), dx.size());
    }
    // d_r = RMSNorm_post backward + the residual branch's d_output.
    float* d_out = lane.buffer(kGradIn, size(n, d));
    lane.upload(g.d_output->data(), d_out, g.d_output->size());
    s.d_r.resize(size(n, d));
    launch::rms_norm_backward(lane.stream(), s.residual.data(), s.inv_post.data(), upload(lane, kPostNorm, w.post_norm),
                              s.d_post_out.data(), d_out, n, d, s.d_r.data());
    attention_backward_input(lane, w, s);
    float* dh_dev = lane.buffer(kGradIn, size(n, d));
    launch::rms_norm_backward(lane.stream(), s.h.data(), s.inv_in.data(), upload(lane, kInNorm, w.input_norm),
                              s.d_in_out.data(), s.d_r.data(), n, d, dh_dev);
    dh.resize(n, d);
    lane.download(dh_dev, dh.data(), dh.size());
    s.has_backward = true;
  }

  /// Accumulates the weight gradients of `layer` into `dw` (after `backward_input`).
  void backward_weight(const Weights& /*w*/, int layer, const Saved& s, Weights& dw) const {
    expect(s.has_backward && s.moe == spec_.is_moe_layer(layer), "cuda::Attention saved", "without backward_input",
           "backward_input of this layer since its forward");
    const long n = s.rows;
    const int d = spec_.hidden, hd = spec_.heads * spec_.head_dim, kd = spec_.kv_heads * spec_.head_dim;
    check_layer_weights(dw, layer, "cuda::Attention dw");
    Lane lane(*pool_);
    accumulate(lane, dw.post_norm, [&](float* g) {
      launch::rms_norm_weight(lane.stream(), s.residual.data(), s.inv_post.data(), s.d_post_out.data(), n, d, g);
    });
    if (s.moe) {
      const int e = spec_.experts;
      accumulate(lane, dw.router, [&](float* g) {
        lane.blas().gemm(true, false, e, d, static_cast<int>(n), 1, s.dlogits.data(), e, s.tokens.data(), d, 1, g, d);
      });
    } else {
      dense_.backward_weight(s.dense, std::span<model::GatedFfnWeights<float>>(&dw.dense, 1));
    }
    const int m = static_cast<int>(n);
    accumulate(lane, dw.attn.wq, [&](float* g) { lane.blas().gemm(true, false, hd, d, m, 1, s.dq.data(), hd, s.x.data(), d, 1, g, d); });
    accumulate(lane, dw.attn.wk, [&](float* g) { lane.blas().gemm(true, false, kd, d, m, 1, s.dk.data(), kd, s.x.data(), d, 1, g, d); });
    accumulate(lane, dw.attn.wv, [&](float* g) { lane.blas().gemm(true, false, kd, d, m, 1, s.dv.data(), kd, s.x.data(), d, 1, g, d); });
    accumulate(lane, dw.attn.wo, [&](float* g) { lane.blas().gemm(true, false, d, hd, m, 1, s.d_r.data(), d, s.o.data(), hd, 1, g, hd); });
    accumulate(lane, dw.input_norm, [&](float* g) {
      launch::rms_norm_weight(lane.stream(), s.h.data(), s.inv_in.data(), s.d_in_out.data(), n, d, g);
    });
  }

  /// h = embedding rows of `ids` (on the host: the concept hands host rows).
  void embed(const EdgeWeights& e, std::span<const int> ids, Matrix& h) const { host_.embed(e, ids, h); }
  /// Accumulates the embedding gradient (on the host, in token order).
  void embed_backward(std::span<const int> ids, const Matrix& dh, EdgeWeights& de) const {
    host_.embed_backward(ids, dh, de);
  }

  /// Mean next-byte cross-entropy of the final hidden states `h` against `targets`.
  float head_forward(const EdgeWeights& e, const Matrix& h, std::span<const int> targets, HeadSaved& s) const {
    Lane lane(*pool_);
    return head_loss_on(lane, e, h, targets, s);
  }
  /// The same loss without keeping state (evaluation).
  float head_loss(const EdgeWeights& e, const Matrix& h, std::span<const int> targets) const {
    Lane lane(*pool_);
    HeadSaved s;
    return head_loss_on(lane, e, h, targets, s);
  }
  /// logits = head(final_norm(h)), [tokens, vocab].
  void head_logits(const EdgeWeights& e, const Matrix& h, Matrix& logits) const {
    const long n = h.rows();
    const int d = spec_.hidden, vocab = spec_.vocab;
    check_rows("cuda::Attention head h", h, n, d);
    model::detail::check_rms_weight(e.final_norm, d);
    Lane lane(*pool_);
    HeadSaved s;
    head_norm(lane, e, h, s);
    float* out = lane.buffer(kHeadLogits, size(n, vocab));
    lane.blas().gemm(false, true, static_cast<int>(n), vocab, d, 1, s.n.data(), d, upload(lane, kHead, e.head), d, 0,
                     out, vocab);
    logits.resize(n, vocab);
    lane.download(out, logits.data(), logits.size());
  }
  /// dh = d(scale * loss)/dh (after head_forward).
  void head_backward_input(const EdgeWeights& e, float scale, HeadSaved& s, Matrix& dh) const {
    expect(s.rows >= 1 && s.probs.size() == size(s.rows, spec_.vocab), "cuda::Attention head saved", "without forward",
           "head_forward first");
    const long n = s.rows;
    const int d = spec_.hidden, vocab = spec_.vocab;
    Lane lane(*pool_);
    s.dlogits.resize(size(n, vocab));
    launch::cross_entropy_backward(lane.stream(), s.probs.data(), s.targets.data(), n, vocab,
                                   scale / static_cast<float>(n), s.dlogits.data());
    s.d_norm_out.resize(size(n, d));
    lane.blas().gemm(false, false, static_cast<int>(n), d, vocab, 1, s.dlogits.data(), vocab,
                     upload(lane, kHead, e.head), d, 0, s.d_norm_out.data(), d);
    float* dh_dev = lane.buffer(kGradIn, size(n, d));
    launch::rms_norm_backward(lane.stream(), s.h.data(), s.inv.data(), upload(lane, kInNorm, e.final_norm),
                              s.d_norm_out.data(), nullptr, n, d, dh_dev);
    dh.resize(n, d);
    lane.download(dh_dev, dh.data(), dh.size());
    s.has_backward = true;
  }
  /// Accumulates the head and final-norm gradients (after head_backward_input).
  void head_backward_weight(const HeadSaved& s, EdgeWeights& de) const {
    expect(s.has_backward, "cuda::Attention head saved", "without backward_input", "head_backward_input first");
    const long n = s.rows;
    const int d = spec_.hidden, vocab = spec_.vocab;
    check_rows("cuda::Attention de.head", de.head, vocab, d);
    model::detail::check_rms_weight(de.final_norm, d);
    Lane lane(*pool_);
    accumulate(lane, de.head, [&](float* g) {
      lane.blas().gemm(true, false, vocab, d, static_cast<int>(n), 1, s.dlogits.data(), vocab, s.n.data(), d, 1, g, d);
    });
    accumulate(lane, de.final_norm, [&](float* g) {
      launch::rms_norm_weight(lane.stream(), s.h.data(), s.inv.data(), s.d_norm_out.data(), n, d, g);
    });
  }

 private:
  // The lane temporaries of a call, by role.
  enum Slot : std::size_t {
    kInNorm, kPostNorm, kWq, kWk, kWv, kWo, kRouter, kRopeCos, kRopeSin, kScores, kScoreGrads, kProjected, kGradIn,
    kGradOut, kAccumulate, kRouterTotals, kHead, kHeadLogits
  };

  static std::size_t size(long rows, int cols) { return static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols); }
  static void check_rows(const std::string& field, const Matrix& m, long rows, int cols) {
    expect(m.rows() == rows && m.cols() == cols, field,
           "[" + std::to_string(m.rows()) + ", " + std::to_string(m.cols()) + "]",
           "[" + std::to_string(rows) + ", " + std::to_string(cols) + "]");
  }
  /// Uploads host matrix `m` into temporary `slot`; returns its device copy.
  static const float* upload(Lane& lane, Slot slot, const Matrix& m) {
    float* p = lane.buffer(slot, static_cast<std::size_t>(m.size()));
    lane.upload(m.data(), p, static_cast<std::size_t>(m.size()));
    return p;
  }
  /// g += what `add` accumulates on the device copy of g (uploaded, then downloaded).
  template <class F>
  static void accumulate(Lane& lane, Matrix& g, F&& add) {
    float* p = lane.buffer(kAccumulate, static_cast<std::size_t>(g.size()));
    lane.upload(g.data(), p, static_cast<std::size_t>(g.size()));
    add(p);
    lane.download(p, g.data(), static_cast<std::size_t>(g.size()));
  }

  void check_layer_weights(const Weights& w, int layer, const std::string& what) const {
    model::detail::check_weights(shape_, w.attn, (what + ".attn").c_str());
    model::detail::check_rms_weight(w.input_norm, spec_.hidden);
    model::detail::check_rms_weight(w.post_norm, spec_.hidden);
    if (spec_.is_moe_layer(layer)) check_rows(what + ".router", w.router, spec_.experts, spec_.hidden);
  }
  void check_layer(const Weights& w, int layer, const Matrix& h) const {
    check_layer_weights(w, layer, "cuda::Attention weights");
    expect(h.cols() == spec_.hidden, "cuda::Attention h.cols", h.cols(), "hidden (" + std::to_string(spec_.hidden) + ")");
    expect(h.rows() % spec_.seq_len == 0, "cuda::Attention h.rows", h.rows(),
           "a multiple of seq_len (" + std::to_string(spec_.seq_len) + ")");
  }

  /// Calls f(b, j) for every sequence b and position j in a query-head group: the
  /// batched products then run over the kv heads g (query head g * group + j).
  template <class F>
  void for_each_group_slice(long sequences, F&& f) const {
    const int group = spec_.heads / spec_.kv_heads;
    for (long b = 0; b < sequences; ++b)
      for (int j = 0; j < group; ++j) f(b, j);
  }

  /// Scores S [sequences, heads, L, L] = Q K^T into `scores` (batched per group slice).
  void scores(Lane& lane, const Saved& s, float* out) const {
    const int L = spec_.seq_len, D = spec_.head_dim, G = spec_.kv_heads, H = spec_.heads, group = H / G;
    const int hd = H * D, kd = G * D;
    for_each_group_slice(s.rows / L, [&](long b, int j) {
      lane.blas().gemm_batched(false, true, L, L, D, 1, s.q.data() + b * L * hd + j * D, hd, long{group} * D,
                               s.k.data() + b * L * kd, kd, D, 0, out + (b * H + j) * L * L, L,
                               long{group} * L * L, G);
    });
  }

  /// Projections, rotary, masked softmax and P V; returns a = o wo^T (a lane temporary).
  float* attention_forward(Lane& lane, const Weights& w, Saved& s) const {
    const long n = s.rows;
    const int d = spec_.hidden, L = spec_.seq_len, D = spec_.head_dim, G = spec_.kv_heads, H = spec_.heads;
    const int hd = H * D, kd = G * D, group = H / G, m = static_cast<int>(n);
    s.q.resize(size(n, hd));
    s.k.resize(size(n, kd));
    s.v.resize(size(n, kd));
    lane.blas().gemm(false, true, m, hd, d, 1, s.x.data(), d, upload(lane, kWq, w.attn.wq), d, 0, s.q.data(), hd);
    lane.blas().gemm(false, true, m, kd, d, 1, s.x.data(), d, upload(lane, kWk, w.attn.wk), d, 0, s.k.data(), kd);
    lane.blas().gemm(false, true, m, kd, d, 1, s.x.data(), d, upload(lane, kWv, w.attn.wv), d, 0, s.v.data(), kd);
    const float* cos = upload(lane, kRopeCos, rope_.cos);
    const float* sin = upload(lane, kRopeSin, rope_.sin);
    launch::rotary(lane.stream(), s.q.data(), n, H, D, cos, sin, L, false);
    launch::rotary(lane.stream(), s.k.data(), n, G, D, cos, sin, L, false);
    const long sequences = n / L;
    float* p = lane.buffer(kScores, size(sequences * H * L, L));
    scores(lane, s, p);
    s.lse.resize(size(n, H));
    launch::attention_softmax(lane.stream(), p, sequences, H, L, spec_.sliding_window, scale(), s.lse.data());
    s.o.resize(size(n, hd));
    for_each_group_slice(sequences, [&](long b, int j) {
      lane.blas().gemm_batched(false, false, L, D, L, 1, p + (b * H + j) * L * L, L, long{group} * L * L,
                               s.v.data() + b * L * kd, kd, D, 0, s.o.data() + b * L * hd + j * D, hd,
                               long{group} * D, G);
    });
    float* a = lane.buffer(kProjected, size(n, d));
    lane.blas().gemm(false, true, m, d, hd, 1, s.o.data(), hd, upload(lane, kWo, w.attn.wo), hd, 0, a, d);
    return a;
  }

  /// From s.d_r = dL/d(attention output): dq, dk, dv (before the projections, rotary
  /// undone) and s.d_in_out = dL/d RMSNorm_in(h).
  void attention_backward_input(Lane& lane, const Weights& w, Saved& s) const {
    const long n = s.rows;
    const int d = spec_.hidden, L = spec_.seq_len, D = spec_.head_dim, G = spec_.kv_heads, H = spec_.heads;
    const int hd = H * D, kd = G * D, group = H / G, m = static_cast<int>(n);
    const long sequences = n / L;
    float* dout = lane.buffer(kGradOut, size(n, hd));
    lane.blas().gemm(false, false, m, hd, d, 1, s.d_r.data(), d, upload(lane, kWo, w.attn.wo), hd, 0, dout, hd);
    float* p = lane.buffer(kScores, size(sequences * H * L, L));
    scores(lane, s, p);
    launch::attention_probs(lane.stream(), p, sequences, H, L, spec_.sliding_window, scale(), s.lse.data());
    float* dp = lane.buffer(kScoreGrads, size(sequences * H * L, L));
    s.dq.resize(size(n, hd));
    s.dk.resize(size(n, kd));
    s.dv.resize(size(n, kd));
    const long sll = long{group} * L * L, sd = long{group} * D;
    // The query heads of a group add into their kv head's dk, dv: the first slice writes.
    for_each_group_slice(sequences, [&](long b, int j) {
      lane.blas().gemm_batched(true, false, L, D, L, 1, p + (b * H + j) * L * L, L, sll, dout + b * L * hd + j * D, hd,
                               sd, j == 0 ? 0.0f : 1.0f, s.dv.data() + b * L * kd, kd, D, G);
      lane.blas().gemm_batched(false, true, L, L, D, 1, dout + b * L * hd + j * D, hd, sd, s.v.data() + b * L * kd, kd,
                               D, 0, dp + (b * H + j) * L * L, L, sll, G);
    });
    launch::attention_softmax_backward(lane.stream(), p, dp, sequences * H * L, L, scale());
    for_each_group_slice(sequences, [&](long b, int j) {
      lane.blas().gemm_batched(false, false, L, D, L, 1, dp + (b * H + j) * L * L, L, sll, s.k.data() + b * L * kd, kd,
                               D, 0, s.dq.data() + b * L * hd + j * D, hd, sd, G);
      lane.blas().gemm_batched(true, false, L, D, L, 1, dp + (b * H + j) * L * L, L, sll, s.q.data() + b * L * hd + j * D,
                               hd, sd, j == 0 ? 0.0f : 1.0f, s.dk.data() + b * L * kd, kd, D, G);
    });
    const float* cos = upload(lane, kRopeCos, rope_.cos);
    const float* sin = upload(lane, kRopeSin, rope_.sin);
    launch::rotary(lane.stream(), s.dq.data(), n, H, D, cos, sin, L, true);
    launch::rotary(lane.stream(), s.dk.data(), n, G, D, cos, sin, L, true);
    s.d_in_out.resize(size(n, d));
    lane.blas().gemm(false, false, m, d, hd, 1, s.dq.data(), hd, upload(lane, kWq, w.attn.wq), d, 0, s.d_in_out.data(), d);
    lane.blas().gemm(false, false, m, d, kd, 1, s.dk.data(), kd, upload(lane, kWk, w.attn.wk), d, 1, s.d_in_out.data(), d);
    lane.blas().gemm(false, false, m, d, kd, 1, s.dv.data(), kd, upload(lane, kWv, w.attn.wv), d, 1, s.d_in_out.data(), d);
  }

  /// Router forward on s.tokens: ids, gates and the two losses into `out`.
  void router_forward(Lane& lane, const Weights& w, Saved& s, runtime::AttentionOutput<float>& out) const {
    const long n = s.rows;
    const int d = spec_.hidden, e = spec_.experts, k = spec_.top_k;
    s.probs.resize(size(n, e));
    s.ids.resize(size(n, k));
    s.gates.resize(size(n, k));
    s.router_lse.resize(static_cast<std::size_t>(n));
    s.selected.resize(static_cast<std::size_t>(n));
    lane.blas().gemm(false, true, static_cast<int>(n), e, d, 1, s.tokens.data(), d, upload(lane, kRouter, w.router), d,
                     0, s.probs.data(), e);
    launch::router_rows(lane.stream(), s.probs.data(), n, e, k, s.ids.data(), s.gates.data(), s.router_lse.data(),
                        s.selected.data());
    // Per-expert totals: probability sums in token order, then the assignment counts (as int bits).
    float* totals = lane.buffer(kRouterTotals, 2 * static_cast<std::size_t>(e));
    launch::router_totals(lane.stream(), s.probs.data(), s.ids.data(), n, e, k, totals,
                          reinterpret_cast<int*>(totals + e));
    out.tokens.resize(n, d);
    lane.download(s.tokens.data(), out.tokens.data(), out.tokens.size());
    out.topk_ids.resize(n, k);
    lane.download(s.ids.data(), out.topk_ids.data(), out.topk_ids.size());
    out.gates.resize(n, k);
    lane.download(s.gates.data(), out.gates.data(), out.gates.size());
    std::vector<float> lse(static_cast<std::size_t>(n)), prob_sums(static_cast<std::size_t>(e));
    std::vector<int> counts(static_cast<std::size_t>(e));
    lane.download(s.router_lse.data(), lse.data(), lse.size());
    lane.download(totals, prob_sums.data(), prob_sums.size());
    lane.download(reinterpret_cast<const int*>(totals + e), counts.data(), counts.size());
    // model/router.hpp's reductions, same order: aux = E sum_i f_i P_i, z = mean lse^2.
    s.expert_fraction.assign(static_cast<std::size_t>(e), 0.0f);
    float aux = 0, z = 0;
    if (n > 0) {
      const float assignments = static_cast<float>(n) * static_cast<float>(k);
      for (int i = 0; i < e; ++i) {
        const float f = static_cast<float>(counts[static_cast<std::size_t>(i)]) / assignments;
        s.expert_fraction[static_cast<std::size_t>(i)] = f;
        aux += f * (prob_sums[static_cast<std::size_t>(i)] / static_cast<float>(n));
      }
      aux = static_cast<float>(e) * aux;
      for (const float l : lse) z += l * l;
      z /= static_cast<float>(n);
    }
    out.aux_loss = static_cast<float>(options_.aux_loss_coef) * aux;
    out.z_loss = static_cast<float>(options_.z_loss_coef) * z;
  }

  /// s.d_post_out (d_tokens on entry) += the router's input gradient; keeps s.dlogits.
  void router_backward(Lane& lane, const Weights& w, const runtime::AttentionGradients<float>& g, Saved& s) const {
    const long n = s.rows;
    const int d = spec_.hidden, e = spec_.experts, k = spec_.top_k;
    s.dlogits.resize(size(n, e));
    if (n == 0) return;
    // router_backward_input's constants, computed as it does.
    const float scale = g.loss_scale;
    const float aux_scale = scale * static_cast<float>(options_.aux_loss_coef) * static_cast<float>(e) /
                            static_cast<float>(n);
    const float z_scale = scale * static_cast<float>(options_.z_loss_coef) * 2.0f / static_cast<float>(n);
    std::vector<float> aux_row(static_cast<std::size_t>(e));
    for (std::size_t i = 0; i < aux_row.size(); ++i) aux_row[i] = aux_scale * s.expert_fraction[i];
    float* aux = lane.buffer(kRouterTotals, aux_row.size());
    lane.upload(aux_row.data(), aux, aux_row.size());
    float* dg = lane.buffer(kGradOut, size(n, k));
    lane.upload(g.d_gates->data(), dg, g.d_gates->size());
    launch::router_backward(lane.stream(), s.probs.data(), s.ids.data(), s.gates.data(), dg, s.selected.data(),
                            s.router_lse.data(), aux, z_scale, n, e, k, s.dlogits.data());
    lane.blas().gemm(false, false, static_cast<int>(n), d, e, 1, s.dlogits.data(), e, upload(lane, kRouter, w.router),
                     d, 1, s.d_post_out.data(), d);
  }

  /// Final RMSNorm of h into s (h, inv, n).
  void head_norm(Lane& lane, const EdgeWeights& e, const Matrix& h, HeadSaved& s) const {
    const long n = h.rows();
    const int d = spec_.hidden;
    s.rows = n;
    s.has_backward = false;
    lane.upload(h.data(), s.h, h.size());
    s.inv.resize(static_cast<std::size_t>(n));
    s.n.resize(size(n, d));
    launch::rms_norm(lane.stream(), s.h.data(), upload(lane, kInNorm, e.final_norm), eps_, n, d, s.n.data(),
                     s.inv.data());
  }

  /// The mean cross-entropy, keeping what the backward needs in s.
  float head_loss_on(Lane& lane, const EdgeWeights& e, const Matrix& h, std::span<const int> targets,
                     HeadSaved& s) const {
    model::detail::check_lm_head(e.head, h, targets);
    model::detail::check_rms_weight(e.final_norm, h.cols());
    const long n = h.rows();
    const int d = spec_.hidden, vocab = static_cast<int>(e.head.rows());
    head_norm(lane, e, h, s);
    s.probs.resize(size(n, vocab));
    lane.blas().gemm(false, true, static_cast<int>(n), vocab, d, 1, s.n.data(), d, upload(lane, kHead, e.head), d, 0,
                     s.probs.data(), vocab);
    lane.upload(targets.data(), s.targets, targets.size());
    float* terms = lane.buffer(kHeadLogits, static_cast<std::size_t>(n));
    launch::cross_entropy(lane.stream(), s.probs.data(), s.targets.data(), n, vocab, true, terms);
    std::vector<float> t(static_cast<std::size_t>(n));
    lane.download(terms, t.data(), t.size());
    float total = 0;  // model::detail::mean_cross_entropy's order
    for (const float x : t) total += x;
    return total / static_cast<float>(n);
  }

  float scale() const { return 1.0f / std::sqrt(static_cast<float>(spec_.head_dim)); }  // HF: head_dim ** -0.5

  Reference host_;  // init, parameter names, embedding: the reference's
  Experts dense_;   // the dense layers' FFN
  ModelSpec spec_;
  float eps_;
  model::AttentionShape shape_;
  model::DecoderOptions options_;
  model::RotaryTable<float> rope_;
  std::shared_ptr<LanePool> pool_;
};

static_assert(runtime::attention_compute<Attention>);

}  // namespace disagmoe::cuda
