// SPDX-License-Identifier: Apache-2.0
/// @file m2n_channel.hpp
/// `M2NChannel<Transport, Backend, Elem>`: the one-way many-to-many token exchange of AF-Pipe
/// (DisagMoE, arXiv 2605.11005, "M2N / N2M exchange") between M attention ranks
/// (A-ranks) and N FFN ranks (F-ranks) of a pair group.
///
/// Forward (M2N): an A-rank sends each token row once to every F-rank holding any of
/// its top-k experts (send-once), after a per-destination layout header (step, rows).
/// The F-rank fans arrived rows out per local expert. Return (N2M, the fused combine):
/// the F-rank sends one row per (token, A-rank) holding sum_j gate_j * expert_j(x) over
/// its local slots j (ascending), and the A-rank adds the partial rows of the F-ranks
/// in ascending F-rank order. Backward mirrors both for dL/dy -> dL/dx and dL/dgate.
///
/// Summation contract (bitwise reproducible; see host/token_kernels.hpp):
///   y_t = P_{d0} + P_{d1} + ... (left to right, d ascending over the F-ranks of t),
///   P_d = g_{j0} * f_{j0}(x_t) + g_{j1} * f_{j1}(x_t) + ... (j ascending, experts on d).
///   dL/dx_t likewise with g_j * J_j^T dL/dy_t (computed by the user's expert backward).
///   dL/dg_tj = sum_c f_j(x_t)[c] * dL/dy_t[c] (c ascending).
///
/// Call sequence per step. A-rank: dispatch -> combine [-> backward_dispatch ->
/// backward_combine]. F-rank: receive -> (fill expert_output) -> send_return
/// [-> receive_grad -> (fill expert_grad_input) -> send_grad]. One channel carries one
/// micro-batch at a time; keep one channel per micro-batch in flight, all of a layer's on
/// one `M2NConnection` (comm/m2n_connection.hpp: the pair group, configuration and the
/// one handshake they share), or give a channel a connection of its own. Every call that
/// waits (combine, backward_combine, receive, receive_grad, receive_return) has a `try_` twin that never
/// blocks: it posts what it can, returns false while transfers are outstanding and true
/// once done, so that one comm stream can keep many channels in flight.
///
/// Hand-off (`ChannelConfig::hand_off`, AF-Pipe's fused combine + next dispatch): the
/// F-ranks return A-rank a's rows, each tagged with its token, to next-layer A-rank
/// a, which combines them in ascending F-rank order (same contract) and later sends
/// dL/dy back; dL/dx and dL/dgate still go to A-rank a. A-rank: dispatch
/// [-> backward_combine]. Next-layer A-rank: receive_return [-> backward_dispatch].
///
/// Back end (comm/backend.hpp): rows and gates live in the back end's buffers and every
/// permute / combine runs as its kernel on the channel's stream. Sends of a kernel's
/// output are posted once its event completes; results handed to the caller (combine's
/// `out`, expert inputs, gradients) are written in the stream's order: on a
/// caller-served host stream when the call returns, otherwise after
/// `backend.synchronize(backend.record(stream))` (or for a stream that waits on that
/// event). Routing metadata (ids, gates as sent, layouts) is host memory.
///
/// Buffers only grow: `reserve(max_tokens)` sizes them up front for micro-batches of up
/// to that many tokens per A-rank (`workspace_bytes` tells how much that is, as CUB's
/// two-phase temp-storage query does), after which no step allocates a buffer.
#pragma once

#include <disagmoe/comm/backend.hpp>
#include <disagmoe/comm/channel_config.hpp>
#include <disagmoe/comm/layout.hpp>
#include <disagmoe/comm/m2n_connection.hpp>
#include <disagmoe/comm/pending_transfers.hpp>
#include <disagmoe/comm/transport.hpp>
#include <disagmoe/error.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace disagmoe::comm {

/// See the file comment. `T`, the back end and the stream are held by reference and
/// must outlive the channel.
template <transport T, backend B, class Elem = float>
class M2NChannel {
  static_assert(row_element<Elem>, "M2NChannel rows hold floating-point elements (comm::row_element)");

 public:
  /// Which side of the exchange this rank is on.
  enum class Role { kAttention, kFfn, kNextAttention };
  using Stream = typename B::Stream;
  template <class E>
  using Buffer = typename B::template Buffer<E>;

 private:
  /// Sends that wait for the channel's kernels (their rows are a kernel's output).
  enum class Post { kNone, kDispatch, kBackwardDispatch, kHandOffBackwardDispatch, kReturn, kGrad };

 public:

  /// Channel `index` of `connection` (which must outlive it); usable once the
  /// connection's handshake completed. Kernels run on `stream` of `backend`.
  M2NChannel(M2NConnection<T>& connection, int index, B& backend, Stream& stream)
      : connection_(&connection), pair_(connection.pair()), config_(connection.config()), backend_(backend),
        stream_(stream), transfers_(connection.pair()) {
    expect(index >= 0 && index < connection.channels(), "M2NChannel index", index,
           "a channel of the connection [0, " + std::to_string(connection.channels()) + ")");
    expect(connection.element_bytes() == sizeof(Elem), "M2NChannel element size (bytes)", sizeof(Elem),
           "the connection's (" + std::to_string(connection.element_bytes()) + ")");
    tag_base_ = connection.tag_base(index);
    name_ = connection.channel_name(index);
    m_ = config_.attention_ranks;
    n_ = config_.ffn_ranks;
    h_ = static_cast<std::size_t>(config_.hidden);
    k_ = static_cast<std::size_t>(config_.top_k);
    hand_off_ = config_.hand_off;
    role_ = pair_.rank() < m_        ? Role::kAttention
            : pair_.rank() < m_ + n_ ? Role::kFfn
                                     : Role::kNextAttention;
    if (role_ == Role::kFfn) arrival_.set_placement(config_.expert_rank, pair_.rank() - m_);
  }
  /// A channel with a connection of its own. Collective over `pair`: validates `config`
  /// (ConfigError), then exchanges fingerprints with every other rank and throws
  /// ConfigError naming the first field on which some rank differs, or TimeoutError if a
  /// rank does not answer.
  M2NChannel(T& pair, ChannelConfig config, B& backend, Stream& stream)
      : M2NChannel(std::make_unique<M2NConnection<T>>(pair, std::move(config), sizeof(Elem)), backend, stream) {}
  using DeferHandshake = typename M2NConnection<T>::DeferHandshake;
  /// The same, the handshake posted only: call complete_handshake() before use.
  M2NChannel(T& pair, ChannelConfig config, B& backend, Stream& stream, DeferHandshake)
      : M2NChannel(std::make_unique<M2NConnection<T>>(pair, std::move(config), sizeof(Elem), 1, DeferHandshake{}),
                   backend, stream) {}
  M2NChannel(const M2NChannel&) = delete;
  M2NChannel& operator=(const M2NChannel&) = delete;
  /// Withdraws anything still in flight (the peers then see a timeout, not garbage)
  /// once the channel's kernels have run.
  ~M2NChannel() {
    transfers_.cancel();
    try {
      backend_.synchronize(done_);
    } catch (...) {  // a failed kernel was reported to the call that waited on it
    }
  }

  /// This rank's side.
  Role role() const { return role_; }
  /// The validated configuration.
  const ChannelConfig& config() const { return config_; }
  /// Rows this rank put on the wire in its last dispatch (A) or return (F).
  std::int64_t last_rows_sent() const { return last_rows_sent_; }
  /// Payload bytes this rank sent since creation (headers included).
  std::int64_t bytes_sent() const { return bytes_sent_; }

  /// Bytes of back-end buffers pair rank `pair_rank` of a channel configured by `c`
  /// needs for micro-batches of up to `max_tokens` tokens per A-rank (what `reserve`
  /// allocates). The first phase of a two-phase allocation, as CUB's temp-storage query.
  static std::size_t workspace_bytes(const ChannelConfig& c, int pair_rank, std::size_t max_tokens) {
    std::size_t bytes = 0;
    for_each_bound(c, pair_rank, max_tokens, [&](auto member, std::size_t elems) {
      bytes += elems * element_bytes(member);
    });
    return bytes;
  }
  /// Sizes every buffer for micro-batches of up to `max_tokens` tokens per A-rank, so
  /// that no step up to that size allocates back-end memory.
  void reserve(std::size_t max_tokens) {
    for_each_bound(config_, pair_.rank(), max_tokens,
                   [&](auto member, std::size_t elems) { detail::grow(this->*member, elems); });
  }

  // ---- A-rank side -------------------------------------------------------------

  /// Posts the layout headers and the send-once rows of `step` (non-blocking).
  /// tokens: [T x hidden] row-major; topk_ids, gates: [T x top_k]; T may be 0.
  /// O(T * (top_k^2 + hidden)).
  void dispatch(std::int64_t step, std::span<const Elem> tokens,
                std::span<const std::int32_t> topk_ids, std::span<const float> gates) {
    enter(Role::kAttention, "dispatch", {State::kIdle, State::kCombined, State::kDispatched});
    if (!hand_off_ && state_ == State::kDispatched)
      fail(channel_field("dispatch"), "out of order", "combine() before the next dispatch");
    wait_pending();  // hand-off: the sends of the previous step
    expect(topk_ids.size() % k_ == 0, "M2NChannel.dispatch topk_ids.size()", topk_ids.size(),
           "a multiple of top_k");
    const std::size_t t = topk_ids.size() / k_;
    if (tokens.size() != t * h_)  // the message is built only on failure: no steady-state allocation
      fail("M2NChannel.dispatch tokens.size()", tokens.size(), "tokens * hidden (" + std::to_string(t * h_) + ")");
    expect(gates.size() == topk_ids.size(), "M2NChannel.dispatch gates.size()", gates.size(),
           "topk_ids.size()");
    step_ = step;
    layout_.build(config_.expert_rank, n_, topk_ids, config_.top_k);
    const auto rows = static_cast<std::size_t>(layout_.total_rows());
    detail::grow(send_rows_, rows * h_);
    detail::grow(send_meta_, rows * k_);
    detail::grow(ret_rows_, rows * h_);
    backend_.gather_rows(stream_, tokens, h_, layout_.row_token(), span_of(send_rows_, 0, rows * h_));
    const auto row_token = layout_.row_token();
    for (std::size_t r = 0; r < rows; ++r) {
      const auto tok = static_cast<std::size_t>(row_token[r]);
      for (std::size_t j = 0; j < k_; ++j)
        send_meta_[r * k_ + j] = RoutingSlot{topk_ids[tok * k_ + j], gates[tok * k_ + j]};
    }
    index_gate_sources(t);
    headers_.resize(static_cast<std::size_t>(n_));
    for (int d = 0; d < n_; ++d)
      headers_[static_cast<std::size_t>(d)] = {step, static_cast<std::int64_t>(layout_.count(d))};
    tokens_ = t;
    post_after_kernels(Post::kDispatch);
    last_rows_sent_ = static_cast<std::int64_t>(rows);
    state_ = State::kDispatched;
  }

  /// Waits for the F-ranks' partial rows and writes out[t] per the summation contract.
  /// out: [T x hidden]. Throws TimeoutError naming the F-rank that did not answer.
  void combine(std::span<Elem> out) {
    while (!try_combine(out)) wait_pending();
  }
  /// combine() without waiting: false while rows are outstanding (call again), true once
  /// `out` is written. Silence is the caller's to time out.
  bool try_combine(std::span<Elem> out) {
    enter(Role::kAttention, "combine", {State::kDispatched});
    if (hand_off_) fail(channel_field("combine"), "hand_off", "receive_return() on the next-layer A-rank");
    expect(out.size() == tokens_ * h_, "M2NChannel.combine out.size()", out.size(), "tokens * hidden");
    if (!test_pending()) return false;
    backend_.combine_rows(stream_, const_span(ret_rows_), h_, layout_.token_offsets(), layout_.token_rows(),
                          std::span<const float>{}, out);
    done_ = backend_.record(stream_);
    state_ = State::kCombined;
    return true;
  }

  /// Posts dL/dy rows (same send-once layout as the forward). grad_out: [T x hidden].
  void backward_dispatch(std::span<const Elem> grad_out) {
    if (hand_off_) {
      hand_off_backward_dispatch(grad_out);
      return;
    }
    enter(Role::kAttention, "backward_dispatch", {State::kCombined});
    expect(grad_out.size() == tokens_ * h_, "M2NChannel.backward_dispatch grad_out.size()",
           grad_out.size(), "tokens * hidden");
    const auto rows = static_cast<std::size_t>(layout_.total_rows());
    detail::grow(grad_send_, rows * h_);
    backend_.gather_rows(stream_, grad_out, h_, layout_.row_token(), span_of(grad_send_, 0, rows * h_));
    state_ = State::kBackwardDispatched;
    post_after_kernels(Post::kBackwardDispatch);
  }

  /// Waits for the gradients: grad_tokens [T x hidden] = dL/dx, grad_gates
  /// [T x top_k] = dL/dgate (each from the one F-rank holding that slot's expert).
  void backward_combine(std::span<Elem> grad_tokens, std::span<float> grad_gates) {
    while (!try_backward_combine(grad_tokens, grad_gates)) wait_pending();
  }
  /// backward_combine() without waiting: false while gradients are outstanding (call
  /// again), true once both outputs are written.
  bool try_backward_combine(std::span<Elem> grad_tokens, std::span<float> grad_gates) {
    if (hand_off_ && phase_ == Phase::kNone) {  // the next-layer A-rank sent dL/dy
      enter(Role::kAttention, "backward_combine", {State::kDispatched});
      post_gradient_receives();
      phase_ = Phase::kRows;
    }
    return combine_gradients(grad_tokens, grad_gates);
  }

 private:
  bool combine_gradients(std::span<Elem> grad_tokens, std::span<float> grad_gates) {
    enter(Role::kAttention, "backward_combine",
          {hand_off_ ? State::kDispatched : State::kBackwardDispatched});
    expect(grad_tokens.size() == tokens_ * h_, "M2NChannel.backward_combine grad_tokens.size()",
           grad_tokens.size(), "tokens * hidden");
    expect(grad_gates.size() == tokens_ * k_, "M2NChannel.backward_combine grad_gates.size()",
           grad_gates.size(), "tokens * top_k");
    if (!test_pending()) return false;
    backend_.combine_rows(stream_, const_span(grad_ret_), h_, layout_.token_offsets(), layout_.token_rows(),
                          std::span<const float>{}, grad_tokens);
    backend_.gather_rows(stream_, const_span(gate_ret_), 1, std::span<const std::int64_t>(gate_source_.data(), tokens_ * k_),
                         grad_gates);
    done_ = backend_.record(stream_);
    state_ = State::kIdle;
    phase_ = Phase::kNone;
    return true;
  }

 public:
  // ---- next-layer A-rank side (hand-off) ----------------------------------------

  /// Waits for the rows of `step` returned by every F-rank and writes out[t], T =
  /// out.size() / hidden, per the summation contract. Throws IoError when an F-rank
  /// is at another step or names a token outside [0, T), TimeoutError on silence.
  void receive_return(std::int64_t step, std::span<Elem> out) {
    while (!try_receive_return(step, out)) wait_pending();
  }
  /// receive_return() without waiting: false while headers or rows are outstanding (call
  /// again with the same step and `out`), true once `out` is written.
  bool try_receive_return(std::int64_t step, std::span<Elem> out) {
    enter(Role::kNextAttention, "receive_return", {State::kIdle, State::kCombined});
    if (phase_ == Phase::kNone) {
      expect(out.size() % h_ == 0, "M2NChannel.receive_return out.size()", out.size(), "a multiple of hidden");
      if (!test_pending()) return false;  // dL/dy sends of the previous step
      step_ = step;
      tokens_ = out.size() / h_;
      headers_.resize(static_cast<std::size_t>(n_));
      pair_.group_begin();
      for (int d = 0; d < n_; ++d)
        recv(m_ + d, kHeader, span_of(headers_, static_cast<std::size_t>(d), 1), "return header");
      pair_.group_end();
      phase_ = Phase::kHeaders;
    }
    expect(out.size() == tokens_ * h_, "M2NChannel.receive_return out.size()", out.size(),
           "the same on every call of one step");
    if (!test_pending()) return false;
    if (phase_ == Phase::kHeaders) {
      const auto rows = check_headers(n_, m_, step);
      detail::grow(ret_rows_, rows * h_);
      detail::grow(ret_tokens_, rows);
      pair_.group_begin();
      for_each_source([&](int d, std::size_t o, std::size_t c) {
        recv(m_ + d, kMeta, span_of(ret_tokens_, o, c), "return tokens");
        recv(m_ + d, kReturn, span_of(ret_rows_, o * h_, c * h_), "return rows");
      });
      pair_.group_end();
      phase_ = Phase::kRows;
      if (!test_pending()) return false;
    }
    phase_ = Phase::kNone;
    const auto rows = static_cast<std::size_t>(from_offset_.back());
    gather_.build(std::span<const std::int64_t>(ret_tokens_.data(), rows), tokens_);
    backend_.combine_rows(stream_, const_span(ret_rows_), h_, gather_.token_offsets(), gather_.token_rows(),
                          std::span<const float>{}, out);
    done_ = backend_.record(stream_);
    state_ = State::kCombined;
    return true;
  }

  /// Waits (up to the timeout) for every posted send, e.g. before destroying a
  /// channel whose last call was send_return, send_grad or a hand-off backward_dispatch
  /// (the destructor cancels instead, so a peer still waiting would time out).
  void flush() { wait_pending(); }

  /// Second step of a deferred creation of a channel with its own connection.
  void complete_handshake() {
    expect(owned_ != nullptr, channel_field("complete_handshake"), "a shared connection",
           "M2NConnection::complete_handshake() on the connection");
    owned_->complete_handshake();
  }

  // ---- F-rank side -------------------------------------------------------------

  /// Waits for the layout headers and rows of `step` from every A-rank and fans them
  /// out per local expert. Throws TimeoutError naming a silent A-rank, IoError when
  /// an A-rank is at another step.
  void receive(std::int64_t step) {
    while (!try_receive(step)) wait_pending();
  }
  /// receive() without waiting: false while headers or rows are outstanding (call again
  /// with the same step), true once the rows are fanned out.
  bool try_receive(std::int64_t step) {
    if (phase_ == Phase::kNone) {
      enter(Role::kFfn, "receive", {State::kIdle, State::kReturned, State::kGradSent});
      if (!test_pending()) return false;  // sends of the previous step
      step_ = step;
      headers_.resize(static_cast<std::size_t>(m_));
      pair_.group_begin();
      for (int a = 0; a < m_; ++a)
        recv(a, kHeader, span_of(headers_, static_cast<std::size_t>(a), 1), "layout header");
      pair_.group_end();
      phase_ = Phase::kHeaders;
    }
    enter(Role::kFfn, "receive", {State::kIdle, State::kReturned, State::kGradSent});
    if (!test_pending()) return false;
    if (phase_ == Phase::kHeaders) {
      const auto rows = check_headers(m_, 0, step);
      detail::grow(recv_rows_, rows * h_);
      detail::grow(recv_meta_, rows * k_);
      if (hand_off_) detail::grow(recv_tokens_, rows);
      pair_.group_begin();
      for (int a = 0; a < m_; ++a) {
        const auto c = static_cast<std::size_t>(headers_[static_cast<std::size_t>(a)][1]);
        const auto o = static_cast<std::size_t>(from_offset_[static_cast<std::size_t>(a)]);
        if (c == 0) continue;
        recv(a, kRows, span_of(recv_rows_, o * h_, c * h_), "token rows");
        recv(a, kMeta, span_of(recv_meta_, o * k_, c * k_), "routing slots");
        if (hand_off_) recv(a, kTokens, span_of(recv_tokens_, o, c), "row tokens");
      }
      pair_.group_end();
      phase_ = Phase::kRows;
      if (!test_pending()) return false;
    }
    phase_ = Phase::kNone;
    const auto rows = static_cast<std::size_t>(from_offset_.back());
    arrival_.build(std::span<const RoutingSlot>(recv_meta_.data(), rows * k_), config_.top_k);
    const auto slots = static_cast<std::size_t>(arrival_.total_slots());
    detail::grow(expert_in_, slots * h_);
    detail::grow(expert_out_, slots * h_);
    backend_.gather_rows(stream_, const_span(recv_rows_), h_, arrival_.expert_row(), span_of(expert_in_, 0, slots * h_));
    done_ = backend_.record(stream_);
    state_ = State::kReceived;
    return true;
  }

  /// Number of experts on this F-rank.
  std::size_t local_experts() const { return arrival_.local_experts(); }
  /// Global id of local expert le (ascending in le).
  std::int32_t expert_id(std::size_t le) const { return arrival_.expert_id(le); }
  /// Rows routed to local expert le in this step (may be 0).
  std::size_t expert_rows(std::size_t le) const {
    return static_cast<std::size_t>(arrival_.expert_offset(le + 1) - arrival_.expert_offset(le));
  }
  /// Input rows of local expert le: [expert_rows(le) x hidden], ordered by (A-rank, token).
  std::span<const Elem> expert_input(std::size_t le) const { return expert_block(expert_in_, le); }
  /// Where the user writes expert le's outputs, row for row (kept for dL/dgate).
  std::span<Elem> expert_output(std::size_t le) { return expert_block(expert_out_, le); }
  /// Gate of every input row of expert le.
  std::span<const float> expert_gates(std::size_t le) const {
    const auto b = static_cast<std::size_t>(arrival_.expert_offset(le));
    return arrival_.expert_gate().subspan(b, expert_rows(le));
  }

  /// Combines the expert outputs per arrived row (gate-weighted, slot order) and sends
  /// each A-rank its partial rows (non-blocking).
  void send_return() {
    enter(Role::kFfn, "send_return", {State::kReceived});
    const auto rows = arrival_.rows();
    detail::grow(ret_send_, rows * h_);
    backend_.combine_rows(stream_, const_span(expert_out_), h_, arrival_.row_seg(), arrival_.row_pos(),
                          arrival_.row_gate(), span_of(ret_send_, 0, rows * h_));
    last_rows_sent_ = static_cast<std::int64_t>(rows);
    state_ = State::kReturned;
    post_after_kernels(Post::kReturn);
  }

  /// Waits for dL/dy rows and fans them out per expert, scaled by the slot's gate.
  void receive_grad() {
    while (!try_receive_grad()) wait_pending();
  }
  /// receive_grad() without waiting: false while rows are outstanding (call again), true
  /// once they are fanned out.
  bool try_receive_grad() {
    enter(Role::kFfn, "receive_grad", {State::kReturned});
    const auto rows = arrival_.rows();
    if (phase_ == Phase::kNone) {
      if (!test_pending()) return false;  // the return's sends
      detail::grow(grad_in_rows_, rows * h_);
      pair_.group_begin();
      for_each_source([&](int a, std::size_t o, std::size_t c) {
        recv(return_peer(a), kGradRows, span_of(grad_in_rows_, o * h_, c * h_), "output-gradient rows");
      });
      pair_.group_end();
      phase_ = Phase::kRows;
    }
    if (!test_pending()) return false;
    phase_ = Phase::kNone;
    const auto slots = static_cast<std::size_t>(arrival_.total_slots());
    detail::grow(expert_gout_, slots * h_);
    detail::grow(expert_gin_, slots * h_);
    backend_.gather_rows_scaled(stream_, const_span(grad_in_rows_), h_, arrival_.expert_row(), arrival_.expert_gate(),
                                span_of(expert_gout_, 0, slots * h_));
    done_ = backend_.record(stream_);
    state_ = State::kGradReceived;
    return true;
  }

  /// gate_j * dL/dy rows of local expert le: [expert_rows(le) x hidden].
  std::span<const Elem> expert_grad_output(std::size_t le) const { return expert_block(expert_gout_, le); }
  /// Where the user writes dL/d(expert input) of expert le, row for row.
  std::span<Elem> expert_grad_input(std::size_t le) { return expert_block(expert_gin_, le); }

  /// Combines input gradients per row, computes dL/dgate, and sends both back.
  void send_grad() {
    enter(Role::kFfn, "send_grad", {State::kGradReceived});
    const auto rows = arrival_.rows();
    detail::grow(grad_send_, rows * h_);
    detail::grow(gate_send_, rows * k_);
    backend_.combine_rows(stream_, const_span(expert_gin_), h_, arrival_.row_seg(), arrival_.row_pos(),
                          std::span<const float>{}, span_of(grad_send_, 0, rows * h_));
    backend_.gate_gradients(stream_, const_span(expert_out_), const_span(grad_in_rows_, rows * h_), h_,
                            arrival_.row_seg(), arrival_.row_pos(), arrival_.row_slot(), k_,
                            span_of(gate_send_, 0, rows * k_));
    state_ = State::kGradSent;
    post_after_kernels(Post::kGrad);
  }

 private:
  /// Posts what waited for the channel's kernels (see post_after_kernels).
  void post_deferred() {
    const Post what = post_;
    post_ = Post::kNone;
    pair_.group_begin();
    switch (what) {
      case Post::kNone:
        break;
      case Post::kDispatch:
        for (int d = 0; d < n_; ++d) {
          const auto c = static_cast<std::size_t>(layout_.count(d));
          const auto o = static_cast<std::size_t>(layout_.offset(d));
          send(m_ + d, kHeader, span_of(headers_, static_cast<std::size_t>(d), 1), "layout header");
          if (c == 0) continue;
          send(m_ + d, kRows, span_of(send_rows_, o * h_, c * h_), "token rows");
          send(m_ + d, kMeta, span_of(send_meta_, o * k_, c * k_), "routing slots");
          if (hand_off_) send(m_ + d, kTokens, layout_.row_token().subspan(o, c), "row tokens");
          // The return's receive is posted with the sends, not before them: a transport that
          // runs groups in issue order on one stream (NCCL) would otherwise wait for the
          // return ahead of the rows it answers.
          if (!hand_off_) recv(m_ + d, kReturn, span_of(ret_rows_, o * h_, c * h_), "return rows");
        }
        break;
      case Post::kBackwardDispatch:
        for (int d = 0; d < n_; ++d) {
          const auto c = static_cast<std::size_t>(layout_.count(d));
          const auto o = static_cast<std::size_t>(layout_.offset(d));
          if (c > 0) send(m_ + d, kGradRows, span_of(grad_send_, o * h_, c * h_), "output-gradient rows");
        }
        post_gradient_receives();  // with the sends, as the dispatch's return receives
        break;
      case Post::kHandOffBackwardDispatch:
        for_each_source([&](int d, std::size_t o, std::size_t c) {
          send(m_ + d, kGradRows, span_of(grad_send_, o * h_, c * h_), "output-gradient rows");
        });
        break;
      case Post::kReturn:
        if (hand_off_) {  // next-layer A-rank a learns the row counts and tokens first
          ret_headers_.resize(static_cast<std::size_t>(m_));
          for (int a = 0; a < m_; ++a) {
            const auto ua = static_cast<std::size_t>(a);
            ret_headers_[ua] = {step_, headers_[ua][1]};
            send(return_peer(a), kHeader, span_of(ret_headers_, ua, 1), "return header");
          }
          for_each_source([&](int a, std::size_t o, std::size_t c) {
            send(return_peer(a), kMeta, span_of(recv_tokens_, o, c), "return tokens");
          });
        }
        for_each_source([&](int a, std::size_t o, std::size_t c) {
          send(return_peer(a), kReturn, span_of(ret_send_, o * h_, c * h_), "return rows");
        });
        break;
      case Post::kGrad:
        for_each_source([&](int a, std::size_t o, std::size_t c) {
          send(a, kGradReturn, span_of(grad_send_, o * h_, c * h_), "gradient rows");
          send(a, kGateGrad, span_of(gate_send_, o * k_, c * k_), "gate gradients");
        });
        break;
    }
    pair_.group_end();
  }

  /// Records the kernels enqueued so far; `what` is posted once they have run (now, on
  /// a caller-served stream).
  void post_after_kernels(Post what) {
    done_ = backend_.record(stream_);
    post_ = what;
    kernels_done();
  }

  /// True once the channel's kernels have run (reporting a failed one); posts what
  /// waited for them.
  bool kernels_done() {
    if (!backend_.query(done_)) return false;
    try {
      backend_.synchronize(done_);
    } catch (...) {
      fail_pending();
      throw;
    }
    if (post_ != Post::kNone) post_deferred();
    return true;
  }

  /// dL/dgate of slot (t, j) is entry j of the row token t sent to that slot's F-rank:
  /// gate_source_[t * top_k + j] = row * top_k + j (an element gather).
  void index_gate_sources(std::size_t tokens) {
    detail::grow(gate_source_, tokens * k_);
    const auto seg = layout_.token_offsets();
    const auto rows_of = layout_.token_rows();
    for (std::size_t t = 0; t < tokens; ++t) {
      for (std::size_t j = 0; j < k_; ++j) {
        const int d = layout_.dest_of_slot(t, j, config_.top_k);
        for (auto q = seg[t]; q < seg[t + 1]; ++q) {
          const auto row = rows_of[static_cast<std::size_t>(q)];
          if (layout_.dest_of_row(row) == d) {
            gate_source_[t * k_ + j] = row * static_cast<std::int64_t>(k_) + static_cast<std::int64_t>(j);
            break;
          }
        }
      }
    }
  }

  /// Validates the (step, rows) headers from pair ranks [first, first + count) and
  /// sets from_offset_; returns the total rows. IoError (channel failed) otherwise.
  std::size_t check_headers(int count, int first, std::int64_t step) {
    from_offset_.resize(static_cast<std::size_t>(count) + 1);
    from_offset_[0] = 0;
    for (int i = 0; i < count; ++i) {
      const auto& hd = headers_[static_cast<std::size_t>(i)];
      if (hd[0] != step || hd[1] < 0) state_ = State::kFailed;  // the peers are out of step
      if (hd[0] != step) fail<IoError>(peer_field(first + i, "layout header step"), hd[0], "step " + std::to_string(step));
      if (hd[1] < 0) fail<IoError>(peer_field(first + i, "layout header rows"), hd[1], ">= 0");
      from_offset_[static_cast<std::size_t>(i) + 1] = from_offset_[static_cast<std::size_t>(i)] + hd[1];
    }
    return static_cast<std::size_t>(from_offset_.back());
  }

  /// Hand-off backward on the next-layer A-rank: dL/dy rows to the F-ranks, in the
  /// order their rows arrived.
  void hand_off_backward_dispatch(std::span<const Elem> grad_out) {
    enter(Role::kNextAttention, "backward_dispatch", {State::kCombined});
    expect(grad_out.size() == tokens_ * h_, "M2NChannel.backward_dispatch grad_out.size()", grad_out.size(),
           "tokens * hidden (as in receive_return)");
    const auto rows = static_cast<std::size_t>(from_offset_.back());
    detail::grow(grad_send_, rows * h_);
    backend_.gather_rows(stream_, grad_out, h_, std::span<const std::int64_t>(ret_tokens_.data(), rows),
                         span_of(grad_send_, 0, rows * h_));
    state_ = State::kIdle;
    post_after_kernels(Post::kHandOffBackwardDispatch);
  }

  /// A-rank: receives for dL/dx rows and dL/dgate from every F-rank it fed.
  void post_gradient_receives() {
    const auto rows = static_cast<std::size_t>(layout_.total_rows());
    detail::grow(grad_ret_, rows * h_);
    detail::grow(gate_ret_, rows * k_);
    pair_.group_begin();
    for (int d = 0; d < n_; ++d) {
      const auto c = static_cast<std::size_t>(layout_.count(d));
      const auto o = static_cast<std::size_t>(layout_.offset(d));
      if (c == 0) continue;
      recv(m_ + d, kGradReturn, span_of(grad_ret_, o * h_, c * h_), "gradient rows");
      recv(m_ + d, kGateGrad, span_of(gate_ret_, o * k_, c * k_), "gate gradients");
    }
    pair_.group_end();
  }

  template <class E>
  static constexpr std::size_t element_bytes(Buffer<E> M2NChannel::*) {
    return sizeof(E);
  }

  /// Calls f(&M2NChannel::buffer, most elements) for every back-end buffer of pair rank
  /// `rank`. An A-rank sends a token to at most min(top_k, F-ranks) F-ranks; an F-rank
  /// receives at most one row per (A-rank, token), each with at most min(top_k, local
  /// experts) slots; a next-layer A-rank one row per (F-rank, token).
  template <class F>
  static void for_each_bound(const ChannelConfig& c, int rank, std::size_t max_tokens, F&& f) {
    validate(c, c.attention_ranks * (c.hand_off ? 2 : 1) + c.ffn_ranks);
    const auto m = static_cast<std::size_t>(c.attention_ranks), n = static_cast<std::size_t>(c.ffn_ranks);
    const auto h = static_cast<std::size_t>(c.hidden), k = static_cast<std::size_t>(c.top_k);
    expect(rank >= 0 && static_cast<std::size_t>(rank) < m * (c.hand_off ? 2 : 1) + n, "M2NChannel pair rank", rank,
           "a rank of the channel's pair group");
    const auto me = static_cast<std::size_t>(rank);
    if (me < m) {
      const std::size_t rows = max_tokens * std::min(k, n);
      for (auto b : {&M2NChannel::send_rows_, &M2NChannel::ret_rows_, &M2NChannel::grad_send_, &M2NChannel::grad_ret_})
        f(b, rows * h);
      f(&M2NChannel::gate_ret_, rows * k);
    } else if (me < m + n) {
      const auto local = static_cast<std::size_t>(std::count(c.expert_rank.begin(), c.expert_rank.end(),
                                                             static_cast<std::int32_t>(me - m)));
      const std::size_t rows = max_tokens * m, slots = rows * std::min(k, local);
      for (auto b : {&M2NChannel::recv_rows_, &M2NChannel::ret_send_, &M2NChannel::grad_in_rows_, &M2NChannel::grad_send_})
        f(b, rows * h);
      for (auto b : {&M2NChannel::expert_in_, &M2NChannel::expert_out_, &M2NChannel::expert_gout_, &M2NChannel::expert_gin_})
        f(b, slots * h);
      f(&M2NChannel::gate_send_, rows * k);
    } else {
      const std::size_t rows = max_tokens * n;
      for (auto b : {&M2NChannel::ret_rows_, &M2NChannel::grad_send_}) f(b, rows * h);
    }
  }

  /// Where F-rank-side traffic for A-rank a's tokens returns (and dL/dy comes from).
  int return_peer(int a) const { return hand_off_ ? m_ + n_ + a : a; }

  /// Where a try_ receive stands between calls.
  enum class Phase { kNone, kHeaders, kRows };
  enum class State { kIdle, kDispatched, kCombined, kBackwardDispatched, kReceived, kReturned,
                     kGradReceived, kGradSent, kFailed };
  // F -> next-layer A reuses kHeader / kMeta (return header / tokens): matching is
  // per (source, tag) and a next-layer A-rank receives nothing else from F-ranks.
  enum Tag { kHeader = 0, kRows, kMeta, kReturn, kGradRows, kGradReturn, kGateGrad, kTokens };
  template <class V>
  static auto span_of(V& v, std::size_t offset, std::size_t count) {
    return std::span(v.data() + offset, count);
  }
  template <class V>
  static auto const_span(const V& v, std::size_t count) {
    return std::span(v.data(), count);
  }
  template <class V>
  static auto const_span(const V& v) {
    return std::span(v.data(), v.size());
  }
  std::span<Elem> expert_block(Buffer<Elem>& v, std::size_t le) const {
    return {v.data() + static_cast<std::size_t>(arrival_.expert_offset(le)) * h_, expert_rows(le) * h_};
  }
  std::span<const Elem> expert_block(const Buffer<Elem>& v, std::size_t le) const {
    return {v.data() + static_cast<std::size_t>(arrival_.expert_offset(le)) * h_, expert_rows(le) * h_};
  }

  /// Calls body(i, first row, rows) for every source i (A-rank on an F-rank, F-rank
  /// on a next-layer A-rank) that sent rows this step.
  template <class Body>
  void for_each_source(Body&& body) {
    const auto sources = from_offset_.size() - 1;
    for (std::size_t i = 0; i < sources; ++i) {
      const auto c = static_cast<std::size_t>(headers_[i][1]);
      if (c > 0) body(static_cast<int>(i), static_cast<std::size_t>(from_offset_[i]), c);
    }
  }

  void enter(Role role, const char* call, std::initializer_list<State> allowed) {
    if (state_ == State::kFailed)
      fail(channel_field(call), "failed", "a channel that has not timed out (create a new one)");
    if (!connection_->ready())
      fail(channel_field(call), "handshake pending", "complete_handshake() after a deferred creation");
    if (role != role_)
      fail(channel_field(call), role_name(role_), std::string("a rank of role ") + role_name(role));
    if (std::find(allowed.begin(), allowed.end(), state_) == allowed.end())
      fail(channel_field(call), "out of order", "the call sequence of the file comment");
  }

  template <class V>
  void send(int peer, int tag, std::span<V> data, const char* what) {
    transfers_.send(peer, tag_base_ + tag, data, what);
    bytes_sent_ += static_cast<std::int64_t>(data.size_bytes());
  }
  template <class V>
  void recv(int peer, int tag, std::span<V> data, const char* what) {
    transfers_.recv(peer, tag_base_ + tag, data, what);
  }

  /// True once the channel's kernels have run and every posted transfer completed (the
  /// sends that waited for a kernel are posted on the way). On an error cancels the
  /// rest and leaves the channel failed.
  bool test_pending() {
    if (!kernels_done()) return false;
    try {
      return transfers_.test();
    } catch (...) {
      state_ = State::kFailed;
      throw;
    }
  }

  /// Waits for the channel's kernels, then (up to the timeout) for every transfer; on a
  /// timeout or an error cancels the rest and leaves the channel failed.
  void wait_pending() {
    try {
      backend_.synchronize(done_);
    } catch (...) {
      fail_pending();
      throw;
    }
    kernels_done();
    std::optional<typename PendingTransfers<T>::Label> late;
    try {
      late = transfers_.wait(deadline_after(config_.timeout));
    } catch (...) {
      state_ = State::kFailed;
      throw;
    }
    if (!late) return;
    state_ = State::kFailed;
    std::ostringstream field, value;
    field << channel_field(late->is_send ? "send" : "receive") << " '" << late->what << "' "
          << (late->is_send ? "to " : "from ") << peer_name(late->peer);
    value << "pending after " << config_.timeout.count() << " ms";
    throw TimeoutError(
        describe(field.str(), value.str(), "completion within ChannelConfig.timeout (is the peer silent or dead?)"));
  }

  /// A kernel failed: nothing posted after it may go out.
  void fail_pending() noexcept {
    transfers_.cancel();
    post_ = Post::kNone;
    state_ = State::kFailed;
  }

  static const char* role_name(Role r) {
    return r == Role::kAttention ? "A-rank" : r == Role::kFfn ? "F-rank" : "next-layer A-rank";
  }
  std::string peer_name(int pair_rank) const { return comm::peer_name(config_, pair_rank); }
  std::string channel_field(const char* call) const {
    std::ostringstream os;
    os << "M2NChannel '" << name_ << "' step " << step_ << ' ' << call;
    return os.str();
  }
  std::string peer_field(int pair_rank, const char* what) const {
    return channel_field("receive") + " " + what + " from " + peer_name(pair_rank);
  }

  /// Adopts a connection of its own (one channel).
  M2NChannel(std::unique_ptr<M2NConnection<T>> own, B& backend, Stream& stream) : M2NChannel(*own, 0, backend, stream) {
    owned_ = std::move(own);
  }

  std::unique_ptr<M2NConnection<T>> owned_;  // a connection of its own, if any
  M2NConnection<T>* connection_;
  T& pair_;
  const ChannelConfig& config_;
  int tag_base_ = 0;
  std::string name_;
  B& backend_;
  Stream& stream_;
  PendingTransfers<T> transfers_;
  typename B::Event done_{};  // the channel's last kernel
  Post post_ = Post::kNone;   // sends waiting for done_
  int m_ = 0, n_ = 0;
  std::size_t h_ = 0, k_ = 0;
  Role role_ = Role::kAttention;
  bool hand_off_ = false;
  State state_ = State::kIdle;
  Phase phase_ = Phase::kNone;
  std::int64_t step_ = -1;
  std::size_t tokens_ = 0;
  std::int64_t last_rows_sent_ = 0, bytes_sent_ = 0;
  std::vector<std::array<std::int64_t, 2>> headers_, ret_headers_;  // (step, rows) per peer
  // A side.
  SendOnceLayout layout_;
  Buffer<Elem> send_rows_, ret_rows_, grad_send_, grad_ret_;
  std::vector<RoutingSlot> send_meta_;
  Buffer<float> gate_ret_;
  std::vector<std::int64_t> gate_source_;
  // F side.
  ArrivalLayout arrival_;
  std::vector<std::int64_t> from_offset_;
  std::vector<RoutingSlot> recv_meta_;
  std::vector<std::int64_t> recv_tokens_;  // hand-off: token of every arrived row
  // Next-layer A side (hand-off).
  TokenGather gather_;
  std::vector<std::int64_t> ret_tokens_;
  Buffer<Elem> recv_rows_, expert_in_, expert_out_, ret_send_, grad_in_rows_, expert_gout_, expert_gin_;
  Buffer<float> gate_send_;
};

}  // namespace disagmoe::comm
