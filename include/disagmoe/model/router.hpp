// SPDX-License-Identifier: Apache-2.0
/// @file router.hpp
/// The Mixtral-style MoE router of the reference compute: a bias-free linear gate, a
/// softmax over experts, top-k selection, renormalised gates, and the two auxiliary
/// losses (Switch load balancing and ST-MoE router z-loss), with a hand-written backward.
///
/// Forward (Jiang et al., "Mixtral of Experts", 2024; Hugging Face transformers
/// `MixtralSparseMoeBlock.forward`):
///   logits = x wg^T, probs = softmax(logits), (ids, p_sel) = topk(probs, k),
///   gates = p_sel / sum(p_sel)   ("routing_weights /= routing_weights.sum(-1)").
///
/// Losses, both returned unscaled by their coefficients:
/// - load balancing (Fedus et al., "Switch Transformers", 2021, eq. 4-6, extended to
///   top-k as Megatron-Core's `switch_load_balancing_loss_func` in
///   megatron/core/transformer/moe/moe_utils.py does):
///   f_i = (#(token, slot) assignments to expert i) / (T k), P_i = (1/T) sum_t probs[t,i],
///   aux = E sum_i f_i P_i. f is a count and is treated as a constant.
/// - z-loss (Zoph et al., "ST-MoE", 2022, eq. 5): z = (1/T) sum_t logsumexp(logits_t)^2.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/model/tensor.hpp>

#include <cmath>
#include <string>
#include <string_view>
#include <vector>

namespace disagmoe::model {

/// Router hyper-parameters.
struct RouterOptions {
  /// Number of experts E (the gate's output features); >= 1.
  int experts = 0;
  /// Experts chosen per token k; 1 <= top_k <= experts.
  int top_k = 0;
  /// Weight of the load-balancing loss in the training objective; finite, >= 0.
  double aux_loss_coef = 0;
  /// Weight of the router z-loss in the training objective; finite, >= 0.
  double z_loss_coef = 0;
};

/// Throws `ConfigError` naming the first bad field of `options`. O(1).
inline void validate(const RouterOptions& options) {
  expect(options.experts >= 1, "RouterOptions.experts", options.experts, ">= 1");
  expect(options.top_k >= 1 && options.top_k <= options.experts, "RouterOptions.top_k",
         options.top_k,
         "1 <= top_k <= experts (" + std::to_string(options.experts) + ")");
  expect(std::isfinite(options.aux_loss_coef) && options.aux_loss_coef >= 0,
         "RouterOptions.aux_loss_coef", options.aux_loss_coef, "finite and >= 0");
  expect(std::isfinite(options.z_loss_coef) && options.z_loss_coef >= 0,
         "RouterOptions.z_loss_coef", options.z_loss_coef, "finite and >= 0");
}

/// What the router hands to dispatch and combine, plus its two losses.
template <class T>
struct RouterOutput {
  /// [tokens, top_k] expert ids; slot 0 holds the highest probability, ties go to the
  /// lower expert id.
  IndexMatrix topk_ids;
  /// [tokens, top_k] chosen probabilities renormalised to sum to 1 per token.
  Matrix<T> gates;
  /// Load-balancing loss E sum_i f_i P_i, unscaled by `aux_loss_coef`; 0 for no tokens.
  /// Equals 1 when routing and probabilities are both uniform.
  T aux_loss = 0;
  /// Router z-loss mean_t logsumexp(logits_t)^2, unscaled by `z_loss_coef`; 0 for no
  /// tokens.
  T z_loss = 0;
};

/// Activations `router_forward` keeps for the backward. Filled by the forward, read by
/// `router_backward_input`, which adds `dlogits` for `router_backward_weight`. Memory
/// O(T (H + E)).
template <class T>
struct RouterSaved {
  /// [tokens, hidden] copy of the input (the weight gradient needs it after the caller's
  /// buffer may have been reused).
  Matrix<T> x;
  /// [tokens, experts] softmax probabilities.
  Matrix<T> probs;
  /// Per-token logsumexp of the logits (z-loss and its gradient).
  std::vector<T> lse;
  /// [tokens, top_k] chosen expert ids (same as `RouterOutput::topk_ids`).
  IndexMatrix topk_ids;
  /// [tokens, top_k] renormalised gates (same as `RouterOutput::gates`).
  Matrix<T> gates;
  /// Per-token sum of the chosen probabilities, the gates' normaliser S.
  std::vector<T> selected_sum;
  /// Per-expert assignment fraction f_i of the load-balancing loss.
  std::vector<T> expert_fraction;
  /// [tokens, experts] dL/dlogits, written by `router_backward_input`; empty (0 x 0)
  /// until then.
  Matrix<T> dlogits;
};

namespace detail {

/// Throws `ConfigError` unless a matrix has the given shape.
inline void expect_shape(std::string_view field, Eigen::Index rows, Eigen::Index cols,
                         Eigen::Index want_rows, Eigen::Index want_cols) {
  if (rows == want_rows && cols == want_cols) return;
  fail(field, Verbatim{std::to_string(rows) + " x " + std::to_string(cols)},
       std::to_string(want_rows) + " x " + std::to_string(want_cols));
}

}  // namespace detail

/// Router forward. `wg` is the gate weight [experts, hidden] (y = x wg^T, as
/// `nn.Linear`), `x` the input [tokens, hidden]; tokens may be 0 (empty outputs, losses
/// 0). Fills `out` and `saved` (both resized). The softmax subtracts the row maximum, so
/// large logits do not overflow. Non-finite inputs give non-finite outputs but still k
/// distinct valid ids per token.
/// Throws `ConfigError` for invalid options or shapes. O(T E H + T E k).
template <class T>
void router_forward(const RouterOptions& options, const Matrix<T>& wg, const Matrix<T>& x,
                    RouterOutput<T>& out, RouterSaved<T>& saved) {
  validate(options);
  const Eigen::Index experts = options.experts;
  const Eigen::Index k = options.top_k;
  detail::expect_shape("router_forward: wg", wg.rows(), wg.cols(), experts, wg.cols());
  detail::expect_shape("router_forward: x", x.rows(), x.cols(), x.rows(), wg.cols());
  const Eigen::Index tokens = x.rows();

  saved.x = x;
  linear_forward(saved.x, wg, saved.probs);  // logits for now, softmaxed in place below
  saved.lse.assign(static_cast<std::size_t>(tokens), T(0));
  saved.selected_sum.assign(static_cast<std::size_t>(tokens), T(0));
  saved.topk_ids.resize(tokens, k);
  saved.gates.resize(tokens, k);
  saved.dlogits.resize(0, 0);
  std::vector<Eigen::Index> counts(static_cast<std::size_t>(experts), 0);
  std::vector<T> chosen(static_cast<std::size_t>(k));

  for (Eigen::Index t = 0; t < tokens; ++t) {
    auto row = saved.probs.row(t);
    // Stable softmax: exp(l - m) <= 1, and lse = m + log(sum exp(l - m)).
    const T m = row.maxCoeff();
    row = (row.array() - m).exp();
    const T s = row.sum();
    row /= s;
    saved.lse[static_cast<std::size_t>(t)] = m + std::log(s);

    // Top-k by insertion into a sorted list: an expert displaces a slot only if strictly
    // greater, so among equal probabilities the lower id (visited first) stays ahead.
    // Unlike std::partial_sort this needs no strict weak order, so NaN cannot cause UB,
    // and it always yields k distinct ids. O(E k).
    Eigen::Index filled = 0;
    for (Eigen::Index i = 0; i < experts; ++i) {
      const T p = row(i);
      Eigen::Index pos = filled;
      while (pos > 0 && p > chosen[static_cast<std::size_t>(pos - 1)]) --pos;
      if (pos >= k) continue;
      for (Eigen::Index j = (filled < k ? filled : k - 1); j > pos; --j) {
        chosen[static_cast<std::size_t>(j)] = chosen[static_cast<std::size_t>(j - 1)];
        saved.topk_ids(t, j) = saved.topk_ids(t, j - 1);
      }
      chosen[static_cast<std::size_t>(pos)] = p;
      saved.topk_ids(t, pos) = static_cast<int>(i);
      if (filled < k) ++filled;
    }

    T sel = 0;
    for (Eigen::Index j = 0; j < k; ++j) sel += chosen[static_cast<std::size_t>(j)];
    saved.selected_sum[static_cast<std::size_t>(t)] = sel;
    for (Eigen::Index j = 0; j < k; ++j) {
      saved.gates(t, j) = chosen[static_cast<std::size_t>(j)] / sel;
      ++counts[static_cast<std::size_t>(saved.topk_ids(t, j))];
    }
  }

  saved.expert_fraction.assign(static_cast<std::size_t>(experts), T(0));
  out.aux_loss = 0;
  out.z_loss = 0;
  if (tokens > 0) {
    // Switch eq. 4-6 / Megatron-Core switch_load_balancing_loss_func:
    // aux = E sum_i f_i P_i with f_i = count_i / (T k), P_i = (1/T) sum_t probs[t, i].
    const T assignments = static_cast<T>(tokens) * static_cast<T>(k);
    T aux = 0;
    for (Eigen::Index i = 0; i < experts; ++i) {
      const T f = static_cast<T>(counts[static_cast<std::size_t>(i)]) / assignments;
      saved.expert_fraction[static_cast<std::size_t>(i)] = f;
      aux += f * (saved.probs.col(i).sum() / static_cast<T>(tokens));
    }
    out.aux_loss = static_cast<T>(experts) * aux;
    // ST-MoE eq. 5: z = (1/T) sum_t lse_t^2.
    T z = 0;
    for (const T l : saved.lse) z += l * l;
    out.z_loss = z / static_cast<T>(tokens);
  }
  out.topk_ids = saved.topk_ids;
  out.gates = saved.gates;
}

/// Router input gradient of
///   L = <d_gates, gates> + scale (aux_loss_coef aux_loss + z_loss_coef z_loss),
/// where `d_gates` [tokens, top_k] is dL/dgates from the combine. ADDS dL/dx into `dx`
/// (already [tokens, hidden]) and stores dL/dlogits in `saved.dlogits`.
/// Preconditions: `saved` comes from `router_forward` with the same `options` and `wg`.
/// The expert counts f are constants (no gradient), as in Megatron-Core.
/// Throws `ConfigError` for invalid options or shapes. O(T E H).
template <class T>
void router_backward_input(const RouterOptions& options, const Matrix<T>& wg,
                           const Matrix<T>& d_gates, T scale, RouterSaved<T>& saved,
                           Matrix<T>& dx) {
  validate(options);
  const Eigen::Index experts = options.experts;
  const Eigen::Index k = options.top_k;
  const Eigen::Index tokens = saved.x.rows();
  detail::expect_shape("router_backward_input: wg", wg.rows(), wg.cols(), experts,
                       saved.x.cols());
  detail::expect_shape("router_backward_input: saved.probs", saved.probs.rows(),
                       saved.probs.cols(), tokens, experts);
  detail::expect_shape("router_backward_input: saved.gates", saved.gates.rows(),
                       saved.gates.cols(), tokens, k);
  detail::expect_shape("router_backward_input: d_gates", d_gates.rows(), d_gates.cols(),
                       tokens, k);
  detail::expect_shape("router_backward_input: dx", dx.rows(), dx.cols(), tokens,
                       saved.x.cols());

  saved.dlogits.resize(tokens, experts);
  if (tokens == 0) return;

  // d aux / d probs[t, i] = E f_i / T (f constant): the same row for every token.
  const T aux_scale = scale * static_cast<T>(options.aux_loss_coef) *
                      static_cast<T>(experts) / static_cast<T>(tokens);
  Matrix<T> aux_row(1, experts);
  for (Eigen::Index i = 0; i < experts; ++i)
    aux_row(0, i) = aux_scale * saved.expert_fraction[static_cast<std::size_t>(i)];
  // d z / d logits[t, i] = (2/T) lse_t probs[t, i]  (ST-MoE eq. 5 differentiated; the
  // logsumexp's gradient is the softmax).
  const T z_scale =
      scale * static_cast<T>(options.z_loss_coef) * T(2) / static_cast<T>(tokens);

  for (Eigen::Index t = 0; t < tokens; ++t) {
    auto dp = saved.dlogits.row(t);  // holds dL/dprobs first, then dL/dlogits
    dp = aux_row;
    // Renormalisation g_j = p_{s_j} / S, S = sum_m p_{s_m}:
    // dL/dp_{s_j} = (dg_j - sum_m dg_m g_m) / S  (quotient rule).
    const T dot_g = d_gates.row(t).dot(saved.gates.row(t));
    const T inv_s = T(1) / saved.selected_sum[static_cast<std::size_t>(t)];
    for (Eigen::Index j = 0; j < k; ++j)
      dp(saved.topk_ids(t, j)) += (d_gates(t, j) - dot_g) * inv_s;
    // Softmax Jacobian dp_i/dl_j = p_i (delta_ij - p_j): dl = p o (dp - <dp, p>); the
    // z-loss term p_i * z_scale * lse_t is folded into the same product.
    const auto p = saved.probs.row(t);
    const T shift = dp.dot(p) - z_scale * saved.lse[static_cast<std::size_t>(t)];
    dp = (p.array() * (dp.array() - shift)).matrix();
  }
  dx.noalias() += saved.dlogits * wg;
}

/// Router weight gradient: dwg += dlogits^T x, accumulated into `dwg` (already
/// [experts, hidden], zeroed by the caller before the first micro-batch).
/// Preconditions: `router_backward_input` has run on `saved`.
/// Throws `ConfigError` for shapes that do not match or a missing backward_input.
/// O(T E H).
template <class T>
void router_backward_weight(const RouterSaved<T>& saved, Matrix<T>& dwg) {
  detail::expect_shape("router_backward_weight: saved.dlogits (run router_backward_input "
                       "first)",
                       saved.dlogits.rows(), saved.dlogits.cols(), saved.probs.rows(),
                       saved.probs.cols());
  detail::expect_shape("router_backward_weight: dwg", dwg.rows(), dwg.cols(),
                       saved.probs.cols(), saved.x.cols());
  linear_backward_weight(saved.dlogits, saved.x, dwg);
}

}  // namespace disagmoe::model
