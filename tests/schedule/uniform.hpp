// SPDX-License-Identifier: Apache-2.0
// Test helpers: uniform-cost problems whose step times have closed forms.
#pragma once

#include <disagmoe/schedule/cost_adapter.hpp>
#include <disagmoe/schedule/problem.hpp>
#include <disagmoe/spec/presets.hpp>

#include <random>

namespace disagmoe::schedule::test {

/// Per-layer compute costs; comm bytes zero unless set.
struct Uniform {
  double f = 1.0;    // attention fwd per layer
  double b = 1.0;    // attention input-grad per layer
  double w = 1.0;    // attention weight-grad per layer
  double ef = 0.0;   // expert fwd
  double eb = 0.0;   // expert input-grad
  double ew = 0.0;   // expert weight-grad
  bool moe = true;
};

inline Problem uniform_problem(int workers, int layers, int m, Uniform u = {}) {
  Problem p;
  p.workers = uniform_workers(workers);
  p.micro_batches = m;
  p.tokens_per_micro_batch = 1000;
  p.flops_per_micro_batch = 1e12;
  LayerCost c;
  c.moe = u.moe;
  c.attn_fwd = u.f;
  c.attn_bwd = u.b;
  c.attn_wgrad = u.w;
  c.expert_fwd = u.ef;
  c.expert_bwd = u.eb;
  c.expert_wgrad = u.ew;
  c.attn_activation_bytes = 1;
  c.expert_activation_bytes = u.moe ? 1 : 0;
  p.layers.assign(static_cast<std::size_t>(layers), c);
  return p;
}

/// One layer with compute costs drawn from U(0.2, 2) s and, when `comm`, every byte
/// count from U(0.2, 2) × 1e8; a quarter of the layers are dense.
inline LayerCost random_layer(std::mt19937_64& rng, bool comm) {
  std::uniform_real_distribution<double> u(0.2, 2.0);
  LayerCost c;
  c.moe = rng() % 4 != 0;
  for (double* x : {&c.attn_fwd, &c.attn_bwd, &c.attn_wgrad, &c.expert_fwd, &c.expert_bwd, &c.expert_wgrad}) *x = u(rng);
  if (comm)
    for (double* x : {&c.dispatch_bytes, &c.combine_bytes, &c.hidden_bytes, &c.attn_grad_bytes, &c.expert_grad_bytes})
      *x = u(rng) * 1e8;
  c.attn_activation_bytes = 10;
  c.expert_activation_bytes = c.moe ? 5 : 0;
  return c;
}

/// `workers` colocated one-GPU workers (1 GB/s NICs, 10 GB/s NVLink), `layers` random
/// layers (random_layer: with comm bytes when `comm`, and then 10 ms of message latency),
/// `m` micro-batches, comm kernels holding `sm_fraction` of the SMs.
inline Problem random_problem(std::mt19937_64& rng, int workers, int layers, int m, bool comm,
                              double sm_fraction = 0) {
  Problem p;
  p.workers = uniform_workers(workers, Role::kColocated, 1e9, 1e10);
  p.network.nic_latency = comm ? 0.01 : 0;
  p.network.comm_sm_fraction = sm_fraction;
  p.micro_batches = m;
  p.tokens_per_micro_batch = 100;
  p.flops_per_micro_batch = 1e9;
  for (int l = 0; l < layers; ++l) p.layers.push_back(random_layer(rng, comm));
  return p;
}

/// A small real setting: OLMoE-1B-7B at `seq_len` on two H800 nodes, 64 sequences per step.
struct SmallSetting {
  ModelSpec model;
  ClusterSpec cluster;
  CostOptions cost;
};
inline SmallSetting small_setting(int seq_len = 1024) {
  SmallSetting s{model_preset("olmoe-1b-7b"), parse_cluster_name("h800x128:2"), {}};
  s.model.seq_len = seq_len;
  s.cost.global_batch = 64;
  return s;
}

}  // namespace disagmoe::schedule::test
