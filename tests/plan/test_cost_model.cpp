// SPDX-License-Identifier: Apache-2.0
// Cost model against hand calculations (tiny model), brute-force counts (attended
// pairs, distinct destination GPUs) and the 6·N·T rule for the presets.
#include <disagmoe/plan/cost_model.hpp>
#include <disagmoe/spec/presets.hpp>

#include "tiny_model.hpp"

#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <string>

using namespace disagmoe;
using namespace disagmoe::plan;

TEST_CASE("attended_pairs equals a brute-force count of causal (windowed) pairs") {
  for (int s = 0; s <= 40; ++s) {
    for (int w : {0, 1, 2, 3, 7, 16, 40, 41}) {
      double brute = 0;
      for (int i = 0; i < s; ++i)
        for (int j = 0; j <= i; ++j) brute += (w == 0 || i - j < w) ? 1 : 0;
      INFO("seq=" << s << " window=" << w);
      CHECK(attended_pairs(s, w) == brute);
    }
  }
}

TEST_CASE("expected_distinct_gpus equals enumeration of all top-k subsets") {
  for (int e : {4, 6, 8, 12}) {
    for (int n : {1, 2, 3, 4, 6}) {
      if (e % n != 0) continue;
      for (int k = 1; k <= e && k <= 5; ++k) {
        double sum = 0, count = 0;
        for (unsigned mask = 0; mask < (1u << e); ++mask) {
          if (std::popcount(mask) != k) continue;
          unsigned gpus = 0;
          for (int x = 0; x < e; ++x)
            if (mask >> x & 1u) gpus |= 1u << (x / (e / n));
          sum += std::popcount(gpus);
          count += 1;
        }
        INFO("E=" << e << " N=" << n << " k=" << k);
        CHECK(expected_distinct_gpus(e, k, n) == doctest::Approx(sum / count).epsilon(1e-12));
      }
    }
  }
  // Not divisible: the with-replacement occupancy formula N(1-(1-1/N)^k).
  CHECK(expected_distinct_gpus(10, 2, 3) == doctest::Approx(3 * (1 - 4.0 / 9)));
  CHECK_THROWS_AS(expected_distinct_gpus(4, 5, 2), ConfigError);
  CHECK_THROWS_AS(expected_distinct_gpus(4, 2, 0), ConfigError);
}

TEST_CASE("tiny model: FLOPs equal the hand calculation") {
  const ModelSpec m = test::tiny_model();
  validate(m);
  // Layer 1 (MoE). T = 8, d = 8, q = 8, kv = 4.
  const LayerCost c = layer_cost(m, 1);
  CHECK(c.moe);
  CHECK(c.tokens == 8);
  // Q,K,V: 2·8·8·(8+4+4) = 2048; O: 2·8·8·8 = 1024.
  CHECK(c.attention_proj == PassFlops{3072, 3072, 3072});
  // 2 sequences × (1+2+3+4) = 20 pairs; QKᵀ 2·20·8 = 320, AV 320.
  CHECK(c.attention_core == PassFlops{640, 1280, 0});
  CHECK(c.router == PassFlops{512, 512, 512});             // 2·8·8·4
  CHECK(c.experts == PassFlops{4608, 4608, 4608});         // 8 tokens·2 experts·3 GEMMs·2·8·6
  CHECK(c.shared_experts == PassFlops{1152, 1152, 1152});  // 8·1·3·2·8·3
  CHECK(c.dense_ffn == PassFlops{});
  CHECK(c.attention_side().forward == 3072 + 640 + 512);
  CHECK(c.ffn_side().forward == 4608 + 1152);
  CHECK(c.total().backward() == 2 * c.total().forward);
  // Layer 0 (dense): 8·3·2·8·16.
  const LayerCost c0 = layer_cost(m, 0);
  CHECK_FALSE(c0.moe);
  CHECK(c0.dense_ffn.forward == 6144);
  CHECK(c0.router.forward == 0);
  CHECK(c0.experts.forward == 0);
  CHECK(head_flops(m).forward == 2 * 8 * 8 * 10);
  CHECK_THROWS_WITH_AS(layer_cost(m, 2), "layer = 2: expected 0 <= layer < layers (2)", ConfigError);
}

TEST_CASE("tiny model: sliding window shrinks only the attention core") {
  ModelSpec m = test::tiny_model();
  m.sliding_window = 2;
  m.sliding_window_interval = 1;
  const LayerCost c = layer_cost(m, 1);
  CHECK(c.windowed);
  // pairs per sequence: 1 + 2 + 2 + 2 = 7; × 2 sequences; 2 products × 2·14·8.
  CHECK(c.attention_core.forward == 448);
  CHECK(c.attention_proj.forward == 3072);
}

TEST_CASE("tiny model: bytes equal the hand calculation") {
  const ModelSpec m = test::tiny_model();  // row = 8 × 2 bytes = 16
  DispatchOptions no_dedup{2, false, 0};
  CHECK(dispatch_bytes(m, 1, no_dedup) == 8 * 2 * 16);
  CHECK(return_bytes(m, 1, no_dedup) == 8 * 2 * 16);
  CHECK(dispatch_bytes(m, 0, no_dedup) == 8 * 1 * 16);  // dense: one row per token
  // Dedup over 2 GPUs with 2 experts each: 5/3 distinct GPUs per token (see enumeration).
  DispatchOptions dedup{2, true, 0};
  CHECK(dispatch_bytes(m, 1, dedup) == doctest::Approx(8 * 16 * 5.0 / 3));
  DispatchOptions given{2, true, 1.25};
  CHECK(dispatch_bytes(m, 1, given) == 8 * 1.25 * 16);
  // Fused stage after layer 0 = return of layer 0 + dispatch of layer 1; after the last layer only its return.
  CHECK(fused_stage_bytes(m, 0, no_dedup) == 128 + 256);
  CHECK(fused_stage_bytes(m, 1, no_dedup) == 256);
  // Colocated all-to-all over EP 2: half the rows leave the GPU; dense layers move nothing.
  CHECK(all_to_all_bytes(m, 1, no_dedup) == 128);
  CHECK(all_to_all_bytes(m, 0, no_dedup) == 0);
  const LayerCost c = layer_cost(m, 1, no_dedup);
  CHECK(c.dispatch_bytes == 256);
  CHECK(c.all_to_all_bytes == 128);
  // Ring all-reduce: attention side of layer 1 = 64+2·32+64 (proj) + 8 (norm) + 8 (ffn norm) + 32 (router) = 240 params.
  CHECK(attention_side_params(m, 1) == 240);
  CHECK(attention_grad_all_reduce_bytes(m, 1, 4) == doctest::Approx(2.0 * 3 / 4 * 240 * 2));
  CHECK(attention_grad_all_reduce_bytes(m, 1, 1) == 0);
  CHECK(ffn_side_params(m, 1) == 4 * 144 + 72);
  CHECK(ffn_side_params(m, 0) == 3 * 8 * 16);
  CHECK_THROWS_AS(dispatch_bytes(m, 1, DispatchOptions{2, true, -1}), ConfigError);
}

TEST_CASE("tiny model: activation bytes equal a per-tensor hand count") {
  const ModelSpec m = test::tiny_model();
  MemoryOptions o;
  // A side, MoE layer: per token 4·8 (norm in/out ×2) + 16 (QKV) + 8 (attn out) + 4 (router logits) = 60
  // elements × 2 bytes × 8 tokens, plus fp32 LSE 2 heads × 8 tokens × 4.
  CHECK(attention_activation_bytes(m, 1, o) == 60 * 2 * 8 + 64);
  CHECK(attention_activation_bytes(m, 0, o) == 56 * 2 * 8 + 64);
  o.flash_attention = false;  // + h·s²·b scores
  CHECK(attention_activation_bytes(m, 1, o) == 60 * 2 * 8 + 2 * 16 * 2 * 2);
  o.recompute.ffn = true;  // the other side's setting changes nothing here
  CHECK(attention_activation_bytes(m, 1, o) == 60 * 2 * 8 + 2 * 16 * 2 * 2);
  o.recompute.attention = true;
  CHECK(attention_activation_bytes(m, 1, o) == 8 * 8 * 2);
  MemoryOptions f;
  DispatchOptions no_dedup{2, false, 0};
  // F side MoE: routed 2·(2·8 + 3·6) = 68, shared 1·(8 + 9) = 17 → 85 elements per token.
  CHECK(ffn_activation_bytes(m, 1, f, no_dedup) == 85 * 2 * 8);
  CHECK(ffn_activation_bytes(m, 0, f, no_dedup) == (8 + 48) * 2 * 8);
  f.recompute.attention = true;
  CHECK(ffn_activation_bytes(m, 1, f, no_dedup) == 85 * 2 * 8);
  f.recompute.ffn = true;
  CHECK(ffn_activation_bytes(m, 1, f, no_dedup) == 8 * 2 * 8 * 2);
}

TEST_CASE("state_bytes: mixed-precision Adam 16 bytes/param, ZeRO-1 shards the 12") {
  const ModelSpec m = test::tiny_model();
  MemoryOptions o;
  MemoryBytes b = state_bytes(m, 1000, 4, o);
  CHECK(b.parameters == 2000);
  CHECK(b.gradients == 2000);
  CHECK(b.optimizer == 12000);
  o.zero1 = true;
  o.grad_bytes = 4;
  b = state_bytes(m, 1000, 4, o);
  CHECK(b.gradients == 4000);
  CHECK(b.optimizer == 3000);
  CHECK(b.total() == 9000);
  CHECK_THROWS_AS(state_bytes(m, 1000, 0, o), ConfigError);
}

TEST_CASE("presets: layer FLOPs match 6·N_active·tokens at short sequence") {
  for (const std::string& name : model_preset_names()) {
    ModelSpec m = model_preset(name);
    m.seq_len = 128;  // keep the quadratic attention term small
    m.micro_batch = 1;
    const double t = double(m.tokens_per_micro_batch());
    const PassFlops f = model_layer_flops(m);
    const double n_layers = double(active_params(m) - embedding_params(m));
    INFO(m.name << ": layers FLOPs " << f.total() << " vs 6NT " << 6 * n_layers * t);
    CHECK(f.total() == doctest::Approx(6 * n_layers * t).epsilon(0.03));
    // Without the attention core the match is exact up to norm/bias/qk-norm parameters (< 0.1%).
    double no_core = 0;
    for (int l = 0; l < m.layers; ++l) {
      const LayerCost c = layer_cost(m, l);
      no_core += c.total().total() - c.attention_core.total();
    }
    CHECK(no_core == doctest::Approx(6 * n_layers * t).epsilon(0.001));
    CHECK(no_core <= 6 * n_layers * t);
  }
}

TEST_CASE("presets: attention's share of FLOPs grows with sequence length") {
  for (const std::string& name : model_preset_names()) {
    ModelSpec m = model_preset(name);
    double prev = 0;
    for (int s : {1024, 4096, 16384, 32768}) {
      m.seq_len = s;
      const LayerCost c = layer_cost(m, m.layers - 1);
      const double share = c.attention_side().total() / c.total().total();
      INFO(m.name << " seq " << s);
      CHECK(share > prev);
      prev = share;
    }
  }
}

TEST_CASE("time helpers") {
  const ClusterSpec c = cluster_preset("h800x128");
  CHECK(compute_seconds(989.4e12, c, DType::kBf16, 0.5) == doctest::Approx(2.0));
  CHECK(compute_seconds(0, c, DType::kBf16, 0.5) == 0);
  CHECK(comm_seconds(50e9, 50e9, 5e-6) == doctest::Approx(1 + 5e-6));
  CHECK(comm_seconds(50e9, 50e9, 0, 0.5) == doctest::Approx(2));
  CHECK(comm_seconds(0, 50e9, 5e-6) == 0);
  CHECK_THROWS_WITH_AS(compute_seconds(1, c, DType::kBf16, 1.5), "efficiency = 1.5: expected a fraction in (0, 1]",
                       ConfigError);
  CHECK_THROWS_AS(compute_seconds(-1, c, DType::kBf16, 0.5), ConfigError);
  CHECK_THROWS_AS(comm_seconds(1, 0, 0), ConfigError);
  CHECK_THROWS_AS(comm_seconds(std::nan(""), 1, 0), ConfigError);
  CHECK_NOTHROW(validate(Efficiency{}));
  CHECK_THROWS_WITH_AS(validate(Efficiency{0.5, 0, 0.8}), "Efficiency.ffn = 0: expected a fraction in (0, 1]",
                       ConfigError);
}
