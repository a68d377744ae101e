// SPDX-License-Identifier: Apache-2.0
/// @file disaggregated_trainer.hpp
/// `DisaggregatedTrainer`: AF-Pipe training on real workers (DisagMoE, arXiv 2605.11005):
/// p attention workers A_i of M ranks each and p FFN workers F_i of N ranks each, layer l's
/// attention on A_{l mod p} and its experts on F_{l mod p}, driven by the very op lists
/// that `schedule::AFPipe` emits for the simulator, lowered to per-worker programs
/// (schedule/lowering.hpp) and run on three streams per rank (runtime/worker_executor.hpp)
/// over any `comm::transport` (loopback threads, MPI processes, NCCL) whose ranks are the A
/// workers' (A_0's M first) then the F workers'. On a transport that matches by issue
/// order per peer (NCCL: `comm::matches_tags` false) the channels travel on lanes
/// (runtime/channel_exchange.hpp) and every message on the world is posted by both ends
/// at one position of the lowering's agreed order (`post_beside_receives`). Every rank calls the same functions with
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
///    so that F_l -> A_{l+1} (fused combine + dispatch) carries the next layer's input
///    (with one pair A_{l+1} = A_l keeps the residual: the fused transfer is a return);
///  - N2M return F_l -> A_l: the combined expert output [T, d] (A_l adds the residual);
///  - backward: dL/dy [T, d] towards F_l; dL/dx [T, d] and dL/dgate [T, k] back to A_l
///    (with stage alignment and p > 1 also dL/dy, which A_l needs for the residual branch);
///  - residual-stream hand-offs between attention workers where the schedule has them.
/// Channel exchange: `comm::M2NChannel` per (MoE layer, micro-batch) between the M ranks
/// of A_i (each a share of the micro-batch) and the N ranks of F_i (experts by
/// `DisaggregatedOptions::expert_rank`). With stage alignment the channel hands off: F_l
/// returns to the M ranks of A_{l+1}, which combine and later send dL/dy to F_l; the
/// residual stream goes beside it, rank a of A_l to rank a of A_{l+1} (forward: the
/// residual; backward: dL/dy for the residual branch). With one pair A_{l+1} = A_l and
/// the fused transfer is a plain return.
///
/// Redundant experts (`DisaggregatedOptions::expert_replicas`, DeepSeek's EPLB): an F-rank
/// holding a copy of an expert holds its weights (the same initial values as the
/// primary's), the A-ranks serve each token-expert pair from one copy (comm::ReplicaRouting,
/// through runtime/channel_exchange.hpp), and after the backward the copies' gradients are
/// summed in rank order, so every copy takes the same optimizer step. The primary alone
/// reports an expert (gradient norm, gathered parameters).
///
/// Colocated baselines (`DisaggregatedOptions::schedule` 1F1B or A2A overlap, the op lists
/// of `schedule::OneFOneB` / `schedule::A2AOverlap`): p pipeline stages of G ranks, every
/// rank holding its stage's attention (a data-parallel replica) and 1/G of its experts;
/// each all-to-all is both ends of the same channel on every rank of the stage
/// (runtime/channel_exchange.hpp), so the baselines and AF-Pipe run the same kernels.
/// The loss head runs on the worker holding the last layer, when the backward first needs
/// its gradient (the schedule has no op for it: with an MoE last layer that is the comm
/// stream, as it posts dL/dy; measured as part of that transfer); its weight gradient
/// accumulates with that layer's backward (in micro-batch order).
#pragma once

#include <disagmoe/comm/all_gather.hpp>
#include <disagmoe/comm/transport.hpp>
#include <disagmoe/error.hpp>
#include <disagmoe/runtime/channel_exchange.hpp>
#include <disagmoe/runtime/colocated_trainer.hpp>
#include <disagmoe/runtime/disaggregated_options.hpp>
#include <disagmoe/runtime/parameter_wire.hpp>
#include <disagmoe/runtime/rank_agreement.hpp>
#include <disagmoe/runtime/rank_timelines.hpp>
#include <disagmoe/runtime/worker_executor.hpp>
#include <disagmoe/runtime/world_messages.hpp>
#include <disagmoe/schedule/afpipe.hpp>
#include <disagmoe/schedule/lowering.hpp>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <span>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace disagmoe::runtime {

/// See the file comment. One object per rank; `world` must outlive it. `Backend` holds
/// the M2NChannel exchange's buffers and runs its kernels (comm/backend.hpp).
template <attention_compute Attention, expert_compute Experts, comm::transport Transport,
          comm::backend Backend = host::Backend>
class DisaggregatedTrainer {
 public:
  using T = typename Attention::scalar_type;
  static_assert(std::is_same_v<T, typename Experts::scalar_type>,
                "attention and expert computes must use one scalar type");
  using Matrix = model::Matrix<T>;

  /// Collective over `world`: builds this rank's stage and agrees on the parameter list.
  DisaggregatedTrainer(Attention attention, Experts experts, const ModelSpec& spec, TrainOptions train,
                       DisaggregatedOptions options, Transport& world, StageOptions stage = {})
      : spec_(spec), train_(train), options_(options), world_(world), ranks_(options) {
    validate(spec_);
    validate(train_);
    validate(options_, spec_, world_.size());
    p_ = options_.pairs;
    m_ranks_ = options_.attention_ranks;
    n_ranks_ = options_.ffn_ranks;
    channel_ = uses_channel(options_);
    rank_ = world_.rank();
    worker_ = ranks_.worker_of(rank_);
    index_ = ranks_.index_of(rank_);
    layer_worker_ = attention_workers(build_schedule(spec_, options_, train_.micro_batches, sizeof(T)));
    const int mine = ranks_.colocated ? worker_ : worker_ % p_;  // the attention worker of my layers
    std::vector<int> layers;
    for (int l = 0; l < spec_.layers; ++l)
      if (layer_worker_[static_cast<std::size_t>(l)] == mine) layers.push_back(l);
    if (is_attention()) {
      AttentionStageLayout layout;
      layout.layers = layers;
      layout.embedding = layer_worker_.front() == mine;
      layout.head = layer_worker_.back() == mine;
      attention_.emplace(std::move(attention), spec_, std::move(layout), stage);
    }
    if (ranks_.colocated || !is_attention()) {
      ExpertStageLayout layout;
      for (int l : layers)
        if (spec_.is_moe_layer(l)) {
          std::vector<int> ids;  // this F-rank's experts of layer l, ascending (routed, then shared), copies included
          const auto hosts = expert_hosts(options_, spec_, l);
          for (int e = 0; e < spec_.experts + spec_.shared_experts; ++e) {
            const auto& h = hosts[static_cast<std::size_t>(e)];
            if (std::find(h.begin(), h.end(), index_) != h.end()) ids.push_back(e);
          }
          layout.layers.push_back(l);
          layout.experts.push_back(std::move(ids));
        }
      experts_.emplace(std::move(experts), spec_, std::move(layout), stage);
      mark_copies();
    }
    if (channel_) {
      std::vector<std::vector<std::vector<std::int32_t>>> hosts;
      for (int l = 0; l < spec_.layers; ++l) hosts.push_back(expert_hosts(options_, spec_, l));
      std::vector<bool> handed(static_cast<std::size_t>(spec_.layers));
      for (int l = 0; l < spec_.layers; ++l) handed[static_cast<std::size_t>(l)] = handed_off(l);
      exchange_.emplace(world_, ranks_, layer_worker_, handed, spec_, train_.micro_batches, std::move(hosts),
                        options_.executor.timeout);
    }
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
        post_beside_receives(comm_position(0));
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
      messages_.cancel();  // before their buffers go
      wire_.clear();
      if (attention_) attention_->release_all();
      if (experts_) experts_->release_all();
      cells_.clear();
      throw;
    }
  }

  /// This rank's worker index in the schedule (0..p-1: A_i, p..2p-1: F_{i-p}; colocated:
  /// the pipeline stage).
  [[nodiscard]] int worker() const { return worker_; }
  /// This rank's index among its worker's ranks.
  [[nodiscard]] int rank_in_worker() const { return index_; }
  /// True where this rank holds an attention stage (every rank of a colocated baseline).
  [[nodiscard]] bool is_attention() const { return ranks_.colocated || worker_ < p_; }
  /// The schedule of the last step (built for its micro-batch size).
  [[nodiscard]] const schedule::Schedule& schedule() const { return schedule_; }
  /// Measured start and end of every op this worker ran in the last step (seconds).
  [[nodiscard]] const std::vector<MeasuredOp>& timeline() const { return timeline_; }
  /// The lowered schedule of the last step.
  [[nodiscard]] const schedule::LoweredSchedule& lowered() const { return lowered_; }
  /// Every rank's timeline of the last step (collective), [worker][rank in worker][op],
  /// as each rank measured it (rank_timelines.hpp).
  RankTimelines gather_rank_timelines() {
    const auto all = comm::all_gather(world_, std::as_bytes(std::span(timeline_)), world_.max_tag(),
                                      comm::deadline_after(options_.executor.timeout), "timelines");
    RankTimelines out(static_cast<std::size_t>(ranks_.workers()));
    for (int w = 0; w < ranks_.workers(); ++w) {
      const int members = w < p_ ? m_ranks_ : n_ranks_;
      for (int i = 0; i < members; ++i) {
        const auto& bytes = all[static_cast<std::size_t>(world_rank(w, i))];
        expect(bytes.size() == timeline_.size() * sizeof(MeasuredOp), "timeline bytes of worker " + std::to_string(w),
               bytes.size(), "one entry per op on every worker");
        auto& t = out[static_cast<std::size_t>(w)].emplace_back(timeline_.size());
        std::memcpy(t.data(), bytes.data(), bytes.size());
      }
    }
    return out;
  }
  /// Every worker's timeline of the last step (collective), indexed [worker][op]: its
  /// ranks' timelines merged as the simulator's calibration reads them (merged_timelines:
  /// the first rank's, an all-to-all from its last rank's entry to its last rank's exit,
  /// each op's CPU time its slowest rank's).
  std::vector<std::vector<MeasuredOp>> gather_timelines() { return merged_timelines(schedule_, gather_rank_timelines()); }
  /// Collective: the token-expert rows the experts of every FFN rank (colocated: of every
  /// rank) computed in the last step's forward, routed and shared, [FFN worker][rank]: the
  /// expert-parallel load a placement and its replicas (DeepSeek's EPLB) balance.
  std::vector<std::vector<std::int64_t>> gather_expert_rows() {
    const auto all = comm::all_gather(world_, std::as_bytes(std::span(&expert_rows_, 1)), world_.max_tag(),
                                      comm::deadline_after(options_.executor.timeout), "expert rows");
    std::vector<std::vector<std::int64_t>> out(static_cast<std::size_t>(p_));
    for (int i = 0; i < p_; ++i)
      for (int r = 0; r < n_ranks_; ++r) {
        const auto& bytes = all[static_cast<std::size_t>(world_rank(ranks_.colocated ? i : p_ + i, r))];
        expect(bytes.size() == sizeof(std::int64_t), "expert rows bytes of rank " + std::to_string(r), bytes.size(),
               "one count per rank");
        std::int64_t rows = 0;
        std::memcpy(&rows, bytes.data(), sizeof rows);
        out[static_cast<std::size_t>(i)].push_back(rows);
      }
    return out;
  }
  /// Collective: how the last step's forward routed its tokens, from the A-ranks' own
  /// routers: the top-k expert ids of every MoE layer flattened [token][MoE layer][slot],
  /// tokens in batch order, on every rank (what `ColocatedTrainer::routing` returns for
  /// the same batch and model). The routing stream of online re-placement
  /// (online_expert_placement.hpp). ConfigError before the first step.
  std::vector<std::int32_t> gather_routing() {
    expect(!cells_.empty(), "gather_routing", "no step", "a trainer that has run a step");
    const int m = train_.micro_batches, k = spec_.top_k;
    std::vector<int> ordinal(static_cast<std::size_t>(spec_.layers), -1);  // MoE layer index of each layer
    int moe_layers = 0;
    for (int l = 0; l < spec_.layers; ++l)
      if (moe(l)) ordinal[static_cast<std::size_t>(l)] = moe_layers++;
    // Worker w's MoE layers in order, micro-batches, tokens, slots: both ends walk this.
    auto walk = [&](int w, auto&& visit) {
      for (int l = 0; l < spec_.layers; ++l)
        if (moe(l) && attention_worker(l) == w)
          for (int j = 0; j < m; ++j)
            for (std::size_t t = 0; t < tokens_; ++t)
              for (int q = 0; q < k; ++q) visit(l, j, t, q);
    };
    std::vector<std::int32_t> mine;
    if (is_attention())
      walk(worker_, [&](int l, int j, std::size_t t, int q) {
        mine.push_back(static_cast<std::int32_t>(cell(j, l).topk(static_cast<Eigen::Index>(t), q)));
      });
    const auto all = comm::all_gather(world_, std::as_bytes(std::span(mine)), world_.max_tag(),
                                      comm::deadline_after(options_.executor.timeout), "routing");
    const auto stride = static_cast<std::size_t>(moe_layers) * static_cast<std::size_t>(k);
    std::vector<std::int32_t> out(static_cast<std::size_t>(m) * static_cast<std::size_t>(m_ranks_) * tokens_ * stride);
    std::vector<std::int32_t> ids;
    for (int w = 0; w < p_; ++w)
      for (int i = 0; i < m_ranks_; ++i) {
        const auto& bytes = all[static_cast<std::size_t>(world_rank(w, i))];
        std::size_t expected = 0;
        walk(w, [&](int, int, std::size_t, int) { ++expected; });
        expect(bytes.size() == expected * sizeof(std::int32_t), "routing bytes of attention rank " + std::to_string(i),
               bytes.size(), "top_k ids of its tokens on every MoE layer of its worker");
        ids.resize(expected);
        if (expected > 0) std::memcpy(ids.data(), bytes.data(), bytes.size());
        std::size_t pos = 0;
        walk(w, [&](int l, int j, std::size_t t, int q) {  // the colocated micro-batch j * M + i
          const std::size_t token = (static_cast<std::size_t>(j) * static_cast<std::size_t>(m_ranks_) +
                                     static_cast<std::size_t>(i)) * tokens_ + t;
          out[token * stride + static_cast<std::size_t>(ordinal[static_cast<std::size_t>(l)]) * static_cast<std::size_t>(k) +
              static_cast<std::size_t>(q)] = ids[pos++];
        });
      }
    return out;
  }

  /// Collective over the world both trainers share: this trainer's parameters, AdamW
  /// moments and step count become `from`'s, which may split the same model another way
  /// (another expert placement: moving experts after online re-placement is this copy).
  /// The whole model travels through one all-gather. ConfigError unless every parameter
  /// of this rank is found in `from`'s model.
  void take_state(DisaggregatedTrainer& from) {
    std::vector<ParameterSet<T>*> mine;
    for_each_parameter_set([&](auto& ps) { mine.push_back(&ps); });
    from.gather_parameters(mine);
    step_ = from.step_;
  }

  /// The options the trainer was built with.
  [[nodiscard]] const DisaggregatedOptions& options() const { return options_; }
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
    for_each_reported_slot([&](const auto& s) { append_slot_bytes(s, mine); });
    const auto all = comm::all_gather(world_, std::span<const std::byte>(mine), world_.max_tag(),
                                      comm::deadline_after(options_.executor.timeout), "parameters");
    if (into.empty()) return;
    std::size_t filled = 0, slots = 0;
    for (const auto& bytes : all) filled += copy_parameter_bytes<T>(bytes, into);
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
    std::size_t started = 0;  // tasks start strictly in program order
    void compute(int op) { t.run_compute(op); }
    void start(const schedule::Task& task) {
      t.start_exchange(task);
      t.post_beside_receives(t.comm_position(++started));
    }
    bool progress(const schedule::Task& task) { return t.progress_exchange(task); }
    /// Only where the channels post within the call (the host back end's kernels finish
    /// in it): a device back end holds a send behind its kernels until the channel's next
    /// call, which may be another op's (MeasuredOp::bytes stays -1 there).
    std::int64_t bytes_posted() const requires std::same_as<Backend, host::Backend> {
      return t.bytes_posted_;
    }
  };

  // ---- layout -----------------------------------------------------------------

  /// F-rank of expert e at layer l (routed: the placement, or contiguous blocks; shared: e - E mod N).
  int expert_rank_of(int l, int e) const { return runtime::expert_rank_of(options_, spec_, l, e); }
  /// World rank of rank `i` of schedule worker `w`.
  int world_rank(int w, int i) const { return ranks_.world_rank(w, i); }
  int attention_worker(int l) const { return layer_worker_[static_cast<std::size_t>(l)]; }
  /// The worker running each layer's attention in `s` (AF-Pipe: l mod p; 1F1B: contiguous
  /// stages; A2A overlap: looped chunks), the same at every micro-batch size.
  static std::vector<int> attention_workers(const schedule::Schedule& s) {
    std::vector<int> w;
    for (const auto& o : s.ops)
      if (o.kind == schedule::OpKind::kAttentionForward) {
        if (static_cast<int>(w.size()) <= o.layer) w.resize(static_cast<std::size_t>(o.layer) + 1, -1);
        w[static_cast<std::size_t>(o.layer)] = o.worker;
      }
    return w;
  }
  bool moe(int l) const { return spec_.is_moe_layer(l); }
  bool last(int l) const { return l + 1 == spec_.layers; }
  /// Stage alignment on MoE layer l: F_l sends the next layer's input to A_{l+1}.
  bool fused(int l) const { return !ranks_.colocated && moe(l) && !last(l) && options_.policy.fuse_combine_dispatch; }
  /// Fused layer l whose next layer runs on another attention worker: the residual (and
  /// backward dL/dy) travels, through F_l (direct) or beside the channel (its hand-off).
  /// With one pair A_{l+1} = A_l keeps both, and the fused transfer is a plain return.
  bool residual_travels(int l) const { return fused(l) && attention_worker(l + 1) != attention_worker(l); }
  /// Channel exchange: the residual travels beside the channel, which hands off to A_{l+1}.
  bool handed_off(int l) const { return channel_ && residual_travels(l); }
  Cell& cell(int mb, int l) { return cells_[static_cast<std::size_t>(mb) * static_cast<std::size_t>(spec_.layers) + static_cast<std::size_t>(l)]; }

  template <class F>
  void for_each_parameter_set(F&& f) {
    if (attention_) f(attention_->parameters());
    if (experts_) f(experts_->parameters());
  }
  /// The parameter slots this rank reports for the whole model: one replica of each
  /// attention worker (its first rank), every rank's own experts but not its copies of
  /// another rank's (redundant experts: the primary reports them).
  template <class F>
  void for_each_reported_slot(F&& f) {
    if (attention_ && index_ == 0)
      for (const auto& s : attention_->parameters().slots()) f(s);
    if (experts_) {
      const auto& slots = experts_->parameters().slots();
      for (std::size_t k = 0; k < slots.size(); ++k)
        if (!copy_slot_[k]) f(slots[k]);
    }
  }

  /// Marks the slots of the expert stage that hold a copy of an expert whose primary is
  /// on another F-rank.
  void mark_copies() {
    copy_slot_.assign(experts_->parameters().slots().size(), 0);
    const auto& layout = experts_->layout();
    for (std::size_t i = 0; i < layout.layers.size(); ++i)
      for (const int e : layout.experts[i])
        if (expert_rank_of(layout.layers[i], e) != index_) {
          const auto [first, last] = experts_->expert_slots(layout.layers[i], e);
          std::fill(copy_slot_.begin() + static_cast<std::ptrdiff_t>(first),
                    copy_slot_.begin() + static_cast<std::ptrdiff_t>(last), 1);
        }
  }

  // ---- per step -----------------------------------------------------------------

  const schedule::WorkerProgram& program() const { return lowered_.workers[static_cast<std::size_t>(worker_)]; }

  void prepare(const TokenBatch& batch) {
    const int m = train_.micro_batches;
    const int per = batch.sequences / m;
    if (per != sequences_per_micro_batch_) {  // every rank builds the same schedule
      ModelSpec mb_spec = spec_;
      mb_spec.micro_batch = per;  // the problem splits it over the A-ranks
      schedule_ = build_schedule(mb_spec, options_, m, sizeof(T));
      expect(attention_workers(schedule_) == layer_worker_, "layers per worker of the rebuilt schedule",
             schedule::describe_op(schedule_, 0), "the layout the stages were built for");
      lowered_ = schedule::lower(schedule_);
      combine_dispatch_.assign(2 * static_cast<std::size_t>(m) * static_cast<std::size_t>(spec_.layers), -1);
      for (std::size_t id = 0; id < schedule_.ops.size(); ++id) {
        const schedule::Op& o = schedule_.ops[id];
        if (o.kind == schedule::OpKind::kCombineDispatch)
          combine_dispatch_[combine_dispatch_index(o.micro_batch, o.layer, o.backward)] = static_cast<int>(id);
      }
      sequences_per_micro_batch_ = per;
      beside_ = beside_receives();
      check_same_program();
    }
    beside_next_ = 0;
    tokens_ = static_cast<std::size_t>(per / m_ranks_) * static_cast<std::size_t>(spec_.seq_len);
    expert_rows_ = 0;
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
    os << to_string(options_.schedule) << ' ' << options_.a2a_overlap.virtual_stages << ' ' << p_ << ' ' << m_ranks_
       << ' ' << n_ranks_ << ' ' << options_.policy.fuse_combine_dispatch << ' '
       << options_.policy.group_size << ' ' << options_.policy.max_in_flight << ' ' << train_.micro_batches << ' '
       << sequences_per_micro_batch_ << ' ' << spec_.layers << ' ' << spec_.hidden << ' ' << spec_.experts << ' '
       << spec_.shared_experts << ' ' << spec_.top_k << ' ' << spec_.seq_len << ' ' << spec_.vocab << ' ' << channel_;
    for (int l = 0; l < spec_.layers; ++l)
      for (const auto& h : expert_hosts(options_, spec_, l)) {
        os << ' ';
        for (const auto r : h) os << r << ',';
      }
    const std::string text = os.str();
    check_same_fingerprints<Transport, 2>(
        world_,
        {comm::ChannelFingerprint::hash(text.data(), text.size()),
         comm::ChannelFingerprint::hash(lowered_.position.data(), lowered_.position.size() * sizeof(int))},
        {FingerprintMeaning{"layout and model fingerprint",
                            "every rank runs the same pairs, ranks, policy, micro-batches, batch and model"},
         FingerprintMeaning{"comm order fingerprint",
                            "the lowering's simulation must agree bit for bit: one build on every rank"}},
        options_.executor.timeout);
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
    // hand-off, or stays here (where the fused backward dispatch sends it from).
    if (attention_worker(l - 1) == worker_ && !residual_travels(l - 1)) cell(j, l - 1).dy = std::move(dh);
    else c.dh = std::move(dh);
  }

  void expert_forward(int j, int l, Cell& c) {
    if (channel_) {
      expert_rows_ += exchange_->expert_forward(*experts_, l, j);
      return;
    }
    c.dispatch.emplace(c.topk, spec_.experts, spec_.shared_experts);
    Matrix rows;
    group_rows(*c.dispatch, c.tokens, rows);
    c.tokens = Matrix();
    expert_rows_ += rows.rows();
    experts_->forward(l, j, c.dispatch->offsets, rows, c.expert_out);
    combine_outputs(*c.dispatch, c.expert_out, c.gates, c.y);
    if (residual_travels(l)) {  // the next layer's input, as colocated: residual + y
      c.y = c.residual + c.y;
      c.residual = Matrix();
    }
  }

  void expert_backward(int j, int l, Cell& c) {
    if (channel_) return exchange_->expert_backward(*experts_, l, j);
    Matrix d_out, d_rows;
    combine_backward(*c.dispatch, c.expert_out, c.gates, c.dy, d_out, c.d_gates);
    experts_->backward_input(l, j, d_out, d_rows);
    combine_input_gradients(*c.dispatch, d_rows, c.d_tokens);
    c.expert_out = c.gates = Matrix();
    c.dispatch.reset();
  }

  // ---- messages -------------------------------------------------------------------

  /// The layer whose cells a transfer belongs to: a backward hand-off carries dL/d(output
  /// of layer l) from layer l + 1's worker; AF-Pipe's op names l, a pipeline baseline's
  /// names the sending stage's first layer, l + 1.
  int transfer_layer(const schedule::Op& o) const {
    return ranks_.colocated && o.backward && o.kind == schedule::OpKind::kSend ? o.layer - 1 : o.layer;
  }

  /// The matrices (in order) that transfer `id` carries; `receiving` selects the
  /// receiver's cells. Both ends list the same shapes, so sizes agree.
  std::vector<std::pair<void*, std::size_t>> segments(int id, bool receiving) {
    const schedule::Op& o = schedule_.ops[static_cast<std::size_t>(id)];
    const int l = transfer_layer(o), j = o.micro_batch;
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
          if (residual_travels(l)) s.push_back(m(c.residual, td));
          return s;
        }
        case K::kReturn: return {m(c.y, td)};
        case K::kCombineDispatch: return {m(receiving && residual_travels(l) ? cell(j, l + 1).h : c.y, td)};
        default: break;
      }
    } else {
      switch (o.kind) {
        case K::kSend:  // A_{l+1} -> A_l: dL/d(output of layer l)
          return {m(receiving ? c.dy : cell(j, l + 1).dh, td)};
        case K::kDispatch: return {m(c.dy, td)};  // A_l -> F_l (A_l holds dy of layer l)
        case K::kCombineDispatch: return {m(receiving || !residual_travels(l) ? c.dy : cell(j, l + 1).dh, td)};
        case K::kReturn: {
          std::vector<std::pair<void*, std::size_t>> s{m(c.d_tokens, td), m(c.d_gates, tk * sizeof(T))};
          if (residual_travels(l)) s.push_back(m(c.dy, td));
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
      if (o.kind == schedule::OpKind::kSend || o.kind == schedule::OpKind::kCombineDispatch)
        cell(o.micro_batch, transfer_layer(o) + 1).dh = Matrix();
      if (o.kind == schedule::OpKind::kReturn) c.d_tokens = c.d_gates = c.dy = Matrix();
      return;
    }
    if (o.kind == schedule::OpKind::kSend) c.next = Matrix();
    if (o.kind == schedule::OpKind::kDispatch) {
      c.tokens = Matrix();
      if (residual_travels(o.layer)) c.residual = Matrix();
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
    const bool plain_return = o.kind == schedule::OpKind::kReturn ||
                              (o.kind == schedule::OpKind::kCombineDispatch && !residual_travels(o.layer));
    if (!o.backward && plain_return) {  // A_l: the layer's output
      Cell& c = cell(o.micro_batch, o.layer);
      const Matrix next = c.residual + c.y;  // as colocated: residual + y
      c.residual = c.y = Matrix();
      hand_on(o.micro_batch, o.layer, next);
    }
  }

  // ---- the M2NChannel exchange (groups of ranks) ------------------------------------

  /// The four exchanges of an MoE layer and micro-batch; each has a sending end (its
  /// channel call posts) and a receiving end (its try_ call is polled until done).
  enum class Phase { kDispatch, kReturn, kGradDispatch, kGradReturn };

  /// Starts a comm task of the channel mode, in the agreed order: the sending end of an
  /// exchange posts its rows (an all-to-all's too: this rank is both ends), a hand-off
  /// posts its transfer.
  void start_exchange(const schedule::Task& task) {
    using K = schedule::OpKind;
    const schedule::Op& o = schedule_.ops[static_cast<std::size_t>(task.op)];
    if (o.kind == K::kAllReduce) return;  // the data-parallel reduce follows the step
    if (o.kind == K::kSend) return start_hand_off(task);
    if (o.kind == K::kAllToAll || task.kind == schedule::TaskKind::kSend) (void)exchange(o, phase_of(task), true);
  }

  /// True once a started task is done: the receiving end polls its channel call.
  bool progress_exchange(const schedule::Task& task) {
    using K = schedule::OpKind;
    const schedule::Op& o = schedule_.ops[static_cast<std::size_t>(task.op)];
    if (o.kind == K::kAllReduce) return true;
    if (o.kind == K::kSend) return progress_hand_off(task);
    if (o.kind != K::kAllToAll && task.kind == schedule::TaskKind::kSend) return true;
    return exchange(o, phase_of(task), false);
  }

  Phase phase_of(const schedule::Task& task) const {
    using K = schedule::OpKind;
    const schedule::Op& o = schedule_.ops[static_cast<std::size_t>(task.op)];
    if (o.kind == K::kAllToAll) {  // colocated EP: the second follows the experts
      const bool second = after_experts(o);
      return o.backward ? (second ? Phase::kGradReturn : Phase::kGradDispatch)
                        : (second ? Phase::kReturn : Phase::kDispatch);
    }
    expect(o.kind == K::kDispatch || o.kind == K::kReturn || o.kind == K::kCombineDispatch,
           "DisaggregatedTrainer transfer", schedule::describe_op(schedule_, task.op),
           "an M2N dispatch, N2M return or fused combine + dispatch");
    if (o.kind == K::kCombineDispatch) return o.backward ? Phase::kGradDispatch : Phase::kReturn;
    return o.kind == K::kDispatch ? (o.backward ? Phase::kGradDispatch : Phase::kDispatch)
                                  : (o.backward ? Phase::kGradReturn : Phase::kReturn);
  }

  /// True for the all-to-all that follows the experts (combine; backward: dL/dx back).
  bool after_experts(const schedule::Op& o) const {
    return std::any_of(o.deps.begin(), o.deps.end(), [&](int d) {
      const auto k = schedule_.ops[static_cast<std::size_t>(d)].kind;
      return k == schedule::OpKind::kExpertForward || k == schedule::OpKind::kExpertBackwardInput;
    });
  }

  /// One end (`send` or receive) of exchange `ph` of op o's layer and micro-batch; true
  /// when that end is done (a send always is, once posted).
  bool exchange(const schedule::Op& o, Phase ph, bool send) {
    using Side = typename ChannelExchange<Transport, T, Backend>::Side;
    const int l = o.layer, j = o.micro_batch;
    const bool from_attention = ph == Phase::kDispatch || ph == Phase::kGradDispatch;
    return exchange_->visit(l, j, send == from_attention ? Side::kAttention : Side::kFfn, [&](auto& ch) {
      const std::int64_t before = ch.bytes_sent();
      const bool done = exchange_on(ch, l, j, ph, send);
      bytes_posted_ += ch.bytes_sent() - before;
      return done;
    });
  }

  template <class Channel>
  bool exchange_on(Channel& ch, int l, int j, Phase ph, bool send) {
    const std::int64_t step = step_ + 1;
    Cell& c = cell(j, l);
    const std::size_t h = static_cast<std::size_t>(spec_.hidden), k = static_cast<std::size_t>(spec_.top_k);
    const std::size_t slots = k + static_cast<std::size_t>(spec_.shared_experts);
    switch (ph) {
      case Phase::kDispatch: {
        if (!send) return ch.try_receive(step);
        std::vector<std::int32_t> ids(tokens_ * slots);
        std::vector<float> gates(tokens_ * slots, 1.0f);
        for (std::size_t t = 0; t < tokens_; ++t)
          for (std::size_t s2 = 0; s2 < slots; ++s2) {
            const bool routed = s2 < k;
            const auto r = static_cast<Eigen::Index>(t), q = static_cast<Eigen::Index>(s2);
            ids[t * slots + s2] = routed ? c.topk(r, q) : spec_.experts + static_cast<int>(s2 - k);
            if (routed) gates[t * slots + s2] = static_cast<float>(c.gates(r, q));
          }
        ch.dispatch(step, {c.tokens.data(), tokens_ * h}, exchange_->serving_copies(l, ids, static_cast<int>(slots)),
                    gates);
        c.tokens = Matrix();
        if (handed_off(l)) send_beside(combine_dispatch_op(j, l, false), attention_worker(l + 1), c.residual);
        return true;
      }
      case Phase::kReturn: {
        if (send) {
          ch.send_return();
          return true;
        }
        c.y.resize(static_cast<Eigen::Index>(tokens_), spec_.hidden);
        if (handed_off(l)) {  // A_{l+1}: the residual from A_l (sent at the dispatch), then the rows
          if (!received_beside(combine_dispatch_op(j, l, false), attention_worker(l), c.residual)) return false;
          if (!ch.try_receive_return(step, {c.y.data(), tokens_ * h})) return false;
        } else if (!ch.try_combine({c.y.data(), tokens_ * h})) {
          return false;
        }
        const Matrix next = c.residual + c.y;  // as colocated: residual + y
        c.residual = c.y = Matrix();
        hand_on(j, l, next);
        return true;
      }
      case Phase::kGradDispatch:  // dL/dy towards the experts
        if (!send) return ch.try_receive_grad();
        if (last(l)) (void)head_gradient(j);
        if (handed_off(l)) {  // on A_{l+1}: dL/dy of layer l is layer l+1's input gradient
          Matrix& dh = cell(j, l + 1).dh;
          ch.backward_dispatch({dh.data(), tokens_ * h});
          send_beside(combine_dispatch_op(j, l, true), attention_worker(l), dh);  // A_l's residual branch
          return true;
        }
        ch.backward_dispatch({c.dy.data(), tokens_ * h});
        return true;
      case Phase::kGradReturn: {
        if (send) {
          ch.send_grad();
          return true;
        }
        if (handed_off(l) && !received_beside(combine_dispatch_op(j, l, true), attention_worker(l + 1), c.dy))
          return false;  // dL/dy from A_{l+1}, sent with its backward dispatch
        d_gates_.resize(tokens_ * slots);
        c.d_tokens.resize(static_cast<Eigen::Index>(tokens_), spec_.hidden);
        if (!ch.try_backward_combine({c.d_tokens.data(), tokens_ * h}, d_gates_)) return false;
        c.d_gates.resize(static_cast<Eigen::Index>(tokens_), spec_.top_k);
        for (std::size_t t = 0; t < tokens_; ++t)
          for (std::size_t s2 = 0; s2 < k; ++s2)
            c.d_gates(static_cast<Eigen::Index>(t), static_cast<Eigen::Index>(s2)) =
                static_cast<T>(d_gates_[t * slots + s2]);
        return true;
      }
    }
    return true;
  }

  /// Residual-stream hand-off between attention workers: rank i of one to rank i of the
  /// other, over the world (sends complete by the end of the step).
  void start_hand_off(const schedule::Task& task) {
    if (task.kind == schedule::TaskKind::kSend)
      post(task.op, world_rank(task.peer, index_), pack(task.op));
    else (void)received_hand_off(task);
  }
  bool progress_hand_off(const schedule::Task& task) {
    if (task.kind == schedule::TaskKind::kSend) return true;
    if (!received_hand_off(task)) return false;
    unpack(task.op);
    return true;
  }
  bool received_hand_off(const schedule::Task& task) {
    return messages_.received(task.op, world_rank(task.peer, index_), [&] {
      auto& buf = wire_[task.op];
      buf.resize(payload_bytes(task.op));
      return std::span<std::byte>(buf);
    });
  }

  /// A message beside a channel's hand-off that this rank receives, and the position in the
  /// agreed order of the op whose start posts it on the sender.
  struct BesideReceive {
    int position = 0, id = -1, from = -1, layer = 0, micro_batch = 0;
    bool backward = false;
  };

  /// This rank's beside receives of a step in the order their senders post them. The sender
  /// posts the residual with its dispatch and dL/dy with its backward dispatch, not at the
  /// receiver's fused op, so on a transport that matches by issue order per peer (NCCL)
  /// receives posted at the fused op could match another message from that rank.
  std::vector<BesideReceive> beside_receives() const {
    std::map<std::pair<int, int>, int> dispatch;  // (layer, micro-batch) -> forward dispatch op
    for (std::size_t id = 0; id < schedule_.ops.size(); ++id) {
      const schedule::Op& o = schedule_.ops[id];
      if (o.kind == schedule::OpKind::kDispatch && !o.backward) dispatch[{o.layer, o.micro_batch}] = static_cast<int>(id);
    }
    auto position = [&](int id) { return lowered_.position[static_cast<std::size_t>(id)]; };
    std::vector<BesideReceive> out;
    for (int l = 0; l < spec_.layers; ++l) {
      if (!handed_off(l)) continue;
      for (int j = 0; j < train_.micro_batches; ++j) {
        if (attention_worker(l + 1) == worker_)
          out.push_back({position(dispatch.at({l, j})), combine_dispatch_op(j, l, false), attention_worker(l), l, j, false});
        if (attention_worker(l) == worker_) {
          const int id = combine_dispatch_op(j, l, true);
          out.push_back({position(id), id, attention_worker(l + 1), l, j, true});
        }
      }
    }
    std::sort(out.begin(), out.end(), [](const BesideReceive& a, const BesideReceive& b) { return a.position < b.position; });
    return out;
  }

  /// Posts the beside receives whose senders post before agreed position `before`: called
  /// before the comm stream's first task and after each start with the next task's
  /// position, so each is posted where a receive task of its own would stand in the
  /// program (no dependencies; schedule/lowering.hpp's order argument then covers it).
  void post_beside_receives(int before) {
    for (; beside_next_ < beside_.size() && beside_[beside_next_].position < before; ++beside_next_) {
      const BesideReceive& b = beside_[beside_next_];
      Cell& c = cell(b.micro_batch, b.layer);
      (void)received_beside(b.id, b.from, b.backward ? c.dy : c.residual);
    }
  }
  /// Agreed position of this worker's k-th comm task (INT_MAX past the last).
  int comm_position(std::size_t k) const {
    const auto& tasks = program().streams[static_cast<std::size_t>(schedule::Stream::kComm)];
    return k < tasks.size() ? lowered_.position[static_cast<std::size_t>(tasks[k].op)] : INT_MAX;
  }

  /// Stage alignment over a channel: rank a of one attention worker sends `m` (tokens x
  /// hidden, kept until the step ends) to rank a of attention worker `to`, tagged by the
  /// fused op `id` it travels beside.
  void send_beside(int id, int to, const Matrix& m) {
    post(id, world_rank(to, index_), std::as_bytes(std::span(m.data(), static_cast<std::size_t>(m.size()))));
  }
  /// Posts a world message (channel mode), counted in `bytes_posted_`.
  void post(int id, int to_rank, std::span<const std::byte> bytes) {
    messages_.send(id, to_rank, bytes);
    bytes_posted_ += static_cast<std::int64_t>(bytes.size());
  }
  /// The matching receive from rank a of attention worker `from` into `m`: posted on the
  /// first call, true once it arrived.
  bool received_beside(int id, int from, Matrix& m) {
    return messages_.received(id, world_rank(from, index_), [&] {
      m.resize(static_cast<Eigen::Index>(tokens_), spec_.hidden);
      return std::as_writable_bytes(std::span(m.data(), static_cast<std::size_t>(m.size())));
    });
  }
  int combine_dispatch_op(int j, int l, bool backward) const {
    return combine_dispatch_[combine_dispatch_index(j, l, backward)];
  }
  std::size_t combine_dispatch_index(int j, int l, bool backward) const {
    return ((backward ? 1u : 0u) * static_cast<std::size_t>(train_.micro_batches) + static_cast<std::size_t>(j)) *
               static_cast<std::size_t>(spec_.layers) +
           static_cast<std::size_t>(l);
  }

  /// After the program: hand-off sends complete, channels flushed, and the attention
  /// workers' replicas sum their gradients.
  void finish_channel_step() {
    messages_.finish(comm::deadline_after(options_.executor.timeout), "hand-off send of step " + std::to_string(step_ + 1));
    wire_.clear();
    exchange_->flush();
    if (attention_) exchange_->sum_replica_gradients(attention_->parameters());
    if (experts_) exchange_->sum_expert_replica_gradients(*experts_);
  }

  // ---- agreement across workers ------------------------------------------------------

  /// Every worker learns the sorted list of all parameter names (the canonical order of
  /// the gradient norm) and where its own slots sit in it.
  void agree_on_parameters() {
    std::vector<std::string> mine;
    std::int64_t count = 0;
    for_each_reported_slot([&](const auto& s) {
      count += s.value->size();
      mine.push_back(s.name);
    });
    std::tie(names_, total_parameters_) = agree_on_parameter_names(world_, mine, count, options_.executor.timeout);
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
    for_each_reported_slot([&](const auto& s) {
      const auto at = std::lower_bound(names_.begin(), names_.end(), s.name) - names_.begin();
      v[static_cast<std::size_t>(m) + 2 * cells + static_cast<std::size_t>(at)] = ParameterSet<T>::grad_square_sum(s);
    });
    const std::vector<double> sum = sum_over_ranks(world_, v, options_.executor.timeout, "step statistics");
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
  std::vector<int> layer_worker_;  // attention worker of every layer
  RankLayout ranks_;
  std::optional<ChannelExchange<Transport, T, Backend>> exchange_;
  std::vector<int> combine_dispatch_;  // fused op of (backward, micro-batch, layer), -1: none
  std::vector<BesideReceive> beside_;  // this rank's, in the senders' order
  std::size_t beside_next_ = 0;        // the first not yet posted this step
  std::vector<float> d_gates_;                                  // channel mode: dL/dgate of one exchange
  std::optional<AttentionStage<Attention>> attention_;
  std::optional<ExpertStage<Experts>> experts_;
  std::vector<char> copy_slot_;  // per slot of experts_: a copy of an expert another F-rank reports
  std::int64_t expert_rows_ = 0;  // rows this rank's experts computed in the step's forward (forward stream)
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
  std::int64_t bytes_posted_ = 0;               // channel mode: payload bytes posted (MeasuredOp::bytes)
  // Channel mode: hand-offs and stage alignment beside a channel (after the buffers they
  // read and write, so that it is destroyed, cancelling, first).
  WorldMessages<Transport> messages_{world_};
  std::vector<MeasuredOp> timeline_;
};

}  // namespace disagmoe::runtime
