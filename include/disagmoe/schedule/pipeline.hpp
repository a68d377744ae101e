// SPDX-License-Identifier: Apache-2.0
/// @file pipeline.hpp
/// Turns a pipeline plan (which stages each micro-batch visits, and which F/B/W actions
/// each worker issues in which order) into ops on colocated expert-parallel workers.
/// Shared by every baseline policy so that 1F1B, interleaved 1F1B, Megatron's A2A
/// overlap, chunked overlap, Comet's fused overlap, DualPipe and DualPipeV differ only in
/// their action lists or in how an MoE layer's ops are cut
/// (the "schedule, passes, execution" split of sail-sg's zero-bubble runtime,
/// `zbpp` in github.com/sail-sg/zero-bubble-pipeline-parallelism).
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/schedule/op.hpp>
#include <disagmoe/schedule/problem.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace disagmoe::schedule {

/// A contiguous range of layers [layer_begin, layer_end) run on one worker.
struct Stage {
  int worker = 0;
  int layer_begin = 0;
  int layer_end = 0;
};

/// What one step of a worker's action list does.
enum class ActionKind : std::uint8_t {
  kForward,          ///< forward of (mb, hop)
  kBackward,         ///< backward (input grads; weight grads too unless deferred) of (mb, hop)
  kWeight,           ///< the oldest deferred weight-gradient chunk (DualPipe's WeightGradStore)
  kForwardBackward,  ///< forward of (mb, hop) overlapped with backward of (mb_b, hop_b)
};

/// One entry of a worker's action list. `hop` indexes the micro-batch's route.
struct Action {
  ActionKind kind = ActionKind::kForward;
  int mb = -1;
  int hop = -1;
  int mb_b = -1;               ///< kForwardBackward: the backward micro-batch
  int hop_b = -1;              ///< kForwardBackward: the backward hop
  bool defer_weight = false;   ///< kBackward: push weight grads to the FIFO instead of running them
};

/// A pipeline schedule before op emission.
struct PipelinePlan {
  std::vector<std::vector<Stage>> routes;    ///< per micro-batch, the stages visited in order
  std::vector<std::vector<Action>> actions;  ///< per worker, in issue order
  int chunks = 1;                            ///< operator-level FFN chunks per MoE layer (>= 1)
  /// Comet's fused kernels instead of chunks: the dispatch fused into the experts' first
  /// GEMM, their second GEMM into the combine, each pipelined over `chunks` tiles (ops of
  /// a layer independent of the tile count: PipelineEmitter::fused_kernel).
  bool fused = false;
  /// Every transfer (all-to-all, pipeline send, all-reduce) runs as GPU kernels (NCCL
  /// send/recv and collectives, DeepEP) holding Network::comm_sm_fraction of the SMs on
  /// both ends; false: all of them go over an RDMA engine (Network::rdma_sm_fraction).
  bool comm_uses_sms = true;
};

/// Share of an expert's FLOPs in its gate and up projections: two of a SwiGLU FFN's three
/// equal GEMMs (d×f, d×f, f×d), in the forward pass and in the input gradient alike.
inline constexpr double kGateUpShare = 2.0 / 3.0;

/// Splits `layers` into `parts` contiguous ranges whose sizes differ by at most one
/// (earlier ranges get the extra layers). Throws ConfigError when layers < parts.
inline std::vector<std::pair<int, int>> split_layers(int layers, int parts, std::string_view what = "stages") {
  expect(parts >= 1 && layers >= parts, "layers", layers,
         "at least one layer per pipeline " + std::string(what) + " (" + std::to_string(parts) + ")");
  std::vector<std::pair<int, int>> r;
  int begin = 0;
  for (int i = 0; i < parts; ++i) {
    const int size = layers / parts + (i < layers % parts ? 1 : 0);
    r.emplace_back(begin, begin + size);
    begin += size;
  }
  return r;
}

namespace detail {

class PipelineEmitter {
 public:
  PipelineEmitter(const Problem& pb, const PipelinePlan& pl) : pb_(pb), pl_(pl) {}

  Schedule run(std::string name) {
    validate(pb_);
    const int nw = static_cast<int>(pb_.workers.size());
    expect(pl_.chunks >= 1, "chunks", pl_.chunks, "a positive integer");
    expect(static_cast<int>(pl_.actions.size()) == nw, "PipelinePlan.actions.size()", pl_.actions.size(),
           "one action list per worker (" + std::to_string(nw) + ")");
    s_.name = std::move(name);
    s_.workers = pb_.workers;
    s_.network = pb_.network;
    s_.order.resize(static_cast<std::size_t>(nw));
    const int m = static_cast<int>(pl_.routes.size());
    s_.tokens_per_step = pb_.tokens_per_micro_batch * m;
    s_.flops_per_step = pb_.flops_per_micro_batch * m;
    for (int k = 0; k < 3; ++k) keys_[k].assign(static_cast<std::size_t>(m), {});
    std::set<std::pair<int, int>> held;  // (worker, layer) pairs whose weights a worker keeps
    for (int j = 0; j < m; ++j) {
      for (const auto& st : pl_.routes[static_cast<std::size_t>(j)]) {
        expect(st.worker >= 0 && st.worker < nw && st.layer_begin >= 0 && st.layer_begin < st.layer_end &&
                   st.layer_end <= static_cast<int>(pb_.layers.size()),
               "PipelinePlan.routes[" + std::to_string(j) + "]", st.worker, "stages on existing workers and layers");
        for (int l = st.layer_begin; l < st.layer_end; ++l) ++wgrads_left_[{st.worker, l}];
        for (int l = st.layer_begin; l < st.layer_end; ++l) held.insert({st.worker, l});
      }
      for (auto& k : keys_) k[static_cast<std::size_t>(j)].assign(pl_.routes[static_cast<std::size_t>(j)].size(), -1);
    }
    for (const auto& [w, l] : held) {
      const LayerCost& lc = pb_.layers[static_cast<std::size_t>(l)];
      s_.workers[static_cast<std::size_t>(w)].static_bytes += lc.attn_state_bytes + lc.expert_state_bytes;
    }
    fifo_.resize(static_cast<std::size_t>(nw));
    for (int w = 0; w < nw; ++w) {
      tail_.clear();
      int step = 0;
      for (const Action& a : pl_.actions[static_cast<std::size_t>(w)]) {
        const std::size_t first = s_.ops.size();
        emit_action(w, a);
        for (std::size_t i = first; i < s_.ops.size(); ++i)
          if (s_.ops[i].worker == w) s_.ops[i].step = step;
        ++step;
      }
      expect(fifo_[static_cast<std::size_t>(w)].empty(), "PipelinePlan.actions[" + std::to_string(w) + "]",
             fifo_[static_cast<std::size_t>(w)].size(), "no deferred weight gradients left at the end");
    }
    for (const auto& p : pending_) {
      const int id = keys_[p.kind][static_cast<std::size_t>(p.mb)][static_cast<std::size_t>(p.hop)];
      expect(id >= 0, "PipelinePlan", std::string(p.kind == kBwdOut ? "B" : "F") + "(mb " + std::to_string(p.mb) +
             ", hop " + std::to_string(p.hop) + ")", "an action list that issues every op it depends on");
      s_.ops[static_cast<std::size_t>(p.op)].deps.push_back(id);
    }
    for (const auto& [key, left] : wgrads_left_)
      expect(left == 0, "PipelinePlan", "worker " + std::to_string(key.first) + " layer " + std::to_string(key.second),
             "every forward matched by a backward");
    return std::move(s_);
  }

 private:
  enum KeyKind { kFwdOut = 0, kBwdOut = 1, kFwdLast = 2 };
  struct Pending {
    int op, kind, mb, hop;
  };
  struct Deferred {  // a weight-gradient op waiting in the FIFO
    OpKind kind;
    int layer, mb, chunk, dep;
    double seconds, free_bytes;
  };
  // A chain in flight while emitting one action: a forward or backward over one stage.
  struct Chain {
    bool forward = true;
    int mb = 0, hop = 0;
    Stage stage;
    bool defer = false;
    int last = -1;             // last op of the chain so far
    int last_w = -1;           // last weight-gradient op run inline
    const Chain* partner = nullptr;  // the other chain of an F&B pair
    std::vector<int> in_deps;  // deps of the chain's first op
    std::vector<Deferred> deferred;
  };

  const Stage& stage_of(int mb, int hop) const {
    const auto& route = pl_.routes.at(static_cast<std::size_t>(mb));
    expect(hop >= 0 && hop < static_cast<int>(route.size()), "Action.hop", hop,
           "a hop of micro-batch " + std::to_string(mb) + "'s route");
    return route[static_cast<std::size_t>(hop)];
  }

  void dep_on_key(int op, int kind, int mb, int hop) {
    const int id = keys_[kind][static_cast<std::size_t>(mb)][static_cast<std::size_t>(hop)];
    if (id >= 0) s_.ops[static_cast<std::size_t>(op)].deps.push_back(id);
    else pending_.push_back({op, kind, mb, hop});
  }

  int add(Op op, Chain& c, std::vector<int> extra = {}) {
    if (c.last >= 0) op.deps.push_back(c.last);
    else op.deps.insert(op.deps.end(), c.in_deps.begin(), c.in_deps.end());
    op.deps.insert(op.deps.end(), extra.begin(), extra.end());
    op.micro_batch = c.mb;
    op.backward = !c.forward;
    const int id = s_.add(std::move(op));
    return id;
  }

  Op compute(OpKind k, int w, int layer, double sec, Stream st) {
    Op o;
    o.kind = k;
    o.stream = st;
    o.worker = w;
    o.layer = layer;
    o.seconds = sec;
    return o;
  }
  Op comm(OpKind k, int w, int peer, int layer, double bytes) {
    Op o;
    o.kind = k;
    o.stream = Stream::kComm;
    o.worker = w;
    o.peer = peer;
    o.layer = layer;
    o.bytes = bytes;
    o.uses_sms = pl_.comm_uses_sms;
    return o;
  }

  Chain start_chain(int w, bool forward, int mb, int hop, bool defer) {
    expect(mb >= 0 && mb < static_cast<int>(pl_.routes.size()), "Action.mb", mb, "a micro-batch index");
    Chain c;
    c.forward = forward;
    c.mb = mb;
    c.hop = hop;
    c.defer = defer;
    c.stage = stage_of(mb, hop);
    expect(c.stage.worker == w, "Action", std::string(forward ? "F" : "B") + "(mb " + std::to_string(mb) +
           ", hop " + std::to_string(hop) + ") on worker " + std::to_string(w),
           "the worker of that hop (" + std::to_string(c.stage.worker) + ")");
    c.in_deps = tail_;
    return c;
  }

  // The first op of a chain depends on the stage input; register it after creation.
  void link_input(Chain& c, int first_op) {
    link_input(c.forward, c.mb, c.hop, first_op);
    // Both halves of an F&B pair start only when both inputs have arrived: DualPipe
    // and Megatron wait for all receives before the fused compute (`_commit_and_wait_comm`).
    if (c.partner != nullptr) link_input(c.partner->forward, c.partner->mb, c.partner->hop, first_op);
  }
  void link_input(bool forward, int mb, int hop, int first_op) {
    const int len = static_cast<int>(pl_.routes[static_cast<std::size_t>(mb)].size());
    if (forward) {
      if (hop > 0) dep_on_key(first_op, kFwdOut, mb, hop - 1);
    } else {
      dep_on_key(first_op, kFwdLast, mb, hop);  // stored activations
      if (hop + 1 < len) dep_on_key(first_op, kBwdOut, mb, hop + 1);
    }
  }

  // Number of layer steps of a chain; forward walks layers up, backward down.
  static int steps(const Chain& c) { return c.stage.layer_end - c.stage.layer_begin; }
  int layer_at(const Chain& c, int i) const {
    return c.forward ? c.stage.layer_begin + i : c.stage.layer_end - 1 - i;
  }

  // Emits half `part` (0 or 1) of layer step i of chain c. Splitting each layer in two
  // halves lets an overlapped F&B step interleave them as Megatron's combined 1F1B does:
  // comm stream  combine_bwd | dispatch_fwd -> dispatch_bwd | combine_fwd
  // The embedding opens the first layer's forward and closes its backward, the output
  // head (with the loss) closes the last layer's forward and opens its backward, on the
  // stage that holds that layer (Megatron's first and last pipeline stage).
  void emit_half(int w, Chain& c, int i, int part) {
    const int l = layer_at(c, i);
    const LayerCost& lc = pb_.layers[static_cast<std::size_t>(l)];
    const EmbeddingHeadCost& eh = pb_.embedding_head;
    const bool last_layer = l + 1 == static_cast<int>(pb_.layers.size());
    const int nc = lc.moe ? pl_.chunks : 1;
    const bool first = c.last < 0;
    const int before = static_cast<int>(s_.ops.size());
    if (c.forward) {
      if (part == 0) {
        if (l == 0 && eh.embed_fwd > 0) c.last = add(compute(OpKind::kEmbeddingForward, w, l, eh.embed_fwd, Stream::kForward), c);
        Op a = compute(OpKind::kAttentionForward, w, l, lc.attn_fwd, Stream::kForward);
        a.alloc_bytes = lc.attn_activation_bytes;
        c.last = add(std::move(a), c);
        if (lc.moe && pl_.fused) {  // dispatch fused into the gate/up GEMM
          const int attn = c.last;
          c.last = fused_kernel(
              c, [&](double x) { return comm(OpKind::kAllToAll, w, w, l, lc.dispatch_bytes * x); },
              [&](double x) {
                Op e =
                    compute(OpKind::kExpertForward, w, l, lc.expert_fwd * kGateUpShare * x, Stream::kForward);
                e.alloc_bytes = lc.expert_activation_bytes * x;
                return e;
              },
              [&](Op o) {
                o.deps.push_back(attn);
                return s_.add(with_meta(std::move(o), c));
              })[1];
        } else if (lc.moe) {
          const int attn = c.last;
          for (int k = 0; k < nc; ++k) {
            Op d = comm(OpKind::kAllToAll, w, w, l, lc.dispatch_bytes / nc);
            d.chunk = nc > 1 ? k : -1;
            d.deps.push_back(attn);
            c.last = s_.add(with_meta(std::move(d), c));
            dispatch_ids_.push_back(c.last);
          }
        }
      } else if (lc.moe && pl_.fused) {  // the down GEMM fused into the combine
        c.last = fused_kernel(
            c,
            [&](double x) {
              return compute(OpKind::kExpertForward, w, l, lc.expert_fwd * (1 - kGateUpShare) * x,
                             Stream::kForward);
            },
            [&](double x) { return comm(OpKind::kAllToAll, w, w, l, lc.combine_bytes * x); },
            [&](Op o) { return add(std::move(o), c); })[1];
      } else if (lc.moe) {
        for (int k = 0; k < nc; ++k) {
          Op e = compute(OpKind::kExpertForward, w, l, lc.expert_fwd / nc, Stream::kForward);
          e.alloc_bytes = lc.expert_activation_bytes / nc;
          e.chunk = nc > 1 ? k : -1;
          e.deps.push_back(dispatch_ids_[static_cast<std::size_t>(k)]);
          const int eid = s_.add(with_meta(std::move(e), c));
          Op cb = comm(OpKind::kAllToAll, w, w, l, lc.combine_bytes / nc);
          cb.chunk = nc > 1 ? k : -1;
          cb.deps.push_back(eid);
          c.last = s_.add(with_meta(std::move(cb), c));
        }
        dispatch_ids_.clear();
      }
      if (part == 1 && last_layer && eh.head_fwd > 0)
        c.last = add(compute(OpKind::kHeadForward, w, l, eh.head_fwd, Stream::kForward), c);
    } else {
      if (part == 0 && last_layer && eh.head_bwd + eh.head_wgrad > 0) {
        c.last = add(compute(OpKind::kHeadBackwardInput, w, l, eh.head_bwd, Stream::kBackward), c);
        weight(w, c, OpKind::kHeadBackwardWeight, l, -1, eh.head_wgrad, 0, c.last);
      }
      if (part == 0 && lc.moe && pl_.fused) {  // the combine's gradient fused into the down GEMM's
        c.last = fused_kernel(
            c, [&](double x) { return comm(OpKind::kAllToAll, w, w, l, lc.combine_bytes * x); },
            [&](double x) {
              return compute(OpKind::kExpertBackwardInput, w, l, lc.expert_bwd * (1 - kGateUpShare) * x,
                             Stream::kBackward);
            },
            [&](Op o) { return add(std::move(o), c); })[1];
      } else if (part == 0 && lc.moe) {
        std::vector<int> cg;
        for (int k = 0; k < nc; ++k) {
          Op g = comm(OpKind::kAllToAll, w, w, l, lc.combine_bytes / nc);
          g.chunk = nc > 1 ? k : -1;
          if (k == 0) {
            cg.push_back(add(std::move(g), c));
          } else {
            g.deps.push_back(cg.back());
            cg.push_back(s_.add(with_meta(std::move(g), c)));
          }
        }
        for (int k = 0; k < nc; ++k) {
          Op e = compute(OpKind::kExpertBackwardInput, w, l, lc.expert_bwd / nc, Stream::kBackward);
          e.chunk = nc > 1 ? k : -1;
          e.deps.push_back(cg[static_cast<std::size_t>(k)]);
          const int eid = s_.add(with_meta(std::move(e), c));
          dgrad_ids_.push_back(eid);
          weight(w, c, OpKind::kExpertBackwardWeight, l, nc > 1 ? k : -1, lc.expert_wgrad / nc,
                 lc.expert_activation_bytes / nc, eid);
        }
        c.last = cg.back();
      } else if (part == 1) {
        if (lc.moe && pl_.fused) {  // the gate/up GEMM's input gradient fused into the dispatch's
          const auto k = fused_kernel(
              c,
              [&](double x) {
                return compute(OpKind::kExpertBackwardInput, w, l, lc.expert_bwd * kGateUpShare * x,
                               Stream::kBackward);
              },
              [&](double x) { return comm(OpKind::kAllToAll, w, w, l, lc.dispatch_bytes * x); },
              [&](Op o) { return add(std::move(o), c); });
          weight(w, c, OpKind::kExpertBackwardWeight, l, -1, lc.expert_wgrad, lc.expert_activation_bytes,
                 k[0]);
          c.last = k[1];
        } else if (lc.moe) {
          int last_dg = -1;
          for (int k = 0; k < nc; ++k) {
            Op g = comm(OpKind::kAllToAll, w, w, l, lc.dispatch_bytes / nc);
            g.chunk = nc > 1 ? k : -1;
            g.deps.push_back(dgrad_ids_[static_cast<std::size_t>(k)]);
            last_dg = s_.add(with_meta(std::move(g), c));
          }
          dgrad_ids_.clear();
          c.last = last_dg;
        }
        Op a = compute(OpKind::kAttentionBackwardInput, w, l, lc.attn_bwd, Stream::kBackward);
        c.last = add(std::move(a), c);
        // The embedding's gradient goes first: layer 0's all-reduce (after its last
        // attention weight gradient) carries it.
        if (l == 0 && eh.embed_wgrad > 0) weight(w, c, OpKind::kEmbeddingBackwardWeight, l, -1, eh.embed_wgrad, 0, c.last);
        weight(w, c, OpKind::kAttentionBackwardWeight, l, -1, lc.attn_wgrad, lc.attn_activation_bytes, c.last);
      }
    }
    if (first && static_cast<int>(s_.ops.size()) > before) {
      // The chain's very first op waits for the stage input (and, if it was a comm op
      // emitted with explicit deps, also for the previous action's tail).
      auto& op = s_.ops[static_cast<std::size_t>(before)];
      for (int d : c.in_deps)
        if (std::find(op.deps.begin(), op.deps.end(), d) == op.deps.end()) op.deps.push_back(d);
      link_input(c, before);
    }
  }

  // One fused kernel of Comet (Zhang et al., MLSys'25, arXiv 2502.19811; Flux's
  // GemmGroupedV3AGScatter / GemmGroupedV3GatherRS): stage `one` feeds stage `two` tile by
  // tile over t = chunks tiles. Four ops whatever t: one's first tile (added by `first`,
  // which sets its dependencies), one's other tiles, two's first t − 1 tiles beside them,
  // two's last tile after both, so that uncontended the kernel takes a + max((t − 1)a,
  // (t − 1)b) + b, the two-stage pipeline's closed form (a, b: one tile of each stage),
  // where a comm stage pays its message latency twice (first tile, then the rest): µs
  // against the ms of a layer's GEMMs.
  // `one(x)` and `two(x)` build their stage's op for share x of its work. Returns {one's
  // end, two's end}.
  template <class One, class Two, class First>
  std::array<int, 2> fused_kernel(const Chain& c, One one, Two two, First first) {
    const int t = pl_.chunks;
    const double tile = 1.0 / t;
    const auto chained = [&](Op o, std::vector<int> deps) {
      o.deps.insert(o.deps.end(), deps.begin(), deps.end());
      return s_.add(with_meta(std::move(o), c));
    };
    const int one_head = first(one(t > 1 ? tile : 1.0));
    if (t == 1) return {one_head, chained(two(1.0), {one_head})};
    const int one_end = chained(one(1 - tile), {one_head});
    const int two_body = chained(two(1 - tile), {one_head});
    return {one_end, chained(two(tile), {one_end, two_body})};
  }

  Op with_meta(Op o, const Chain& c) const {
    o.micro_batch = c.mb;
    o.backward = !c.forward;
    return o;
  }

  void weight(int w, Chain& c, OpKind k, int layer, int chunk, double sec, double free_bytes, int dep) {
    Deferred d{k, layer, c.mb, chunk, dep, sec, free_bytes};
    if (c.defer) c.deferred.push_back(d);
    else c.last_w = emit_weight(w, d, {});
  }

  int emit_weight(int w, const Deferred& d, const std::vector<int>& barrier) {
    Op o = compute(d.kind, w, d.layer, d.seconds, Stream::kBackward);
    o.micro_batch = d.mb;
    o.chunk = d.chunk;
    o.backward = true;
    o.free_bytes = d.free_bytes;
    o.deps.push_back(d.dep);
    o.deps.insert(o.deps.end(), barrier.begin(), barrier.end());
    const int id = s_.add(std::move(o));
    auto& left = wgrads_left_[{w, d.layer}];
    const bool last_of_layer = d.kind == OpKind::kAttentionBackwardWeight && --left == 0;
    if (last_of_layer) all_reduce(w, d.layer, id);
    return id;
  }

  void all_reduce(int w, int layer, int dep) {
    const LayerCost& lc = pb_.layers[static_cast<std::size_t>(layer)];
    const double bytes = lc.attn_grad_bytes + lc.expert_grad_bytes;
    if (bytes <= 0) return;
    Op r = comm(OpKind::kAllReduce, w, w, layer, bytes);
    r.backward = true;
    r.deps.push_back(dep);
    s_.add(std::move(r));
  }

  // Finishes a chain: records its outputs and sends them to the next stage's worker.
  void finish_chain(int w, Chain& c) {
    const auto& route = pl_.routes[static_cast<std::size_t>(c.mb)];
    const int len = static_cast<int>(route.size());
    if (c.forward) {
      keys_[kFwdLast][static_cast<std::size_t>(c.mb)][static_cast<std::size_t>(c.hop)] = c.last;
      int out = c.last;
      if (c.hop + 1 < len) {
        const int next = route[static_cast<std::size_t>(c.hop + 1)].worker;
        if (next != w) {
          Op snd = comm(OpKind::kSend, w, next, c.stage.layer_end - 1,
                        pb_.layers[static_cast<std::size_t>(c.stage.layer_end - 1)].hidden_bytes);
          snd.deps.push_back(c.last);
          out = s_.add(with_meta(std::move(snd), c));
        }
      }
      keys_[kFwdOut][static_cast<std::size_t>(c.mb)][static_cast<std::size_t>(c.hop)] = out;
    } else {
      int out = c.last;
      if (c.hop > 0) {
        const int prev = route[static_cast<std::size_t>(c.hop - 1)].worker;
        if (prev != w) {
          Op snd = comm(OpKind::kSend, w, prev, c.stage.layer_begin,
                        pb_.layers[static_cast<std::size_t>(c.stage.layer_begin)].hidden_bytes);
          snd.deps.push_back(c.last);
          // Without deferral the stage's backward (autograd) ends with its weight
          // gradients before the send, as in Megatron's 1F1B (B1).
          if (c.last_w >= 0) snd.deps.push_back(c.last_w);
          out = s_.add(with_meta(std::move(snd), c));
        }
      }
      keys_[kBwdOut][static_cast<std::size_t>(c.mb)][static_cast<std::size_t>(c.hop)] = out;
      if (!c.deferred.empty()) fifo_[static_cast<std::size_t>(w)].push_back(std::move(c.deferred));
    }
  }

  void run_chain(int w, Chain& c) {
    for (int i = 0; i < steps(c); ++i) {
      emit_half(w, c, i, 0);
      emit_half(w, c, i, 1);
    }
  }

  void emit_action(int w, const Action& a) {
    switch (a.kind) {
      case ActionKind::kForward: {
        Chain c = start_chain(w, true, a.mb, a.hop, false);
        run_chain(w, c);
        tail_ = {c.last};
        finish_chain(w, c);
        break;
      }
      case ActionKind::kBackward: {
        Chain c = start_chain(w, false, a.mb, a.hop, a.defer_weight);
        c.last_w = -1;
        run_chain(w, c);
        tail_ = {c.last};
        if (c.last_w >= 0) tail_.push_back(c.last_w);
        finish_chain(w, c);
        break;
      }
      case ActionKind::kWeight: {
        auto& q = fifo_[static_cast<std::size_t>(w)];
        expect(!q.empty(), "PipelinePlan.actions[" + std::to_string(w) + "]", "W",
               "a weight action only after a backward that deferred its weight gradients");
        const auto chunk = std::move(q.front());
        q.pop_front();
        int last = -1;
        const auto barrier = tail_;
        for (const auto& d : chunk) last = emit_weight(w, d, barrier);
        if (last >= 0) tail_ = {last};
        break;
      }
      case ActionKind::kForwardBackward: {
        Chain f = start_chain(w, true, a.mb, a.hop, false);
        Chain b = start_chain(w, false, a.mb_b, a.hop_b, false);
        f.partner = &b;
        b.partner = &f;
        const int n = std::max(steps(f), steps(b));
        for (int i = 0; i < n; ++i) {  // B3 order: B half 0, F half 0, B half 1, F half 1
          if (i < steps(b)) emit_half(w, b, i, 0);
          if (i < steps(f)) emit_half(w, f, i, 0);
          if (i < steps(b)) emit_half(w, b, i, 1);
          if (i < steps(f)) emit_half(w, f, i, 1);
        }
        tail_ = {f.last, b.last};
        if (b.last_w >= 0) tail_.push_back(b.last_w);
        finish_chain(w, f);
        finish_chain(w, b);
        break;
      }
    }
  }

  const Problem& pb_;
  const PipelinePlan& pl_;
  Schedule s_;
  std::vector<std::vector<int>> keys_[3];
  std::vector<Pending> pending_;
  std::vector<std::deque<std::vector<Deferred>>> fifo_;
  std::vector<int> tail_;
  std::vector<int> dispatch_ids_, dgrad_ids_;
  std::map<std::pair<int, int>, int> wgrads_left_;
};

}  // namespace detail

/// Emits the ops of `plan` over `problem`'s workers. Each action waits for the previous
/// action of its worker (one action at a time, as Megatron and DualPipe run them);
/// inside a kForwardBackward action the forward (fwd stream) and backward (bwd stream)
/// chains overlap. All-to-alls go on the worker's comm stream in issue order; pipeline
/// sends are asynchronous. The DP all-reduce of a layer is issued after its last
/// weight gradient. Throws ConfigError when the plan is inconsistent (an action on the
/// wrong worker, a dependency never issued, a weight action with nothing deferred).
/// O(ops + deps).
inline Schedule build_pipeline(const Problem& problem, const PipelinePlan& plan, std::string name) {
  return detail::PipelineEmitter(problem, plan).run(std::move(name));
}

}  // namespace disagmoe::schedule
