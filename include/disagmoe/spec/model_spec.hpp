// SPDX-License-Identifier: Apache-2.0
/// @file model_spec.hpp
/// ModelSpec: the shape of a decoder-only MoE transformer and of its training batch.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/limits.hpp>
#include <disagmoe/spec/dtype.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

namespace disagmoe {

/// A decoder-only transformer with (some) MoE layers, plus the per-micro-batch
/// training shape. Sizes are element counts; the layer pattern is: the first
/// `first_dense_layers` layers are dense, after that every `moe_layer_interval`-th
/// layer is MoE and the rest are dense.
struct ModelSpec {
  std::string name = "custom";
  int layers = 0;               ///< transformer blocks
  int hidden = 0;               ///< model width d
  int heads = 0;                ///< query heads
  int kv_heads = 0;             ///< key/value heads (grouped-query attention); == heads for MHA
  int head_dim = 0;             ///< per-head width (need not be hidden / heads)
  int first_dense_layers = 0;   ///< leading dense layers (DeepSeek-MoE: 1)
  int moe_layer_interval = 1;   ///< after those, every n-th layer is MoE (1: all)
  int experts = 0;              ///< routed experts per MoE layer
  int shared_experts = 0;       ///< always-active experts per MoE layer
  int top_k = 0;                ///< routed experts per token
  int expert_ffn = 0;           ///< intermediate width of one routed expert
  int shared_expert_ffn = 0;    ///< intermediate width of one shared expert
  int dense_ffn = 0;            ///< intermediate width of a dense layer's FFN
  int vocab = 0;                ///< vocabulary size
  bool tied_embeddings = false; ///< output projection shares the embedding matrix
  bool qk_norm = false;         ///< RMSNorm on q and k per head (Qwen3, OLMoE)
  bool attention_bias = false;  ///< biases on the Q/K/V/O projections (GPT-OSS)
  int sliding_window = 0;       ///< attention window in tokens; 0 = full causal attention
  int sliding_window_interval = 1; ///< windowed layers: l % interval == 0 (GPT-OSS alternates: 2)
  int seq_len = 4096;           ///< tokens per sequence
  int micro_batch = 1;          ///< sequences per micro-batch
  DType dtype = DType::kBf16;   ///< compute format of activations and weights

  /// True when layer `l` (0-based) is an MoE layer.
  [[nodiscard]] constexpr bool is_moe_layer(int l) const {
    return l >= first_dense_layers && (l - first_dense_layers) % moe_layer_interval == 0;
  }
  /// True when layer `l` attends within a sliding window.
  [[nodiscard]] constexpr bool is_windowed_layer(int l) const {
    return sliding_window > 0 && l % sliding_window_interval == 0;
  }
  /// Number of MoE layers.
  [[nodiscard]] constexpr int moe_layers() const {
    int n = 0;
    for (int l = 0; l < layers; ++l) n += is_moe_layer(l) ? 1 : 0;
    return n;
  }
  /// Tokens in one micro-batch.
  [[nodiscard]] constexpr std::int64_t tokens_per_micro_batch() const {
    return std::int64_t{seq_len} * micro_batch;
  }
};

/// Throws ConfigError naming `prefix.field`, its value and the valid range for the
/// first invalid field. `prefix` is "ModelSpec" or a JSON path such as "$".
inline void validate(const ModelSpec& m, std::string_view prefix = "ModelSpec") {
  const std::string p(prefix);
  // Upper bounds (limits.hpp) keep every derived size in 64 bits and the planner's work bounded.
  auto positive = [&](const char* f, long long v, long long hi = std::numeric_limits<int>::max()) {
    expect(v > 0 && v <= hi, p + "." + f, v, "an integer in [1, " + std::to_string(hi) + "]");
  };
  auto non_negative = [&](const char* f, long long v, long long hi = std::numeric_limits<int>::max()) {
    expect(v >= 0 && v <= hi, p + "." + f, v, "an integer in [0, " + std::to_string(hi) + "]");
  };
  namespace mx = max_size;
  positive("layers", m.layers, mx::kLayers);
  positive("hidden", m.hidden, mx::kHidden);
  positive("heads", m.heads, mx::kHeads);
  positive("kv_heads", m.kv_heads, mx::kHeads);
  expect(m.heads % m.kv_heads == 0, p + ".kv_heads", m.kv_heads,
         "a divisor of heads (" + std::to_string(m.heads) + ")");
  positive("head_dim", m.head_dim, mx::kHeadDim);
  non_negative("first_dense_layers", m.first_dense_layers);
  expect(m.first_dense_layers <= m.layers, p + ".first_dense_layers", m.first_dense_layers,
         "at most layers (" + std::to_string(m.layers) + ")");
  positive("moe_layer_interval", m.moe_layer_interval);
  positive("experts", m.experts, mx::kExperts);
  non_negative("shared_experts", m.shared_experts, mx::kExperts);
  expect(m.top_k >= 1 && m.top_k <= std::min(m.experts, mx::kTopK), p + ".top_k", m.top_k,
         m.experts <= mx::kTopK ? "1 <= top_k <= experts (" + std::to_string(m.experts) + ")"
                                : "1 <= top_k <= " + std::to_string(mx::kTopK));
  positive("expert_ffn", m.expert_ffn, mx::kFfn);
  if (m.shared_experts > 0) positive("shared_expert_ffn", m.shared_expert_ffn, mx::kFfn);
  else non_negative("shared_expert_ffn", m.shared_expert_ffn, mx::kFfn);
  if (m.moe_layers() < m.layers) positive("dense_ffn", m.dense_ffn, mx::kFfn);
  else non_negative("dense_ffn", m.dense_ffn, mx::kFfn);
  positive("vocab", m.vocab, mx::kVocab);
  non_negative("sliding_window", m.sliding_window, mx::kSeqLen);
  positive("sliding_window_interval", m.sliding_window_interval);
  positive("seq_len", m.seq_len, mx::kSeqLen);
  positive("micro_batch", m.micro_batch, mx::kMicroBatch);
}

}  // namespace disagmoe
