// SPDX-License-Identifier: Apache-2.0
/// @file attention.hpp
/// Causal multi-head self-attention with grouped key/value heads (GQA; Ainslie et al.,
/// "GQA: Training Generalized Multi-Query Transformer Models from Multi-Head
/// Checkpoints", 2023), rotary position embeddings (`rotary.hpp`) and an optional
/// sliding window, with a hand-written backward split into an input-gradient and a
/// weight-gradient call (so a pipeline schedule can defer the weight gradient).
///
/// Semantics follow Hugging Face transformers' Llama/Mistral/Mixtral attention:
///   q = x wq^T, k = x wk^T, v = x wv^T                      (no biases)
///   q_h, k_g <- RoPE at each row's position                  (`apply_rotary_pos_emb`)
///   query head h reads kv head g = h / (heads / kv_heads)    (`repeat_kv`)
///   S = q_h k_g^T / sqrt(head_dim), masked to i - window < j <= i (window 0: j <= i)
///   P = softmax over keys (row max subtracted), o_h = P v_g
///   y = concat_h(o_h) wo^T
/// The mask is Mistral's `sliding_window` (keys j with q_idx - sliding_window < j <=
/// q_idx, HF `masking_utils.sliding_window_overlay`).
///
/// Memory follows FlashAttention (Dao et al., "FlashAttention: Fast and Memory-Efficient
/// Exact Attention with IO-Awareness", 2022, Sec. 3.1 and Alg. 4): the probabilities
/// are not stored; forward keeps one log-sum-exp per (row, head) and backward recomputes
/// P from it. Work is done per (sequence, head, tile of kQueryTile queries) with Eigen
/// GEMMs; a tile only touches the keys its queries may see, so the causal mask halves
/// the FLOPs and a window bounds them. Single-threaded beyond Eigen's own kernels and
/// deterministic: the same inputs give bitwise the same outputs.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/model/rotary.hpp>
#include <disagmoe/model/tensor.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace disagmoe::model {

/// Shape of one attention layer and of the micro-batch it sees.
struct AttentionShape {
  int hidden = 0;    ///< model width (columns of x and y)
  int heads = 0;     ///< query heads
  int kv_heads = 0;  ///< key/value heads; divides heads (== heads: MHA, 1: MQA)
  int head_dim = 0;  ///< per-head width D; even (RoPE pairs i and i + D/2)
  int seq_len = 0;   ///< tokens per sequence; x has batch * seq_len rows, sequences contiguous, row r at position r % seq_len
  int window = 0;    ///< 0: full causal; w > 0: query i sees keys i - w < j <= i (HF Mistral `sliding_window`)
  double rope_theta = 10000.0;  ///< RoPE base (HF `rope_theta`)
};

/// Throws ConfigError naming the first bad field of `s`, e.g.
/// "AttentionShape.kv_heads = 3: expected a divisor of heads (8)". O(1).
/// (That x.rows() is a multiple of seq_len is checked by `attention_forward`.)
inline void validate(const AttentionShape& s) {
  expect(s.hidden > 0, "AttentionShape.hidden", s.hidden, "> 0");
  expect(s.heads > 0, "AttentionShape.heads", s.heads, "> 0");
  expect(s.kv_heads > 0 && s.heads % s.kv_heads == 0, "AttentionShape.kv_heads", s.kv_heads,
         "a divisor of heads (" + std::to_string(s.heads) + ")");
  expect(s.head_dim > 0 && s.head_dim % 2 == 0, "AttentionShape.head_dim", s.head_dim,
         "a positive even number (RoPE rotates pairs i, i + head_dim/2)");
  expect(s.seq_len > 0, "AttentionShape.seq_len", s.seq_len, "> 0");
  expect(s.window >= 0, "AttentionShape.window", s.window, ">= 0 (0: full causal)");
  expect(s.rope_theta > 0.0 && std::isfinite(s.rope_theta), "AttentionShape.rope_theta", s.rope_theta,
         "a positive finite number");
}

/// Projection weights, Hugging Face layout ([out, in], applied as y = x W^T).
template <class T>
struct AttentionWeights {
  Matrix<T> wq;  ///< [heads * head_dim, hidden]
  Matrix<T> wk;  ///< [kv_heads * head_dim, hidden]
  Matrix<T> wv;  ///< [kv_heads * head_dim, hidden]
  Matrix<T> wo;  ///< [hidden, heads * head_dim]
};

/// What one (layer, micro-batch) keeps between forward and backward. Filled by
/// `attention_forward`; `attention_backward_input` adds the gradients that
/// `attention_backward_weight` consumes. Memory: rows * (hidden + 2 (heads + kv_heads)
/// head_dim + heads) values after forward, plus rows * (hidden + (heads + 2 kv_heads)
/// head_dim) after backward_input; never seq_len^2 per head.
template <class T>
struct AttentionSaved {
  Matrix<T> x;    ///< [rows, hidden] the layer input (for the q/k/v weight gradients)
  Matrix<T> q;    ///< [rows, heads * head_dim] queries after RoPE
  Matrix<T> k;    ///< [rows, kv_heads * head_dim] keys after RoPE
  Matrix<T> v;    ///< [rows, kv_heads * head_dim] values
  Matrix<T> o;    ///< [rows, heads * head_dim] attention output before wo (for the wo gradient)
  Matrix<T> lse;  ///< [rows, heads] log sum_j exp(S_ij) of the scaled, masked scores
  RotaryTable<T> rope;  ///< cos/sin for positions [0, seq_len)
  // Set by attention_backward_input:
  Matrix<T> dy;   ///< [rows, hidden] gradient of y (for the wo gradient)
  Matrix<T> dq;   ///< [rows, heads * head_dim] gradient of x wq^T (before RoPE)
  Matrix<T> dk;   ///< [rows, kv_heads * head_dim] gradient of x wk^T (before RoPE)
  Matrix<T> dv;   ///< [rows, kv_heads * head_dim] gradient of x wv^T
  bool has_forward = false;   ///< attention_forward has filled the forward fields
  bool has_backward = false;  ///< attention_backward_input has filled dy, dq, dk, dv
};

namespace detail {

/// Queries per tile: large enough for efficient GEMMs, small enough that the causal
/// diagonal tile (where half the computed scores are masked) stays a small share.
inline constexpr int kQueryTile = 128;

/// First key a query at position i may see.
inline int first_key(int i, int window) { return window > 0 ? std::max(0, i - window + 1) : 0; }

template <class T>
void check_weights(const AttentionShape& s, const AttentionWeights<T>& w, const char* what) {
  const auto check = [&](const Matrix<T>& m, const char* name, Eigen::Index rows, Eigen::Index cols) {
    const std::string field = std::string(what) + "." + name;
    const std::string want = "[" + std::to_string(rows) + ", " + std::to_string(cols) + "]";
    expect(m.rows() == rows && m.cols() == cols, field,
           "[" + std::to_string(m.rows()) + ", " + std::to_string(m.cols()) + "]", want);
  };
  const Eigen::Index qd = static_cast<Eigen::Index>(s.heads) * s.head_dim;
  const Eigen::Index kd = static_cast<Eigen::Index>(s.kv_heads) * s.head_dim;
  check(w.wq, "wq", qd, s.hidden);
  check(w.wk, "wk", kd, s.hidden);
  check(w.wv, "wv", kd, s.hidden);
  check(w.wo, "wo", s.hidden, qd);
}

/// Turns the raw scores of one tile (queries [i0, i0 + n), keys [lo, lo + m)) into the
/// masked, softmaxed probabilities, in place; masked entries become exactly 0 so the
/// following GEMMs may use the whole tile. kRecompute = false (forward): stable softmax
/// and each row's log-sum-exp written to `lse`. kRecompute = true (backward): P =
/// exp(scale * S - lse) from the saved `lse` (FlashAttention Alg. 4 line 11).
template <bool kRecompute, class T, class Lse>
void softmax_tile(Matrix<T>& scores, int i0, int lo, int window, T scale, Lse&& lse) {
  const Eigen::Index n = scores.rows(), m = scores.cols();
  for (Eigen::Index r = 0; r < n; ++r) {
    const int i = i0 + static_cast<int>(r);
    const Eigen::Index a = first_key(i, window) - lo;  // allowed columns [a, b)
    const Eigen::Index b = i - lo + 1;
    auto row = scores.row(r);
    row.head(a).setZero();
    row.tail(m - b).setZero();
    auto seg = row.segment(a, b - a).array();
    if constexpr (kRecompute) {
      seg = (scale * seg - lse(r)).exp();
    } else {
      // Stable softmax: subtract the row max before exp. The diagonal is always
      // allowed, so the segment is non-empty and the max finite for finite inputs.
      const T mx = scale * seg.maxCoeff();  // scale > 0: max(scale s) = scale max(s)
      seg = (scale * seg - mx).exp();
      const T sum = seg.sum();
      seg /= sum;
      lse(r) = mx + std::log(sum);
    }
  }
}

/// One block of the score matrix: queries [i0, i0 + n) of query head h in the sequence
/// starting at row `base`, against the keys [lo, lo + m) they may see (columns qc / kc).
struct ScoreTile {
  Eigen::Index base, qc, kc;
  int h, i0, n, lo, m;
};

/// Calls `f(tile)` for every score tile of `batch` sequences, in a fixed order (sequence,
/// head, query tile), so forward and backward visit the same blocks.
template <class F>
void for_each_tile(const AttentionShape& s, Eigen::Index batch, F&& f) {
  const int group = s.heads / s.kv_heads;
  for (Eigen::Index b = 0; b < batch; ++b)
    for (int h = 0; h < s.heads; ++h)
      for (int i0 = 0; i0 < s.seq_len; i0 += kQueryTile) {
        const int n = std::min(kQueryTile, s.seq_len - i0), lo = first_key(i0, s.window);
        f(ScoreTile{b * s.seq_len, static_cast<Eigen::Index>(h) * s.head_dim,
                    static_cast<Eigen::Index>(h / group) * s.head_dim, h, i0, n, lo, i0 + n - lo});
      }
}

}  // namespace detail

/// Forward: y = attention(x) as in the file comment. x is [rows, hidden] with rows =
/// batch * seq_len; y is resized to [rows, hidden]; `saved` is overwritten with what
/// backward needs (its gradient fields are cleared). Throws ConfigError on an invalid
/// shape, weights of the wrong size, x.cols() != hidden or rows not a multiple of
/// seq_len. O(rows * hidden * (heads + kv_heads) * head_dim) for the projections plus
/// O(rows * min(seq_len, window) * heads * head_dim) for the scores.
template <class T>
void attention_forward(const AttentionShape& s, const AttentionWeights<T>& w, const Matrix<T>& x, Matrix<T>& y,
                       AttentionSaved<T>& saved) {
  validate(s);
  detail::check_weights(s, w, "AttentionWeights");
  expect(x.cols() == s.hidden, "x.cols()", x.cols(), "AttentionShape.hidden (" + std::to_string(s.hidden) + ")");
  expect(x.rows() % s.seq_len == 0, "x.rows()", x.rows(),
         "a multiple of AttentionShape.seq_len (" + std::to_string(s.seq_len) + ")");
  const int L = s.seq_len, D = s.head_dim;
  const Eigen::Index batch = x.rows() / L;
  const T scale = T(1) / std::sqrt(static_cast<T>(D));  // HF: head_dim ** -0.5

  saved.has_forward = false;
  saved.has_backward = false;
  saved.dy.resize(0, 0);
  saved.dq.resize(0, 0);
  saved.dk.resize(0, 0);
  saved.dv.resize(0, 0);
  saved.x = x;
  linear_forward(x, w.wq, saved.q);
  linear_forward(x, w.wk, saved.k);
  linear_forward(x, w.wv, saved.v);
  if (!saved.rope.matches(L, D, s.rope_theta)) saved.rope = make_rotary_table<T>(L, D, s.rope_theta);
  rotary_apply(saved.rope, saved.q, s.heads);
  rotary_apply(saved.rope, saved.k, s.kv_heads);
  saved.o.resize(x.rows(), static_cast<Eigen::Index>(s.heads) * D);
  saved.lse.resize(x.rows(), s.heads);

  Matrix<T> scores;
  detail::for_each_tile(s, batch, [&](const detail::ScoreTile& t) {
    const auto qt = saved.q.block(t.base + t.i0, t.qc, t.n, D);
    const auto kt = saved.k.block(t.base + t.lo, t.kc, t.m, D);
    const auto vt = saved.v.block(t.base + t.lo, t.kc, t.m, D);
    scores.resize(t.n, t.m);
    scores.noalias() = qt * kt.transpose();
    detail::softmax_tile<false>(scores, t.i0, t.lo, s.window, scale, saved.lse.col(t.h).segment(t.base + t.i0, t.n));
    saved.o.block(t.base + t.i0, t.qc, t.n, D).noalias() = scores * vt;
  });
  linear_forward(saved.o, w.wo, y);
  saved.has_forward = true;
}

/// Input gradient: dx = dL/dx for dy = dL/dy ([rows, hidden]); dx is resized to
/// [rows, hidden]. Also stores dy and the gradients of the three projections' outputs
/// in `saved` for `attention_backward_weight`. Softmax backward is
/// dS = P o (dP - rowsum(dP o P)) (FlashAttention, Dao et al. 2022, Sec. 3 and Alg. 4
/// line 16-19; llm.c `attention_backward`); RoPE's transpose is the rotation by -angle.
/// Precondition: `saved` comes from `attention_forward` with the same shape and weights
/// (ConfigError otherwise, or on a dy of the wrong size). Same complexity as forward
/// (about twice its score FLOPs, as P is recomputed).
template <class T>
void attention_backward_input(const AttentionShape& s, const AttentionWeights<T>& w, const Matrix<T>& dy,
                              AttentionSaved<T>& saved, Matrix<T>& dx) {
  validate(s);
  detail::check_weights(s, w, "AttentionWeights");
  expect(saved.has_forward, "AttentionSaved.has_forward", saved.has_forward, "true (run attention_forward first)");
  expect(saved.x.cols() == s.hidden && saved.q.cols() == static_cast<Eigen::Index>(s.heads) * s.head_dim &&
             saved.k.cols() == static_cast<Eigen::Index>(s.kv_heads) * s.head_dim && saved.lse.cols() == s.heads &&
             saved.rope.matches(s.seq_len, s.head_dim, s.rope_theta),
         "AttentionSaved", "from another shape", "the output of attention_forward with this AttentionShape");
  expect(dy.rows() == saved.x.rows() && dy.cols() == s.hidden, "dy",
         "[" + std::to_string(dy.rows()) + ", " + std::to_string(dy.cols()) + "]",
         "[" + std::to_string(saved.x.rows()) + ", " + std::to_string(s.hidden) + "] like y");
  const int L = s.seq_len, D = s.head_dim;
  const Eigen::Index rows = saved.x.rows(), batch = rows / L;
  const T scale = T(1) / std::sqrt(static_cast<T>(D));

  saved.dy = dy;
  Matrix<T> dout;  // dL/do, [rows, heads * D]
  linear_backward_input(dy, w.wo, dout);
  saved.dq.resize(rows, static_cast<Eigen::Index>(s.heads) * D);
  saved.dk.setZero(rows, static_cast<Eigen::Index>(s.kv_heads) * D);  // accumulated over the query heads of a group
  saved.dv.setZero(rows, static_cast<Eigen::Index>(s.kv_heads) * D);

  Matrix<T> p, dp;
  Eigen::Array<T, Eigen::Dynamic, 1> rowdot;
  detail::for_each_tile(s, batch, [&](const detail::ScoreTile& t) {
    const auto qt = saved.q.block(t.base + t.i0, t.qc, t.n, D);
    const auto kt = saved.k.block(t.base + t.lo, t.kc, t.m, D);
    const auto vt = saved.v.block(t.base + t.lo, t.kc, t.m, D);
    const auto dot = dout.block(t.base + t.i0, t.qc, t.n, D);
    p.resize(t.n, t.m);
    p.noalias() = qt * kt.transpose();
    detail::softmax_tile<true>(p, t.i0, t.lo, s.window, scale, saved.lse.col(t.h).segment(t.base + t.i0, t.n));
    // o = P v  =>  dv += P^T do, dP = do v^T.
    saved.dv.block(t.base + t.lo, t.kc, t.m, D).noalias() += p.transpose() * dot;
    dp.resize(t.n, t.m);
    dp.noalias() = dot * vt.transpose();
    // Softmax backward; masked entries have P = 0 and so dS = 0.
    rowdot = (p.array() * dp.array()).rowwise().sum();
    dp.array() = p.array() * (dp.array().colwise() - rowdot) * scale;  // now d(q k^T)
    // q k^T => dq = dS k, dk += dS^T q (still in the rotated frame).
    saved.dq.block(t.base + t.i0, t.qc, t.n, D).noalias() = dp * kt;
    saved.dk.block(t.base + t.lo, t.kc, t.m, D).noalias() += dp.transpose() * qt;
  });
  rotary_apply(saved.rope, saved.dq, s.heads, RotaryDirection::kInverse);
  rotary_apply(saved.rope, saved.dk, s.kv_heads, RotaryDirection::kInverse);
  linear_backward_input(saved.dq, w.wq, dx);
  dx.noalias() += saved.dk * w.wk;
  dx.noalias() += saved.dv * w.wv;
  saved.has_backward = true;
}

/// Weight gradients, accumulated: grads.wq += dq^T x, grads.wk += dk^T x,
/// grads.wv += dv^T x, grads.wo += dy^T o (`linear_backward_weight`). `grads` must be
/// sized like the weights (the caller zeroes them once per step). Precondition:
/// `attention_backward_input` has run on `saved` (ConfigError otherwise).
/// O(rows * hidden * (2 heads + 2 kv_heads) * head_dim).
template <class T>
void attention_backward_weight(const AttentionShape& s, const AttentionSaved<T>& saved, AttentionWeights<T>& grads) {
  validate(s);
  detail::check_weights(s, grads, "grads");
  expect(saved.has_backward, "AttentionSaved.has_backward", saved.has_backward,
         "true (run attention_backward_input first)");
  expect(saved.x.cols() == s.hidden && saved.dq.cols() == static_cast<Eigen::Index>(s.heads) * s.head_dim &&
             saved.dk.cols() == static_cast<Eigen::Index>(s.kv_heads) * s.head_dim,
         "AttentionSaved", "from another shape", "the output of attention_backward_input with this AttentionShape");
  linear_backward_weight(saved.dq, saved.x, grads.wq);
  linear_backward_weight(saved.dk, saved.x, grads.wk);
  linear_backward_weight(saved.dv, saved.x, grads.wv);
  linear_backward_weight(saved.dy, saved.o, grads.wo);
}

}  // namespace disagmoe::model
