// SPDX-License-Identifier: Apache-2.0
/// @file op.hpp
/// The op model shared by every schedule policy, the simulator and (later) the runtime:
/// per worker, per stream, an ordered list of ops with explicit dependencies.
///
/// A *worker* is a group of GPUs that execute the same op sequence in lock step on
/// equal shares of the data (one pipeline stage of a colocated EP job, or one attention
/// or FFN group of AF-Pipe). Under uniform routing all GPUs of such a group behave
/// identically, so simulating one representative GPU per group is exact and keeps a
/// 128-GPU step at a few thousand ops (vTrain's per-stream node lists with
/// cross-stream edges).
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/plan/group_placement.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace disagmoe::schedule {

/// What an op does. Compute kinds carry `seconds`, communication kinds carry `bytes` (and
/// a calibrated overhead in `seconds`).
enum class OpKind : std::uint8_t {
  kAttentionForward,         ///< attention (+ router; + dense FFN on dense layers), forward
  kAttentionBackwardInput,   ///< attention backward, input gradient ("B"/dgrad)
  kAttentionBackwardWeight,  ///< attention backward, weight gradient ("W"/wgrad)
  kExpertForward,            ///< routed experts (+ shared experts), forward
  kExpertBackwardInput,      ///< experts backward, input gradient
  kExpertBackwardWeight,     ///< experts backward, weight gradient
  kEmbeddingForward,         ///< input embedding lookup (before the first layer)
  kEmbeddingBackwardWeight,  ///< its weight gradient (scatter-add into the table's gradient)
  kHeadForward,              ///< final norm + output head (logits) + loss (after the last layer)
  kHeadBackwardInput,        ///< output head backward, input gradient
  kHeadBackwardWeight,       ///< output head backward, weight gradient
  kDispatch,                 ///< AF-Pipe M2N: attention group -> FFN group, one way
  kReturn,                   ///< AF-Pipe N2M: FFN group -> attention group, one way
  kCombineDispatch,          ///< AF-Pipe fused combine of layer l + dispatch towards layer l+1
  kAllToAll,                 ///< colocated EP dispatch or combine inside one worker
  kSend,                     ///< pipeline hand-off of the residual stream between workers
  kAllReduce,                ///< data-parallel gradient all-reduce inside one worker
};

/// The three streams of a worker (DisagMoE, arXiv 2605.11005, AF-Pipe "asynchronous execution").
enum class Stream : std::uint8_t { kForward = 0, kBackward = 1, kComm = 2 };
/// Number of streams per worker.
inline constexpr int kStreams = 3;

/// True for kinds that move bytes rather than compute.
constexpr bool is_comm(OpKind k) { return k >= OpKind::kDispatch; }

/// Short stable name of a kind ("attn_fwd"), used in traces, golden tests and JSON.
constexpr std::string_view to_string(OpKind k) {
  switch (k) {
    case OpKind::kAttentionForward: return "attn_fwd";
    case OpKind::kAttentionBackwardInput: return "attn_bwd";
    case OpKind::kAttentionBackwardWeight: return "attn_wgrad";
    case OpKind::kExpertForward: return "expert_fwd";
    case OpKind::kExpertBackwardInput: return "expert_bwd";
    case OpKind::kExpertBackwardWeight: return "expert_wgrad";
    case OpKind::kEmbeddingForward: return "embed_fwd";
    case OpKind::kEmbeddingBackwardWeight: return "embed_wgrad";
    case OpKind::kHeadForward: return "head_fwd";
    case OpKind::kHeadBackwardInput: return "head_bwd";
    case OpKind::kHeadBackwardWeight: return "head_wgrad";
    case OpKind::kDispatch: return "m2n_dispatch";
    case OpKind::kReturn: return "n2m_return";
    case OpKind::kCombineDispatch: return "combine_dispatch";
    case OpKind::kAllToAll: return "all_to_all";
    case OpKind::kSend: return "send";
    case OpKind::kAllReduce: return "all_reduce";
  }
  return "?";
}

/// Stream name ("fwd", "bwd", "comm").
constexpr std::string_view to_string(Stream s) {
  switch (s) {
    case Stream::kForward: return "fwd";
    case Stream::kBackward: return "bwd";
    case Stream::kComm: return "comm";
  }
  return "?";
}

/// Role of a worker in the layout.
enum class Role : std::uint8_t { kColocated, kAttention, kFfn };

/// Role name ("colocated", "attention", "ffn").
constexpr std::string_view to_string(Role r) {
  switch (r) {
    case Role::kColocated: return "colocated";
    case Role::kAttention: return "attention";
    case Role::kFfn: return "ffn";
  }
  return "?";
}

/// A group of `gpus` identical GPUs spread evenly over nodes
/// [first_node, first_node + nodes). Bandwidths are per GPU and per direction; the NIC
/// figure is this group's share of its nodes' NICs (the plan's NIC split).
struct Worker {
  std::string name = "w";
  Role role = Role::kColocated;
  int gpus = 1;                   ///< GPUs in the group (>= 1)
  int first_node = 0;             ///< first node the group occupies
  int nodes = 1;                  ///< nodes it spans; gpus % nodes == 0 unless mixed
  /// A mixed split (plan::Allocation::mixed_nodes): the first `mixed_nodes` of its nodes
  /// hold `mixed_gpus` of its GPUs each, the others an equal share of the rest.
  int mixed_nodes = 0;
  int mixed_gpus = 0;
  double nic_bandwidth = 0;       ///< bytes/s per GPU per direction across nodes
  double nvlink_bandwidth = 0;    ///< bytes/s per GPU per direction inside a node
  double peak_flops = 0;          ///< FLOP/s per GPU (for MFU)
  double static_bytes = 0;        ///< per GPU: parameters + gradients + optimizer state
  /// true: the comm stream runs its ops one at a time in order (a NCCL kernel stream);
  /// false: each comm op starts as soon as its dependencies are done and concurrent ones
  /// share bandwidth (a message engine such as an RDMA M2N channel, StepMesh/MegaScale-Infer).
  bool in_order_comm = true;
  /// true: its pipeline sends (kSend) start as soon as their dependencies are done,
  /// beside the comm stream's turn order, as a send that is posted and left to the
  /// network does (the CPU runtime's loopback and MPI transports; on GPUs a pipeline
  /// group with its own NCCL stream, as colocated_problem sets); false: each takes its
  /// turn on the in-order comm stream like the all-to-alls. The runtime still posts a
  /// send at its turn; the pipelines emitted here always have it ready by then, so the
  /// two agree. Lowering (lowering.hpp) issues comm in the order of the simulated starts,
  /// the same on both ends of a transfer, so a posted send may precede an all-to-all.
  bool posted_sends = false;
  /// All-to-all link loads: bytes over this group's NIC and over its NVLink per byte of
  /// an all-to-all op (op.bytes). Negative: destinations spread evenly over all `gpus`
  /// of the group (the own GPU's share stays local). Set by the cost adapter when the
  /// expert-parallel group is smaller than the worker, or when cross-node rows are
  /// deduplicated per node and forwarded over NVLink (DeepEP); the NVLink share then
  /// counts forwarded rows too, so the two may add up to more than 1.
  double a2a_nic_share = -1;
  double a2a_nvlink_share = -1;

  /// GPUs of this group on each of its nodes (that are not mixed).
  [[nodiscard]] constexpr int gpus_per_node() const { return placement().gpus_per_node(); }
  /// Where the group sits, as the planner describes it.
  [[nodiscard]] constexpr plan::GroupNodes placement() const {
    return {first_node, nodes, gpus, mixed_nodes, mixed_gpus};
  }
};

/// One unit of work on one stream of one worker.
struct Op {
  OpKind kind = OpKind::kAttentionForward;
  Stream stream = Stream::kForward;
  int worker = 0;          ///< the worker whose stream runs the op (sender for comm)
  int peer = -1;           ///< comm: receiving worker (== worker for all-to-all/all-reduce)
  int micro_batch = -1;    ///< -1 when the op is not tied to one micro-batch
  int layer = -1;          ///< transformer layer, -1 when none
  int chunk = -1;          ///< chunk of a chunked layer (operator-level overlap), else -1
  int step = -1;           ///< index of the pipeline action that issued it on its worker, else -1
  bool backward = false;   ///< carries gradients (backward pass)
  /// comm: the transfer runs as GPU kernels (NCCL, NVSHMEM/DeepEP) that hold
  /// Network::comm_sm_fraction of the SMs on both ends; false: an RDMA engine, which
  /// holds Network::rdma_sm_fraction. Policies set it by transport, never by kind.
  bool uses_sms = false;
  /// Starts as soon as its deps are done, beside its stream's order (outside_stream_order):
  /// a compute op on a CUDA stream of its own, sharing the GPU with the worker's other
  /// compute while both run. Policies set it for work whose inputs arrive at no fixed
  /// point of the stream (AF-Pipe's vocabulary-parallel head), and chain a worker's
  /// posted compute ops by dependencies so that one runs at a time (the simulator refuses
  /// a fourth compute op running on one worker).
  bool posted = false;
  /// compute: time at the worker's full rate; comm: overhead added to its message
  /// latency (0 unless calibrated from a measured run: runtime::calibrated)
  double seconds = 0;
  double bytes = 0;        ///< comm: bytes sent per GPU of `worker`
  /// comm: each GPU of `peer` receives bytes × worker GPUs / peer GPUs × rx_scale. 1 for
  /// an even spread; > 1 when the representative receiving GPU is its group's busiest
  /// (an F group whose size does not divide the experts: the GPU with ceil(E / g) of
  /// them), < 1 when the representative sender is (it sends more than the mean).
  double rx_scale = 1;
  double alloc_bytes = 0;  ///< per GPU, allocated when the op starts (stored activations)
  double free_bytes = 0;   ///< per GPU, released when the op ends
  std::vector<int> deps;   ///< ids of ops that must finish before this op starts
};

/// Latencies and contention knobs of the simulated machine.
struct Network {
  double nic_latency = 0;        ///< seconds per message crossing nodes
  double nvlink_latency = 0;     ///< seconds per message inside a node
  /// Fraction of SMs the comm kernels (ops with `uses_sms`) hold on each end of a
  /// transfer; compute on a worker runs at (1 − fraction) while one of them touches it,
  /// however many (a library reserves its SMs once: DeepEP's Buffer::num_sms).
  /// cost_adapter.hpp takes it from ClusterSpec::kernel_comm_sm_fraction. With
  /// host_cores > 0 it is the share of a core each rank's comm thread takes instead.
  double comm_sm_fraction = 0;
  /// The same for RDMA-engine transfers (ops without `uses_sms`); both can apply at once.
  /// From ClusterSpec::rdma_comm_sm_fraction (default 0).
  double rdma_sm_fraction = 0;
  /// Host cores shared by every worker (0: unlimited, the workers are GPUs). Above 0 the
  /// workers are host threads, as a CPU runtime's are (4 workers on 2 cores): a compute
  /// op of a worker of g ranks runs on g threads holding min(g, C) cores, at min(g, C) / g
  /// of its rate; a worker's forward and backward streams are threads of their own (no
  /// GPU to share); an op whose cores are not free waits, first come first served.
  int host_cores = 0;
};

/// A complete schedule: workers, ops and per-(worker, stream) order.
struct Schedule {
  std::string name;                 ///< policy name ("1f1b", "afpipe", ...)
  std::vector<Worker> workers;
  Network network;
  std::vector<Op> ops;
  /// order[w][s]: op ids run by stream s of worker w, in issue order.
  std::vector<std::array<std::vector<int>, kStreams>> order;
  double tokens_per_step = 0;       ///< tokens trained per step (whole job)
  double flops_per_step = 0;        ///< model FLOPs per step (whole job, fwd + bwd)

  /// Appends `op` to the end of its worker's stream and returns its id.
  int add(Op op) {
    if (order.size() < workers.size()) order.resize(workers.size());
    expect(op.worker >= 0 && op.worker < static_cast<int>(workers.size()), "Op.worker", op.worker,
           "a worker index below " + std::to_string(workers.size()));
    const int id = static_cast<int>(ops.size());
    order[static_cast<std::size_t>(op.worker)][static_cast<std::size_t>(op.stream)].push_back(id);
    ops.push_back(std::move(op));
    return id;
  }
  /// Total GPUs over all workers.
  [[nodiscard]] int gpus() const {
    int n = 0;
    for (const auto& w : workers) n += w.gpus;
    return n;
  }
};

/// True when `op` starts as soon as its dependencies are done instead of at its turn in
/// its stream: a posted op (Op::posted), a comm op of a worker whose comm stream is not
/// in order, or a pipeline send of a worker that posts its sends (Worker::posted_sends).
/// O(1).
inline bool outside_stream_order(const Schedule& s, const Op& op) {
  if (op.posted) return true;
  if (op.stream != Stream::kComm) return false;
  const Worker& w = s.workers[static_cast<std::size_t>(op.worker)];
  return !w.in_order_comm || (w.posted_sends && op.kind == OpKind::kSend);
}

namespace detail {

/// Where each op sits in the stream orders concatenated worker by worker, stream by
/// stream: `pos[id]` is its index in that concatenation, and (worker, stream) pair `wk`
/// (= worker × kStreams + stream) occupies [begin[wk], begin[wk + 1]).
struct StreamSlots {
  std::vector<int> pos;
  std::vector<std::size_t> begin;
};

/// validate(s) that also fills `slots`. The order lists are read in sequence and each
/// op's slot is written to a small int array; the ops are then read in sequence and
/// checked against their slots, so no pass reads the (large) ops in stream order, which
/// is scattered in memory for a schedule emitted micro-batch by micro-batch.
inline void validate(const Schedule& s, StreamSlots& slots) {
  const int nw = static_cast<int>(s.workers.size());
  expect(nw > 0, "Schedule.workers", nw, "at least one worker");
  // Field names are built only on failure: this runs once per simulation over every op.
  auto check = [](bool ok, auto&& field, const auto& value, std::string_view expected) {
    if (!ok) fail(field(), value, expected);
  };
  for (int w = 0; w < nw; ++w) {
    const auto& k = s.workers[static_cast<std::size_t>(w)];
    auto f = [w](const char* leaf) { return "Schedule.workers[" + std::to_string(w) + "]." + leaf; };
    check(k.gpus >= 1, [&] { return f("gpus"); }, k.gpus, "a positive integer");
    check(
        k.nodes < 1 || (k.mixed_nodes >= 0 && k.mixed_nodes < k.nodes && k.mixed_gpus >= (k.mixed_nodes > 0)),
        [&] { return f("mixed_nodes"); }, k.mixed_nodes, "fewer than nodes, each holding at least one GPU");
    check(
        k.nodes >= 1 && (k.gpus - k.mixed_nodes * k.mixed_gpus) % (k.nodes - k.mixed_nodes) == 0 &&
            k.gpus - k.mixed_nodes * k.mixed_gpus >= k.nodes - k.mixed_nodes,
        [&] { return f("nodes"); }, k.nodes,
        "a positive divisor of gpus (" + std::to_string(k.gpus) + "), less the mixed nodes' GPUs");
    check(k.nic_bandwidth >= 0 && k.nvlink_bandwidth >= 0, [&] { return f("nic_bandwidth"); }, k.nic_bandwidth,
          "non-negative bandwidths");
    check(k.a2a_nic_share < 0 || k.a2a_nvlink_share >= 0, [&] { return f("a2a_nvlink_share"); },
          k.a2a_nvlink_share, "a non-negative share when a2a_nic_share is set");
  }
  expect(s.network.host_cores >= 0, "Schedule.network.host_cores", s.network.host_cores,
         "a non-negative core count (0: unlimited)");
  const int n = static_cast<int>(s.ops.size());
  expect(static_cast<int>(s.order.size()) == nw, "Schedule.order.size()", s.order.size(),
         "one entry per worker (" + std::to_string(nw) + ")");
  auto& pos = slots.pos;
  auto& begin = slots.begin;
  pos.assign(static_cast<std::size_t>(n), -1);
  begin.assign(static_cast<std::size_t>(nw) * kStreams + 1, 0);
  auto stream_name = [](std::size_t wk) {
    return "Schedule.order[" + std::to_string(wk / kStreams) + "][" + std::to_string(wk % kStreams) + "]";
  };
  const std::string id_below = "an op id below " + std::to_string(n);
  int next = 0;
  for (std::size_t wk = 0; wk < begin.size() - 1; ++wk) {
    begin[wk] = static_cast<std::size_t>(next);
    for (int id : s.order[wk / kStreams][wk % kStreams]) {
      check(id >= 0 && id < n, [&] { return stream_name(wk); }, id, id_below);
      check(pos[static_cast<std::size_t>(id)] < 0, [&] { return stream_name(wk); }, id, "each op listed once");
      pos[static_cast<std::size_t>(id)] = next++;
    }
  }
  begin.back() = static_cast<std::size_t>(next);
  const std::string worker_below = "a worker index below " + std::to_string(nw);
  for (int i = 0; i < n; ++i) {
    const auto& op = s.ops[static_cast<std::size_t>(i)];
    auto f = [i](const char* leaf) { return "Schedule.ops[" + std::to_string(i) + "]" + leaf; };
    const int at = pos[static_cast<std::size_t>(i)];
    check(at >= 0, [&] { return f(""); }, i, "an op listed in its stream's order");
    check(op.worker >= 0 && op.worker < nw, [&] { return f(".worker"); }, op.worker, worker_below);
    check(static_cast<int>(op.stream) < kStreams, [&] { return f(".stream"); }, static_cast<int>(op.stream),
          "fwd, bwd or comm");
    const std::size_t wk = static_cast<std::size_t>(op.worker) * kStreams + static_cast<std::size_t>(op.stream);
    if (static_cast<std::size_t>(at) < begin[wk] || static_cast<std::size_t>(at) >= begin[wk + 1]) {
      const auto listed = std::upper_bound(begin.begin(), begin.end(), static_cast<std::size_t>(at)) - begin.begin() - 1;
      fail(stream_name(static_cast<std::size_t>(listed)), i, "an op of this worker and stream");
    }
    check(op.seconds >= 0 && op.bytes >= 0 && op.alloc_bytes >= 0 && op.free_bytes >= 0,
          [&] { return f(".seconds"); }, op.seconds, "non-negative costs");
    check(op.rx_scale > 0 && op.rx_scale < 1e300, [&] { return f(".rx_scale"); }, op.rx_scale,
          "a positive finite factor");
    if (is_comm(op.kind)) {
      check(op.peer >= 0 && op.peer < nw, [&] { return f(".peer"); }, op.peer, worker_below);
      check(op.stream == Stream::kComm, [&] { return f(".stream"); }, to_string(op.stream), "comm for a comm op");
    } else {
      check(op.stream != Stream::kComm, [&] { return f(".stream"); }, to_string(op.stream),
            "fwd or bwd for a compute op");
    }
    for (int d : op.deps) check(d >= 0 && d < n && d != i, [&] { return f(".deps"); }, d, "another op's id");
  }
}

}  // namespace detail

/// Throws ConfigError naming the first inconsistency: bad worker fields, an op on a
/// non-existent worker or peer, a dependency id out of range or on itself, negative
/// costs, or an `order` that does not list every op exactly once on its own stream.
/// O(ops + deps).
inline void validate(const Schedule& s) {
  detail::StreamSlots slots;
  detail::validate(s, slots);
}

}  // namespace disagmoe::schedule
