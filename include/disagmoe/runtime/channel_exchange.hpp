// SPDX-License-Identifier: Apache-2.0
/// @file channel_exchange.hpp
/// `ChannelExchange`: what one rank of a disaggregated run holds for the M2NChannel
/// exchange between groups of ranks (runtime/disaggregated_trainer.hpp): its pair groups
/// with one `comm::M2NChannel` per (MoE layer, micro-batch) created once, up front, and
/// reused every step, its attention worker's data-parallel group, and the places where a
/// stage meets a channel: an F-rank's experts on the rows the channel fanned out, and the
/// gradient sums of the A replicas and of redundant experts' copies.
///
/// Redundant experts (DeepSeek's EPLB, github.com/deepseek-ai/EPLB): a layer's experts
/// may have copies on several F-ranks. Every copy is a channel expert id of its own
/// (comm::ReplicaRouting); an A-rank rewrites its tokens' expert ids to the copies that
/// serve them before the dispatch (`serving_copies`), an F-rank computes each copy with
/// its expert's weights (the stage holds the expert once, ids ascending, so the channel's
/// per-copy blocks are put in the stage's order), and after the backward the copies'
/// gradients are summed over the FFN worker's ranks in rank order (runtime/gradient_sum.hpp).
///
/// Pair groups: (A_i's M ranks, then F_i's N ranks) for the layers of pair i whose F_i
/// returns to A_i, and the hand-off group (A_i, F_i, then the M ranks of the next
/// layer's attention worker) for the layers whose return goes on to that worker (AF-Pipe's
/// stage alignment: the fused combine + dispatch). A hand-off to the same worker (one
/// pair) is a plain return. Channel (l, j) uses tags from the ordinal of l among its
/// pair's MoE layers, the same on every member.
///
/// Colocated expert parallelism (`RankLayout::colocated`, the baselines): worker i's G
/// ranks are both its A-ranks and its F-ranks, so each (MoE layer, micro-batch) has two
/// endpoints of one channel on every rank, over a `comm::DualRoleGroup` of the worker's
/// ranks: its dispatch and combine are the all-to-all of colocated EP, run by the same
/// send-once layout, kernels and summation contract as AF-Pipe's M2N / N2M exchange.
///
/// On a transport that matches messages by issue order per peer instead of by tag (NCCL;
/// `comm::matches_tags<Transport>` false), the channels of one group in flight at once
/// would cross (an F-rank serving micro-batch 1 before micro-batch 0 receives 0's rows).
/// Each pair and hand-off group is then a `comm::LanedTransport` with one communicator per
/// channel on it (its tag range; MoE layers of the pair x micro-batches): within a channel
/// both ends post in the channel's protocol order, step after step, so per-peer issue
/// order matches. Colocated baselines over such a transport are refused (their dual-role
/// ends share the worker's group: not laned yet).
///
/// The channels' kernels run on `Backend`'s comm stream (for the host back end: served by
/// the thread that drives the exchange, the executor's comm stream, so results are there
/// when a call returns).
#pragma once

#include <disagmoe/backend/host/backend.hpp>
#include <disagmoe/comm/all_gather.hpp>
#include <disagmoe/comm/dual_role.hpp>
#include <disagmoe/comm/laned_transport.hpp>
#include <disagmoe/comm/m2n_channel.hpp>
#include <disagmoe/comm/replica_routing.hpp>
#include <disagmoe/comm/transport.hpp>
#include <disagmoe/error.hpp>
#include <disagmoe/runtime/disaggregated_options.hpp>
#include <disagmoe/runtime/gradient_sum.hpp>
#include <disagmoe/runtime/parameter_set.hpp>
#include <disagmoe/spec/model_spec.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace disagmoe::runtime {

/// See the file comment. `T` is the element type of the rows (the stages' scalar).
template <comm::transport Transport, class T, comm::backend Backend = host::Backend>
class ChannelExchange {
 public:
  using Matrix = model::Matrix<T>;
  /// Which end of a channel a call needs (both live on one rank when colocated).
  enum class Side { kAttention, kFfn };

  /// Collective over `world` (every rank calls it with the same arguments): splits the
  /// groups, then creates this rank's channels. `layer_worker[l]`: the attention worker
  /// (pair, or colocated stage) of layer l; `hand_off[l]`: F_l returns to layer l+1's
  /// attention worker. Shared experts ride as extra routing slots of gate 1 (ids E, E+1,
  /// ...), so a channel's combine adds them after the routed slots, as the colocated
  /// combine does. `hosts[l][e]`: the F-ranks holding a copy of expert e of layer l
  /// (routed, then shared), its primary first (`expert_hosts`); a dense layer's is unused.
  ChannelExchange(Transport& world, const RankLayout& ranks, const std::vector<int>& layer_worker,
                  const std::vector<bool>& hand_off, const ModelSpec& spec, int micro_batches,
                  std::vector<std::vector<std::vector<std::int32_t>>> hosts, std::chrono::milliseconds timeout)
      : spec_(spec), timeout_(timeout), home_(ranks.colocated ? ranks.index_of(world.rank()) : -1) {
    const int me = world.rank(), worker = ranks.worker_of(me);
    const int pair = ranks.colocated ? worker : worker % ranks.pairs;
    const bool attention = ranks.colocated || worker < ranks.pairs;
    expect(!ranks.colocated || comm::matches_tags<Transport>, "colocated expert parallelism over a transport",
           "matching by issue order (NCCL)", "a transport that matches tags (MPI, loopback): not laned yet");
    auto handed_to = [&](int i) {  // the attention worker pair i's hand-off layers return to, or -1
      for (int l = 0; l + 1 < spec.layers; ++l)
        if (layer_worker[static_cast<std::size_t>(l)] == i && spec.is_moe_layer(l) && hand_off[static_cast<std::size_t>(l)])
          return layer_worker[static_cast<std::size_t>(l) + 1];
      return -1;
    };
    hand_off_group_.resize(static_cast<std::size_t>(ranks.pairs));
    for (int i = 0; i < ranks.pairs; ++i) {
      std::vector<int> members;
      for (int r = 0; r < ranks.attention_ranks; ++r) members.push_back(ranks.world_rank(i, r));
      auto a = world.split(members);
      if (a) attention_group_.emplace(std::move(*a));
      if (ranks.colocated) continue;
      for (int r = 0; r < ranks.ffn_ranks; ++r) members.push_back(ranks.world_rank(ranks.pairs + i, r));
      // One lane per channel of pair i: its MoE layers (tag ranges by their ordinal) x micro-batches.
      int channels = 0;
      for (int l = 0; l < spec.layers; ++l)
        if (layer_worker[static_cast<std::size_t>(l)] == i && spec.is_moe_layer(l)) channels += micro_batches;
      auto plain = world.split(members);
      if (plain) pair_group_.emplace(lay_out(std::move(*plain), channels));
      const int next = handed_to(i);
      if (next < 0) continue;
      for (int r = 0; r < ranks.attention_ranks; ++r) members.push_back(ranks.world_rank(next, r));
      if (auto handed = world.split(members)) hand_off_group_[static_cast<std::size_t>(i)].emplace(lay_out(std::move(*handed), channels));
    }
    bool replicas = false;  // the same on every rank: the copies' gradient sum needs the FFN groups
    for (int l = 0; l < spec.layers; ++l)
      if (spec.is_moe_layer(l))
        for (const auto& h : hosts[static_cast<std::size_t>(l)]) replicas = replicas || h.size() > 1;
    for (int i = 0; replicas && !ranks.colocated && i < ranks.pairs; ++i) {
      std::vector<int> members;
      for (int r = 0; r < ranks.ffn_ranks; ++r) members.push_back(ranks.world_rank(ranks.pairs + i, r));
      auto f = world.split(members);
      if (f) ffn_group_.emplace(std::move(*f));
    }
    // Colocated: the stage's ranks hold its experts, so they sum the copies.
    replica_group_ = !replicas ? nullptr : ranks.colocated ? &*attention_group_ : ffn_group_ ? &*ffn_group_ : nullptr;
    if (ranks.colocated) {
      dual_ = std::make_unique<comm::DualRoleGroup<Transport>>(*attention_group_);
      attention_end_ = dual_->attention();
      ffn_end_ = dual_->ffn();
    }
    comm::ChannelConfig base;
    base.attention_ranks = ranks.attention_ranks;
    base.ffn_ranks = ranks.ffn_ranks;
    base.hidden = spec.hidden;
    base.top_k = spec.top_k + spec.shared_experts;
    base.timeout = timeout;
    std::vector<int> ordinal(static_cast<std::size_t>(ranks.pairs), 0);  // MoE layers of each pair so far
    for (int l = 0; l < spec.layers; ++l) {
      if (!spec.is_moe_layer(l)) continue;
      const int i = layer_worker[static_cast<std::size_t>(l)];
      const int count = ordinal[static_cast<std::size_t>(i)]++;
      const bool handed = !ranks.colocated && hand_off[static_cast<std::size_t>(l)];
      const bool next_here = handed && attention && layer_worker[static_cast<std::size_t>(l) + 1] == pair;
      if (i != pair && !next_here) continue;  // not a member of layer l's channels
      const auto& copies = routing_.try_emplace(l, std::move(hosts[static_cast<std::size_t>(l)]), ranks.ffn_ranks)
                               .first->second;
      comm::ChannelConfig c = base;  // one connection per layer, a channel per micro-batch
      c.name = "layer " + std::to_string(l);
      c.expert_rank.assign(copies.expert_rank().begin(), copies.expert_rank().end());
      c.hand_off = handed;
      c.tag_base = comm::kTagsPerChannel * count * micro_batches;
      expect(c.tag_base + comm::kTagsPerChannel * micro_batches <= comm::kHandshakeTag, "channels per pair",
             (count + 1) * micro_batches,
             "at most " + std::to_string(comm::kHandshakeTag / comm::kTagsPerChannel) +
                 " (MoE layers per pair x micro-batches; MPI tags end at 32767)");
      if (!ranks.colocated) {
        Group& group = handed ? *hand_off_group_[static_cast<std::size_t>(i)] : *pair_group_;
        auto* conn = connections_.emplace_back(
            std::make_unique<comm::M2NConnection<Group>>(group, std::move(c), sizeof(T), micro_batches)).get();
        for (int j = 0; j < micro_batches; ++j) channels_[{l, j}] = std::make_unique<Channel>(*conn, j, backend_, stream_);
        continue;
      }
      // Both ends post their handshake before either waits.
      using Defer = typename comm::M2NConnection<End>::DeferHandshake;
      auto* a = end_connections_.emplace_back(
          std::make_unique<comm::M2NConnection<End>>(attention_end_, c, sizeof(T), micro_batches, Defer{})).get();
      auto* f = end_connections_.emplace_back(
          std::make_unique<comm::M2NConnection<End>>(ffn_end_, std::move(c), sizeof(T), micro_batches, Defer{})).get();
      a->complete_handshake();
      f->complete_handshake();
      for (int j = 0; j < micro_batches; ++j)
        colocated_[{l, j}] = {std::make_unique<EndChannel>(*a, j, backend_, stream_),
                              std::make_unique<EndChannel>(*f, j, backend_, stream_)};
    }
    if (!ranks.colocated && attention) return;
    for (auto& entry : routing_) {  // F-rank: the stage's experts ascending, each once
      const comm::ReplicaRouting& copies = entry.second;
      auto& order = stage_order_[entry.first];
      visit(entry.first, 0, Side::kFfn, [&](auto& ch) {
        for (std::size_t le = 0; le < ch.local_experts(); ++le) order.push_back(le);
        std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
          return copies.expert_of(ch.expert_id(a)) < copies.expert_of(ch.expert_id(b));
        });
      });
    }
  }

  /// Calls f(channel) with this rank's `side` end of the channel of MoE layer `l`,
  /// micro-batch `j` (this rank's worker holds `l`).
  template <class F>
  decltype(auto) visit(int l, int j, Side side, F&& f) {
    if (dual_) {
      auto& ends = colocated_.at({l, j});
      return f(side == Side::kAttention ? *ends.first : *ends.second);
    }
    return f(*channels_.at({l, j}));
  }

  /// A-rank: the channel expert ids of the copies serving `ids` ([tokens x slots], the
  /// routed then shared experts of each token) of layer `l`: comm::ReplicaRouting's rule,
  /// with this rank as every token's home when it holds experts too (colocated). Without
  /// replicas every id is its own. Called from the comm stream only (the routing keeps
  /// per-call loads). O(ids x copies).
  std::vector<std::int32_t> serving_copies(int l, std::span<const std::int32_t> ids, int slots) {
    std::vector<std::int32_t> out(ids.size());
    const std::vector<std::int32_t> home(home_ < 0 ? 0 : ids.size() / static_cast<std::size_t>(slots), home_);
    (void)routing_.at(l).route(ids, slots, home, out);
    return out;
  }

  /// F-rank: the forward of `stage`'s experts of layer l on the rows channel (l, j) fanned
  /// out to them, written back as the channel's expert outputs; returns the rows. The
  /// stage holds each expert once, ids ascending; the channel has a block per copy id (a
  /// replica's id comes after every primary's), so blocks go to the stage in its order.
  template <class Stage>
  std::int64_t expert_forward(Stage& stage, int l, int j) {
    return visit(l, j, Side::kFfn, [&](auto& ch) {
      const auto& order = stage_order_.at(l);
      std::vector<std::int64_t> offsets{0};
      for (const std::size_t le : order) offsets.push_back(offsets.back() + static_cast<std::int64_t>(ch.expert_rows(le)));
      const Matrix rows = gathered(order, offsets.back(), [&](std::size_t le) { return ch.expert_input(le); });
      Matrix out;
      stage.forward(l, j, offsets, rows, out);
      scatter(order, out, [&](std::size_t le) { return ch.expert_output(le); });
      return offsets.back();
    });
  }

  /// F-rank: the input-gradient backward of the same experts on the channel's gate-scaled
  /// output gradients, written back as the channel's expert input gradients.
  template <class Stage>
  void expert_backward(Stage& stage, int l, int j) {
    visit(l, j, Side::kFfn, [&](auto& ch) {
      const auto& order = stage_order_.at(l);
      std::int64_t rows_n = 0;
      for (const std::size_t le : order) rows_n += static_cast<std::int64_t>(ch.expert_rows(le));
      const Matrix d_out = gathered(order, rows_n, [&](std::size_t le) { return ch.expert_grad_output(le); });
      Matrix d_rows;
      stage.backward_input(l, j, d_out, d_rows);
      scatter(order, d_rows, [&](std::size_t le) { return ch.expert_grad_input(le); });
    });
  }

  /// Waits for every channel's posted sends (the end of a step).
  void flush() {
    for (auto& [key, ch] : channels_) ch->flush();
    for (auto& [key, ends] : colocated_) {
      ends.first->flush();
      ends.second->flush();
    }
  }

  /// A-rank of a worker of several ranks: every replica's gradients summed in rank order
  /// (the same bits on every replica). Collective over the attention group; no-op elsewhere.
  void sum_replica_gradients(ParameterSet<T>& params) {
    if (!attention_group_) return;
    std::vector<ParameterSlot<T>*> slots;
    for (auto& s : params.slots()) slots.push_back(&s);
    sum_gradients_by_name<Transport, T>(*attention_group_, slots, timeout_, "attention gradients");
  }

  /// F-rank of a run with redundant experts: the gradients of every expert with copies on
  /// several F-ranks summed over its copies in rank order (the same bits on each), so the
  /// optimizer keeps the copies identical. Collective over the FFN worker's ranks (the
  /// stage's, colocated); no-op in a run without replicas and on A-ranks.
  template <class Stage>
  void sum_expert_replica_gradients(Stage& stage) {
    if (replica_group_ == nullptr) return;
    std::vector<ParameterSlot<T>*> copies;
    auto& slots = stage.parameters().slots();
    const auto& layout = stage.layout();
    for (std::size_t i = 0; i < layout.layers.size(); ++i) {
      const int l = layout.layers[i];
      for (const int e : layout.experts[i])
        if (routing_.at(l).hosts(e).size() > 1) {
          const auto [first, last] = stage.expert_slots(l, e);
          for (std::size_t k = first; k < last; ++k) copies.push_back(&slots[k]);
        }
    }
    sum_gradients_by_name<Transport, T>(*replica_group_, copies, timeout_, "expert replica gradients");
  }

 private:
  // rows x hidden: the channel's per-copy blocks `block(le)`, in the stage's order.
  template <class Block>
  Matrix gathered(const std::vector<std::size_t>& order, std::int64_t rows, Block&& block) const {
    Matrix m(static_cast<Eigen::Index>(rows), spec_.hidden);
    std::size_t at = 0;
    for (const std::size_t le : order) {
      const auto b = block(le);
      if (!b.empty()) std::memcpy(m.data() + at, b.data(), b.size_bytes());
      at += b.size();
    }
    return m;
  }
  // The stage's rows `m` back into the channel's per-copy blocks.
  template <class Block>
  static void scatter(const std::vector<std::size_t>& order, const Matrix& m, Block&& block) {
    std::size_t at = 0;
    for (const std::size_t le : order) {
      const auto b = block(le);
      if (!b.empty()) std::memcpy(b.data(), m.data() + at, b.size_bytes());
      at += b.size();
    }
  }

  // A pair or hand-off group: laned where the transport matches by issue order (file comment).
  using Group = std::conditional_t<comm::matches_tags<Transport>, Transport, comm::LanedTransport<Transport>>;
  static Group lay_out(Transport group, int channels) {
    if constexpr (comm::matches_tags<Transport>) return group;
    else return Group(std::move(group), std::max(channels, 1));
  }
  using End = comm::DualRoleTransport<Transport>;
  using Channel = comm::M2NChannel<Group, Backend, T>;
  using EndChannel = comm::M2NChannel<End, Backend, T>;

  ModelSpec spec_;
  std::chrono::milliseconds timeout_;
  Backend backend_{};
  typename Backend::Stream stream_ = backend_.comm_stream();
  std::optional<Transport> attention_group_, ffn_group_;
  std::optional<Group> pair_group_;
  Transport* replica_group_ = nullptr;  // where redundant experts' copies sum (none: no replicas)
  int home_ = -1;                       // the F-rank tokens sit on (colocated: this rank), or -1
  std::map<int, comm::ReplicaRouting> routing_;        // by MoE layer this rank is a member of
  std::map<int, std::vector<std::size_t>> stage_order_;  // F-rank, by layer: channel block of each stage expert
  std::vector<std::optional<Group>> hand_off_group_;  // by pair: (A_i, F_i, next attention worker)
  std::vector<std::unique_ptr<comm::M2NConnection<Group>>> connections_;  // one per layer
  std::map<std::pair<int, int>, std::unique_ptr<Channel>> channels_;       // (layer, mb)
  // Colocated: the worker's dual-role view, its two ends, and both channel ends per (layer, mb).
  std::unique_ptr<comm::DualRoleGroup<Transport>> dual_;
  End attention_end_, ffn_end_;
  std::vector<std::unique_ptr<comm::M2NConnection<End>>> end_connections_;
  std::map<std::pair<int, int>, std::pair<std::unique_ptr<EndChannel>, std::unique_ptr<EndChannel>>> colocated_;
};

}  // namespace disagmoe::runtime
