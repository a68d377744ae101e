// SPDX-License-Identifier: Apache-2.0
// A tiny MoE model whose costs are small enough to count by hand.
#pragma once

#include <disagmoe/spec/cluster_spec.hpp>
#include <disagmoe/spec/model_spec.hpp>
#include <disagmoe/spec/presets.hpp>

namespace disagmoe::plan::test {

/// 2 layers: layer 0 dense (FFN 16), layer 1 MoE (4 experts of width 6, top-2, one
/// shared expert of width 3); d = 8, 2 query heads and 1 KV head of width 4;
/// micro-batch of 2 sequences of 4 tokens (T = 8); bf16.
inline ModelSpec tiny_model() {
  ModelSpec m;
  m.name = "tiny";
  m.layers = 2;
  m.hidden = 8;
  m.heads = 2;
  m.kv_heads = 1;
  m.head_dim = 4;
  m.first_dense_layers = 1;
  m.experts = 4;
  m.top_k = 2;
  m.expert_ffn = 6;
  m.shared_experts = 1;
  m.shared_expert_ffn = 3;
  m.dense_ffn = 16;
  m.vocab = 10;
  m.seq_len = 4;
  m.micro_batch = 2;
  return m;
}

/// An h800x128 node scaled to a small cluster, for exhaustive-enumeration oracles.
inline ClusterSpec small_cluster(int nodes, int gpus, int nics, double hbm_bytes = 80e9) {
  ClusterSpec c = cluster_preset("h800x128");
  c.name = "small";
  c.nodes = nodes;
  c.gpus_per_node = gpus;
  c.nics_per_node = nics;
  c.gpu.hbm_bytes = hbm_bytes;
  return c;
}

}  // namespace disagmoe::plan::test
