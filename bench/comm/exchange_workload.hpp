// SPDX-License-Identifier: Apache-2.0
// One MoE layer's token exchange for the comm benchmarks: a routing workload, the
// M2NChannel path (send-once dispatch + fused return) and a pairwise baseline that
// sends one row per (token, expert) pair and combines at the A side (what an
// all-to-all dispatcher without duplicate removal, e.g. Megatron's `alltoall`, ships).
#pragma once

#include <disagmoe/backend/host/backend.hpp>
#include <disagmoe/backend/host/token_kernels.hpp>
#include <disagmoe/comm/m2n_channel.hpp>

#include <algorithm>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

namespace bench {

struct Workload {
  int m = 2, n = 2, experts = 16, k = 4, h = 1024;
  std::size_t tokens = 2048;  // per A-rank
  std::vector<std::int32_t> expert_rank;
  std::vector<std::vector<float>> x, gates;
  std::vector<std::vector<std::int32_t>> ids;
};

/// Expert e on F-rank e % n. `correlated`: 90% of tokens take all k experts from one
/// rank's experts (co-selected experts placed together, Expert Coupling §3);
/// otherwise k distinct experts uniformly.
inline Workload make_workload(int m, int n, int experts, int k, int h, std::size_t tokens, bool correlated,
                              std::uint64_t seed) {
  Workload w;
  w.m = m, w.n = n, w.experts = experts, w.k = k, w.h = h, w.tokens = tokens;
  for (int e = 0; e < experts; ++e) w.expert_rank.push_back(e % n);
  std::mt19937_64 rng(seed);
  std::vector<std::int32_t> all(static_cast<std::size_t>(experts));
  std::iota(all.begin(), all.end(), 0);
  for (int a = 0; a < m; ++a) {
    std::vector<float> x(tokens * static_cast<std::size_t>(h)), g;
    std::vector<std::int32_t> ids;
    for (auto& v : x) v = std::uniform_real_distribution<float>(-1, 1)(rng);
    for (std::size_t t = 0; t < tokens; ++t) {
      std::vector<std::int32_t> pool = all;
      if (correlated && rng() % 10 != 0) {
        const int d = static_cast<int>(rng() % static_cast<unsigned>(n));
        pool.clear();
        for (int e = d; e < experts; e += n) pool.push_back(e);
      }
      std::shuffle(pool.begin(), pool.end(), rng);
      for (int j = 0; j < k; ++j) {
        ids.push_back(pool[static_cast<std::size_t>(j) % pool.size()]);
        g.push_back(1.0f / static_cast<float>(k));
      }
    }
    w.x.push_back(std::move(x));
    w.ids.push_back(std::move(ids));
    w.gates.push_back(std::move(g));
  }
  return w;
}

/// The stand-in expert: y = 0.5 x (cheap, identical per row in both paths).
inline void expert_compute(std::span<const float> in, std::span<float> out) {
  for (std::size_t i = 0; i < in.size(); ++i) out[i] = 0.5f * in[i];
}

template <class T>
using HostChannel = disagmoe::comm::M2NChannel<T, disagmoe::host::Backend>;

/// One layer through M2NChannel on pair rank `me` (A-ranks first), kernels on a
/// caller-served stream.
template <class T>
void m2n_step(HostChannel<T>& ch, const Workload& w, int me, std::int64_t step, std::vector<float>& out) {
  if (me < w.m) {
    const auto a = static_cast<std::size_t>(me);
    out.resize(w.tokens * static_cast<std::size_t>(w.h));
    ch.dispatch(step, w.x[a], w.ids[a], w.gates[a]);
    ch.combine(out);
  } else {
    ch.receive(step);
    for (std::size_t le = 0; le < ch.local_experts(); ++le) expert_compute(ch.expert_input(le), ch.expert_output(le));
    ch.send_return();
  }
}

/// Per-(token, expert) row layout of one A-rank: rows grouped by F-rank, then token, then slot.
struct PairLayout {
  std::vector<std::int64_t> counts, offsets, row_token, seg, pos;
  std::vector<float> weights;
  void build(const Workload& w, std::size_t a) {
    const auto k = static_cast<std::size_t>(w.k);
    counts.assign(static_cast<std::size_t>(w.n), 0);
    for (auto e : w.ids[a]) ++counts[static_cast<std::size_t>(w.expert_rank[static_cast<std::size_t>(e)])];
    offsets.assign(static_cast<std::size_t>(w.n) + 1, 0);
    for (int d = 0; d < w.n; ++d) offsets[static_cast<std::size_t>(d) + 1] = offsets[static_cast<std::size_t>(d)] + counts[static_cast<std::size_t>(d)];
    auto cursor = offsets;
    row_token.assign(w.tokens * k, 0);
    pos.assign(w.tokens * k, 0);
    seg.assign(w.tokens + 1, 0);
    weights = w.gates[a];
    for (std::size_t t = 0; t < w.tokens; ++t) {
      seg[t + 1] = static_cast<std::int64_t>((t + 1) * k);
      for (std::size_t j = 0; j < k; ++j) {
        const auto d = static_cast<std::size_t>(w.expert_rank[static_cast<std::size_t>(w.ids[a][t * k + j])]);
        const auto r = cursor[d]++;
        row_token[static_cast<std::size_t>(r)] = static_cast<std::int64_t>(t);
        pos[t * k + j] = r;
      }
    }
  }
};

/// The pairwise baseline over any transport: counts, then one row per pair, then
/// the expert outputs back, combined with the gates at the A side.
template <class T>
class PairwiseExchange {
 public:
  PairwiseExchange(T& pair, const Workload& w) : t_(pair), w_(w) {
    if (t_.rank() < w_.m) layout_.build(w_, static_cast<std::size_t>(t_.rank()));
  }
  std::int64_t rows_sent() const { return rows_sent_; }

  void step(std::vector<float>& out) {
    using namespace disagmoe;
    const auto h = static_cast<std::size_t>(w_.h);
    reqs_.clear();
    if (t_.rank() < w_.m) {
      const auto a = static_cast<std::size_t>(t_.rank());
      const auto rows = w_.tokens * static_cast<std::size_t>(w_.k);
      send_.resize(rows * h);
      ret_.resize(rows * h);
      out.resize(w_.tokens * h);
      host::gather_rows<float>(w_.x[a], h, layout_.row_token, send_, {}, false);
      t_.group_begin();
      for (int d = 0; d < w_.n; ++d) {
        const auto o = static_cast<std::size_t>(layout_.offsets[static_cast<std::size_t>(d)]) * h;
        const auto c = static_cast<std::size_t>(layout_.counts[static_cast<std::size_t>(d)]) * h;
        reqs_.push_back(comm::irecv(t_, w_.m + d, 1, std::span<float>(ret_.data() + o, c)));
        reqs_.push_back(comm::isend(t_, w_.m + d, 0, std::span<const std::int64_t>(&layout_.counts[static_cast<std::size_t>(d)], 1)));
        reqs_.push_back(comm::isend(t_, w_.m + d, 2, std::span<const float>(send_.data() + o, c)));
      }
      t_.group_end();
      wait_all();
      host::combine_rows<float, float>(ret_, h, layout_.seg, layout_.pos, layout_.weights, out);
      rows_sent_ = static_cast<std::int64_t>(rows);
    } else {
      counts_.assign(static_cast<std::size_t>(w_.m), 0);
      t_.group_begin();
      for (int a = 0; a < w_.m; ++a) reqs_.push_back(comm::irecv(t_, a, 0, std::span<std::int64_t>(&counts_[static_cast<std::size_t>(a)], 1)));
      t_.group_end();
      wait_all();
      std::vector<std::int64_t> off(static_cast<std::size_t>(w_.m) + 1, 0);
      for (int a = 0; a < w_.m; ++a) off[static_cast<std::size_t>(a) + 1] = off[static_cast<std::size_t>(a)] + counts_[static_cast<std::size_t>(a)];
      const auto rows = static_cast<std::size_t>(off.back());
      recv_.resize(rows * h);
      y_.resize(rows * h);
      t_.group_begin();
      for (int a = 0; a < w_.m; ++a)
        reqs_.push_back(comm::irecv(t_, a, 2, std::span<float>(recv_.data() + static_cast<std::size_t>(off[static_cast<std::size_t>(a)]) * h,
                                                             static_cast<std::size_t>(counts_[static_cast<std::size_t>(a)]) * h)));
      t_.group_end();
      wait_all();
      expert_compute(std::span<const float>(recv_.data(), rows * h), std::span<float>(y_.data(), rows * h));
      t_.group_begin();
      for (int a = 0; a < w_.m; ++a)
        reqs_.push_back(comm::isend(t_, a, 1, std::span<const float>(y_.data() + static_cast<std::size_t>(off[static_cast<std::size_t>(a)]) * h,
                                                                   static_cast<std::size_t>(counts_[static_cast<std::size_t>(a)]) * h)));
      t_.group_end();
      wait_all();
      rows_sent_ = static_cast<std::int64_t>(rows);
    }
  }

 private:
  void wait_all() {
    for (auto& r : reqs_)
      if (!t_.wait(r, disagmoe::comm::deadline_after(std::chrono::seconds(60)))) throw std::runtime_error("baseline timed out");
    reqs_.clear();
  }
  T& t_;
  const Workload& w_;
  PairLayout layout_;
  std::vector<typename T::Request> reqs_;
  std::vector<float> send_, ret_, recv_, y_;
  std::vector<std::int64_t> counts_;
  std::int64_t rows_sent_ = 0;
};

/// M2N configuration for a workload.
inline disagmoe::comm::ChannelConfig channel_config(const Workload& w) {
  disagmoe::comm::ChannelConfig c;
  c.name = "bench";
  c.attention_ranks = w.m;
  c.ffn_ranks = w.n;
  c.hidden = w.h;
  c.top_k = w.k;
  c.expert_rank = w.expert_rank;
  c.timeout = std::chrono::seconds(60);
  c.tag_base = 16;  // clear of the baseline's tags 0..2 on the same transport
  return c;
}

/// Rows per A-rank the send-once layout ships (recount, for the bytes column).
inline std::int64_t send_once_rows(const Workload& w, std::size_t a) {
  std::int64_t rows = 0;
  const auto k = static_cast<std::size_t>(w.k);
  for (std::size_t t = 0; t < w.tokens; ++t) {
    std::vector<int> d;
    for (std::size_t j = 0; j < k; ++j) d.push_back(w.expert_rank[static_cast<std::size_t>(w.ids[a][t * k + j])]);
    std::sort(d.begin(), d.end());
    rows += std::unique(d.begin(), d.end()) - d.begin();
  }
  return rows;
}

}  // namespace bench
