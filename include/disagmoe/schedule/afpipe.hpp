// SPDX-License-Identifier: Apache-2.0
/// @file afpipe.hpp
/// AF-Pipe (DisagMoE, arXiv 2605.11005, "AF-Pipe"): attention groups (A) and
/// FFN groups (F) on disjoint workers, layer l on pair l mod p (interleaved layer
/// assignment), one-way M2N dispatch A→F and N2M return F→A, stage alignment that fuses
/// the combine of layer l with the dispatch towards layer l+1 (F_l sends straight to
/// A_{l+1}), and three streams per worker so that an F-worker sends gradients while it
/// computes the forward of later micro-batches.
///
/// Order per worker (our definition; the paper gives no op-level listing): micro-batches
/// in groups of `group_size`; the forward stream runs, group by group, every layer the
/// worker holds round by round (layers i, i+p, ...), each round over the group's
/// micro-batches (MegaScale-Infer's ping-pong); the
/// backward stream runs each group's backward in reverse layer order as soon as its
/// gradients arrive, concurrently with the next group's forward. At most
/// `max_in_flight` micro-batches are between their first forward and last backward
/// (a 1F1B-like activation bound). The embedding runs on A_0 before layer 0's attention
/// (Problem::embedding_head; none when 0). The output head (with the loss) is
/// vocabulary-parallel over the p A groups (Yeung et al. 2024, "Balancing Pipeline
/// Parallelism with Vocabulary Parallelism", arXiv 2411.05288): at the start of a
/// micro-batch's backward the last layer's output travels the ring of A groups from the
/// last layer's group A_h (A_h → A_{h+1} → …), each group computing its V/p shard's
/// logits and local softmax statistics and then its shard's input gradient under its
/// own normaliser; a second pass of the ring, from A_{h+1} back to A_h, merges the
/// partial gradients with their (max, sum) statistics exactly, as online softmax merges
/// partial sums, and A_h continues the backward. Those two passes are posted (Op::posted:
/// a stream of their own, sharing the GPU), as the shards' inputs arrive at no fixed
/// point of the forward or backward stream. A third pass of the ring carries the
/// softmax's global (max, sum) from A_h, which each shard's weight gradient needs (it
/// rescales every token's probabilities); those run in the backward stream. With one
/// pair, A_0 holds the whole head.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/schedule/op.hpp>
#include <disagmoe/schedule/policy.hpp>
#include <disagmoe/schedule/problem.hpp>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace disagmoe::schedule {

/// The AF-Pipe policy. The problem's workers must be p attention workers and p FFN
/// workers (roles kAttention / kFfn; pair i = the i-th of each). Layer costs are per GPU
/// of the side that runs them; `dispatch_bytes` per A-GPU, `combine_bytes` per F-GPU
/// (the busiest F GPU's, with `ffn_imbalance` its share over the mean).
struct AFPipe {
  using policy_concept = schedule_policy_tag;
  static constexpr std::string_view kName = "afpipe";
  int group_size = 0;                ///< micro-batches per ping-pong group; 0: min(m, 4p)
  int max_in_flight = 0;             ///< micro-batches alive at once; 0: 2 × group_size
  bool fuse_combine_dispatch = true; ///< stage alignment: F_l → A_{l+1} in one transfer
  /// M2N/N2M transfers (dispatch, return, stage-aligned combine+dispatch) run as GPU
  /// kernels holding Network::comm_sm_fraction of the SMs on both ends; false: over an
  /// RDMA engine (Network::rdma_sm_fraction). Pipeline hand-offs between A workers and
  /// gradient all-reduces are NCCL kernels either way, as in every baseline.
  bool m2n_uses_sms = true;

  [[nodiscard]] Schedule build(const Problem& pb) const {
    validate(pb);
    std::vector<int> a, f;
    for (int w = 0; w < static_cast<int>(pb.workers.size()); ++w) {
      const Role r = pb.workers[static_cast<std::size_t>(w)].role;
      expect(r != Role::kColocated, "workers[" + std::to_string(w) + "].role", to_string(r),
             "attention or ffn for AF-Pipe");
      (r == Role::kAttention ? a : f).push_back(w);
    }
    const int p = static_cast<int>(a.size());
    expect(p >= 1 && f.size() == a.size(), "workers", pb.workers.size(),
           "equal numbers of attention and FFN workers (" + std::to_string(a.size()) + " vs " +
               std::to_string(f.size()) + ")");
    const int m = pb.micro_batches, L = static_cast<int>(pb.layers.size());
    const int g = group_size > 0 ? std::min(group_size, m) : std::min(m, 4 * p);
    const int window = max_in_flight > 0 ? max_in_flight : 2 * g;
    expect(window >= g, "max_in_flight", window, "at least group_size (" + std::to_string(g) + ")");

    Schedule s;
    s.name = std::string(kName);
    s.workers = pb.workers;
    for (auto& w : s.workers) w.in_order_comm = false;
    s.network = pb.network;
    s.order.resize(s.workers.size());
    // At most 12 ops per micro-batch and layer (10 with stage alignment), plus the
    // all-reduces: reserved once, so that a 10^6-op step is not copied while it grows
    // (untouched reserved pages cost nothing; fresh touched ones are slow on a VM).
    s.ops.reserve(static_cast<std::size_t>(m) *
                      (static_cast<std::size_t>(L) * 12 + 6 * static_cast<std::size_t>(p)) +
                  2 * static_cast<std::size_t>(L));
    s.tokens_per_step = pb.tokens_per_micro_batch * m;
    s.flops_per_step = pb.flops_per_micro_batch * m;

    for (int l = 0; l < L; ++l) {  // interleaved layer assignment: pair l mod p keeps layer l
      const LayerCost& c = pb.layers[static_cast<std::size_t>(l)];
      s.workers[static_cast<std::size_t>(a[static_cast<std::size_t>(l % p)])].static_bytes += c.attn_state_bytes;
      s.workers[static_cast<std::size_t>(f[static_cast<std::size_t>(l % p)])].static_bytes += c.expert_state_bytes;
    }
    const auto idx = [&](int j, int l) { return static_cast<std::size_t>(j) * static_cast<std::size_t>(L) + static_cast<std::size_t>(l); };
    const std::size_t cells = static_cast<std::size_t>(m) * static_cast<std::size_t>(L);
    std::vector<int> arrive(cells, -1);   // forward output of (j, l) available at its consumer
    std::vector<int> attn_f(cells, -1), exp_f(cells, -1);
    std::vector<int> grad_out(cells, -1); // gradient of (j, l)'s input available at its producer side
    std::vector<int> last_bwd(static_cast<std::size_t>(m), -1);
    const auto A = [&](int l) { return a[static_cast<std::size_t>(l % p)]; };
    const auto F = [&](int l) { return f[static_cast<std::size_t>(l % p)]; };
    const auto gpus = [&](int w) { return double(s.workers[static_cast<std::size_t>(w)].gpus); };
    const EmbeddingHeadCost& eh = pb.embedding_head;

    auto compute = [&](OpKind k, int w, Stream st, int j, int l, double sec, std::vector<int> deps) {
      Op o;
      o.kind = k;
      o.stream = st;
      o.worker = w;
      o.micro_batch = j;
      o.layer = l;
      o.seconds = sec;
      o.backward = st == Stream::kBackward;
      o.deps = std::move(deps);
      return o;
    };
    // rx_scale: the F side is represented by its busiest GPU (LayerCost::ffn_imbalance),
    // so it receives imb × the even share (A→F) and sends imb × the mean (F→A).
    auto comm = [&](OpKind k, int from, int to, int j, int l, double bytes, bool bwd, std::vector<int> deps,
                    double rx_scale = 1) {
      Op o;
      o.kind = k;
      o.stream = Stream::kComm;
      o.worker = from;
      o.peer = to;
      o.micro_batch = j;
      o.layer = l;
      o.bytes = bytes;
      o.rx_scale = rx_scale;
      o.backward = bwd;
      o.uses_sms = (k == OpKind::kSend || k == OpKind::kAllReduce) || m2n_uses_sms;
      o.deps = std::move(deps);
      return s.add(std::move(o));
    };

    // The vocabulary-parallel head of micro-batch j after layer l = L - 1, whose output
    // `out` is on A_h (file comment). Returns the head's input gradient as it reaches
    // A_h (the whole head's with p = 1; else the other shards' merged by the ring) and
    // A_h's own shard's input gradient, to merge with it (-1 with p = 1).
    std::vector<int> ring(static_cast<std::size_t>(p));
    std::vector<int> last_posted(s.workers.size(), -1);  // each worker's posted ops, chained
    auto head = [&](int j, int l, int out) {
      const int h = l % p;
      const auto at = [&](int k) { return a[static_cast<std::size_t>((h + k) % p)]; };
      const double share = 1.0 / p;
      int arrived = out;
      for (int k = 0; k < p; ++k) {  // the output around the ring; each shard's logits and input gradient
        if (k > 0)
          arrived = comm(OpKind::kSend, at(k - 1), at(k), j, l,
                         pb.layers[static_cast<std::size_t>(l)].hidden_bytes, false, {arrived});
        // Posted (Op::posted): each shard's logits and input gradient run as soon as their
        // input is there, beside the worker's layers, in order among themselves (a stream
        // of their own).
        // At a fixed point of a stream they would wait for that stream's earlier work: in
        // the forward stream for the next group's forward, in the backward stream for the
        // previous group's whole backward.
        const auto pass = [&](OpKind kind, double seconds, int dep) {
          int& last = last_posted[static_cast<std::size_t>(at(k))];
          Op o = compute(kind, at(k), Stream::kBackward, j, l, seconds * share, {dep});
          if (last >= 0) o.deps.push_back(last);
          o.posted = true;
          return last = s.add(std::move(o));
        };
        const int hf = pass(OpKind::kHeadForward, eh.head_fwd, arrived);
        ring[static_cast<std::size_t>(k)] = pass(OpKind::kHeadBackwardInput, eh.head_bwd, hf);
      }
      // Each shard's weight gradient, in its worker's backward stream (nothing else
      // waits for it but the step's all-reduce, which that stream orders after it),
      // once it has its input gradient and the softmax's global (max, sum).
      const auto weight = [&](int k, int stats) {
        std::vector<int> deps{ring[static_cast<std::size_t>(k)]};
        if (stats >= 0) deps.push_back(stats);
        s.add(compute(OpKind::kHeadBackwardWeight, at(k), Stream::kBackward, j, l, eh.head_wgrad * share,
                      std::move(deps)));
      };
      if (p == 1) {
        weight(0, -1);
        return std::pair{ring[0], -1};
      }
      int partial = -1;  // the merged gradient and statistics, A_{h+1} → … → A_{h+p-1} → A_h
      for (int k = 1; k < p; ++k) {
        std::vector<int> deps{ring[static_cast<std::size_t>(k)]};
        if (partial >= 0) deps.push_back(partial);
        partial = comm(OpKind::kSend, at(k), at((k + 1) % p), j, l,
                       pb.layers[static_cast<std::size_t>(l)].hidden_bytes, true, std::move(deps));
      }
      // The global statistics back around the ring (two fp32 per token) for the shards'
      // weight gradients.
      const double stats_bytes = 8.0 * pb.tokens_per_micro_batch / gpus(at(0));
      weight(0, partial);
      for (int k = 1, stats = partial; k < p; ++k) {
        stats = comm(OpKind::kSend, at(k - 1), at(k), j, l, stats_bytes, true, {stats});
        weight(k, stats);
      }
      return std::pair{partial, ring[0]};
    };

    for (int g0 = 0; g0 < m; g0 += g) {
      const int g1 = std::min(m, g0 + g);
      // Forward, layer by layer, so each worker's fwd stream gets (round, micro-batch) order.
      for (int l = 0; l < L; ++l) {
        const LayerCost& c = pb.layers[static_cast<std::size_t>(l)];
        for (int j = g0; j < g1; ++j) {
          std::vector<int> deps;
          if (l > 0) deps.push_back(arrive[idx(j, l - 1)]);
          if (l == 0 && j >= window) deps.push_back(last_bwd[static_cast<std::size_t>(j - window)]);
          if (l == 0 && eh.embed_fwd > 0)
            deps = {s.add(compute(OpKind::kEmbeddingForward, A(0), Stream::kForward, j, 0, eh.embed_fwd, deps))};
          Op at = compute(OpKind::kAttentionForward, A(l), Stream::kForward, j, l, c.attn_fwd, deps);
          at.alloc_bytes = c.attn_activation_bytes;
          const int ai = s.add(std::move(at));
          attn_f[idx(j, l)] = ai;
          const bool last = l + 1 == L;
          if (!c.moe) {
            arrive[idx(j, l)] = (!last && A(l + 1) != A(l))
                                    ? comm(OpKind::kSend, A(l), A(l + 1), j, l, c.hidden_bytes, false, {ai})
                                    : ai;
            continue;
          }
          const double imb = c.ffn_imbalance;
          const int di = comm(OpKind::kDispatch, A(l), F(l), j, l, c.dispatch_bytes, false, {ai}, imb);
          Op ex = compute(OpKind::kExpertForward, F(l), Stream::kForward, j, l, c.expert_fwd, {di});
          ex.alloc_bytes = c.expert_activation_bytes;
          const int ei = s.add(std::move(ex));
          exp_f[idx(j, l)] = ei;
          if (!last && fuse_combine_dispatch) {
            arrive[idx(j, l)] =
                comm(OpKind::kCombineDispatch, F(l), A(l + 1), j, l, c.combine_bytes, false, {ei}, 1 / imb);
          } else {
            const int ri = comm(OpKind::kReturn, F(l), A(l), j, l, c.combine_bytes, false, {ei}, 1 / imb);
            arrive[idx(j, l)] = (!last && A(l + 1) != A(l))
                                    ? comm(OpKind::kSend, A(l), A(l + 1), j, l, c.hidden_bytes, false, {ri})
                                    : ri;
          }
        }
      }
      // Backward in reverse layer order; gradients flow A_{l+1} → F_l → A_l.
      for (int l = L - 1; l >= 0; --l) {
        const LayerCost& c = pb.layers[static_cast<std::size_t>(l)];
        const bool last = l + 1 == L;
        for (int j = g0; j < g1; ++j) {
          // Where the gradient of layer l's output comes from: the loss (after the
          // forward of the last layer) or layer l+1's attention input-gradient.
          int src = last ? arrive[idx(j, l)] : grad_out[idx(j, l + 1)];
          std::vector<int> head_done;  // A_h's own shard of the head's input gradient, merged into src
          if (last && eh.head_fwd + eh.head_bwd + eh.head_wgrad > 0) {
            const auto [merged, own] = head(j, l, src);
            src = merged;
            if (own >= 0) head_done.push_back(own);
          }
          int at_a = -1;  // gradient present on A(l) for the attention backward
          if (c.moe) {
            // Gradients retrace the forward path: A GPUs send the mean F GPU's rows
            // (combine_bytes / imb spread back), the busiest F GPU returns imb × the mean.
            const double imb = c.ffn_imbalance;
            int to_f;
            if (!last && fuse_combine_dispatch) {
              to_f = comm(OpKind::kCombineDispatch, A(l + 1), F(l), j, l,
                          c.combine_bytes / imb * gpus(F(l)) / gpus(A(l + 1)), true, {src}, imb);
            } else {
              int at_al = src;
              if (!last && A(l + 1) != A(l)) at_al = comm(OpKind::kSend, A(l + 1), A(l), j, l, c.hidden_bytes, true, {src});
              head_done.push_back(at_al);
              to_f =
                  comm(OpKind::kDispatch, A(l), F(l), j, l, c.combine_bytes / imb * gpus(F(l)) / gpus(A(l)),
                       true, std::exchange(head_done, {}), imb);
            }
            const int eb = s.add(compute(OpKind::kExpertBackwardInput, F(l), Stream::kBackward, j, l, c.expert_bwd,
                                         {to_f, exp_f[idx(j, l)]}));
            Op ew = compute(OpKind::kExpertBackwardWeight, F(l), Stream::kBackward, j, l, c.expert_wgrad, {eb});
            ew.free_bytes = c.expert_activation_bytes;
            const int ewi = s.add(std::move(ew));
            at_a = comm(OpKind::kReturn, F(l), A(l), j, l, c.dispatch_bytes * imb * gpus(A(l)) / gpus(F(l)), true, {eb},
                        1 / imb);
            if (j + 1 == m && c.expert_grad_bytes > 0)
              comm(OpKind::kAllReduce, F(l), F(l), -1, l, c.expert_grad_bytes, true, {ewi});
          } else {
            at_a = (!last && A(l + 1) != A(l)) ? comm(OpKind::kSend, A(l + 1), A(l), j, l, c.hidden_bytes, true, {src})
                                               : src;
          }
          head_done.insert(head_done.end(), {at_a, attn_f[idx(j, l)]});
          const int ab = s.add(compute(OpKind::kAttentionBackwardInput, A(l), Stream::kBackward, j, l,
                                       c.attn_bwd, std::move(head_done)));
          Op aw = compute(OpKind::kAttentionBackwardWeight, A(l), Stream::kBackward, j, l, c.attn_wgrad, {ab});
          aw.free_bytes = c.attn_activation_bytes;
          int awi = s.add(std::move(aw));
          if (l == 0 && eh.embed_wgrad > 0)  // the embedding's gradient, all-reduced with layer 0's
            awi = s.add(compute(OpKind::kEmbeddingBackwardWeight, A(0), Stream::kBackward, j, 0, eh.embed_wgrad, {ab}));
          grad_out[idx(j, l)] = ab;
          if (l == 0) last_bwd[static_cast<std::size_t>(j)] = awi;
          if (j + 1 == m && c.attn_grad_bytes > 0)
            comm(OpKind::kAllReduce, A(l), A(l), -1, l, c.attn_grad_bytes, true, {awi});
        }
      }
    }
    return s;
  }
};

static_assert(schedule_policy<AFPipe>);

}  // namespace disagmoe::schedule
