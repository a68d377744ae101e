// SPDX-License-Identifier: Apache-2.0
/// @file channel_config.hpp
/// Configuration of an `M2NChannel`, its validation, and the fingerprint that ranks
/// exchange at channel creation so that a mismatch between ranks is an error there,
/// not a hang or garbage later.
#pragma once

#include <disagmoe/error.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace disagmoe::comm {

/// Tags a channel uses: [tag_base, tag_base + kTagsPerChannel).
inline constexpr int kTagsPerChannel = 8;
/// Tag of the creation handshake (MPI guarantees tags up to 32767, MPI 4.0 §3.2.3).
inline constexpr int kHandshakeTag = 32767;

/// What an M2N/N2M channel connects and carries. Pair-group ranks [0, M) are the
/// attention ranks (A-ranks), [M, M + N) the FFN ranks (F-ranks).
struct ChannelConfig {
  /// Name used in every error message (e.g. "layer3").
  std::string name = "m2n";
  /// M: number of A-ranks.
  int attention_ranks = 0;
  /// N: number of F-ranks.
  int ffn_ranks = 0;
  /// Row width in elements (the model's hidden size).
  int hidden = 0;
  /// Experts chosen per token.
  int top_k = 0;
  /// expert_rank[e] in [0, N): the F-rank holding expert e (size = number of experts).
  std::vector<std::int32_t> expert_rank;
  /// First of the kTagsPerChannel tags this channel uses; channels sharing one
  /// transport need disjoint tag ranges.
  int tag_base = 0;
  /// Longest a single wait may take before the channel reports the peer it waits for.
  std::chrono::milliseconds timeout{30000};
  /// AF-Pipe hand-off: the pair group has 2M + N ranks, [M + N, 2M + N) being the
  /// next layer's A-ranks; F-ranks return A-rank a's combined rows to next-layer
  /// A-rank a (the fused combine + dispatch stage), which also starts the backward.
  bool hand_off = false;
};

/// Throws ConfigError naming the first invalid field of `c` for a pair group of
/// `pair_size` ranks. O(experts).
inline void validate(const ChannelConfig& c, int pair_size) {
  expect(c.attention_ranks >= 1, "ChannelConfig.attention_ranks", c.attention_ranks, ">= 1");
  expect(c.ffn_ranks >= 1, "ChannelConfig.ffn_ranks", c.ffn_ranks, ">= 1");
  const int ranks = c.attention_ranks * (c.hand_off ? 2 : 1) + c.ffn_ranks;
  expect(ranks == pair_size,
         c.hand_off ? "ChannelConfig 2 * attention_ranks + ffn_ranks (hand_off)" : "ChannelConfig.attention_ranks + ffn_ranks",
         ranks, "the size of the pair group (" + std::to_string(pair_size) + ")");
  expect(c.hidden >= 1, "ChannelConfig.hidden", c.hidden, ">= 1");
  expect(!c.expert_rank.empty(), "ChannelConfig.expert_rank.size()", 0, ">= 1 expert");
  expect(c.top_k >= 1 && c.top_k <= static_cast<int>(c.expert_rank.size()), "ChannelConfig.top_k", c.top_k,
         "in [1, experts = " + std::to_string(c.expert_rank.size()) + "]");
  for (std::size_t e = 0; e < c.expert_rank.size(); ++e) {
    if (c.expert_rank[e] < 0 || c.expert_rank[e] >= c.ffn_ranks)
      fail("ChannelConfig.expert_rank[" + std::to_string(e) + "]", c.expert_rank[e],
           "an F-rank in [0, ffn_ranks = " + std::to_string(c.ffn_ranks) + ")");
  }
  expect(c.tag_base >= 0 && c.tag_base + kTagsPerChannel <= kHandshakeTag, "ChannelConfig.tag_base",
         c.tag_base, "in [0, 32767 - kTagsPerChannel]");
  expect(c.timeout.count() > 0, "ChannelConfig.timeout (ms)", c.timeout.count(), "> 0");
}

/// The fields every rank of a channel must agree on, as exchanged at creation.
struct ChannelFingerprint {
  static constexpr std::array<std::string_view, 11> kNames{
      "ChannelConfig.attention_ranks", "ChannelConfig.ffn_ranks", "ChannelConfig.hidden",
      "ChannelConfig.top_k",           "ChannelConfig.expert_rank.size()", "element size (bytes)",
      "ChannelConfig.expert_rank (hash)", "ChannelConfig.tag_base", "ChannelConfig.name (hash)",
      "ChannelConfig.hand_off", "channels of the connection"};
  std::array<std::int64_t, kNames.size()> values{};

  /// FNV-1a, 64 bit (Fowler, Noll, Vo; IETF draft-eastlake-fnv).
  static std::int64_t hash(const void* data, std::size_t bytes) {
    std::uint64_t h = 0xcbf29ce484222325ull;
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
    return static_cast<std::int64_t>(h >> 1);
  }

  /// The fingerprint of `c` for `channels` channels of elements of `element_bytes` bytes.
  static ChannelFingerprint of(const ChannelConfig& c, std::size_t element_bytes, int channels = 1) {
    ChannelFingerprint f;
    f.values = {c.attention_ranks,
                c.ffn_ranks,
                c.hidden,
                c.top_k,
                static_cast<std::int64_t>(c.expert_rank.size()),
                static_cast<std::int64_t>(element_bytes),
                hash(c.expert_rank.data(), c.expert_rank.size() * sizeof(std::int32_t)),
                c.tag_base,
                hash(c.name.data(), c.name.size()),
                c.hand_off ? 1 : 0,
                channels};
    return f;
  }

  /// Throws ConfigError naming the first field where `peer` (pair rank `peer_rank`)
  /// differs from this rank's fingerprint.
  void check_same(const ChannelFingerprint& peer, std::string_view channel, int my_rank,
                  int peer_rank) const {
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (values[i] == peer.values[i]) continue;
      std::ostringstream field, want;
      field << "M2NChannel '" << channel << "' " << kNames[i] << " on pair rank " << peer_rank;
      want << values[i] << " as on pair rank " << my_rank << " (ranks must agree at creation)";
      fail(field.str(), peer.values[i], want.str());
    }
  }
};

}  // namespace disagmoe::comm
