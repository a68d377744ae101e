// SPDX-License-Identifier: Apache-2.0
/// @file m2n_connection.hpp
/// `M2NConnection<T>`: what the channels of one MoE layer share (comm/m2n_channel.hpp):
/// the pair group, the validated configuration and the creation handshake that proved
/// every rank agrees on it. Each of its `channels` (one per micro-batch in flight) keeps
/// its own exchange state and tag range [tag_base + c * kTagsPerChannel, ...), so one
/// handshake serves them all.
#pragma once

#include <disagmoe/comm/channel_config.hpp>
#include <disagmoe/comm/pending_transfers.hpp>
#include <disagmoe/comm/transport.hpp>
#include <disagmoe/error.hpp>

#include <cstddef>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace disagmoe::comm {

/// "A-rank a (pair rank r)", "F-rank f (pair rank r)" or "next-layer A-rank a (pair rank r)".
inline std::string peer_name(const ChannelConfig& c, int pair_rank) {
  const int m = c.attention_ranks, n = c.ffn_ranks;
  std::ostringstream os;
  if (pair_rank < m) os << "A-rank " << pair_rank;
  else if (pair_rank < m + n) os << "F-rank " << pair_rank - m;
  else os << "next-layer A-rank " << pair_rank - m - n;
  os << " (pair rank " << pair_rank << ")";
  return os.str();
}

/// See the file comment. `T` is held by reference and must outlive the connection.
template <transport T>
class M2NConnection {
 public:
  /// Marks the two-step creation: the constructor posts the handshake and
  /// `complete_handshake()` waits for it, so that one thread can create several
  /// endpoints of one pair group (comm/dual_role.hpp) before any of them waits.
  struct DeferHandshake {};

  /// Collective over `pair`: validates `config` for `channels` channels of elements of
  /// `element_bytes` bytes (ConfigError), then exchanges fingerprints with every other
  /// rank and throws ConfigError naming the first field on which some rank differs, or
  /// TimeoutError if a rank does not answer.
  M2NConnection(T& pair, ChannelConfig config, std::size_t element_bytes, int channels = 1)
      : M2NConnection(pair, std::move(config), element_bytes, channels, DeferHandshake{}) {
    complete_handshake();
  }
  /// Validates and posts the handshake; call complete_handshake() before any channel call.
  M2NConnection(T& pair, ChannelConfig config, std::size_t element_bytes, int channels, DeferHandshake)
      : pair_(pair), config_(std::move(config)), channels_(channels), element_bytes_(element_bytes), transfers_(pair) {
    validate(config_, pair_.size());
    expect(channels >= 1 && config_.tag_base + channels * kTagsPerChannel <= kHandshakeTag,
           "M2NConnection channels", channels,
           ">= 1 with ChannelConfig.tag_base + channels * kTagsPerChannel <= 32767 (the handshake's tag)");
    mine_ = ChannelFingerprint::of(config_, element_bytes, channels);
    const int size = pair_.size(), me = pair_.rank();
    theirs_.resize(static_cast<std::size_t>(size));
    pair_.group_begin();
    for (int p = 0; p < size; ++p) {
      if (p == me) continue;
      transfers_.recv(p, kHandshakeTag, std::span(theirs_.data() + p, 1), "creation handshake");
      transfers_.send(p, kHandshakeTag, std::span<const ChannelFingerprint>(&mine_, 1), "creation handshake");
    }
    pair_.group_end();
  }
  M2NConnection(const M2NConnection&) = delete;
  M2NConnection& operator=(const M2NConnection&) = delete;

  /// Second step of a deferred creation: waits for every peer's fingerprint and throws
  /// ConfigError naming the first field on which some rank differs, or TimeoutError.
  void complete_handshake() {
    expect(!ready_, "M2NChannel '" + config_.name + "' complete_handshake", "called twice",
           "one call after a deferred creation");
    if (const auto late = transfers_.wait(deadline_after(config_.timeout))) {
      std::ostringstream field, value;
      field << "M2NChannel '" << config_.name << "' creation handshake " << (late->is_send ? "to " : "from ")
            << peer_name(config_, late->peer);
      value << "pending after " << config_.timeout.count() << " ms";
      throw TimeoutError(describe(field.str(), value.str(),
                                  "completion within ChannelConfig.timeout (is the peer silent or dead?)"));
    }
    const int size = pair_.size(), me = pair_.rank();
    for (int p = 0; p < size; ++p)
      if (p != me) mine_.check_same(theirs_[static_cast<std::size_t>(p)], config_.name, me, p);
    ready_ = true;
  }

  /// True once the handshake completed.
  bool ready() const { return ready_; }
  T& pair() const { return pair_; }
  const ChannelConfig& config() const { return config_; }
  int channels() const { return channels_; }
  /// First tag of channel `c`.
  int tag_base(int c) const { return config_.tag_base + c * kTagsPerChannel; }
  /// Bytes of one row element, as every rank agreed.
  std::size_t element_bytes() const { return element_bytes_; }
  /// Channel `c` in error messages: the configuration's name, with " micro-batch c" when
  /// the connection has several.
  std::string channel_name(int c) const {
    return channels_ == 1 ? config_.name : config_.name + " micro-batch " + std::to_string(c);
  }

 private:
  T& pair_;
  ChannelConfig config_;
  int channels_ = 1;
  std::size_t element_bytes_ = 0;
  bool ready_ = false;
  PendingTransfers<T> transfers_;
  ChannelFingerprint mine_;
  std::vector<ChannelFingerprint> theirs_;
};

}  // namespace disagmoe::comm
