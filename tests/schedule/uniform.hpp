// SPDX-License-Identifier: Apache-2.0
// Test helpers: uniform-cost problems whose step times have closed forms.
#pragma once

#include <disagmoe/schedule/problem.hpp>

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

}  // namespace disagmoe::schedule::test
