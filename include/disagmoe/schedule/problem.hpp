// SPDX-License-Identifier: Apache-2.0
/// @file problem.hpp
/// The abstract input of every schedule policy: a worker layout and per-layer op costs
/// (seconds for compute, bytes for communication). Policies never see a ModelSpec; the
/// cost adapter (cost_adapter.hpp) or a test fills this in.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/schedule/op.hpp>

#include <string>
#include <vector>

namespace disagmoe::schedule {

/// Costs of one transformer layer for one micro-batch, per GPU of the worker that runs
/// each part, at that worker's full compute rate.
struct LayerCost {
  bool moe = true;                ///< false: dense layer; its FFN is folded into attention
  double attn_fwd = 0;            ///< s, attention (+ router, + dense FFN) forward
  double attn_bwd = 0;            ///< s, its input-gradient backward
  double attn_wgrad = 0;          ///< s, its weight-gradient backward
  double expert_fwd = 0;          ///< s, expert forward
  double expert_bwd = 0;          ///< s, expert input-gradient backward
  double expert_wgrad = 0;        ///< s, expert weight-gradient backward
  double dispatch_bytes = 0;      ///< bytes sent per attention-side GPU to the experts
  double combine_bytes = 0;       ///< bytes sent per expert-side GPU back towards attention
                                  ///< (its busiest GPU when ffn_imbalance > 1)
  /// Busiest expert-side GPU's share of the layer's A↔F rows over the mean share (>= 1;
  /// 1 when the experts split evenly): it receives and returns this × the mean rows.
  double ffn_imbalance = 1;
  double hidden_bytes = 0;        ///< bytes of the residual stream per GPU (pipeline hand-off)
  double attn_grad_bytes = 0;     ///< per GPU, DP all-reduce volume of attention grads (0: none)
  double expert_grad_bytes = 0;   ///< per GPU, all-reduce volume of expert grads (0: none)
  double attn_activation_bytes = 0;    ///< per GPU, kept from attention fwd to its wgrad
  double expert_activation_bytes = 0;  ///< per GPU, kept from expert fwd to its wgrad
  double attn_state_bytes = 0;    ///< per GPU holding the layer: attention-side weights + grads + optimizer
  double expert_state_bytes = 0;  ///< per GPU holding the layer: expert-side weights + grads + optimizer
};

/// The input embedding and the output head of one micro-batch, per GPU of the worker
/// that holds the first (embedding) or the last (head) layer's attention, at its full
/// rate; all 0: not scheduled (a problem built by hand or by the runtime, which folds
/// them into the first and last attention ops).
struct EmbeddingHeadCost {
  double embed_fwd = 0;    ///< s, embedding lookup
  double embed_wgrad = 0;  ///< s, its weight gradient
  double head_fwd = 0;     ///< s, final norm + logits + loss
  double head_bwd = 0;     ///< s, the head's input gradient
  double head_wgrad = 0;   ///< s, the head's weight gradient
};

/// Everything a policy needs: who computes (workers), what each layer costs, how many
/// micro-batches one step has, and the whole-job tokens/FLOPs of one micro-batch (for
/// tokens/s and MFU).
struct Problem {
  std::vector<Worker> workers;      ///< layout; the policy decides which layers go where
  Network network;
  std::vector<LayerCost> layers;    ///< one entry per transformer layer
  EmbeddingHeadCost embedding_head; ///< before the first and after the last layer
  int micro_batches = 1;            ///< micro-batches per step
  double tokens_per_micro_batch = 0;  ///< whole job
  double flops_per_micro_batch = 0;   ///< whole job, forward + backward model FLOPs
};

/// Throws ConfigError naming the first invalid field of `p`.
inline void validate(const Problem& p) {
  expect(!p.workers.empty(), "Problem.workers", p.workers.size(), "at least one worker");
  expect(!p.layers.empty(), "Problem.layers", p.layers.size(), "at least one layer");
  expect(p.micro_batches >= 1, "micro_batches", p.micro_batches, "a positive integer");
  for (std::size_t i = 0; i < p.layers.size(); ++i) {
    const auto& l = p.layers[i];
    const double v[] = {l.attn_fwd, l.attn_bwd, l.attn_wgrad, l.expert_fwd, l.expert_bwd, l.expert_wgrad,
                        l.dispatch_bytes, l.combine_bytes, l.hidden_bytes, l.attn_grad_bytes,
                        l.expert_grad_bytes, l.attn_activation_bytes, l.expert_activation_bytes, l.attn_state_bytes,
                        l.expert_state_bytes};
    for (double x : v)
      expect(x >= 0 && x < 1e300, "Problem.layers[" + std::to_string(i) + "]", x, "finite non-negative costs");
    expect(l.ffn_imbalance >= 1 && l.ffn_imbalance < 1e300, "Problem.layers[" + std::to_string(i) + "].ffn_imbalance",
           l.ffn_imbalance, "a finite factor >= 1");
  }
  const auto& e = p.embedding_head;
  for (double x : {e.embed_fwd, e.embed_wgrad, e.head_fwd, e.head_bwd, e.head_wgrad})
    expect(x >= 0 && x < 1e300, "Problem.embedding_head", x, "finite non-negative costs");
}

/// `n` identical workers of one GPU each on separate nodes (a test/default layout).
inline std::vector<Worker> uniform_workers(int n, Role role = Role::kColocated, double nic = 1e9,
                                           double nvlink = 1e10) {
  std::vector<Worker> w(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    auto& k = w[static_cast<std::size_t>(i)];
    k.name = std::string(role == Role::kFfn ? "F" : role == Role::kAttention ? "A" : "S") + std::to_string(i);
    k.role = role;
    k.first_node = i;
    k.nic_bandwidth = nic;
    k.nvlink_bandwidth = nvlink;
    k.peak_flops = 1e12;
  }
  return w;
}

}  // namespace disagmoe::schedule
