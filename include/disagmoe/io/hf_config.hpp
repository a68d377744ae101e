// SPDX-License-Identifier: Apache-2.0
/// @file hf_config.hpp
/// `config.json` for a checkpoint of the reference decoder, with the keys of Hugging
/// Face's `MixtralConfig` (transformers/models/mixtral/configuration_mixtral.py), so
/// that `MixtralForCausalLM.from_pretrained` reads a checkpoint of that shape.
#pragma once

#include <disagmoe/model/decoder_options.hpp>
#include <disagmoe/spec/model_spec.hpp>

#include <nlohmann/json.hpp>

namespace disagmoe::io {

/// True when `m` has exactly Mixtral's layout: every layer MoE, no shared experts,
/// untied head, head_dim = hidden / heads, no q/k norm or attention biases, one window
/// rule for all layers.
inline bool is_mixtral_shape(const ModelSpec& m) {
  return m.first_dense_layers == 0 && m.moe_layer_interval == 1 && m.shared_experts == 0 && !m.tied_embeddings &&
         !m.qk_norm && !m.attention_bias && m.head_dim * m.heads == m.hidden &&
         (m.sliding_window == 0 || m.sliding_window_interval == 1);
}

/// MixtralConfig's keys for `m` and `o`; models of another shape get the same keys
/// plus "disagmoe_*" ones for what Mixtral cannot express, and no "architectures".
inline nlohmann::json mixtral_config(const ModelSpec& m, const model::DecoderOptions& o) {
  nlohmann::json j{{"model_type", "mixtral"},
                   {"hidden_size", m.hidden},
                   {"intermediate_size", m.expert_ffn},
                   {"num_hidden_layers", m.layers},
                   {"num_attention_heads", m.heads},
                   {"num_key_value_heads", m.kv_heads},
                   {"num_local_experts", m.experts},
                   {"num_experts_per_tok", m.top_k},
                   {"rms_norm_eps", o.rms_norm_eps},
                   {"rope_theta", o.rope_theta},
                   {"vocab_size", m.vocab},
                   {"max_position_embeddings", m.seq_len},
                   {"sliding_window", m.sliding_window > 0 ? nlohmann::json(m.sliding_window) : nlohmann::json()},
                   {"hidden_act", "silu"},
                   {"tie_word_embeddings", false},
                   {"router_aux_loss_coef", o.aux_loss_coef},
                   {"initializer_range", o.init_std},
                   {"torch_dtype", "float32"}};
  if (is_mixtral_shape(m)) {
    j["architectures"] = {"MixtralForCausalLM"};
  } else {
    j["disagmoe_head_dim"] = m.head_dim;
    j["disagmoe_first_dense_layers"] = m.first_dense_layers;
    j["disagmoe_moe_layer_interval"] = m.moe_layer_interval;
    j["disagmoe_dense_ffn"] = m.dense_ffn;
    j["disagmoe_shared_experts"] = m.shared_experts;
    j["disagmoe_shared_expert_ffn"] = m.shared_expert_ffn;
  }
  j["disagmoe_z_loss_coef"] = o.z_loss_coef;
  return j;
}

}  // namespace disagmoe::io
