// SPDX-License-Identifier: Apache-2.0
/// @file presets.hpp
/// Small byte-level MoE models for training on one CPU (`disagmoe-train`, tests and
/// `bench/train`), described by the same `ModelSpec` the planner reads.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/spec/model_spec.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace disagmoe::model {

/// The training presets: "tiny" (the demo: 3.4 M parameters, 1 M active per token; trains
/// in about a minute on 2 cores) and "small" (about 9x its training FLOPs per token).
inline std::vector<ModelSpec> train_presets() {
  auto base = [](const char* name, int layers, int hidden, int heads, int kv_heads, int experts, int top_k,
                 int expert_ffn, int seq_len) {
    ModelSpec m;
    m.name = name;
    m.layers = layers;
    m.hidden = hidden;
    m.heads = heads;
    m.kv_heads = kv_heads;
    m.head_dim = hidden / heads;
    m.experts = experts;
    m.top_k = top_k;
    m.expert_ffn = expert_ffn;
    m.vocab = 256;  // bytes
    m.seq_len = seq_len;
    m.micro_batch = 8;
    m.dtype = DType::kFp32;
    return m;
  };
  return {base("tiny", 4, 128, 4, 2, 8, 2, 256, 64), base("small", 8, 256, 8, 4, 16, 2, 640, 128)};
}

/// The training preset called `name`; ConfigError listing the presets otherwise.
inline ModelSpec train_preset(std::string_view name) {
  std::string names;
  for (const auto& m : train_presets()) {
    if (m.name == name) return m;
    names += (names.empty() ? "" : ", ") + m.name;
  }
  fail("model", name, "a training preset (" + names + ")");
}

}  // namespace disagmoe::model
