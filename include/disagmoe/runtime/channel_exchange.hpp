// SPDX-License-Identifier: Apache-2.0
/// @file channel_exchange.hpp
/// `ChannelExchange`: what one rank of a disaggregated run holds for the M2NChannel
/// exchange between groups of ranks (runtime/disaggregated_trainer.hpp): its pair groups
/// with one `comm::M2NChannel` per (MoE layer, micro-batch) created once, up front, and
/// reused every step, its attention worker's data-parallel group, and the two places
/// where a stage meets a channel: an F-rank's experts on the rows the channel fanned
/// out, and the A replicas' gradient sum.
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
#include <disagmoe/comm/transport.hpp>
#include <disagmoe/error.hpp>
#include <disagmoe/runtime/disaggregated_options.hpp>
#include <disagmoe/runtime/parameter_set.hpp>
#include <disagmoe/spec/model_spec.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
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
  /// combine does. `expert_rank[l]`: F-rank of every expert of layer l, routed then shared.
  ChannelExchange(Transport& world, const RankLayout& ranks, const std::vector<int>& layer_worker,
                  const std::vector<bool>& hand_off, const ModelSpec& spec, int micro_batches,
                  std::vector<std::vector<std::int32_t>> expert_rank, std::chrono::milliseconds timeout)
      : spec_(spec), timeout_(timeout) {
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
      comm::ChannelConfig c = base;  // one connection per layer, a channel per micro-batch
      c.name = "layer " + std::to_string(l);
      c.expert_rank = std::move(expert_rank[static_cast<std::size_t>(l)]);
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

  /// F-rank: the forward of `stage`'s experts of layer l on the rows channel (l, j) fanned
  /// out to them (grouped by local expert), written back as the channel's expert outputs.
  template <class Stage>
  void expert_forward(Stage& stage, int l, int j) {
    visit(l, j, Side::kFfn, [&](auto& ch) {
      std::vector<std::int64_t> offsets{0};
      for (std::size_t k = 0; k < ch.local_experts(); ++k)
        offsets.push_back(offsets.back() + static_cast<std::int64_t>(ch.expert_rows(k)));
      const Matrix rows = grouped(offsets.back(), [&] { return ch.expert_input(0).data(); });
      Matrix out;
      stage.forward(l, j, offsets, rows, out);
      if (rows.size() > 0) std::memcpy(ch.expert_output(0).data(), out.data(), bytes_of(out));
    });
  }

  /// F-rank: the input-gradient backward of the same experts on the channel's gate-scaled
  /// output gradients, written back as the channel's expert input gradients.
  template <class Stage>
  void expert_backward(Stage& stage, int l, int j) {
    visit(l, j, Side::kFfn, [&](auto& ch) {
      std::int64_t rows_n = 0;
      for (std::size_t k = 0; k < ch.local_experts(); ++k) rows_n += static_cast<std::int64_t>(ch.expert_rows(k));
      const Matrix d_out = grouped(rows_n, [&] { return ch.expert_grad_output(0).data(); });
      Matrix d_rows;
      stage.backward_input(l, j, d_out, d_rows);
      if (d_out.size() > 0) std::memcpy(ch.expert_grad_input(0).data(), d_rows.data(), bytes_of(d_rows));
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
    if (!attention_group_ || attention_group_->size() == 1) return;
    std::vector<T> mine;
    for (const auto& sl : params.slots()) mine.insert(mine.end(), sl.grad->data(), sl.grad->data() + sl.grad->size());
    const auto all = comm::all_gather(*attention_group_, std::as_bytes(std::span(mine)), attention_group_->max_tag(),
                                      comm::deadline_after(timeout_), "attention gradients");
    std::vector<T> sum(mine.size()), part(mine.size());
    for (std::size_t r = 0; r < all.size(); ++r) {
      expect(all[r].size() == mine.size() * sizeof(T), "attention gradient bytes of rank " + std::to_string(r),
             all[r].size(), "the same on every replica");
      std::memcpy(part.data(), all[r].data(), all[r].size());
      for (std::size_t i = 0; i < sum.size(); ++i) sum[i] = r == 0 ? part[i] : sum[i] + part[i];
    }
    std::size_t at = 0;
    for (auto& sl : params.slots()) {
      std::memcpy(sl.grad->data(), sum.data() + at, static_cast<std::size_t>(sl.grad->size()) * sizeof(T));
      at += static_cast<std::size_t>(sl.grad->size());
    }
  }

 private:
  // rows x hidden copied from a channel's contiguous per-expert blocks (none: empty).
  template <class Source>
  Matrix grouped(std::int64_t rows, Source&& source) const {
    Matrix m(static_cast<Eigen::Index>(rows), spec_.hidden);
    if (rows > 0) std::memcpy(m.data(), source(), bytes_of(m));
    return m;
  }
  static std::size_t bytes_of(const Matrix& m) { return static_cast<std::size_t>(m.size()) * sizeof(T); }

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
  std::optional<Transport> attention_group_;
  std::optional<Group> pair_group_;
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
