// SPDX-License-Identifier: Apache-2.0
/// @file compute_launch.hpp
/// Host launch functions of the row kernels of the CUDA attention-side compute
/// (cuda/attention.hpp) and of the optimizer: declared here for host code, defined in
/// compute_kernels.cuh (reached through instantiate.cuh in one nvcc TU). Each enqueues on
/// `stream` and returns; pointers are device memory; matrices are row-major; a count of 0
/// launches nothing. One thread per row (per column for the gain gradient, per element
/// for the element-wise ones), running the arithmetic of norm_math.hpp,
/// softmax_math.hpp, router_math.hpp and adamw_math.hpp: deterministic, no atomics.
#pragma once

#include <disagmoe/runtime/adamw_coefficients.hpp>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>

namespace disagmoe::cuda::launch {

/// y[i] = x[i] rounded to bf16 (nearest even), i < n. O(n).
void round_to_bf16(cudaStream_t stream, const float* x, std::size_t n, __nv_bfloat16* y);
/// out[i] = a[i] + b[i], i < n (out may alias a or b). O(n).
void add(cudaStream_t stream, const float* a, const float* b, std::size_t n, float* out);

/// RMSNorm of x [rows, d] with gain w [d]: y [rows, d] and inv [rows] (norm_math.hpp).
void rms_norm(cudaStream_t stream, const float* x, const float* w, float eps, long rows, int d, float* y, float* inv);
/// dx = the RMSNorm input gradient of dy, plus `add` when not null (may alias dx). O(rows d).
void rms_norm_backward(cudaStream_t stream, const float* x, const float* inv, const float* w, const float* dy,
                       const float* add, long rows, int d, float* dx);
/// dw [d] += the gain gradient, each column summed over rows in order. O(rows d).
void rms_norm_weight(cudaStream_t stream, const float* x, const float* inv, const float* dy, long rows, int d,
                     float* dw);
/// Rotates x [rows, heads * head_dim] in place, row r at position r % seq_len, with the
/// table cos/sin [seq_len, head_dim / 2]; `inverse` turns by -angle. O(rows heads head_dim).
void rotary(cudaStream_t stream, float* x, long rows, int heads, int head_dim, const float* cos, const float* sin,
            int seq_len, bool inverse);

/// Scores [count, seq_len, seq_len] (count = sequences x heads, ordered (sequence, head))
/// to probabilities in place, row i masked to [first_key(i), i]; lse [rows, heads]
/// receives each row's log-sum-exp (row b * seq_len + i, column h). O(count seq_len^2).
void attention_softmax(cudaStream_t stream, float* scores, long sequences, int heads, int seq_len, int window,
                       float scale, float* lse);
/// The probabilities again from the scores and the saved lse (the backward's recompute).
void attention_probs(cudaStream_t stream, float* scores, long sequences, int heads, int seq_len, int window,
                     float scale, const float* lse);
/// dp (dL/dP, same layout) to dL/dS in place, from the probabilities p. O(count seq_len^2).
void attention_softmax_backward(cudaStream_t stream, const float* p, float* dp, long rows, int seq_len, float scale);

/// Router rows: logits [tokens, experts] to probabilities in place; ids, gates [tokens,
/// k]; lse and selected [tokens] (router_math.hpp router_row). O(tokens experts k).
void router_rows(cudaStream_t stream, float* probs, long tokens, int experts, int k, int* ids, float* gates,
                 float* lse, float* selected);
/// Per expert i: prob_sums[i] = sum over tokens (in order) of probs[t][i], counts[i] =
/// assignments of tokens to i. O(tokens (experts + k)).
void router_totals(cudaStream_t stream, const float* probs, const int* ids, long tokens, int experts, int k,
                   float* prob_sums, int* counts);
/// dlogits [tokens, experts] (router_math.hpp router_backward_row). O(tokens (experts + k)).
void router_backward(cudaStream_t stream, const float* probs, const int* ids, const float* gates, const float* d_gates,
                     const float* selected, const float* lse, const float* aux_row, float z_scale, long tokens,
                     int experts, int k, float* dlogits);

/// Cross-entropy rows of logits [rows, vocab] against targets [rows]: terms [rows] and,
/// when to_probs, the softmax in place (softmax_math.hpp cross_entropy_row). O(rows vocab).
void cross_entropy(cudaStream_t stream, float* logits, const int* targets, long rows, int vocab, bool to_probs,
                   float* terms);
/// dlogits = c (probs - onehot(targets)). O(rows vocab).
void cross_entropy_backward(cudaStream_t stream, const float* probs, const int* targets, long rows, int vocab, float c,
                            float* dlogits);

/// One AdamW step on n elements of p with gradient g and moments m, v (adamw_math.hpp). O(n).
void adamw(cudaStream_t stream, const runtime::AdamWCoefficients<float>& k, std::size_t n, float* p, const float* g,
           float* m, float* v);

}  // namespace disagmoe::cuda::launch
