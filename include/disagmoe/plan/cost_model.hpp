// SPDX-License-Identifier: Apache-2.0
/// @file cost_model.hpp
/// Analytic cost model of one transformer layer for one micro-batch: FLOPs per
/// component and pass, bytes crossing the network between attention (A) and FFN (F)
/// workers, data-parallel gradient all-reduce bytes, memory per worker, and the
/// two time helpers every planner and simulator uses.
///
/// Split of a layer between the sides of a disaggregated deployment (DisagMoE,
/// DisagMoE (arXiv 2605.11005) "Disaggregated placement"): the A side runs the attention block and
/// the router (the router decides where tokens go, so it runs before dispatch); the
/// F side runs routed experts, shared experts and the dense FFN of dense layers.
///
/// Conventions: a multiply-add is 2 FLOPs; only matrix products are counted (norms,
/// softmax, activation functions and residual adds are O(T·d) and ignored, as in
/// Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
/// Clusters Using Megatron-LM", §5.1 / Appendix). T = seq_len × micro_batch tokens.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/plan/recompute.hpp>
#include <disagmoe/spec/cluster_spec.hpp>
#include <disagmoe/spec/dtype.hpp>
#include <disagmoe/spec/model_size.hpp>
#include <disagmoe/spec/model_spec.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace disagmoe::plan {

namespace detail {
inline void check_layer(const ModelSpec& m, int l) {
  expect(l >= 0 && l < m.layers, "layer", l, "0 <= layer < layers (" + std::to_string(m.layers) + ")");
}
}  // namespace detail

// ───────────────────────────── FLOPs ─────────────────────────────

/// FLOPs of one component for one micro-batch, split by pass. The backward pass is
/// split as zero-bubble schedules split it (Qi et al. 2024, "Zero Bubble Pipeline
/// Parallelism", §2): `backward_input` (B, gradients w.r.t. activations, on the
/// critical path) and `backward_weight` (W, gradients w.r.t. weights, deferrable).
/// For a GEMM Y = XW both halves cost as much as the forward product, so
/// backward = 2 × forward (Kaplan et al. 2020, "Scaling Laws", §2.1: C ≈ 6N per token).
struct PassFlops {
  double forward = 0;          ///< FLOPs of the forward pass
  double backward_input = 0;   ///< FLOPs of dL/dX (B)
  double backward_weight = 0;  ///< FLOPs of dL/dW (W)

  /// backward_input + backward_weight.
  [[nodiscard]] constexpr double backward() const { return backward_input + backward_weight; }
  /// forward + backward.
  [[nodiscard]] constexpr double total() const { return forward + backward(); }
  /// Component-wise sum.
  constexpr PassFlops& operator+=(const PassFlops& o) {
    forward += o.forward;
    backward_input += o.backward_input;
    backward_weight += o.backward_weight;
    return *this;
  }
  friend constexpr PassFlops operator+(PassFlops a, const PassFlops& b) { return a += b; }
  friend constexpr bool operator==(const PassFlops&, const PassFlops&) = default;
};

/// FLOPs of a weight GEMM (forward f): dX and dW each cost f.
constexpr PassFlops gemm_flops(double forward) { return {forward, forward, forward}; }

/// Number of (query, key) pairs one sequence of `seq` tokens attends to under causal
/// masking with an optional sliding `window` (0 = none): Σ_i min(i + 1, w). Full
/// causal attention gives seq(seq+1)/2 ≈ seq²/2 — the causal factor ½ of FlashAttention
/// FLOP accounting (Dao 2023, "FlashAttention-2", §4.1). Exact count, O(1).
constexpr double attended_pairs(std::int64_t seq, std::int64_t window = 0) {
  if (seq <= 0) return 0;
  if (window <= 0 || window >= seq) return 0.5 * double(seq) * double(seq + 1);
  const double w = double(window);
  // First w queries see i+1 keys (a triangle), the remaining seq-w see exactly w.
  return 0.5 * w * (w + 1) + double(seq - window) * w;
}

// ──────────────────────────── bytes ─────────────────────────────

/// Expected number of distinct GPUs a token's top-k experts live on when the E
/// experts are spread evenly over N GPUs (E/N each, E divisible by N) and the k
/// experts are a uniformly random k-subset: N·(1 − C(E − E/N, k) / C(E, k))
/// (occupancy with sampling without replacement: a GPU is missed iff all k picks
/// fall in the other E − E/N experts; Feller 1968, "An Introduction to Probability
/// Theory", Vol. I, §II.11 and §IV.2). For E ≫ k it tends to the classic
/// N·(1 − (1 − 1/N)^k). When E is not divisible by N the with-replacement form is
/// used. Preconditions: 1 <= k <= E, N >= 1 (ConfigError otherwise). O(k).
inline double expected_distinct_gpus(int experts, int top_k, int gpus) {
  expect(gpus >= 1, "ep_size", gpus, "a positive number of GPUs");
  expect(top_k >= 1 && top_k <= experts, "top_k", top_k,
         "1 <= top_k <= experts (" + std::to_string(experts) + ")");
  const double n = gpus;
  if (experts % gpus != 0) return n * (1 - std::pow(1 - 1 / n, top_k));
  const int other = experts - experts / gpus;
  // C(other, k) / C(E, k) = Π_{i<k} (other - i) / (E - i); zero once other - i hits 0.
  double miss = 1;
  for (int i = 0; i < top_k; ++i) miss *= std::max(0, other - i) / double(experts - i);
  return n * (1 - miss);
}

/// How tokens are addressed when dispatched to expert GPUs.
struct DispatchOptions {
  /// Size N of the expert-parallel group the experts of a layer are spread over.
  int ep_size = 1;
  /// Send each token once per destination GPU (not once per chosen expert), with the
  /// F side summing its gate-weighted expert outputs before returning one row
  /// (Expert Coupling, arXiv 2610.09372; DeepEP's deduplicated dispatch).
  bool dedup = true;
  /// Caller-given rows per token for MoE layers (e.g. measured from a routing trace
  /// by placement/); 0 = derive: expected_distinct_gpus if dedup, else top_k.
  double rows_per_token = 0;
};

/// Rows (hidden-size vectors) sent per token from A to F for layer `l`: 1 for a
/// dense layer; for an MoE layer `opt.rows_per_token` if given, else the expected
/// number of distinct destination GPUs (dedup) or top_k (one row per expert).
inline double dispatch_rows_per_token(const ModelSpec& m, int l, const DispatchOptions& opt) {
  detail::check_layer(m, l);
  expect(opt.rows_per_token >= 0 && std::isfinite(opt.rows_per_token), "rows_per_token", opt.rows_per_token,
         "a finite number >= 0 (0 = derive from ep_size)");
  if (!m.is_moe_layer(l)) return 1;
  if (opt.rows_per_token > 0) return opt.rows_per_token;
  return opt.dedup ? expected_distinct_gpus(m.experts, m.top_k, opt.ep_size) : double(m.top_k);
}

/// Bytes of one row: hidden × bytes_of(dtype).
constexpr double row_bytes(const ModelSpec& m) { return double(m.hidden) * bytes_of(m.dtype); }

/// Bytes moved A→F (dispatch) for layer `l` and one micro-batch in the forward pass:
/// T · rows_per_token · d · bytes. The backward pass moves the same bytes F→A
/// (gradients retrace the path). O(1).
inline double dispatch_bytes(const ModelSpec& m, int l, const DispatchOptions& opt) {
  return double(m.tokens_per_micro_batch()) * dispatch_rows_per_token(m, l, opt) * row_bytes(m);
}

/// Bytes moved F→A (return/combine) for layer `l`, one micro-batch, forward pass.
/// Equal to dispatch_bytes: with dedup each destination GPU returns one pre-reduced
/// row per token, without it one row per expert. O(1).
inline double return_bytes(const ModelSpec& m, int l, const DispatchOptions& opt) {
  return dispatch_bytes(m, l, opt);
}

/// Bytes of AF-Pipe's fused communication stage at the boundary after layer `l`:
/// the return of layer l (F→A) and the dispatch of layer l + 1 (A→F) travel in one
/// aligned stage (DisagMoE, arXiv 2605.11005, AF-Pipe "Stage alignment"). For the last layer only
/// the return is left. O(1).
inline double fused_stage_bytes(const ModelSpec& m, int l, const DispatchOptions& opt) {
  double b = return_bytes(m, l, opt);
  if (l + 1 < m.layers) b += dispatch_bytes(m, l + 1, opt);
  return b;
}

/// Bytes one GPU sends to other GPUs in the colocated expert-parallel all-to-all of
/// the baselines (dispatch only; combine moves the same), for layer `l`, when every
/// GPU of an EP group of N holds E/N experts and its own T tokens: uniformly, a
/// fraction (N − 1)/N of the rows go to other GPUs (Lepikhin et al. 2021, GShard, §2.2;
/// Megatron-Core MoE token dispatcher). Dense layers move nothing. O(1).
inline double all_to_all_bytes(const ModelSpec& m, int l, const DispatchOptions& opt) {
  if (!m.is_moe_layer(l)) return 0;
  const double n = opt.ep_size;
  return dispatch_bytes(m, l, opt) * (n - 1) / n;
}

// ─────────────────────────── per layer ───────────────────────────

/// FLOPs of one layer for one micro-batch, per component. Every field is for the
/// whole micro-batch (T tokens) on one data-parallel rank's worth of work.
struct LayerCost {
  int layer = 0;                 ///< 0-based layer index
  bool moe = false;              ///< MoE layer (else dense FFN)
  bool windowed = false;         ///< sliding-window attention
  double tokens = 0;             ///< T = seq_len × micro_batch
  PassFlops attention_proj;      ///< Q, K, V, O projections (GQA: K, V have kv_heads)
  PassFlops attention_core;      ///< QKᵀ and A·V (no weights: all backward is B)
  PassFlops router;              ///< gate GEMM d×E
  PassFlops experts;             ///< routed experts: 3 GEMMs per routed token-expert
  PassFlops shared_experts;      ///< shared experts: 3 GEMMs per token per shared expert
  PassFlops dense_ffn;           ///< dense FFN of a dense layer: 3 GEMMs per token
  double dispatch_bytes = 0;     ///< A→F bytes, forward (see plan::dispatch_bytes)
  double return_bytes = 0;       ///< F→A bytes, forward (see plan::return_bytes)
  double all_to_all_bytes = 0;   ///< colocated EP all-to-all bytes per GPU, one direction

  /// Attention block (projections + core).
  [[nodiscard]] constexpr PassFlops attention() const { return attention_proj + attention_core; }
  /// Everything the A side runs: attention block + router.
  [[nodiscard]] constexpr PassFlops attention_side() const { return attention() + router; }
  /// Everything the F side runs: routed + shared experts + dense FFN.
  [[nodiscard]] constexpr PassFlops ffn_side() const { return experts + shared_experts + dense_ffn; }
  /// The whole layer.
  [[nodiscard]] constexpr PassFlops total() const { return attention_side() + ffn_side(); }
};

/// FLOPs and bytes of layer `l` (0-based) of `m` for one micro-batch of m.micro_batch
/// sequences of m.seq_len tokens; `opt` says how tokens are dispatched (bytes only).
/// Precondition: 0 <= l < m.layers (ConfigError otherwise). O(k).
///
/// Formulas (T tokens, d hidden, h heads, kv kv-heads, dh head_dim, q = h·dh, P pairs
/// per sequence from attended_pairs, b = micro_batch):
///  - projections: 2T·d·(q + 2·kv·dh) + 2T·q·d (Narayanan et al. 2021, Appendix,
///    generalised to grouped-query attention, Ainslie et al. 2023);
///  - core: QKᵀ 2·b·P·h·dh + A·V 2·b·P·h·dh; GQA shares K/V but every query head
///    still does its dot products, so kv_heads does not enter. Backward of the core
///    is 2× forward (dQ, dK from dS; dP, dV from dO), all of it activation gradient;
///  - router: 2T·d·E;
///  - routed experts: 3 GEMMs (gate, up: d×f; down: f×d) per routed token-expert:
///    T·k·3·2·d·f (SwiGLU, Shazeer 2020); shared experts T·s·6·d·f_s; dense T·6·d·f_dense.
inline LayerCost layer_cost(const ModelSpec& m, int l, const DispatchOptions& opt = {}) {
  detail::check_layer(m, l);
  LayerCost c;
  c.layer = l;
  c.moe = m.is_moe_layer(l);
  c.windowed = m.is_windowed_layer(l);
  const double t = double(m.tokens_per_micro_batch());
  c.tokens = t;
  const double d = m.hidden, q = double(m.heads) * m.head_dim, kv = double(m.kv_heads) * m.head_dim;
  c.attention_proj = gemm_flops(2 * t * d * (q + 2 * kv) + 2 * t * q * d);
  const double pairs = attended_pairs(m.seq_len, c.windowed ? m.sliding_window : 0) * m.micro_batch;
  const double core = 2 * (2 * pairs * q);  // QKᵀ + AV, each 2·pairs·h·dh
  c.attention_core = {core, 2 * core, 0};
  if (c.moe) {
    c.router = gemm_flops(2 * t * d * m.experts);
    c.experts = gemm_flops(t * m.top_k * 6 * d * m.expert_ffn);
    c.shared_experts = gemm_flops(t * m.shared_experts * 6 * d * m.shared_expert_ffn);
  } else {
    c.dense_ffn = gemm_flops(t * 6 * d * m.dense_ffn);
  }
  c.dispatch_bytes = dispatch_bytes(m, l, opt);
  c.return_bytes = return_bytes(m, l, opt);
  c.all_to_all_bytes = all_to_all_bytes(m, l, opt);
  return c;
}

/// Sum of layer_cost over all layers (no embedding or LM head). O(layers).
inline PassFlops model_layer_flops(const ModelSpec& m) {
  PassFlops s;
  for (int l = 0; l < m.layers; ++l) s += layer_cost(m, l).total();
  return s;
}

/// FLOPs of the output head (logits) for one micro-batch: GEMM 2·T·d·V
/// (Narayanan et al. 2021, Appendix: the 6·B·s·h·V term over the three passes).
inline PassFlops head_flops(const ModelSpec& m) {
  return gemm_flops(2.0 * double(m.tokens_per_micro_batch()) * m.hidden * m.vocab);
}

/// Bytes each rank sends (and receives) in a ring all-reduce of `bytes` over `n`
/// ranks: 2(n − 1)/n × bytes (Patarasuk & Yuan 2009, "Bandwidth optimal all-reduce
/// algorithms for clusters of workstations", JPDC 69(2)). 0 for n <= 1.
constexpr double ring_all_reduce_bytes(double bytes, int n) {
  return n <= 1 ? 0.0 : 2.0 * (n - 1) / n * bytes;
}

/// Parameters on the A side for layer `l`: attention block + FFN input norm + router
/// (replicated on every A worker holding the layer).
constexpr std::int64_t attention_side_params(const ModelSpec& m, int l) {
  return attention_params(m) + m.hidden + (m.is_moe_layer(l) ? router_params(m) : 0);
}

/// Parameters on the F side for layer `l`: all routed experts, shared experts, dense FFN.
constexpr std::int64_t ffn_side_params(const ModelSpec& m, int l) {
  return ffn_params(m, l) - m.hidden - (m.is_moe_layer(l) ? router_params(m) : 0);
}

/// Per-rank bytes of the data-parallel gradient all-reduce of the replicated A-side
/// weights of layer `l` over `dp` ranks, gradients of `grad_bytes` bytes each
/// (0 = bytes_of(m.dtype)). Once per step, not per micro-batch. O(1).
inline double attention_grad_all_reduce_bytes(const ModelSpec& m, int l, int dp, double grad_bytes = 0) {
  const double gb = grad_bytes > 0 ? grad_bytes : bytes_of(m.dtype);
  return ring_all_reduce_bytes(double(attention_side_params(m, l)) * gb, dp);
}

/// Seconds the key/value ring of context parallelism takes per layer and pass, per GPU.
struct RingAttentionSeconds {
  double forward = 0;   ///< forward pass (and its recomputation)
  double backward = 0;  ///< input-gradient pass
};

/// The key/value ring of context parallelism (CP) of degree `cp` on layer `l`, inside a
/// data-parallel attention group: each micro-batch's sequences are split over `cp` GPUs
/// of one node, each holding T/cp tokens (load-balanced causal chunks, so each also does
/// 1/cp of the attention FLOPs), and the key/value chunks travel around the ring (ring
/// attention, Liu et al. 2023, arXiv 2310.01889; Megatron-Core's context parallelism):
/// forward, every GPU receives the cp − 1 other chunks of 2·kv_heads·head_dim elements
/// per token; backward, the chunks again and their gradients (2(cp − 1) transfers). Each
/// hop is one message over the GPU's intra-node link (`c.intra_node_latency`, bandwidth ×
/// `network_efficiency`). Ring attention computes on one chunk while the next arrives,
/// so a pass takes the longer of its compute and its ring (schedule/cost_adapter.hpp,
/// plan/analytic_model.hpp).
/// A sliding-window layer (window w: query i sees keys i − w < j ≤ i, model/attention.hpp)
/// keeps the same load-balanced layout, each GPU two half-chunks of H = S/(2cp) positions
/// (i and 2cp − 1 − i), so it needs only the w − 1 positions before each half: a halo of
/// min(2(w − 1), (cp − 1)·S/cp) positions per sequence, the halves' from opposite
/// neighbours at once, relayed over ⌈(w − 1)/H⌉ hops; the whole ring once the halo
/// reaches (cp − 1)·S/cp. All 0 for cp = 1. O(1).
inline RingAttentionSeconds context_parallel_ring_seconds(const ModelSpec& m, int l, int cp,
                                                          const ClusterSpec& c, double network_efficiency) {
  detail::check_layer(m, l);
  if (cp <= 1) return {};
  double positions = (cp - 1) * (double(m.seq_len) / cp), hops = cp - 1;  // the whole ring
  if (m.is_windowed_layer(l)) {
    const double halo = double(m.sliding_window) - 1, half_chunk = double(m.seq_len) / (2 * cp);
    if (2 * halo < positions) {  // then ⌈halo / H⌉ ≤ cp − 1 hops
      positions = 2 * halo;
      hops = std::ceil(halo / half_chunk);
    }
  }
  const double bytes = positions * m.micro_batch * 2.0 * m.kv_heads * m.head_dim * bytes_of(m.dtype);
  const double forward = hops * c.intra_node_latency + bytes / (c.intra_node_bandwidth * network_efficiency);
  return {forward, 2.0 * forward};
}

/// Tokens per GPU micro-batch below which context parallelism is not chosen
/// automatically: the efficiencies of plan::Efficiency are measured on micro-batches of
/// 4K-token sequences, and smaller chunks run smaller, less efficient kernels, which
/// this model does not price.
inline constexpr double kMinContextParallelTokens = 4096;

/// ConfigError naming `field` unless context-parallel degree `cp` gives every GPU at
/// least one token of each sequence of `m` (cp <= seq_len). O(1).
inline void expect_context_parallel_fits(std::string_view field, int cp, const ModelSpec& m) {
  expect(cp <= m.seq_len, field, cp,
         "at most the sequence length (" + std::to_string(m.seq_len) + " tokens: each GPU holds a chunk)");
}

/// The context-parallel degrees an automatic choice tries for `m` on nodes of
/// `gpus_per_node` GPUs: 1, 2, 4, … below gpus_per_node and at most the sequence length
/// (each GPU holds a chunk of every sequence), each above 1 keeping at least
/// kMinContextParallelTokens tokens per GPU micro-batch. O(log).
inline std::vector<int> context_parallel_degrees(const ModelSpec& m, int gpus_per_node) {
  std::vector<int> v{1};
  for (int cp = 2; cp < gpus_per_node && cp <= m.seq_len &&
                   double(m.tokens_per_micro_batch()) / cp >= kMinContextParallelTokens;
       cp *= 2)
    v.push_back(cp);
  return v;
}

// ──────────────────────────── memory ────────────────────────────

/// How training state is kept.
struct MemoryOptions {
  /// Bytes per gradient element; 0 = bytes_of(dtype). Megatron-LM accumulates in fp32 (4).
  double grad_bytes = 0;
  /// Bytes per parameter of optimizer state: fp32 master copy + Adam m + v = 4 + 4 + 4
  /// (Rajbhandari et al. 2020, "ZeRO", §3.1: K = 12 for mixed-precision Adam).
  double optimizer_bytes = 12;
  /// ZeRO-1: shard optimizer states over the data-parallel group of each parameter.
  bool zero1 = false;
  /// Full activation recomputation, per side (Recompute): a recomputing side keeps only
  /// its input (2sbh bytes per layer at 16 bits on the A side, Korthikanti et al. §4).
  Recompute recompute{};
  /// FlashAttention: the h·s² score/softmax matrices are never stored (they are
  /// recomputed in the backward pass — Korthikanti's "selective recomputation").
  bool flash_attention = true;
};

/// The training state both the planner and the simulator assume unless told otherwise:
/// bf16 weights and gradients, 12 bytes of Adam state per parameter, ZeRO-1 (optimizer
/// states sharded over each parameter's data-parallel group, as Megatron-Core's
/// distributed optimizer does), FlashAttention, no recomputation (chosen per allocation).
/// plan::PlanOptions and schedule::CostOptions both default to this one value.
inline constexpr MemoryOptions kDefaultMemory{.zero1 = true};

/// Usable share of HBM by default (allocator workspace, fragmentation, comm buffers),
/// the planner's and the simulator's alike.
inline constexpr double kDefaultMemoryFraction = 0.9;

/// Bytes of one worker, by kind.
struct MemoryBytes {
  double parameters = 0;   ///< weights in the compute dtype
  double gradients = 0;    ///< weight gradients
  double optimizer = 0;    ///< master weights + Adam moments (after ZeRO-1 sharding)
  double activations = 0;  ///< stored for the backward pass
  /// Sum of all four.
  [[nodiscard]] constexpr double total() const { return parameters + gradients + optimizer + activations; }
  constexpr MemoryBytes& operator+=(const MemoryBytes& o) {
    parameters += o.parameters;
    gradients += o.gradients;
    optimizer += o.optimizer;
    activations += o.activations;
    return *this;
  }
};

/// Bytes of weights, gradients and optimizer state for `params` parameters that are
/// replicated over a data-parallel group of `dp` ranks (ZeRO-1 shards only the
/// optimizer states, Rajbhandari et al. 2020 §5.1: (2 + 2 + K/N_d)Ψ). O(1).
inline MemoryBytes state_bytes(const ModelSpec& m, double params, int dp, const MemoryOptions& o) {
  expect(dp >= 1, "dp", dp, "a positive data-parallel group size");
  MemoryBytes b;
  b.parameters = params * bytes_of(m.dtype);
  b.gradients = params * (o.grad_bytes > 0 ? o.grad_bytes : bytes_of(m.dtype));
  b.optimizer = params * o.optimizer_bytes / (o.zero1 ? dp : 1);
  return b;
}

/// Activation bytes the A side stores for layer `l` and one micro-batch, following
/// the per-tensor count of Korthikanti et al. 2022 §4.1 (attention 11sbh + 5as²b,
/// norms 4sbh at 16 bits) adapted to pre-norm RMSNorm, GQA and no dropout:
/// norm input d, QKV input d, Q/K/V (q + 2kv), attention output q (input of Wo),
/// FFN norm input d, router input d, router logits E (MoE layers), per token, plus
/// h·s²·b score elements when FlashAttention is off (the softmax output; dropout,
/// which Korthikanti's 5as²b includes, is absent in these models) and fp32
/// log-sum-exp per head and token when it is on (Dao 2023). When the A side
/// recomputes (o.recompute.attention) only the layer input (T·d) is kept. Bytes, O(1).
inline double attention_activation_bytes(const ModelSpec& m, int l, const MemoryOptions& o) {
  const double t = double(m.tokens_per_micro_batch()), e = bytes_of(m.dtype);
  const double d = m.hidden, q = double(m.heads) * m.head_dim, kv = double(m.kv_heads) * m.head_dim;
  if (o.recompute.attention) return t * d * e;
  double per_token = 4 * d + (q + 2 * kv) + q + (m.is_moe_layer(l) ? m.experts : 0);
  double bytes = t * per_token * e;
  if (o.flash_attention) bytes += t * m.heads * 4.0;
  else bytes += double(m.heads) * m.seq_len * double(m.seq_len) * m.micro_batch * e;
  return bytes;
}

/// Activation bytes the F side stores for layer `l` and one micro-batch: per routed
/// token-expert the gated FFN keeps its input (d), gate and up outputs (2f) and the
/// product that feeds the down projection (f), and the expert output (d) for the
/// gradient of its gate weight; shared experts keep d + 3f_s per token each, the
/// dense FFN d + 3f per token (Korthikanti et al. 2022 §4.1's MLP count, 19sbh for a
/// 4h GeLU MLP with dropout, redone for SwiGLU without dropout). When the F side
/// recomputes (o.recompute.ffn) only the received rows (T·rows·d) are kept. `opt` gives rows per token.
/// Bytes, O(1).
inline double ffn_activation_bytes(const ModelSpec& m, int l, const MemoryOptions& o, const DispatchOptions& opt) {
  const double t = double(m.tokens_per_micro_batch()), e = bytes_of(m.dtype), d = m.hidden;
  if (o.recompute.ffn) return t * dispatch_rows_per_token(m, l, opt) * d * e;
  if (!m.is_moe_layer(l)) return t * (d + 3.0 * m.dense_ffn) * e;
  const double routed = double(m.top_k) * (2 * d + 3.0 * m.expert_ffn);
  const double shared = double(m.shared_experts) * (d + 3.0 * m.shared_expert_ffn);
  return t * (routed + shared) * e;
}

// ───────────────────────────── time ─────────────────────────────

/// Achievable fraction of peak, per component. Defaults: Megatron-Core MoE reaches
/// 49.3% MFU on H100 for Mixtral-8x22B and 39.0% for Qwen2-57B-A14B (arXiv
/// 2504.14960) — attention GEMMs are large (0.5), grouped expert GEMMs smaller (0.45);
/// DeepEP measures 43 GB/s internode dispatch on 50 GB/s CX7 NICs at EP16 (DeepEP
/// README, V1 normal kernels) — network 0.85.
struct Efficiency {
  double attention = 0.50;  ///< fraction of peak FLOP/s for the A side
  double ffn = 0.45;        ///< fraction of peak FLOP/s for the F side
  double network = 0.85;    ///< fraction of NIC / link bandwidth
};

/// Throws ConfigError unless every factor is in (0, 1].
inline void validate(const Efficiency& e) {
  auto check = [](const char* f, double v) {
    expect(std::isfinite(v) && v > 0 && v <= 1, std::string("Efficiency.") + f, v, "a fraction in (0, 1]");
  };
  check("attention", e.attention);
  check("ffn", e.ffn);
  check("network", e.network);
}

/// Seconds to run `flops` on one GPU of `c` in `dtype` at `efficiency` × peak.
/// Preconditions: flops >= 0, efficiency in (0, 1], peak > 0 (ConfigError otherwise).
inline double compute_seconds(double flops, const ClusterSpec& c, DType dtype, double efficiency) {
  expect(std::isfinite(flops) && flops >= 0, "flops", flops, "a finite number >= 0");
  expect(std::isfinite(efficiency) && efficiency > 0 && efficiency <= 1, "efficiency", efficiency,
         "a fraction in (0, 1]");
  const double peak = c.gpu.peak_flops(dtype);
  expect(peak > 0, "gpu.peak_flops", peak, "a positive FLOP/s for dtype " + std::string(to_string(dtype)));
  return flops / (peak * efficiency);
}

/// Seconds to move `bytes` over a link of `bandwidth` bytes/s with `latency` seconds
/// per message at `efficiency` × bandwidth: latency + bytes / (bandwidth · efficiency)
/// (the α–β model, Hockney 1994). 0 bytes cost nothing (no message is sent).
inline double comm_seconds(double bytes, double bandwidth, double latency, double efficiency = 1.0) {
  expect(std::isfinite(bytes) && bytes >= 0, "bytes", bytes, "a finite number >= 0");
  expect(std::isfinite(bandwidth) && bandwidth > 0, "bandwidth", bandwidth, "a positive bytes/s");
  expect(std::isfinite(latency) && latency >= 0, "latency", latency, "a finite number >= 0");
  expect(std::isfinite(efficiency) && efficiency > 0 && efficiency <= 1, "efficiency", efficiency,
         "a fraction in (0, 1]");
  if (bytes == 0) return 0;
  return latency + bytes / (bandwidth * efficiency);
}

/// Seconds of the input embedding and the output head for one micro-batch on one GPU
/// holding T / cp of its tokens (context parallelism cp), whole (not split over
/// vocabulary shards). The head's GEMMs (head_flops) are compute-bound and run at
/// `attention_efficiency` of peak, where they are scheduled; the final norm and the loss
/// are elementwise and left out (fused cross-entropy kernels, as Megatron's, read the
/// logits once). The embedding is a gather with no FLOPs, so its roofline time is its
/// HBM traffic (Williams et al. 2009): T rows of d read and written forward; its
/// gradient reads T rows of d and read-modify-writes as many rows of the table's
/// gradient (`grad_bytes` per element). The planner and the simulator both use it. O(1).
struct EmbeddingHeadSeconds {
  double embed_fwd = 0;    ///< embedding lookup
  double embed_wgrad = 0;  ///< its weight gradient
  double head_fwd = 0;     ///< final norm + logits + loss
  double head_bwd = 0;     ///< the head's input gradient
  double head_wgrad = 0;   ///< the head's weight gradient
  [[nodiscard]] double head() const { return head_fwd + head_bwd + head_wgrad; }
  [[nodiscard]] double embedding() const { return embed_fwd + embed_wgrad; }
};
inline EmbeddingHeadSeconds embedding_head_seconds(const ModelSpec& m, const ClusterSpec& c,
                                                   double attention_efficiency, double grad_bytes,
                                                   int cp = 1) {
  const PassFlops head = head_flops(m);
  const double rows = double(m.tokens_per_micro_batch()) / cp * m.hidden;
  EmbeddingHeadSeconds e;
  e.embed_fwd = 2 * rows * bytes_of(m.dtype) / c.gpu.hbm_bandwidth;
  e.embed_wgrad = 3 * rows * grad_bytes / c.gpu.hbm_bandwidth;
  e.head_fwd = compute_seconds(head.forward / cp, c, m.dtype, attention_efficiency);
  e.head_bwd = compute_seconds(head.backward_input / cp, c, m.dtype, attention_efficiency);
  e.head_wgrad = compute_seconds(head.backward_weight / cp, c, m.dtype, attention_efficiency);
  return e;
}

}  // namespace disagmoe::plan
