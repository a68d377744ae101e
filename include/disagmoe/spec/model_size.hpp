// SPDX-License-Identifier: Apache-2.0
/// @file model_size.hpp
/// Parameter counts derived from a ModelSpec (elements, not bytes). The layer
/// structure is the standard pre-norm decoder block: RMSNorm, attention with
/// Q/K/V/O projections (GQA), RMSNorm, then a gated (SwiGLU) FFN with three
/// matrices, either dense or MoE with a linear router (Shazeer et al. 2017;
/// DeepSeekMoE, Dai et al. 2024, for shared experts). Counts are in checked 64-bit
/// arithmetic: a spec too large for them is a ConfigError, never a negative count.
#pragma once

#include <disagmoe/limits.hpp>
#include <disagmoe/spec/model_spec.hpp>

#include <cstdint>

namespace disagmoe {

namespace detail {
inline constexpr std::string_view kParamsField = "ModelSpec parameter count";
constexpr std::int64_t pmul(std::int64_t a, std::int64_t b) { return checked_mul(a, b, kParamsField); }
constexpr std::int64_t padd(std::int64_t a, std::int64_t b) { return checked_add(a, b, kParamsField); }
}  // namespace detail

/// Parameters of one attention block incl. its input norm: Wq d×(h·dh), Wk and Wv
/// d×(kv·dh), Wo (h·dh)×d, optional biases, optional per-head q/k norms.
constexpr std::int64_t attention_params(const ModelSpec& m) {
  using detail::padd, detail::pmul;
  const std::int64_t d = m.hidden, q = pmul(m.heads, m.head_dim), kv = pmul(m.kv_heads, m.head_dim);
  // projections + input RMSNorm: d·q + 2·d·kv + q·d + d
  std::int64_t p = padd(padd(pmul(2, pmul(d, q)), pmul(2, pmul(d, kv))), d);
  if (m.attention_bias) p = padd(p, padd(padd(q, pmul(2, kv)), d));
  if (m.qk_norm) p = padd(p, 2 * std::int64_t{m.head_dim});
  return p;
}

/// Parameters of one gated FFN of intermediate width `ffn`: gate, up (d×f) and down (f×d).
constexpr std::int64_t gated_ffn_params(const ModelSpec& m, int ffn) {
  return detail::pmul(3, detail::pmul(m.hidden, ffn));
}

/// Parameters of one routed expert.
constexpr std::int64_t expert_params(const ModelSpec& m) { return gated_ffn_params(m, m.expert_ffn); }

/// Router (gate) weights of one MoE layer: d×E.
constexpr std::int64_t router_params(const ModelSpec& m) { return detail::pmul(m.hidden, m.experts); }

/// Parameters of the FFN part of layer `l` incl. its RMSNorm; `active` counts only
/// the top-k routed experts (plus shared experts and router) that one token uses.
constexpr std::int64_t ffn_params(const ModelSpec& m, int l, bool active = false) {
  using detail::padd, detail::pmul;
  const std::int64_t norm = m.hidden;
  if (!m.is_moe_layer(l)) return padd(norm, gated_ffn_params(m, m.dense_ffn));
  const std::int64_t routed = pmul(active ? m.top_k : m.experts, expert_params(m));
  return padd(padd(padd(norm, router_params(m)), routed), pmul(m.shared_experts, gated_ffn_params(m, m.shared_expert_ffn)));
}

/// Embedding, output head (unless tied) and final norm.
constexpr std::int64_t embedding_params(const ModelSpec& m) {
  const std::int64_t e = detail::pmul(m.vocab, m.hidden);
  return detail::padd(m.tied_embeddings ? e : detail::pmul(2, e), m.hidden);
}

/// All parameters of the model.
constexpr std::int64_t total_params(const ModelSpec& m) {
  std::int64_t p = embedding_params(m);
  for (int l = 0; l < m.layers; ++l) p = detail::padd(p, detail::padd(attention_params(m), ffn_params(m, l)));
  return p;
}

/// Parameters one token touches in a forward pass (routed experts: top-k of E),
/// embeddings included (the convention of DeepSeekMoE, Qwen3 and Mixtral reports).
constexpr std::int64_t active_params(const ModelSpec& m) {
  std::int64_t p = embedding_params(m);
  for (int l = 0; l < m.layers; ++l) p = detail::padd(p, detail::padd(attention_params(m), ffn_params(m, l, true)));
  return p;
}

}  // namespace disagmoe
