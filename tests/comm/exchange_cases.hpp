// SPDX-License-Identifier: Apache-2.0
// The M2NChannel test suite, written once against the `transport` concept and run on
// the loopback transport (test_exchange_loopback.cpp) and under mpirun
// (test_exchange_mpi.cpp). Every rank generates the same global problem from the
// seed, so each rank can compute its own oracle without communication.
// Failures throw std::runtime_error naming the seed, rank and what differed.
#pragma once

#include <disagmoe/backend/host/backend.hpp>
#include <disagmoe/comm/m2n_channel.hpp>
#include <disagmoe/comm/replica_routing.hpp>

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace exchange {

using disagmoe::comm::ChannelConfig;
using disagmoe::comm::M2NChannel;
template <class T>
using Channel = M2NChannel<T, disagmoe::host::Backend>;

/// The back end and comm stream one rank's channel runs on: kernel threads, and a stream
/// served by the caller or (`threaded`) by a thread of its own.
struct Device {
  explicit Device(int kernel_threads = 1, bool threaded = false)
      : backend(disagmoe::host::KernelOptions{kernel_threads, 0}),
        stream(threaded ? disagmoe::host::Stream::threaded("comm") : disagmoe::host::Stream::caller()) {}
  disagmoe::host::Backend backend;
  disagmoe::host::Stream stream;
  /// Results of the channel's kernels are readable after this.
  void sync() { stream.synchronize(); }
};

/// One A-rank's batch of one step.
struct Batch {
  std::vector<float> x;            // [T x H]
  std::vector<std::int32_t> ids;   // [T x k]
  std::vector<float> gates;        // [T x k]
  std::vector<float> grad_out;     // [T x H]
  std::size_t tokens = 0;
};

/// A random exchange: group sizes, placement, routing, expert weights.
struct Problem {
  std::uint64_t seed = 0;
  bool exact = false;  // small integers and dyadic gates: every order of summation is exact
  bool hand_off = false;  // the pair also holds M next-layer A-ranks receiving the return
  int m = 0, n = 0, experts = 0, k = 0, h = 0, steps = 3;
  std::vector<int> pair_members;  // world ranks; A-ranks, F-ranks, [next-layer A-ranks]
  std::vector<std::int32_t> expert_rank;
  std::vector<std::vector<float>> weights;  // W_e: [H x H] row-major, y = W x
  std::vector<std::vector<Batch>> batches;  // [step][A-rank]
};

inline Problem make_problem(std::uint64_t seed, int world, bool exact, bool hand_off = false) {
  std::mt19937_64 rng(seed);
  auto uni = [&](int lo, int hi) { return lo + static_cast<int>(rng() % static_cast<unsigned>(hi - lo + 1)); };
  auto value = [&](int lim) {
    return exact ? static_cast<float>(uni(-lim, lim)) : std::uniform_real_distribution<float>(-1, 1)(rng);
  };
  Problem p;
  p.seed = seed;
  p.exact = exact;
  p.hand_off = hand_off;  // needs world >= 3
  p.m = hand_off ? uni(1, (world - 1) / 2) : uni(1, world - 1);
  p.n = uni(1, world - p.m * (hand_off ? 2 : 1));
  p.pair_members.resize(static_cast<std::size_t>(world));
  std::iota(p.pair_members.begin(), p.pair_members.end(), 0);
  std::shuffle(p.pair_members.begin(), p.pair_members.end(), rng);
  p.pair_members.resize(static_cast<std::size_t>(p.m * (hand_off ? 2 : 1) + p.n));  // the rest stay idle
  p.experts = uni(1, 10);
  p.k = uni(1, std::min(p.experts, 4));
  p.h = uni(1, 8);
  for (int e = 0; e < p.experts; ++e) p.expert_rank.push_back(uni(0, p.n - 1));  // some F-ranks empty
  for (int e = 0; e < p.experts; ++e) {
    std::vector<float> w(static_cast<std::size_t>(p.h * p.h));
    for (auto& v : w) v = value(2);
    p.weights.push_back(std::move(w));
  }
  std::vector<std::int32_t> all(static_cast<std::size_t>(p.experts));
  std::iota(all.begin(), all.end(), 0);
  p.batches.resize(static_cast<std::size_t>(p.steps));
  for (auto& step : p.batches) {
    for (int a = 0; a < p.m; ++a) {
      Batch b;
      b.tokens = uni(0, 3) == 0 ? 0 : static_cast<std::size_t>(uni(1, 12));  // zero-token ranks
      for (std::size_t t = 0; t < b.tokens; ++t) {
        std::shuffle(all.begin(), all.end(), rng);  // k distinct experts per token
        for (int j = 0; j < p.k; ++j) {
          b.ids.push_back(all[static_cast<std::size_t>(j)]);
          b.gates.push_back(exact ? static_cast<float>(uni(1, 8)) / 8 : std::uniform_real_distribution<float>(0, 1)(rng));
        }
        for (int c = 0; c < p.h; ++c) {
          b.x.push_back(value(4));
          b.grad_out.push_back(value(4));
        }
      }
      step.push_back(std::move(b));
    }
  }
  return p;
}

/// y = W_e x (c ascending): the "expert" both the F-ranks and the oracles run.
inline void expert_forward(const Problem& p, int e, const float* x, float* y) {
  const auto h = static_cast<std::size_t>(p.h);
  const auto& w = p.weights[static_cast<std::size_t>(e)];
  for (std::size_t i = 0; i < h; ++i) {
    float acc = 0;
    for (std::size_t c = 0; c < h; ++c) acc += w[i * h + c] * x[c];
    y[i] = acc;
  }
}

/// dx = W_e^T g (i ascending).
inline void expert_backward(const Problem& p, int e, const float* g, float* dx) {
  const auto h = static_cast<std::size_t>(p.h);
  const auto& w = p.weights[static_cast<std::size_t>(e)];
  for (std::size_t c = 0; c < h; ++c) {
    float acc = 0;
    for (std::size_t i = 0; i < h; ++i) acc += w[i * h + c] * g[i];
    dx[c] = acc;
  }
}

class Failure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline void verify(bool ok, const Problem& p, int world_rank, const std::string& what) {
  if (ok) return;
  std::ostringstream os;
  os << "seed " << p.seed << (p.exact ? " (exact)" : " (float)") << " world rank " << world_rank << ": " << what;
  throw Failure(os.str());
}

inline bool same_bits(const float* a, const float* b, std::size_t n) {
  return n == 0 || std::memcmp(a, b, n * sizeof(float)) == 0;
}

/// Exact mode: equal values (any order is exact); float mode: identical bits.
inline bool same_result(const Problem& p, const float* a, const float* b, std::size_t n) {
  return p.exact ? std::equal(a, a + n, b) : same_bits(a, b, n);
}

/// Oracle of A-rank a, step s: y, dL/dx, dL/dgate. In exact mode a plain dense
/// reference (any summation order is exact); otherwise the channel's documented
/// summation order, so the comparison can be bitwise.
struct Expected {
  std::vector<float> y, grad_x, grad_gates;
};
inline Expected oracle(const Problem& p, const Batch& b) {
  const auto h = static_cast<std::size_t>(p.h), k = static_cast<std::size_t>(p.k);
  Expected ex{std::vector<float>(b.tokens * h), std::vector<float>(b.tokens * h), std::vector<float>(b.tokens * k)};
  std::vector<float> y(h), g(h), dx(h), part(h), gpart(h);
  for (std::size_t t = 0; t < b.tokens; ++t) {
    const float* x = &b.x[t * h];
    const float* gy = &b.grad_out[t * h];
    float* out = &ex.y[t * h];
    float* gx = &ex.grad_x[t * h];
    for (std::size_t j = 0; j < k; ++j) {  // dL/dgate: one dot per slot, c ascending
      expert_forward(p, b.ids[t * k + j], x, y.data());
      float acc = 0;
      for (std::size_t c = 0; c < h; ++c) acc += y[c] * gy[c];
      ex.grad_gates[t * k + j] = acc;
    }
    if (p.exact) {
      for (std::size_t j = 0; j < k; ++j) {
        const float gate = b.gates[t * k + j];
        expert_forward(p, b.ids[t * k + j], x, y.data());
        for (std::size_t c = 0; c < h; ++c) g[c] = gate * gy[c];
        expert_backward(p, b.ids[t * k + j], g.data(), dx.data());
        for (std::size_t c = 0; c < h; ++c) {
          out[c] += gate * y[c];
          gx[c] += dx[c];
        }
      }
      continue;
    }
    bool first_rank = true;
    for (int d = 0; d < p.n; ++d) {
      bool any = false;
      for (std::size_t j = 0; j < k; ++j) {
        const int e = b.ids[t * k + j];
        if (p.expert_rank[static_cast<std::size_t>(e)] != d) continue;
        const float gate = b.gates[t * k + j];
        expert_forward(p, e, x, y.data());
        for (std::size_t c = 0; c < h; ++c) g[c] = gate * gy[c];
        expert_backward(p, e, g.data(), dx.data());
        for (std::size_t c = 0; c < h; ++c) {
          const float term = gate * y[c];
          part[c] = any ? part[c] + term : term;
          gpart[c] = any ? gpart[c] + dx[c] : dx[c];
        }
        any = true;
      }
      if (!any) continue;
      for (std::size_t c = 0; c < h; ++c) {
        out[c] = first_rank ? part[c] : out[c] + part[c];
        gx[c] = first_rank ? gpart[c] : gx[c] + gpart[c];
      }
      first_rank = false;
    }
  }
  return ex;
}

/// `p` with redundant experts: each expert gets 0-2 copies on other F-ranks, and every
/// batch's ids are rewritten to the copies serving them (comm::ReplicaRouting), so the
/// channel sees one expert id per copy, each computing its expert's weights.
inline Problem with_replicas(const Problem& p, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<std::int32_t>> hosts;
  for (int e = 0; e < p.experts; ++e) {
    std::vector<std::int32_t> h{p.expert_rank[static_cast<std::size_t>(e)]};
    for (int c = static_cast<int>(rng() % 3); c > 0; --c) {
      const auto g = static_cast<std::int32_t>(rng() % static_cast<unsigned>(p.n));
      if (std::find(h.begin(), h.end(), g) == h.end()) h.push_back(g);
    }
    hosts.push_back(std::move(h));
  }
  disagmoe::comm::ReplicaRouting routing(hosts, p.n);
  Problem r = p;
  r.experts = routing.copies();
  r.expert_rank.assign(routing.expert_rank().begin(), routing.expert_rank().end());
  r.weights.clear();
  for (int v = 0; v < routing.copies(); ++v) r.weights.push_back(p.weights[static_cast<std::size_t>(routing.expert_of(v))]);
  for (auto& step : r.batches)
    for (auto& b : step) {
      const auto real = b.ids;
      routing.route(real, p.k, {}, b.ids);
    }
  return r;
}

inline ChannelConfig config_of(const Problem& p, int timeout_ms) {
  ChannelConfig c;
  c.name = "moe-test";
  c.attention_ranks = p.m;
  c.ffn_ranks = p.n;
  c.hidden = p.h;
  c.top_k = p.k;
  c.expert_rank = p.expert_rank;
  c.tag_base = 8;
  c.hand_off = p.hand_off;
  c.timeout = std::chrono::milliseconds(timeout_ms);
  return c;
}

/// Runs all steps of `p` (forward, return, backward) on this world rank and checks
/// every output against the oracles. Collective over `world`. `threaded`: the channel's
/// kernels run on a stream with a thread of its own (results read after a sync).
/// `channels` > 1: one connection (one handshake) with that many channels, step s on
/// channel s mod channels.
template <class T>
void run_exchange(T& world, const Problem& p, int kernel_threads = 1, bool threaded = false, int channels = 1) {
  const int me = world.rank();
  auto pair = world.split(p.pair_members);
  if (!pair) return;  // idle rank
  auto cfg = config_of(p, 3000);  // generous for a shared 2-core machine; a failing rank costs this much
  Device dev(kernel_threads, threaded);
  std::optional<disagmoe::comm::M2NConnection<T>> connection;
  std::vector<std::unique_ptr<Channel<T>>> chans;
  if (channels == 1) {
    chans.push_back(std::make_unique<Channel<T>>(*pair, cfg, dev.backend, dev.stream));
  } else {
    connection.emplace(*pair, cfg, sizeof(float), channels);
    for (int c = 0; c < channels; ++c) chans.push_back(std::make_unique<Channel<T>>(*connection, c, dev.backend, dev.stream));
  }
  const auto h = static_cast<std::size_t>(p.h), k = static_cast<std::size_t>(p.k);
  for (int s = 0; s < p.steps; ++s) {
    auto& ch = *chans[static_cast<std::size_t>(s % channels)];
    const auto& step = p.batches[static_cast<std::size_t>(s)];
    if (pair->rank() >= p.m + p.n) {  // next-layer A-rank (hand-off)
      const auto& b = step[static_cast<std::size_t>(pair->rank() - p.m - p.n)];
      const auto ex = oracle(p, b);
      std::vector<float> out(b.tokens * h, -1);
      ch.receive_return(s, out);
      dev.sync();
      verify(same_result(p, out.data(), ex.y.data(), out.size()), p, me, "handed-off output differs from the oracle, step " + std::to_string(s));
      ch.backward_dispatch(b.grad_out);
    } else if (pair->rank() < p.m) {
      const auto& b = step[static_cast<std::size_t>(pair->rank())];
      const auto ex = oracle(p, b);
      std::vector<float> out(b.tokens * h, -1), gx(b.tokens * h, -1), gg(b.tokens * k, -1);
      ch.dispatch(s, b.x, b.ids, b.gates);
      std::int64_t want_rows = 0;  // recount of send-once rows: distinct F-ranks per token
      for (std::size_t t = 0; t < b.tokens; ++t) {
        std::vector<int> d;
        for (std::size_t j = 0; j < k; ++j) d.push_back(p.expert_rank[static_cast<std::size_t>(b.ids[t * k + j])]);
        std::sort(d.begin(), d.end());
        want_rows += std::unique(d.begin(), d.end()) - d.begin();
      }
      verify(ch.last_rows_sent() == want_rows, p, me, "rows sent != distinct (token, F-rank) pairs");
      if (!p.hand_off) {
        ch.combine(out);
        dev.sync();
        verify(same_result(p, out.data(), ex.y.data(), out.size()), p, me, "combined output differs from the oracle, step " + std::to_string(s));
        ch.backward_dispatch(b.grad_out);
      }
      ch.backward_combine(gx, gg);
      dev.sync();
      verify(same_result(p, gx.data(), ex.grad_x.data(), gx.size()), p, me, "dL/dx differs from the oracle, step " + std::to_string(s));
      verify(same_result(p, gg.data(), ex.grad_gates.data(), gg.size()), p, me, "dL/dgate differs from the oracle, step " + std::to_string(s));
    } else {
      const int f = pair->rank() - p.m;
      ch.receive(s);
      dev.sync();
      // Every row arrives exactly once per expert slot held here, ordered by (A-rank, token).
      std::size_t rows_here = 0;
      for (int a = 0; a < p.m; ++a) {
        const auto& b = step[static_cast<std::size_t>(a)];
        for (std::size_t t = 0; t < b.tokens; ++t) {
          bool any = false;
          for (std::size_t j = 0; j < k; ++j) any |= p.expert_rank[static_cast<std::size_t>(b.ids[t * k + j])] == f;
          rows_here += any ? 1 : 0;
        }
      }
      verify(static_cast<int>(ch.local_experts()) == static_cast<int>(std::count(p.expert_rank.begin(), p.expert_rank.end(), f)),
             p, me, "local expert count");
      for (std::size_t le = 0; le < ch.local_experts(); ++le) {
        const int e = ch.expert_id(le);
        std::vector<float> want;
        std::vector<float> want_gates;
        for (int a = 0; a < p.m; ++a) {
          const auto& b = step[static_cast<std::size_t>(a)];
          for (std::size_t t = 0; t < b.tokens; ++t)
            for (std::size_t j = 0; j < k; ++j)
              if (b.ids[t * k + j] == e) {
                want.insert(want.end(), b.x.begin() + static_cast<std::ptrdiff_t>(t * h), b.x.begin() + static_cast<std::ptrdiff_t>((t + 1) * h));
                want_gates.push_back(b.gates[t * k + j]);
              }
        }
        const auto in = ch.expert_input(le);
        verify(in.size() == want.size() && same_bits(in.data(), want.data(), want.size()), p, me,
               "expert " + std::to_string(e) + " input rows differ from the recount, step " + std::to_string(s));
        verify(ch.expert_gates(le).size() == want_gates.size() && same_bits(ch.expert_gates(le).data(), want_gates.data(), want_gates.size()),
               p, me, "expert gates differ");
        auto out = ch.expert_output(le);
        for (std::size_t r = 0; r < ch.expert_rows(le); ++r) expert_forward(p, e, &in[r * h], &out[r * h]);
      }
      ch.send_return();
      verify(ch.last_rows_sent() == static_cast<std::int64_t>(rows_here), p, me, "return rows != arrived rows");
      ch.receive_grad();
      dev.sync();
      for (std::size_t le = 0; le < ch.local_experts(); ++le) {
        const auto g = ch.expert_grad_output(le);
        auto dx = ch.expert_grad_input(le);
        for (std::size_t r = 0; r < ch.expert_rows(le); ++r) expert_backward(p, ch.expert_id(le), &g[r * h], &dx[r * h]);
      }
      ch.send_grad();
    }
  }
  for (auto& ch : chans) ch->flush();  // a peer may still be receiving this rank's last sends
}

/// A fixed problem on the whole world: A-ranks [0, w/2), F-ranks the rest, every
/// F-rank holding experts, every A-rank sending 4 tokens per step.
inline Problem fixed_problem(int w) {
  Problem p;
  p.seed = 0;
  p.exact = true;
  p.m = w / 2;
  p.n = w - p.m;
  p.experts = 2 * p.n;
  p.k = 2;
  p.h = 4;
  p.steps = 2;
  p.pair_members.resize(static_cast<std::size_t>(w));
  std::iota(p.pair_members.begin(), p.pair_members.end(), 0);
  for (int e = 0; e < p.experts; ++e) p.expert_rank.push_back(e % p.n);
  p.batches.resize(2);
  for (auto& step : p.batches)
    for (int a = 0; a < p.m; ++a) {
      Batch b;
      b.tokens = 4;
      for (std::size_t t = 0; t < b.tokens; ++t)
        for (int j = 0; j < p.k; ++j) {
          b.ids.push_back(static_cast<std::int32_t>((2 * t + static_cast<std::size_t>(j)) % static_cast<std::size_t>(p.experts)));
          b.gates.push_back(0.5f);
        }
      b.x.assign(b.tokens * static_cast<std::size_t>(p.h), 1.0f);
      b.grad_out = b.x;
      step.push_back(std::move(b));
    }
  return p;
}

/// Pair rank `silent` stops before step 1; every rank that waits for it must throw
/// TimeoutError within the deadline. Returns this rank's message ("" when none).
template <class T>
std::string run_silent_peer(T& world, int silent, int timeout_ms) {
  const Problem p = fixed_problem(world.size());
  auto pair = world.split(p.pair_members);
  Device dev;
  Channel<T> ch(*pair, config_of(p, timeout_ms), dev.backend, dev.stream);
  const int me = pair->rank();
  const auto h = static_cast<std::size_t>(p.h);
  try {
    for (int s = 0; s < p.steps; ++s) {
      if (s == 1 && me == silent) return "";
      if (me < p.m) {
        const auto& b = p.batches[static_cast<std::size_t>(s)][static_cast<std::size_t>(me)];
        std::vector<float> out(b.tokens * h);
        ch.dispatch(s, b.x, b.ids, b.gates);
        ch.combine(out);
      } else {
        ch.receive(s);
        for (std::size_t le = 0; le < ch.local_experts(); ++le) {
          auto out = ch.expert_output(le);
          std::fill(out.begin(), out.end(), 1.0f);
        }
        ch.send_return();
      }
    }
  } catch (const disagmoe::TimeoutError& e) {
    return e.what();
  }
  return "";
}

/// Creates a channel where world rank `odd` changes one field by `mutate`; returns
/// the ConfigError message this rank got ("" when none).
template <class T, class Mutate>
std::string run_mismatch(T& world, int odd, Mutate&& mutate) {
  const Problem p = fixed_problem(world.size());
  auto pair = world.split(p.pair_members);
  auto cfg = config_of(p, 5000);
  if (world.rank() == odd) mutate(cfg);
  try {
    Device dev;
    Channel<T> ch(*pair, cfg, dev.backend, dev.stream);
  } catch (const disagmoe::ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace exchange
