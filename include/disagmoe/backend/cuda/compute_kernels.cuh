// SPDX-License-Identifier: Apache-2.0
/// @file compute_kernels.cuh
/// Device code and definitions of the launch functions of compute_launch.hpp. Included
/// once per program, through instantiate.cuh. Every kernel is a grid-stride loop over
/// rows (columns, elements) calling the host-tested functions of norm_math.hpp,
/// softmax_math.hpp, router_math.hpp and adamw_math.hpp. nvcc only.
#pragma once

#include <disagmoe/backend/cuda/adamw_math.hpp>
#include <disagmoe/backend/cuda/check.hpp>
#include <disagmoe/backend/cuda/compute_launch.hpp>
#include <disagmoe/backend/cuda/norm_math.hpp>
#include <disagmoe/backend/cuda/router_math.hpp>
#include <disagmoe/backend/cuda/softmax_math.hpp>
#include <disagmoe/backend/cuda/token_kernels.cuh>  // kernels::blocks_for, kThreads

#include <cuda_runtime.h>

namespace disagmoe::cuda::kernels {

/// i = this thread's indices in [0, n), grid-stride.
#define DISAGMOE_FOR_EACH_INDEX_(i, n) \
  for (std::size_t i = blockIdx.x * std::size_t{kThreads} + threadIdx.x; i < (n); i += std::size_t{gridDim.x} * kThreads)

__global__ void round_to_bf16(const float* __restrict__ x, std::size_t n, __nv_bfloat16* __restrict__ y) {
  DISAGMOE_FOR_EACH_INDEX_(i, n) y[i] = __float2bfloat16_rn(x[i]);
}

__global__ void add(const float* a, const float* b, std::size_t n, float* out) {
  DISAGMOE_FOR_EACH_INDEX_(i, n) out[i] = add_rn(a[i], b[i]);
}

__global__ void rms_norm(const float* __restrict__ x, const float* __restrict__ w, float eps, long rows, int d,
                         float* __restrict__ y, float* __restrict__ inv) {
  DISAGMOE_FOR_EACH_INDEX_(r, static_cast<std::size_t>(rows)) {
    const float* xr = x + r * d;
    inv[r] = rms_inverse(xr, d, eps);
    rms_norm_row(xr, w, inv[r], d, y + r * d);
  }
}

__global__ void rms_norm_backward(const float* x, const float* inv, const float* w, const float* dy, const float* add,
                                  long rows, int d, float* dx) {
  DISAGMOE_FOR_EACH_INDEX_(r, static_cast<std::size_t>(rows))
  rms_norm_backward_row(x + r * d, w, inv[r], dy + r * d, add != nullptr ? add + r * d : nullptr, d, dx + r * d);
}

__global__ void rms_norm_weight(const float* x, const float* inv, const float* dy, long rows, int d, float* dw) {
  DISAGMOE_FOR_EACH_INDEX_(c, static_cast<std::size_t>(d))
  dw[c] = rms_norm_weight_column(x, inv, dy, rows, d, static_cast<int>(c), dw[c]);
}

__global__ void rotary(float* x, long rows, int heads, int head_dim, const float* cos, const float* sin, int seq_len,
                       bool inverse) {
  const int half = head_dim / 2;
  const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(heads) * half;
  DISAGMOE_FOR_EACH_INDEX_(e, n) {
    const long r = static_cast<long>(e / (static_cast<std::size_t>(heads) * half));
    const int rest = static_cast<int>(e % (static_cast<std::size_t>(heads) * half)), h = rest / half, i = rest % half;
    const long p = r % seq_len;
    float* row = x + r * heads * head_dim + h * head_dim;
    const float s = sin[p * half + i];
    rotate_pair(row[i], row[i + half], cos[p * half + i], inverse ? -s : s);
  }
}

__global__ void attention_softmax(float* scores, long sequences, int heads, int seq_len, int window, float scale,
                                  float* lse, bool recompute) {
  const std::size_t n = static_cast<std::size_t>(sequences) * heads * seq_len;
  DISAGMOE_FOR_EACH_INDEX_(row, n) {
    const int i = static_cast<int>(row % seq_len);
    const long bh = static_cast<long>(row / seq_len), b = bh / heads;
    const int h = static_cast<int>(bh % heads);
    float* s = scores + row * seq_len;
    float& l = lse[(b * seq_len + i) * heads + h];
    if (recompute)
      attention_probs_row(s, seq_len, i, window, scale, l);
    else
      l = attention_softmax_row(s, seq_len, i, window, scale);
  }
}

__global__ void attention_softmax_backward(const float* p, float* dp, long rows, int seq_len, float scale) {
  DISAGMOE_FOR_EACH_INDEX_(r, static_cast<std::size_t>(rows))
  attention_softmax_backward_row(p + r * seq_len, dp + r * seq_len, seq_len, scale);
}

__global__ void router_rows(float* probs, long tokens, int experts, int k, int* ids, float* gates, float* lse,
                            float* selected) {
  DISAGMOE_FOR_EACH_INDEX_(t, static_cast<std::size_t>(tokens))
  selected[t] = router_row(probs + t * experts, experts, k, ids + t * k, gates + t * k, lse[t]);
}

__global__ void router_totals(const float* probs, const int* ids, long tokens, int experts, int k, float* prob_sums,
                              int* counts) {
  DISAGMOE_FOR_EACH_INDEX_(i, static_cast<std::size_t>(experts)) {
    float sum = 0.0f;
    int count = 0;
    for (long t = 0; t < tokens; ++t) {
      sum = add_rn(sum, probs[t * experts + static_cast<long>(i)]);
      for (int j = 0; j < k; ++j) count += ids[t * k + j] == static_cast<int>(i);
    }
    prob_sums[i] = sum;
    counts[i] = count;
  }
}

__global__ void router_backward(const float* probs, const int* ids, const float* gates, const float* d_gates,
                                const float* selected, const float* lse, const float* aux_row, float z_scale,
                                long tokens, int experts, int k, float* dlogits) {
  DISAGMOE_FOR_EACH_INDEX_(t, static_cast<std::size_t>(tokens))
  router_backward_row(probs + t * experts, ids + t * k, gates + t * k, d_gates + t * k, selected[t], lse[t], aux_row,
                      z_scale, experts, k, dlogits + t * experts);
}

__global__ void cross_entropy(float* logits, const int* targets, long rows, int vocab, bool to_probs, float* terms) {
  DISAGMOE_FOR_EACH_INDEX_(r, static_cast<std::size_t>(rows))
  terms[r] = cross_entropy_row(logits + r * vocab, vocab, targets[r], to_probs);
}

__global__ void cross_entropy_backward(const float* probs, const int* targets, long rows, int vocab, float c,
                                       float* dlogits) {
  DISAGMOE_FOR_EACH_INDEX_(r, static_cast<std::size_t>(rows))
  cross_entropy_backward_row(probs + r * vocab, vocab, targets[r], c, dlogits + r * vocab);
}

__global__ void adamw(runtime::AdamWCoefficients<float> k, std::size_t n, float* p, const float* g, float* m,
                      float* v) {
  DISAGMOE_FOR_EACH_INDEX_(i, n) adamw_element(k, g[i], p[i], m[i], v[i]);
}

#undef DISAGMOE_FOR_EACH_INDEX_

}  // namespace disagmoe::cuda::kernels

namespace disagmoe::cuda::launch {

/// Launches `kernel` over `n` indices on `stream` (nothing for n == 0) and checks the launch.
#define DISAGMOE_LAUNCH_OVER_(n, kernel, ...)                                          \
  do {                                                                                 \
    const auto n_ = static_cast<std::size_t>(n);                                       \
    if (n_ == 0) return;                                                               \
    kernels::kernel<<<kernels::blocks_for(n_), kernels::kThreads, 0, stream>>>(__VA_ARGS__); \
    DISAGMOE_CUDA_CHECK_LAUNCH();                                                      \
  } while (false)

void round_to_bf16(cudaStream_t stream, const float* x, std::size_t n, __nv_bfloat16* y) {
  DISAGMOE_LAUNCH_OVER_(n, round_to_bf16, x, n, y);
}
void add(cudaStream_t stream, const float* a, const float* b, std::size_t n, float* out) {
  DISAGMOE_LAUNCH_OVER_(n, add, a, b, n, out);
}
void rms_norm(cudaStream_t stream, const float* x, const float* w, float eps, long rows, int d, float* y, float* inv) {
  DISAGMOE_LAUNCH_OVER_(rows, rms_norm, x, w, eps, rows, d, y, inv);
}
void rms_norm_backward(cudaStream_t stream, const float* x, const float* inv, const float* w, const float* dy,
                       const float* add, long rows, int d, float* dx) {
  DISAGMOE_LAUNCH_OVER_(rows, rms_norm_backward, x, inv, w, dy, add, rows, d, dx);
}
void rms_norm_weight(cudaStream_t stream, const float* x, const float* inv, const float* dy, long rows, int d,
                     float* dw) {
  if (rows == 0) return;
  DISAGMOE_LAUNCH_OVER_(d, rms_norm_weight, x, inv, dy, rows, d, dw);
}
void rotary(cudaStream_t stream, float* x, long rows, int heads, int head_dim, const float* cos, const float* sin,
            int seq_len, bool inverse) {
  DISAGMOE_LAUNCH_OVER_(static_cast<std::size_t>(rows) * heads * (head_dim / 2), rotary, x, rows, heads, head_dim, cos,
                        sin, seq_len, inverse);
}
void attention_softmax(cudaStream_t stream, float* scores, long sequences, int heads, int seq_len, int window,
                       float scale, float* lse) {
  DISAGMOE_LAUNCH_OVER_(static_cast<std::size_t>(sequences) * heads * seq_len, attention_softmax, scores, sequences,
                        heads, seq_len, window, scale, lse, false);
}
void attention_probs(cudaStream_t stream, float* scores, long sequences, int heads, int seq_len, int window,
                     float scale, const float* lse) {
  // The kernel only reads lse when recomputing.
  DISAGMOE_LAUNCH_OVER_(static_cast<std::size_t>(sequences) * heads * seq_len, attention_softmax, scores, sequences,
                        heads, seq_len, window, scale, const_cast<float*>(lse), true);
}
void attention_softmax_backward(cudaStream_t stream, const float* p, float* dp, long rows, int seq_len, float scale) {
  DISAGMOE_LAUNCH_OVER_(rows, attention_softmax_backward, p, dp, rows, seq_len, scale);
}
void router_rows(cudaStream_t stream, float* probs, long tokens, int experts, int k, int* ids, float* gates,
                 float* lse, float* selected) {
  DISAGMOE_LAUNCH_OVER_(tokens, router_rows, probs, tokens, experts, k, ids, gates, lse, selected);
}
void router_totals(cudaStream_t stream, const float* probs, const int* ids, long tokens, int experts, int k,
                   float* prob_sums, int* counts) {
  DISAGMOE_LAUNCH_OVER_(experts, router_totals, probs, ids, tokens, experts, k, prob_sums, counts);
}
void router_backward(cudaStream_t stream, const float* probs, const int* ids, const float* gates, const float* d_gates,
                     const float* selected, const float* lse, const float* aux_row, float z_scale, long tokens,
                     int experts, int k, float* dlogits) {
  DISAGMOE_LAUNCH_OVER_(tokens, router_backward, probs, ids, gates, d_gates, selected, lse, aux_row, z_scale, tokens,
                        experts, k, dlogits);
}
void cross_entropy(cudaStream_t stream, float* logits, const int* targets, long rows, int vocab, bool to_probs,
                   float* terms) {
  DISAGMOE_LAUNCH_OVER_(rows, cross_entropy, logits, targets, rows, vocab, to_probs, terms);
}
void cross_entropy_backward(cudaStream_t stream, const float* probs, const int* targets, long rows, int vocab, float c,
                            float* dlogits) {
  DISAGMOE_LAUNCH_OVER_(rows, cross_entropy_backward, probs, targets, rows, vocab, c, dlogits);
}
void adamw(cudaStream_t stream, const runtime::AdamWCoefficients<float>& k, std::size_t n, float* p, const float* g,
           float* m, float* v) {
  DISAGMOE_LAUNCH_OVER_(n, adamw, k, n, p, g, m, v);
}

#undef DISAGMOE_LAUNCH_OVER_

}  // namespace disagmoe::cuda::launch
