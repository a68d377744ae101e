// SPDX-License-Identifier: Apache-2.0
/// @file disaggregated_trainer.hpp
/// `DisaggregatedTrainer`: AF-Pipe training on real workers (DisagMoE, arXiv 2605.11005):
/// p attention workers A_i of M ranks each and p FFN workers F_i of N ranks each, layer l's
/// attention on A_{l mod p} and its experts on F_{l mod p}, driven by the very op lists
/// that `schedule::AFPipe` emits for the simulator, lowered to per-worker programs
/// (schedule/lowering.hpp) and run on three streams per rank (runtime/worker_executor.hpp)
/// over any `comm::transport` (loopback threads, MPI processes) whose ranks are the A
/// workers' (A_0's M first) then the F workers'. Every rank calls the same functions with
/// the same batch (SPMD). Design notes: docs/afpipe-runtime.md.
///
/// With one rank per worker it trains exactly the model `ColocatedTrainer` trains, bit for
/// bit: every micro-batch's arithmetic is the colocated one (the same stages, computes,
/// token grouping and combine order), weight gradients accumulate in micro-batch order
/// (each worker's backward stream runs them so), the global gradient norm is summed in
/// parameter-name order on both, and the optimizer is elementwise. With groups of ranks
/// (M2NChannel exchange) it matches the colocated trainer run with M x the micro-batches
/// to float rounding (sums regroup).
///
/// Direct exchange (one rank per worker; one message per schedule transfer, T tokens of a
/// micro-batch, d wide):
///  - M2N dispatch A_l -> F_l: normed tokens [T, d], top-k ids and gates [T, k];
///    with stage alignment also the residual [T, d], which F_l adds to the expert output
///    so that F_l -> A_{l+1} (fused combine + dispatch) carries the next layer's input;
///  - N2M return F_l -> A_l: the combined expert output [T, d] (A_l adds the residual);
///  - backward: dL/dy [T, d] towards F_l; dL/dx [T, d] and dL/dgate [T, k] back to A_l
///    (with stage alignment also dL/dy, which A_l needs for the residual branch);
///  - residual-stream hand-offs between attention workers where the schedule has them.
/// Channel exchange: `comm::M2NChannel` per (MoE layer, micro-batch) between the M ranks
/// of A_i (each a share of the micro-batch) and the N ranks of F_i (experts by
/// `DisaggregatedOptions::expert_rank`); no stage alignment.
/// The loss head runs on the worker holding the last layer, when the backward first needs
/// its gradient (the schedule has no op for it: with an MoE last layer that is the comm
/// stream, as it posts dL/dy; measured as part of that transfer); its weight gradient
/// accumulates with that layer's backward (in micro-batch order).
#pragma once

#include <disagmoe/comm/all_gather.hpp>
#include <disagmoe/comm/m2n_channel.hpp>
#include <disagmoe/comm/transport.hpp>
#include <disagmoe/error.hpp>
#include <disagmoe/plan/cost_model.hpp>
#include <disagmoe/runtime/colocated_trainer.hpp>
#include <disagmoe/runtime/worker_executor.hpp>
#include <disagmoe/schedule/afpipe.hpp>
#include <disagmoe/schedule/lowering.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <span>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace disagmoe::runtime {

/// How tokens move between an attention worker and its FFN worker.
enum class Exchange : std::uint8_t {
  kAuto,     ///< direct with one rank per worker, else channel
  kDirect,   ///< one message per schedule transfer, one rank per worker (stage alignment allowed)
  kChannel,  ///< comm::M2NChannel between the M ranks of A_i and the N ranks of F_i
};

/// How the disaggregated run is laid out and scheduled.
struct DisaggregatedOptions {
  int pairs = 1;                  ///< p: attention workers = FFN workers = p
  int attention_ranks = 1;        ///< M: ranks per attention worker (data parallel over a micro-batch)
  int ffn_ranks = 1;              ///< N: ranks per FFN worker (its experts split over them)
  /// F-rank in [0, N) of every routed expert (the same for every layer); empty: contiguous
  /// blocks. Shared expert s lives on F-rank s mod N.
  std::vector<int> expert_rank;
  Exchange exchange = Exchange::kAuto;
  schedule::AFPipe policy{};      ///< ping-pong group, in-flight window, stage alignment
  ExecutorOptions executor{};     ///< fault deadline
  /// Rates the schedule's op costs assume (they fix the agreed comm order and the
  /// simulated prediction, never the arithmetic).
  double flops_per_second = 5e10;
  double bytes_per_second = 1e10;
  double latency_seconds = 0;  ///< per message between workers
};

/// Throws ConfigError naming the first field that cannot run `spec` on a world of
/// `world_size` ranks.
inline void validate(const DisaggregatedOptions& o, const ModelSpec& spec, int world_size) {
  expect(o.pairs >= 1, "DisaggregatedOptions.pairs", o.pairs, "a positive integer");
  expect(o.pairs <= spec.layers, "DisaggregatedOptions.pairs", o.pairs,
         "at most the model's layers (" + std::to_string(spec.layers) + "): pair i holds layers i, i + p, ...");
  expect(o.attention_ranks >= 1, "DisaggregatedOptions.attention_ranks", o.attention_ranks, "a positive integer");
  expect(o.ffn_ranks >= 1, "DisaggregatedOptions.ffn_ranks", o.ffn_ranks, "a positive integer");
  const int size = o.pairs * (o.attention_ranks + o.ffn_ranks);
  expect(world_size == size, "world size", world_size,
         "pairs * (attention_ranks + ffn_ranks) = " + std::to_string(size) +
             " (ranks: the attention workers' first, then the FFN workers')");
  const bool one = o.attention_ranks == 1 && o.ffn_ranks == 1;
  expect(o.exchange != Exchange::kDirect || one, "DisaggregatedOptions.exchange", "direct",
         "channel for workers of several ranks");
  if (!one || o.exchange == Exchange::kChannel)
    expect(!o.policy.fuse_combine_dispatch, "DisaggregatedOptions.policy.fuse_combine_dispatch", true,
           "false with the M2NChannel exchange (stage alignment runs on one rank per worker, exchange direct)");
  expect(o.expert_rank.empty() || static_cast<int>(o.expert_rank.size()) == spec.experts,
         "DisaggregatedOptions.expert_rank.size()", o.expert_rank.size(),
         "0 (contiguous) or one F-rank per routed expert (" + std::to_string(spec.experts) + ")");
  for (std::size_t e = 0; e < o.expert_rank.size(); ++e)
    expect(o.expert_rank[e] >= 0 && o.expert_rank[e] < o.ffn_ranks,
           "DisaggregatedOptions.expert_rank[" + std::to_string(e) + "]", o.expert_rank[e],
           "an F-rank in [0, ffn_ranks = " + std::to_string(o.ffn_ranks) + ")");
  expect(o.policy.group_size >= 0, "DisaggregatedOptions.policy.group_size", o.policy.group_size,
         "an integer >= 0 (0: the policy's default)");
  expect(o.policy.max_in_flight >= 0, "DisaggregatedOptions.policy.max_in_flight", o.policy.max_in_flight,
         "an integer >= 0 (0: the policy's default)");
  expect(o.flops_per_second > 0, "DisaggregatedOptions.flops_per_second", o.flops_per_second, "a positive rate");
  expect(o.bytes_per_second > 0, "DisaggregatedOptions.bytes_per_second", o.bytes_per_second, "a positive rate");
  expect(o.latency_seconds >= 0 && o.latency_seconds < 1e3, "DisaggregatedOptions.latency_seconds", o.latency_seconds,
         "a latency in [0, 1000) s");
  expect(o.executor.timeout.count() > 0, "DisaggregatedOptions.executor.timeout (ms)", o.executor.timeout.count(),
         "a positive deadline");
}

/// The AF-Pipe problem of `spec` (micro-batches of `spec.micro_batch` sequences) on
/// `o.pairs` pairs of one-GPU workers: layer costs from plan::layer_cost at o's rates, the
/// bytes of the messages listed in the file comment.
inline schedule::Problem afpipe_problem(const ModelSpec& spec, const DisaggregatedOptions& o, int micro_batches,
                                        std::size_t element_bytes = 4) {
  const int pairs = o.pairs;
  const double flops_per_second = o.flops_per_second, bytes_per_second = o.bytes_per_second;
  schedule::Problem pb;
  pb.network.nic_latency = pb.network.nvlink_latency = o.latency_seconds;
  for (int side = 0; side < 2; ++side)
    for (int i = 0; i < pairs; ++i) {
      schedule::Worker w;
      w.name = (side == 0 ? "A" : "F") + std::to_string(i);
      w.role = side == 0 ? schedule::Role::kAttention : schedule::Role::kFfn;
      w.gpus = side == 0 ? o.attention_ranks : o.ffn_ranks;
      w.first_node = side * pairs + i;
      w.nic_bandwidth = w.nvlink_bandwidth = bytes_per_second;
      w.peak_flops = flops_per_second;
      pb.workers.push_back(w);
    }
  pb.micro_batches = micro_batches;
  // Per GPU: an A-rank holds T / M tokens of a micro-batch; an F-rank 1/N of the expert
  // work; a token goes to at most min(k + shared, N) F-ranks (send-once).
  const double t = double(spec.tokens_per_micro_batch()), d = spec.hidden, e = double(element_bytes);
  const double ta = t / o.attention_ranks, n = o.ffn_ranks;
  const double dest = std::min<double>(spec.top_k + spec.shared_experts, n);
  pb.tokens_per_micro_batch = t * pairs;
  for (int l = 0; l < spec.layers; ++l) {
    const auto c = plan::layer_cost(spec, l);
    const auto a = c.attention_side() + c.dense_ffn, f = c.experts + c.shared_experts;
    schedule::LayerCost lc;
    lc.moe = c.moe;
    const double am = o.attention_ranks * flops_per_second, fn = n * flops_per_second;
    lc.attn_fwd = a.forward / am;
    lc.attn_bwd = a.backward_input / am;
    lc.attn_wgrad = a.backward_weight / am;
    lc.expert_fwd = f.forward / fn;
    lc.expert_bwd = f.backward_input / fn;
    lc.expert_wgrad = f.backward_weight / fn;
    lc.dispatch_bytes = ta * dest * (d * e + (spec.top_k + spec.shared_experts) * 8.0);
    lc.combine_bytes = t * dest * d * e / n;
    lc.hidden_bytes = ta * d * e;
    // Stage alignment: the residual rides with the dispatch (and dL/dy with the return).
    if (c.moe && l + 1 < spec.layers && o.policy.fuse_combine_dispatch) lc.dispatch_bytes += ta * d * e;
    pb.flops_per_micro_batch += c.total().total();
    pb.layers.push_back(lc);
  }
  return pb;
}

/// See the file comment. One object per rank; `world` must outlive it.
template <attention_compute Attention, expert_compute Experts, comm::transport Transport>
class DisaggregatedTrainer {
 public:
  using T = typename Attention::scalar_type;
  static_assert(std::is_same_v<T, typename Experts::scalar_type>,
                "attention and expert computes must use one scalar type");
  using Matrix = model::Matrix<T>;

  /// Collective over `world`: builds this rank's stage and agrees on the parameter list.
  DisaggregatedTrainer(Attention attention, Experts experts, const ModelSpec& spec, TrainOptions train,
                       DisaggregatedOptions options, Transport& world, StageOptions stage = {})
      : spec_(spec), train_(train), options_(options), world_(world) {
    validate(spec_);
    validate(train_);
    validate(options_, spec_, world_.size());
    p_ = options_.pairs;
    m_ranks_ = options_.attention_ranks;
    n_ranks_ = options_.ffn_ranks;
    channel_ = options_.exchange == Exchange::kChannel || m_ranks_ > 1 || n_ranks_ > 1;
    rank_ = world_.rank();
    worker_ = rank_ < p_ * m_ranks_ ? rank_ / m_ranks_ : p_ + (rank_ - p_ * m_ranks_) / n_ranks_;
    index_ = rank_ < p_ * m_ranks_ ? rank_ % m_ranks_ : (rank_ - p_ * m_ranks_) % n_ranks_;
    const int pair = worker_ % p_;
    if (channel_) make_groups();
    if (is_attention()) {
      AttentionStageLayout layout;
      for (int l = pair; l < spec_.layers; l += p_) layout.layers.push_back(l);
      layout.embedding = pair == 0;
      layout.head = (spec_.layers - 1) % p_ == pair;
      attention_.emplace(std::move(attention), spec_, std::move(layout), stage);
    } else {
      ExpertStageLayout layout;
      std::vector<int> ids;  // this F-rank's experts, ascending (routed, then shared)
      for (int e = 0; e < spec_.experts + spec_.shared_experts; ++e)
        if (expert_rank_of(e) == index_) ids.push_back(e);
      for (int l = pair; l < spec_.layers; l += p_)
        if (spec_.is_moe_layer(l)) {
          layout.layers.push_back(l);
          layout.experts.push_back(ids);
        }
      experts_.emplace(std::move(experts), spec_, std::move(layout), stage);
    }
    if (channel_) make_channels();
    agree_on_parameters();
  }

  /// One optimizer step (collective): the disaggregated forward and backward of every
  /// micro-batch, the global norm, clipping and AdamW on every worker's own parameters.
  StepStats step(const TokenBatch& batch) {
    StepStats st = compute_gradients(batch);
    const double clip = detail::clip_factor(train_, st.grad_norm, step_ + 1);
    st.lr = train_.lr.at(step_);
    ++step_;
    for_each_parameter_set([&](auto& ps) { ps.adamw_step(train_.adamw, st.lr, clip, step_); });
    return st;
  }

  /// The gradients of the step's objective on every worker (collective), nothing updated.
  StepStats compute_gradients(const TokenBatch& batch) {
    expect(!failed_, "DisaggregatedTrainer", "failed", "a trainer whose earlier step did not fail (create a new one)");
    detail::check_batch(spec_, batch);
    const int m = train_.micro_batches;
    expect(batch.sequences % m == 0, "batch.sequences", batch.sequences,
           "a multiple of the micro-batches (" + std::to_string(m) + ")");
    const int per = batch.sequences / m;
    expect(per % m_ranks_ == 0, "batch.sequences / micro_batches", per,
           "a multiple of attention_ranks (" + std::to_string(m_ranks_) + "): each A-rank takes an equal share");
    for_each_parameter_set([](auto& ps) { ps.zero_grad(); });
    try {
      prepare(batch);
      ExecutorOptions exec = options_.executor;
      exec.step = step_ + 1;
      if (!exec.epoch) {  // every rank's timeline from one moment: just after a barrier
        (void)comm::all_gather(world_, {}, world_.max_tag(), comm::deadline_after(options_.executor.timeout),
                               "step start");
        exec.epoch = std::chrono::steady_clock::now();
      }
      if (channel_) {
        ChannelHandler handler{*this};
        timeline_ = run_worker(schedule_, program(), handler, exec);
        finish_channel_step();
      } else {
        Handler handler{*this};
        timeline_ = run_worker(schedule_, program(), world_, handler, exec);
      }
      return gather_stats();
    } catch (...) {
      failed_ = true;  // the peers' state is out of step with ours: no further steps
      for (auto& r : pending_sends_) world_.cancel(r);  // before their buffers go
      pending_sends_.clear();
      wire_.clear();
      if (attention_) attention_->release_all();
      if (experts_) experts_->release_all();
      cells_.clear();
      throw;
    }
  }

  /// This rank's worker index in the schedule (0..p-1: A_i, p..2p-1: F_{i-p}).
  [[nodiscard]] int worker() const { return worker_; }
  /// This rank's index among its worker's ranks.
  [[nodiscard]] int rank_in_worker() const { return index_; }
  [[nodiscard]] bool is_attention() const { return worker_ < p_; }
  /// The schedule of the last step (built for its micro-batch size).
  [[nodiscard]] const schedule::Schedule& schedule() const { return schedule_; }
  /// Measured start and end of every op this worker ran in the last step (seconds).
  [[nodiscard]] const std::vector<MeasuredOp>& timeline() const { return timeline_; }
  /// The lowered schedule of the last step.
  [[nodiscard]] const schedule::LoweredSchedule& lowered() const { return lowered_; }
  /// Every worker's timeline of the last step (collective; a worker of several ranks
  /// reports its first rank's), indexed [worker][op].
  std::vector<std::vector<MeasuredOp>> gather_timelines() {
    const auto all = comm::all_gather(world_, std::as_bytes(std::span(timeline_)), world_.max_tag(),
                                      comm::deadline_after(options_.executor.timeout), "timelines");
    std::vector<std::vector<MeasuredOp>> out(static_cast<std::size_t>(2 * p_));
    for (int w = 0; w < 2 * p_; ++w) {
      const auto& bytes = all[static_cast<std::size_t>(world_rank(w, 0))];
      expect(bytes.size() == timeline_.size() * sizeof(MeasuredOp), "timeline bytes of worker " + std::to_string(w),
             bytes.size(), "one entry per op on every worker");
      out[static_cast<std::size_t>(w)].resize(timeline_.size());
      std::memcpy(out[static_cast<std::size_t>(w)].data(), bytes.data(), bytes.size());
    }
    return out;
  }
  /// This rank's stages (the other is absent).
  [[nodiscard]] AttentionStage<Attention>* attention() { return attention_ ? &*attention_ : nullptr; }
  [[nodiscard]] ExpertStage<Experts>* experts() { return experts_ ? &*experts_ : nullptr; }
  [[nodiscard]] std::int64_t steps() const { return step_; }
  /// Restores the step count (resuming).
  void set_steps(std::int64_t s) { step_ = s; }

  /// Copies values and AdamW moments of this worker's parameters from `from` (a model
  /// split any other way, e.g. a loaded colocated checkpoint), by name. ConfigError
  /// unless every parameter of this worker is found.
  void load_parameters(std::span<const ParameterSet<T>* const> from) {
    std::vector<ParameterSet<T>*> mine;
    std::size_t count = 0;
    for_each_parameter_set([&](auto& ps) {
      mine.push_back(&ps);
      count += ps.slots().size();
    });
    const std::size_t copied = copy_matching<T>(from, mine);
    expect(copied == count, "parameters found for worker " + std::to_string(rank_), copied,
           "all " + std::to_string(count) + " of its parameters");
  }

  /// Collective: every worker's values and AdamW moments, copied by name into `into`
  /// (empty on ranks that do not need them). Every rank receives the whole model.
  void gather_parameters(std::span<ParameterSet<T>* const> into) {
    std::vector<std::byte> mine;
    auto put = [&](const void* p, std::size_t n) {
      const auto* b = static_cast<const std::byte*>(p);
      mine.insert(mine.end(), b, b + n);
    };
    if (reports_parameters()) for_each_parameter_set([&](auto& ps) {
      for (const auto& s : ps.slots()) {
        const std::uint64_t len = s.name.size(), rows = static_cast<std::uint64_t>(s.value->rows()),
                            cols = static_cast<std::uint64_t>(s.value->cols());
        for (const std::uint64_t x : {len, rows, cols}) put(&x, sizeof x);
        put(s.name.data(), len);
        for (const Matrix* m : {static_cast<const Matrix*>(s.value), &s.m, &s.v}) put(m->data(), static_cast<std::size_t>(m->size()) * sizeof(T));
      }
    });
    const auto all = comm::all_gather(world_, std::span<const std::byte>(mine), world_.max_tag(),
                                      comm::deadline_after(options_.executor.timeout), "parameters");
    if (into.empty()) return;
    std::size_t filled = 0;
    for (const auto& bytes : all) {
      ParameterSet<T> part;  // views into matrices decoded from the message
      std::vector<std::unique_ptr<Matrix>> store;
      std::size_t at = 0;
      auto get = [&](void* p, std::size_t n) {
        expect(at + n <= bytes.size(), "gathered parameter bytes", bytes.size(), "a complete message");
        std::memcpy(p, bytes.data() + at, n);
        at += n;
      };
      while (at < bytes.size()) {
        std::uint64_t len = 0, rows = 0, cols = 0;
        for (std::uint64_t* x : {&len, &rows, &cols}) get(x, sizeof *x);
        std::string name(len, '\0');
        get(name.data(), len);
        auto& value = *store.emplace_back(std::make_unique<Matrix>(static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(cols)));
        auto& grad = *store.emplace_back(std::make_unique<Matrix>());
        part.add(name, {}, value, grad);
        auto& slot = part.slots().back();
        for (Matrix* m : {&value, &slot.m, &slot.v}) get(m->data(), static_cast<std::size_t>(m->size()) * sizeof(T));
      }
      const ParameterSet<T>* from[] = {&part};
      filled += copy_matching<T>(from, into);
    }
    std::size_t slots = 0;
    for (const auto* ps : into) slots += ps->slots().size();
    expect(filled == slots, "gathered parameters", filled,
           "every parameter of the receiving model (" + std::to_string(slots) + "): a model of the same shape");
  }
  /// Trainable scalars of the whole model (all workers).
  [[nodiscard]] std::int64_t parameter_count() const { return total_parameters_; }

 private:
  // What one (micro-batch, layer) keeps between ops on this worker.
  struct Cell {
    Matrix h, residual, tokens, gates, next, expert_out, y, dy, dh, d_tokens, d_gates;
    model::IndexMatrix topk;
    std::optional<LocalDispatch> dispatch;
    double aux = 0, z = 0;
    bool head_done = false;
  };

  struct Handler {
    DisaggregatedTrainer& t;
    void compute(int op) { t.run_compute(op); }
    std::span<const std::byte> send_payload(int op) { return t.pack(op); }
    std::span<std::byte> recv_buffer(int op) {
      auto& buf = t.wire_[op];
      buf.resize(t.payload_bytes(op));
      return buf;
    }
    void received(int op) { t.unpack(op); }
    void sent(int op) { t.wire_.erase(op); }
    void collective(int) {}  // one rank per worker: its all-reduce is the identity
  };
  struct ChannelHandler {
    DisaggregatedTrainer& t;
    void compute(int op) { t.run_compute(op); }
    void communicate(const schedule::Task& task) { t.communicate(task); }
  };

  // ---- layout -----------------------------------------------------------------

  /// F-rank of expert e (routed: the placement, or contiguous blocks; shared: e - E mod N).
  int expert_rank_of(int e) const {
    if (e >= spec_.experts) return (e - spec_.experts) % n_ranks_;
    if (!options_.expert_rank.empty()) return options_.expert_rank[static_cast<std::size_t>(e)];
    return static_cast<int>(static_cast<std::int64_t>(e) * n_ranks_ / spec_.experts);
  }
  /// World rank of rank `i` of schedule worker `w`.
  int world_rank(int w, int i) const { return w < p_ ? w * m_ranks_ + i : p_ * m_ranks_ + (w - p_) * n_ranks_ + i; }
  int attention_worker(int l) const { return l % p_; }
  int ffn_worker(int l) const { return p_ + l % p_; }
  bool moe(int l) const { return spec_.is_moe_layer(l); }
  bool last(int l) const { return l + 1 == spec_.layers; }
  /// Stage alignment on MoE layer l: F_l sends the next layer's input to A_{l+1}.
  bool fused(int l) const { return moe(l) && !last(l) && options_.policy.fuse_combine_dispatch; }
  Cell& cell(int mb, int l) { return cells_[static_cast<std::size_t>(mb) * static_cast<std::size_t>(spec_.layers) + static_cast<std::size_t>(l)]; }

  template <class F>
  void for_each_parameter_set(F&& f) {
    if (attention_) f(attention_->parameters());
    if (experts_) f(experts_->parameters());
  }

  // ---- per step -----------------------------------------------------------------

  const schedule::WorkerProgram& program() const { return lowered_.workers[static_cast<std::size_t>(worker_)]; }

  void prepare(const TokenBatch& batch) {
    const int m = train_.micro_batches;
    const int per = batch.sequences / m;
    if (per != sequences_per_micro_batch_) {  // every rank builds the same schedule
      ModelSpec mb_spec = spec_;
      mb_spec.micro_batch = per;  // the problem splits it over the A-ranks
      schedule_ = options_.policy.build(afpipe_problem(mb_spec, options_, m, sizeof(T)));
      lowered_ = schedule::lower(schedule_);
      sequences_per_micro_batch_ = per;
      check_same_program();
    }
    tokens_ = static_cast<std::size_t>(per / m_ranks_) * static_cast<std::size_t>(spec_.seq_len);
    batch_ = batch;
    cells_.assign(static_cast<std::size_t>(m) * static_cast<std::size_t>(spec_.layers), Cell{});
    final_.assign(static_cast<std::size_t>(m), Matrix());
    loss_.assign(static_cast<std::size_t>(m), T{0});
    wire_.clear();
  }

  /// This A-rank's share of micro-batch mb: the colocated run's micro-batch mb * M + index
  /// of M * micro_batches (so the router losses see the same tokens).
  /// Collective: every rank must run the same layout, model and comm order (a rank
  /// launched with other options, or whose simulation rounded differently, would
  /// otherwise exchange mismatched messages). ConfigError naming the first rank that differs.
  void check_same_program() {
    std::ostringstream os;
    os << p_ << ' ' << m_ranks_ << ' ' << n_ranks_ << ' ' << options_.policy.fuse_combine_dispatch << ' '
       << options_.policy.group_size << ' ' << options_.policy.max_in_flight << ' ' << train_.micro_batches << ' '
       << sequences_per_micro_batch_ << ' ' << spec_.layers << ' ' << spec_.hidden << ' ' << spec_.experts << ' '
       << spec_.shared_experts << ' ' << spec_.top_k << ' ' << spec_.seq_len << ' ' << spec_.vocab << ' ' << channel_;
    for (int e = 0; e < spec_.experts; ++e) os << ' ' << expert_rank_of(e);
    const std::string text = os.str();
    const std::int64_t mine[2] = {comm::ChannelFingerprint::hash(text.data(), text.size()),
                                  comm::ChannelFingerprint::hash(lowered_.position.data(),
                                                                 lowered_.position.size() * sizeof(int))};
    const auto all = comm::all_gather(world_, std::as_bytes(std::span(mine)), world_.max_tag(),
                                      comm::deadline_after(options_.executor.timeout), "program fingerprints");
    for (std::size_t r = 0; r < all.size(); ++r) {
      std::int64_t theirs[2] = {0, 0};
      expect(all[r].size() == sizeof theirs, "program fingerprint bytes of rank " + std::to_string(r), all[r].size(),
             std::to_string(sizeof theirs));
      std::memcpy(theirs, all[r].data(), sizeof theirs);
      expect(theirs[0] == mine[0], "layout and model fingerprint of rank " + std::to_string(r), theirs[0],
             std::to_string(mine[0]) + " as on rank " + std::to_string(rank_) +
                 " (every rank runs the same pairs, ranks, policy, micro-batches, batch and model)");
      expect(theirs[1] == mine[1], "comm order fingerprint of rank " + std::to_string(r), theirs[1],
             std::to_string(mine[1]) + " as on rank " + std::to_string(rank_) +
                 " (the lowering's simulation must agree bit for bit: one build on every rank)");
    }
  }

  std::span<const int> slice(std::span<const int> all, int mb) const {
    return all.subspan((static_cast<std::size_t>(mb) * static_cast<std::size_t>(m_ranks_) + static_cast<std::size_t>(index_)) * tokens_,
                       tokens_);
  }
  T loss_scale() const { return static_cast<T>(1.0 / (train_.micro_batches * m_ranks_)); }

  void run_compute(int id) {
    const schedule::Op& o = schedule_.ops[static_cast<std::size_t>(id)];
    const int l = o.layer, j = o.micro_batch;
    Cell& c = cell(j, l);
    switch (o.kind) {
      case schedule::OpKind::kAttentionForward: return attention_forward(j, l, c);
      case schedule::OpKind::kAttentionBackwardInput: return attention_backward(j, l, c);
      case schedule::OpKind::kAttentionBackwardWeight:
        if (last(l)) attention_->head_backward_weight(j);  // micro-batch order, as colocated
        return attention_->backward_weight(l, j);
      case schedule::OpKind::kExpertForward: return expert_forward(j, l, c);
      case schedule::OpKind::kExpertBackwardInput: return expert_backward(j, l, c);
      case schedule::OpKind::kExpertBackwardWeight: return experts_->backward_weight(l, j);
      default: fail("DisaggregatedTrainer op", schedule::describe_op(schedule_, id), "a compute op of AF-Pipe");
    }
  }

  void attention_forward(int j, int l, Cell& c) {
    if (l == 0) attention_->embed(j, slice(batch_.inputs, j), c.h);
    const AttentionOutput<T>& out = attention_->forward(l, j, c.h);
    c.h = Matrix();
    if (!moe(l)) return hand_on(j, l, out.residual);
    c.residual = out.residual;
    c.tokens = out.tokens;
    c.topk = out.topk_ids;
    c.gates = out.gates;
    c.aux = static_cast<double>(out.aux_loss);
    c.z = static_cast<double>(out.z_loss);
  }

  /// The output of layer l (on A_l) becomes layer l+1's input: here, or sent by the
  /// schedule's hand-off, or the head's input after the last layer.
  void hand_on(int j, int l, const Matrix& next) {
    if (last(l)) final_[static_cast<std::size_t>(j)] = next;
    else if (attention_worker(l + 1) == worker_) cell(j, l + 1).h = next;
    else cell(j, l).next = next;
  }

  /// dL/d(output of the last layer) of micro-batch j (runs the head once).
  Matrix& head_gradient(int j) {
    Cell& c = cell(j, spec_.layers - 1);
    if (!c.head_done) {
      loss_[static_cast<std::size_t>(j)] =
          attention_->head_forward(j, final_[static_cast<std::size_t>(j)], slice(batch_.targets, j));
      attention_->head_backward_input(j, loss_scale(), c.dy);
      final_[static_cast<std::size_t>(j)] = Matrix();
      c.head_done = true;
    }
    return c.dy;
  }
  Matrix& output_gradient(int j, int l) { return last(l) ? head_gradient(j) : cell(j, l).dy; }

  void attention_backward(int j, int l, Cell& c) {
    Matrix& dy = output_gradient(j, l);
    Matrix dh;
    const AttentionGradients<T> g = moe(l) ? AttentionGradients<T>{&dy, &c.d_tokens, &c.d_gates, loss_scale()}
                                           : AttentionGradients<T>{&dy, nullptr, nullptr, loss_scale()};
    attention_->backward_input(l, j, g, dh);
    c.dy = c.d_tokens = c.d_gates = Matrix();
    if (l == 0) return attention_->embed_backward(j, dh);
    // dh is dL/d(output of layer l-1): travels with the fused backward dispatch, by a
    // hand-off, or stays here.
    if (!fused(l - 1) && attention_worker(l - 1) == worker_) cell(j, l - 1).dy = std::move(dh);
    else c.dh = std::move(dh);
  }

  void expert_forward(int j, int l, Cell& c) {
    if (channel_) return channel_expert_forward(j, l);
    c.dispatch.emplace(c.topk, spec_.experts, spec_.shared_experts);
    Matrix rows;
    group_rows(*c.dispatch, c.tokens, rows);
    c.tokens = Matrix();
    experts_->forward(l, j, c.dispatch->offsets, rows, c.expert_out);
    combine_outputs(*c.dispatch, c.expert_out, c.gates, c.y);
    if (fused(l)) {  // the next layer's input, as colocated: residual + y
      c.y = c.residual + c.y;
      c.residual = Matrix();
    }
  }

  void expert_backward(int j, int l, Cell& c) {
    if (channel_) return channel_expert_backward(j, l);
    Matrix d_out, d_rows;
    combine_backward(*c.dispatch, c.expert_out, c.gates, c.dy, d_out, c.d_gates);
    experts_->backward_input(l, j, d_out, d_rows);
    combine_input_gradients(*c.dispatch, d_rows, c.d_tokens);
    c.expert_out = c.gates = Matrix();
    c.dispatch.reset();
  }

  // ---- messages -------------------------------------------------------------------

  /// The matrices (in order) that transfer `id` carries; `receiving` selects the
  /// receiver's cells. Both ends list the same shapes, so sizes agree.
  std::vector<std::pair<void*, std::size_t>> segments(int id, bool receiving) {
    const schedule::Op& o = schedule_.ops[static_cast<std::size_t>(id)];
    const int l = o.layer, j = o.micro_batch;
    const std::size_t td = tokens_ * static_cast<std::size_t>(spec_.hidden) * sizeof(T);
    const std::size_t tk = tokens_ * static_cast<std::size_t>(spec_.top_k);
    Cell& c = cell(j, l);
    using K = schedule::OpKind;
    auto m = [&](Matrix& x, std::size_t bytes) -> std::pair<void*, std::size_t> {
      if (receiving) x.resize(static_cast<Eigen::Index>(tokens_), static_cast<Eigen::Index>(bytes / sizeof(T) / tokens_));
      else if (static_cast<std::size_t>(x.size()) * sizeof(T) != bytes)  // a compute gave another shape
        fail(schedule::describe_op(schedule_, id) + " payload bytes", static_cast<std::size_t>(x.size()) * sizeof(T),
             std::to_string(bytes) + " (tokens x width of the transfer)");
      return {x.data(), bytes};
    };
    if (!o.backward) {
      switch (o.kind) {
        case K::kSend:  // A_l -> A_{l+1}: the next layer's input
          return {m(receiving ? cell(j, l + 1).h : c.next, td)};
        case K::kDispatch: {
          if (receiving) c.topk.resize(static_cast<Eigen::Index>(tokens_), spec_.top_k);
          else expect(static_cast<std::size_t>(c.topk.size()) == tk, schedule::describe_op(schedule_, id) + " top-k ids",
                      c.topk.size(), "tokens x top_k (" + std::to_string(tk) + ")");
          std::vector<std::pair<void*, std::size_t>> s{m(c.tokens, td), {c.topk.data(), tk * sizeof(int)},
                                                      m(c.gates, tk * sizeof(T))};
          if (fused(l)) s.push_back(m(c.residual, td));
          return s;
        }
        case K::kReturn: return {m(c.y, td)};
        case K::kCombineDispatch: return {m(receiving ? cell(j, l + 1).h : c.y, td)};
        default: break;
      }
    } else {
      switch (o.kind) {
        case K::kSend:  // A_{l+1} -> A_l: dL/d(output of layer l)
          return {m(receiving ? c.dy : cell(j, l + 1).dh, td)};
        case K::kDispatch: return {m(c.dy, td)};  // A_l -> F_l (A_l holds dy of layer l)
        case K::kCombineDispatch: return {m(receiving ? c.dy : cell(j, l + 1).dh, td)};
        case K::kReturn: {
          std::vector<std::pair<void*, std::size_t>> s{m(c.d_tokens, td), m(c.d_gates, tk * sizeof(T))};
          if (fused(l)) s.push_back(m(c.dy, td));
          return s;
        }
        default: break;
      }
    }
    fail("DisaggregatedTrainer transfer", schedule::describe_op(schedule_, id), "a transfer of AF-Pipe");
  }

  std::size_t payload_bytes(int id) {
    std::size_t n = 0;
    for (const auto& [p, b] : segments(id, true)) n += b;
    return n;
  }

  std::span<const std::byte> pack(int id) {
    const schedule::Op& o = schedule_.ops[static_cast<std::size_t>(id)];
    if (o.backward && o.kind == schedule::OpKind::kDispatch && last(o.layer)) (void)head_gradient(o.micro_batch);
    auto& buf = wire_[id];
    const auto segs = segments(id, false);
    std::size_t n = 0;
    for (const auto& [p, b] : segs) n += b;
    buf.resize(n);
    std::size_t at = 0;
    for (const auto& [p, b] : segs) {
      std::memcpy(buf.data() + at, p, b);
      at += b;
    }
    release_sent(o);
    return buf;
  }

  /// What the sender no longer needs once a transfer's bytes are copied out.
  void release_sent(const schedule::Op& o) {
    Cell& c = cell(o.micro_batch, o.layer);
    if (o.backward) {
      if (o.kind == schedule::OpKind::kSend || o.kind == schedule::OpKind::kCombineDispatch) cell(o.micro_batch, o.layer + 1).dh = Matrix();
      if (o.kind == schedule::OpKind::kReturn) c.d_tokens = c.d_gates = c.dy = Matrix();
      return;
    }
    if (o.kind == schedule::OpKind::kSend) c.next = Matrix();
    if (o.kind == schedule::OpKind::kDispatch) {
      c.tokens = Matrix();
      if (fused(o.layer)) c.residual = Matrix();
    }
    if (o.kind == schedule::OpKind::kCombineDispatch || o.kind == schedule::OpKind::kReturn) c.y = Matrix();
  }

  void unpack(int id) {
    const auto& buf = wire_.at(id);
    std::size_t at = 0;
    for (const auto& [p, b] : segments(id, true)) {
      std::memcpy(p, buf.data() + at, b);
      at += b;
    }
    wire_.erase(id);
    const schedule::Op& o = schedule_.ops[static_cast<std::size_t>(id)];
    if (!o.backward && o.kind == schedule::OpKind::kReturn) {  // A_l: the layer's output
      Cell& c = cell(o.micro_batch, o.layer);
      const Matrix next = c.residual + c.y;  // as colocated: residual + y
      c.residual = c.y = Matrix();
      hand_on(o.micro_batch, o.layer, next);
    }
  }

  // ---- the M2NChannel exchange (groups of ranks) ------------------------------------

  /// Collective over the world: the pair groups (A_i then F_i ranks) and the attention
  /// workers' data-parallel groups; this rank keeps its own.
  void make_groups() {
    for (int i = 0; i < p_; ++i) {
      std::vector<int> members;
      for (int r = 0; r < m_ranks_; ++r) members.push_back(world_rank(i, r));
      auto a = world_.split(members);
      for (int r = 0; r < n_ranks_; ++r) members.push_back(world_rank(p_ + i, r));
      auto pair = world_.split(members);
      if (a) attention_group_.emplace(std::move(*a));
      if (pair) pair_group_.emplace(std::move(*pair));
    }
  }

  /// Collective over this rank's pair group: one channel per (MoE layer, micro-batch),
  /// created once (a fingerprint handshake each) and reused every step. Shared experts
  /// ride as extra routing slots of gate 1 (ids E, E+1, ...), so the channel's combine
  /// adds them after the routed slots, as the colocated combine does.
  void make_channels() {
    comm::ChannelConfig base;
    base.attention_ranks = m_ranks_;
    base.ffn_ranks = n_ranks_;
    base.hidden = spec_.hidden;
    base.top_k = spec_.top_k + spec_.shared_experts;
    base.timeout = options_.executor.timeout;
    for (int e = 0; e < spec_.experts + spec_.shared_experts; ++e) base.expert_rank.push_back(expert_rank_of(e));
    int count = 0;
    for (int l = worker_ % p_; l < spec_.layers; l += p_) {
      if (!moe(l)) continue;
      for (int j = 0; j < train_.micro_batches; ++j) {
        comm::ChannelConfig c = base;
        c.name = "layer " + std::to_string(l) + " micro-batch " + std::to_string(j);
        c.tag_base = comm::kTagsPerChannel * count++;
        expect(c.tag_base + comm::kTagsPerChannel <= comm::kHandshakeTag, "channels per pair", count,
               "at most " + std::to_string(comm::kHandshakeTag / comm::kTagsPerChannel) +
                   " (MoE layers per pair x micro-batches; MPI tags end at 32767)");
        channels_[{l, j}] = std::make_unique<comm::M2NChannel<Transport, T>>(*pair_group_, std::move(c));
      }
    }
  }
  comm::M2NChannel<Transport, T>& channel(int l, int j) { return *channels_.at({l, j}); }

  /// Grouped rows of this F-rank's experts for (l, j), as the channel fanned them out.
  void channel_expert_forward(int j, int l) {
    auto& ch = channel(l, j);
    const std::size_t le = ch.local_experts(), h = static_cast<std::size_t>(spec_.hidden);
    std::vector<std::int64_t> offsets{0};
    for (std::size_t k = 0; k < le; ++k) offsets.push_back(offsets.back() + static_cast<std::int64_t>(ch.expert_rows(k)));
    const auto rows_n = static_cast<Eigen::Index>(offsets.back());
    Matrix rows(rows_n, spec_.hidden), out;
    if (rows_n > 0) std::memcpy(rows.data(), ch.expert_input(0).data(), static_cast<std::size_t>(rows.size()) * sizeof(T));
    experts_->forward(l, j, offsets, rows, out);
    if (rows_n > 0) std::memcpy(ch.expert_output(0).data(), out.data(), static_cast<std::size_t>(rows_n) * h * sizeof(T));
  }

  void channel_expert_backward(int j, int l) {
    auto& ch = channel(l, j);
    const std::size_t le = ch.local_experts();
    std::size_t rows_n = 0;
    for (std::size_t k = 0; k < le; ++k) rows_n += ch.expert_rows(k);
    Matrix d_out(static_cast<Eigen::Index>(rows_n), spec_.hidden), d_rows;
    if (rows_n > 0)
      std::memcpy(d_out.data(), ch.expert_grad_output(0).data(), static_cast<std::size_t>(d_out.size()) * sizeof(T));
    experts_->backward_input(l, j, d_out, d_rows);
    if (rows_n > 0)
      std::memcpy(ch.expert_grad_input(0).data(), d_rows.data(), static_cast<std::size_t>(d_rows.size()) * sizeof(T));
  }

  /// A comm task of the channel mode, on the comm stream, in the agreed order.
  void communicate(const schedule::Task& task) {
    using K = schedule::OpKind;
    const schedule::Op& o = schedule_.ops[static_cast<std::size_t>(task.op)];
    const int l = o.layer, j = o.micro_batch;
    const std::int64_t step = step_ + 1;
    if (task.kind == schedule::TaskKind::kCollective) return;  // the data-parallel reduce follows the step
    if (o.kind == K::kSend) return hand_off(task);
    expect(o.kind == K::kDispatch || o.kind == K::kReturn, "DisaggregatedTrainer transfer",
           schedule::describe_op(schedule_, task.op), "an M2N dispatch or N2M return (no stage alignment)");
    auto& ch = channel(l, j);
    Cell& c = cell(j, l);
    const bool send = task.kind == schedule::TaskKind::kSend;
    const std::size_t h = static_cast<std::size_t>(spec_.hidden), k = static_cast<std::size_t>(spec_.top_k);
    const std::size_t slots = k + static_cast<std::size_t>(spec_.shared_experts);
    if (o.kind == K::kDispatch && !o.backward) {
      if (!send) return ch.receive(step);
      std::vector<std::int32_t> ids(tokens_ * slots);
      std::vector<float> gates(tokens_ * slots, 1.0f);
      for (std::size_t t = 0; t < tokens_; ++t)
        for (std::size_t s2 = 0; s2 < slots; ++s2) {
          const bool routed = s2 < k;
          ids[t * slots + s2] = routed ? c.topk(static_cast<Eigen::Index>(t), static_cast<Eigen::Index>(s2))
                                       : spec_.experts + static_cast<int>(s2 - k);
          if (routed) gates[t * slots + s2] = static_cast<float>(c.gates(static_cast<Eigen::Index>(t), static_cast<Eigen::Index>(s2)));
        }
      ch.dispatch(step, {c.tokens.data(), tokens_ * h}, ids, gates);
      c.tokens = Matrix();
      return;
    }
    if (o.kind == K::kReturn && !o.backward) {
      if (send) return ch.send_return();
      c.y.resize(static_cast<Eigen::Index>(tokens_), spec_.hidden);
      ch.combine({c.y.data(), tokens_ * h});
      const Matrix next = c.residual + c.y;  // as colocated: residual + y
      c.residual = c.y = Matrix();
      return hand_on(j, l, next);
    }
    if (o.kind == K::kDispatch) {  // backward: dL/dy towards the experts
      if (!send) return ch.receive_grad();
      if (last(l)) (void)head_gradient(j);
      return ch.backward_dispatch({c.dy.data(), tokens_ * h});
    }
    if (send) return ch.send_grad();
    std::vector<float> d_gates(tokens_ * slots);
    c.d_tokens.resize(static_cast<Eigen::Index>(tokens_), spec_.hidden);
    ch.backward_combine({c.d_tokens.data(), tokens_ * h}, d_gates);
    c.d_gates.resize(static_cast<Eigen::Index>(tokens_), spec_.top_k);
    for (std::size_t t = 0; t < tokens_; ++t)
      for (std::size_t s2 = 0; s2 < k; ++s2)
        c.d_gates(static_cast<Eigen::Index>(t), static_cast<Eigen::Index>(s2)) = static_cast<T>(d_gates[t * slots + s2]);
  }

  /// Residual-stream hand-off between attention workers: rank i of one to rank i of the
  /// other, over the world (sends complete by the end of the step).
  void hand_off(const schedule::Task& task) {
    const int peer = world_rank(task.peer, index_);
    const int tag = task.op % world_.max_tag();
    if (task.kind == schedule::TaskKind::kSend) {
      pending_sends_.push_back(world_.isend(peer, tag, pack(task.op)));
      return;
    }
    auto& buf = wire_[task.op];
    buf.resize(payload_bytes(task.op));
    auto req = world_.irecv(peer, tag, std::span<std::byte>(buf));
    if (!world_.wait(req, comm::deadline_after(options_.executor.timeout))) {
      world_.cancel(req);
      fail<TimeoutError>("hand-off " + schedule::describe_op(schedule_, task.op) + " from world rank " +
                             std::to_string(peer),
                         "no data", "arrival within the deadline (is the peer dead, silent or failed?)");
    }
    unpack(task.op);
  }

  /// After the program: hand-off sends complete, channels flushed, and the attention
  /// workers' replicas sum their gradients (in rank order, the same bits on every rank).
  void finish_channel_step() {
    const auto deadline = comm::deadline_after(options_.executor.timeout);
    for (auto& r : pending_sends_)
      if (!world_.wait(r, deadline))
        fail<TimeoutError>("hand-off send of step " + std::to_string(step_ + 1), "pending",
                           "completion within the deadline (is the receiving rank dead?)");
    pending_sends_.clear();
    wire_.clear();
    for (auto& [key, ch] : channels_) ch->flush();
    if (!attention_ || m_ranks_ == 1) return;
    std::vector<T> mine;
    for (const auto& sl : attention_->parameters().slots())
      mine.insert(mine.end(), sl.grad->data(), sl.grad->data() + sl.grad->size());
    const auto all = comm::all_gather(*attention_group_, std::as_bytes(std::span(mine)), attention_group_->max_tag(),
                                      deadline, "attention gradients");
    std::vector<T> sum(mine.size()), part(mine.size());
    for (std::size_t r = 0; r < all.size(); ++r) {
      expect(all[r].size() == mine.size() * sizeof(T), "attention gradient bytes of rank " + std::to_string(r),
             all[r].size(), "the same on every replica");
      std::memcpy(part.data(), all[r].data(), all[r].size());
      for (std::size_t i = 0; i < sum.size(); ++i) sum[i] = r == 0 ? part[i] : sum[i] + part[i];
    }
    std::size_t at = 0;
    for (auto& sl : attention_->parameters().slots()) {
      std::memcpy(sl.grad->data(), sum.data() + at, static_cast<std::size_t>(sl.grad->size()) * sizeof(T));
      at += static_cast<std::size_t>(sl.grad->size());
    }
  }

  /// True on the rank that reports this rank's parameters (one replica per A worker).
  bool reports_parameters() const { return !is_attention() || index_ == 0; }

  // ---- agreement across workers ------------------------------------------------------

  /// Every worker learns the sorted list of all parameter names (the canonical order of
  /// the gradient norm) and where its own slots sit in it.
  void agree_on_parameters() {
    std::string mine;
    std::int64_t count = 0;
    if (reports_parameters())
      for_each_parameter_set([&](auto& ps) {
        count += ps.count();
        for (const auto& s : ps.slots()) mine += s.name + '\n';
      });
    mine += std::to_string(count);
    const auto all = comm::all_gather(world_, std::as_bytes(std::span(mine.data(), mine.size())), world_.max_tag(),
                                      comm::deadline_after(options_.executor.timeout), "parameter names");
    std::vector<std::string> names;
    total_parameters_ = 0;
    for (const auto& bytes : all) {
      std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
      std::size_t start = 0;
      for (std::size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1)
        names.push_back(text.substr(start, nl - start));
      total_parameters_ += std::stoll(text.substr(start));
    }
    std::sort(names.begin(), names.end());
    for (std::size_t i = 1; i < names.size(); ++i)
      expect(names[i] != names[i - 1], "parameter name", names[i], "held by exactly one worker");
    names_ = std::move(names);
  }

  /// Losses per (micro-batch, layer) and gradient square sums per parameter, each with
  /// exactly one contributing worker, so the sum over workers is exact; then the
  /// statistics in the colocated trainer's summation order.
  StepStats gather_stats() {
    // Indexed by the colocated run's micro-batch q = mb * M + rank in worker (M * m of them).
    const int m = train_.micro_batches * m_ranks_, L = spec_.layers;
    const std::size_t cells = static_cast<std::size_t>(m) * static_cast<std::size_t>(L);
    std::vector<double> v(static_cast<std::size_t>(m) + 2 * cells + names_.size(), 0.0);
    auto q_of = [&](int mb) { return static_cast<std::size_t>(mb * m_ranks_ + index_); };
    if (attention_ && attention_->layout().head)
      for (int j = 0; j < train_.micro_batches; ++j) v[q_of(j)] = static_cast<double>(loss_[static_cast<std::size_t>(j)]);
    if (attention_)
      for (int j = 0; j < train_.micro_batches; ++j)
        for (int l = 0; l < L; ++l) {
          const std::size_t i = q_of(j) * static_cast<std::size_t>(L) + static_cast<std::size_t>(l);
          v[static_cast<std::size_t>(m) + i] = cell(j, l).aux;
          v[static_cast<std::size_t>(m) + cells + i] = cell(j, l).z;
        }
    if (reports_parameters())
      for_each_parameter_set([&](auto& ps) {
        for (const auto& s : ps.slots()) {
          const auto at = std::lower_bound(names_.begin(), names_.end(), s.name) - names_.begin();
          v[static_cast<std::size_t>(m) + 2 * cells + static_cast<std::size_t>(at)] =
              std::decay_t<decltype(ps)>::grad_square_sum(s);
        }
      });
    const auto all = comm::all_gather(world_, std::as_bytes(std::span(v)), world_.max_tag(),
                                      comm::deadline_after(options_.executor.timeout), "step statistics");
    std::vector<double> sum(v.size(), 0.0);
    for (const auto& bytes : all) {  // exactly one rank contributes each entry: the sum is exact
      expect(bytes.size() == v.size() * sizeof(double), "step statistics bytes", bytes.size(), "the same on every worker");
      std::vector<double> x(v.size());
      std::memcpy(x.data(), bytes.data(), bytes.size());
      for (std::size_t i = 0; i < v.size(); ++i) sum[i] += x[i];
    }
    StepStats st;  // in the colocated trainer's order
    for (int q = 0; q < m; ++q) {
      st.loss += sum[static_cast<std::size_t>(q)] / m;
      for (int l = 0; l < L; ++l) {
        const std::size_t i = static_cast<std::size_t>(q) * static_cast<std::size_t>(L) + static_cast<std::size_t>(l);
        st.aux_loss += sum[static_cast<std::size_t>(m) + i];
        st.z_loss += sum[static_cast<std::size_t>(m) + cells + i];
      }
    }
    st.aux_loss /= m;
    st.z_loss /= m;
    std::vector<std::pair<std::string, double>> sq;
    for (std::size_t k = 0; k < names_.size(); ++k) sq.emplace_back(names_[k], sum[static_cast<std::size_t>(m) + 2 * cells + k]);
    st.grad_norm = canonical_grad_norm(std::move(sq));
    return st;
  }

  ModelSpec spec_;
  TrainOptions train_;
  DisaggregatedOptions options_;
  Transport& world_;
  int p_ = 1, rank_ = 0;
  int m_ranks_ = 1, n_ranks_ = 1;  // ranks per attention / FFN worker
  int worker_ = 0, index_ = 0;     // this rank's worker and its index there
  bool channel_ = false;           // M2NChannel exchange (else direct messages)
  std::optional<Transport> pair_group_, attention_group_;
  std::map<std::pair<int, int>, std::unique_ptr<comm::M2NChannel<Transport, T>>> channels_;  // (layer, mb)
  std::vector<typename Transport::Request> pending_sends_;  // channel mode: hand-offs between A workers
  std::optional<AttentionStage<Attention>> attention_;
  std::optional<ExpertStage<Experts>> experts_;
  std::vector<std::string> names_;
  std::int64_t total_parameters_ = 0;
  std::int64_t step_ = 0;
  bool failed_ = false;
  // The schedule, built for one micro-batch size.
  int sequences_per_micro_batch_ = -1;
  schedule::Schedule schedule_;
  schedule::LoweredSchedule lowered_;
  // Per step.
  TokenBatch batch_;
  std::size_t tokens_ = 0;
  std::vector<Cell> cells_;
  std::vector<Matrix> final_;
  std::vector<T> loss_;
  std::map<int, std::vector<std::byte>> wire_;  // comm stream only
  std::vector<MeasuredOp> timeline_;
};

}  // namespace disagmoe::runtime
