// SPDX-License-Identifier: Apache-2.0
#include <disagmoe/spec/model_size.hpp>
#include <disagmoe/spec/model_spec.hpp>

#include <doctest/doctest.h>

#include <functional>
#include <string>

using namespace disagmoe;

namespace {
// A model small enough to count by hand.
ModelSpec tiny() {
  ModelSpec m;
  m.layers = 3;
  m.hidden = 8;
  m.heads = 4;
  m.kv_heads = 2;
  m.head_dim = 2;
  m.first_dense_layers = 1;
  m.experts = 4;
  m.top_k = 2;
  m.expert_ffn = 6;
  m.shared_experts = 1;
  m.shared_expert_ffn = 5;
  m.dense_ffn = 16;
  m.vocab = 10;
  return m;
}

std::string error_of(const ModelSpec& m) {
  try {
    validate(m);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("parameter counts of a tiny model equal a hand count") {
  const ModelSpec m = tiny();
  // attention: Wq 8x8, Wk 8x4, Wv 8x4, Wo 8x8, input norm 8 = 64+32+32+64+8
  CHECK(attention_params(m) == 200);
  // dense layer 0: norm 8 + 3*8*16
  CHECK(ffn_params(m, 0) == 8 + 384);
  // MoE layer: norm 8 + router 8*4 + 4 experts * 3*8*6 + 1 shared * 3*8*5
  CHECK(ffn_params(m, 1) == 8 + 32 + 4 * 144 + 120);
  CHECK(ffn_params(m, 1, true) == 8 + 32 + 2 * 144 + 120);
  // embedding 10x8, untied head 10x8, final norm 8
  CHECK(embedding_params(m) == 168);
  CHECK(total_params(m) == 168 + 3 * 200 + 392 + 2 * 736);
  CHECK(active_params(m) == 168 + 3 * 200 + 392 + 2 * 448);
  CHECK(m.moe_layers() == 2);

  ModelSpec t = m;
  t.tied_embeddings = true;
  t.attention_bias = true;
  t.qk_norm = true;
  CHECK(embedding_params(t) == 88);
  CHECK(attention_params(t) == 200 + (8 + 4 + 4 + 8) + 2 * 2);
}

TEST_CASE("the layer pattern follows first_dense_layers and moe_layer_interval") {
  ModelSpec m = tiny();
  m.layers = 7;
  m.first_dense_layers = 1;
  m.moe_layer_interval = 2;
  std::string pattern;
  for (int l = 0; l < m.layers; ++l) pattern += m.is_moe_layer(l) ? 'M' : 'D';
  CHECK(pattern == "DMDMDMD");
  m.sliding_window = 128;
  m.sliding_window_interval = 2;
  CHECK(m.is_windowed_layer(0));
  CHECK_FALSE(m.is_windowed_layer(1));
}

TEST_CASE("validation names the field, the value and the expectation") {
  CHECK(error_of(tiny()).empty());
  struct Case {
    const char* field;
    std::function<void(ModelSpec&)> edit;
  };
  const Case cases[] = {
      {"ModelSpec.layers = 0", [](ModelSpec& m) { m.layers = 0; }},
      {"ModelSpec.hidden = -8", [](ModelSpec& m) { m.hidden = -8; }},
      {"ModelSpec.heads = 0", [](ModelSpec& m) { m.heads = 0; }},
      {"ModelSpec.kv_heads = 3: expected a divisor of heads (4)", [](ModelSpec& m) { m.kv_heads = 3; }},
      {"ModelSpec.head_dim = 0", [](ModelSpec& m) { m.head_dim = 0; }},
      {"ModelSpec.first_dense_layers = 4", [](ModelSpec& m) { m.first_dense_layers = 4; }},
      {"ModelSpec.moe_layer_interval = 0", [](ModelSpec& m) { m.moe_layer_interval = 0; }},
      {"ModelSpec.experts = 0", [](ModelSpec& m) { m.experts = 0; }},
      {"ModelSpec.top_k = 5: expected 1 <= top_k <= experts (4)", [](ModelSpec& m) { m.top_k = 5; }},
      {"ModelSpec.top_k = 0", [](ModelSpec& m) { m.top_k = 0; }},
      {"ModelSpec.expert_ffn = 0", [](ModelSpec& m) { m.expert_ffn = 0; }},
      {"ModelSpec.shared_expert_ffn = 0", [](ModelSpec& m) { m.shared_expert_ffn = 0; }},
      {"ModelSpec.dense_ffn = 0", [](ModelSpec& m) { m.dense_ffn = 0; }},
      {"ModelSpec.vocab = 0", [](ModelSpec& m) { m.vocab = 0; }},
      {"ModelSpec.sliding_window = -1", [](ModelSpec& m) { m.sliding_window = -1; }},
      {"ModelSpec.seq_len = 0", [](ModelSpec& m) { m.seq_len = 0; }},
      {"ModelSpec.micro_batch = 0", [](ModelSpec& m) { m.micro_batch = 0; }},
  };
  for (const auto& c : cases) {
    ModelSpec m = tiny();
    c.edit(m);
    CAPTURE(c.field);
    CHECK(error_of(m).starts_with(c.field));
  }
  // an all-MoE model may leave dense_ffn at 0
  ModelSpec all_moe = tiny();
  all_moe.first_dense_layers = 0;
  all_moe.dense_ffn = 0;
  CHECK(error_of(all_moe).empty());
}
