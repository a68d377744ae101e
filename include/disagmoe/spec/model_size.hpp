// SPDX-License-Identifier: Apache-2.0
/// @file model_size.hpp
/// Parameter counts derived from a ModelSpec (elements, not bytes). The layer
/// structure is the standard pre-norm decoder block: RMSNorm, attention with
/// Q/K/V/O projections (GQA), RMSNorm, then a gated (SwiGLU) FFN with three
/// matrices, either dense or MoE with a linear router (Shazeer et al. 2017;
/// DeepSeekMoE, Dai et al. 2024, for shared experts).
#pragma once

#include <disagmoe/spec/model_spec.hpp>

#include <cstdint>

namespace disagmoe {

/// Parameters of one attention block incl. its input norm: Wq d×(h·dh), Wk and Wv
/// d×(kv·dh), Wo (h·dh)×d, optional biases, optional per-head q/k norms.
constexpr std::int64_t attention_params(const ModelSpec& m) {
  const std::int64_t d = m.hidden, q = std::int64_t{m.heads} * m.head_dim,
                     kv = std::int64_t{m.kv_heads} * m.head_dim;
  std::int64_t p = d * q + 2 * d * kv + q * d + d;  // projections + input RMSNorm
  if (m.attention_bias) p += q + 2 * kv + d;
  if (m.qk_norm) p += 2 * std::int64_t{m.head_dim};
  return p;
}

/// Parameters of one gated FFN of intermediate width `ffn`: gate, up (d×f) and down (f×d).
constexpr std::int64_t gated_ffn_params(const ModelSpec& m, int ffn) {
  return 3 * std::int64_t{m.hidden} * ffn;
}

/// Parameters of one routed expert.
constexpr std::int64_t expert_params(const ModelSpec& m) { return gated_ffn_params(m, m.expert_ffn); }

/// Router (gate) weights of one MoE layer: d×E.
constexpr std::int64_t router_params(const ModelSpec& m) { return std::int64_t{m.hidden} * m.experts; }

/// Parameters of the FFN part of layer `l` incl. its RMSNorm; `active` counts only
/// the top-k routed experts (plus shared experts and router) that one token uses.
constexpr std::int64_t ffn_params(const ModelSpec& m, int l, bool active = false) {
  const std::int64_t norm = m.hidden;
  if (!m.is_moe_layer(l)) return norm + gated_ffn_params(m, m.dense_ffn);
  const std::int64_t routed = std::int64_t{active ? m.top_k : m.experts} * expert_params(m);
  return norm + router_params(m) + routed + std::int64_t{m.shared_experts} * gated_ffn_params(m, m.shared_expert_ffn);
}

/// Embedding, output head (unless tied) and final norm.
constexpr std::int64_t embedding_params(const ModelSpec& m) {
  const std::int64_t e = std::int64_t{m.vocab} * m.hidden;
  return (m.tied_embeddings ? e : 2 * e) + m.hidden;
}

/// All parameters of the model.
constexpr std::int64_t total_params(const ModelSpec& m) {
  std::int64_t p = embedding_params(m);
  for (int l = 0; l < m.layers; ++l) p += attention_params(m) + ffn_params(m, l);
  return p;
}

/// Parameters one token touches in a forward pass (routed experts: top-k of E),
/// embeddings included (the convention of DeepSeekMoE, Qwen3 and Mixtral reports).
constexpr std::int64_t active_params(const ModelSpec& m) {
  std::int64_t p = embedding_params(m);
  for (int l = 0; l < m.layers; ++l) p += attention_params(m) + ffn_params(m, l, true);
  return p;
}

}  // namespace disagmoe
