// SPDX-License-Identifier: Apache-2.0
/// @file schedules.hpp
/// Every shipped policy by name, plus the two searches a user needs before comparing
/// schedules on a real model: the best deployment (depth × EP degree) for a colocated baseline and the
/// best A/F split for AF-Pipe, both judged by the simulator (the "simple default"
/// until the planner's allocator drives AF-Pipe; `simulated_step_seconds` is the
/// simulator-backed step-time oracle the planner can call).
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/schedule/afpipe.hpp>
#include <disagmoe/schedule/baselines.hpp>
#include <disagmoe/schedule/cost_adapter.hpp>
#include <disagmoe/schedule/dualpipe.hpp>
#include <disagmoe/schedule/simulator.hpp>
#include <disagmoe/schedule/timeline_cost.hpp>

#include <algorithm>
#include <array>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace disagmoe::schedule {

/// Command-line names of the shipped policies, in comparison order.
inline constexpr std::array<std::string_view, 8> kScheduleNames{
    AFPipe::kName,         OneFOneB::kName,     Interleaved1F1B::kName, A2AOverlap::kName,
    ChunkedOverlap::kName, CometOverlap::kName, DualPipe::kName,        DualPipeV::kName};

/// Run-time knobs of the shipped policies.
struct PolicyKnobs {
  int virtual_stages = 2;   ///< interleaved, a2a-overlap, chunked, comet
  int chunks = 4;           ///< chunked
  int tiles = 16;           ///< comet
  int af_group_size = 0;    ///< afpipe (0: auto)
  bool af_fuse = true;      ///< afpipe stage alignment
  bool af_uses_sms = true;  ///< afpipe M2N kernels on SMs
};

/// Throws ConfigError unless `name` is one of kScheduleNames.
inline void check_schedule_name(std::string_view name) {
  for (auto n : kScheduleNames)
    if (n == name) return;
  fail("schedule", name,
       "one of afpipe, 1f1b, interleaved, a2a-overlap, chunked, comet, dualpipe, dualpipev");
}

/// Builds the schedule called `name` over `pb`. ConfigError for an unknown name or
/// sizes the policy cannot handle.
inline Schedule build_schedule(std::string_view name, const Problem& pb, const PolicyKnobs& k = {}) {
  check_schedule_name(name);
  if (name == AFPipe::kName) return AFPipe{k.af_group_size, 0, k.af_fuse, k.af_uses_sms}.build(pb);
  if (name == OneFOneB::kName) return OneFOneB{}.build(pb);
  if (name == Interleaved1F1B::kName) return Interleaved1F1B{k.virtual_stages}.build(pb);
  if (name == A2AOverlap::kName) return A2AOverlap{k.virtual_stages}.build(pb);
  if (name == ChunkedOverlap::kName) return ChunkedOverlap{k.chunks, k.virtual_stages}.build(pb);
  if (name == CometOverlap::kName) return CometOverlap{k.tiles, k.virtual_stages}.build(pb);
  if (name == DualPipe::kName) return DualPipe{}.build(pb);
  return DualPipeV{}.build(pb);
}

/// A simulated configuration: the layout chosen, the schedule and its result.
struct Simulated {
  std::string layout;   ///< "stages=8" or "p=2 a/f=4/4 nic=4/4 g=4"
  bool fits = false;    ///< peak memory within the GPU's HBM × CostOptions::memory_fraction
  Schedule schedule;
  SimResult result;
};

namespace detail {
inline double hbm_limit(const ClusterSpec& c, const CostOptions& o) { return c.gpu.hbm_bytes * o.memory_fraction; }

inline std::optional<Simulated> try_simulate(std::string_view name, const Problem& pb, const PolicyKnobs& k,
                                             const ClusterSpec& c, const CostOptions& o, std::string layout) {
  Simulated s;
  try {
    s.schedule = build_schedule(name, pb, k);
  } catch (const ConfigError&) {
    return std::nullopt;  // sizes this policy cannot run (e.g. DualPipe with m < 2p)
  }
  s.result = simulate(s.schedule);
  if (s.result.deadlocked) return std::nullopt;
  s.fits = s.result.peak_memory_bytes <= hbm_limit(c, o);
  s.layout = std::move(layout);
  return s;
}

// Better = fits memory first, then higher throughput (batch_seconds: steps of different
// layouts can carry different tokens).
inline bool better(const Simulated& a, const std::optional<Simulated>& b) {
  if (!b) return true;
  if (a.fits != b->fits) return a.fits;
  return a.result.tokens_per_second > b->result.tokens_per_second;
}
}  // namespace detail

/// Seconds the simulated rate of `s` needs for `batch_tokens` tokens. Layouts are
/// compared by this, never by their raw steps: each runs ⌊global batch / (micro_batch ×
/// its data-parallel width)⌋ micro-batches (detail::derive_micro_batches), so steps of
/// two layouts can carry different tokens (DeepSeek-MoE-16B at 32K, 128 sequences: an A
/// group of 48 GPUs runs 96 of them, one of 64 runs all 128). O(1).
inline double batch_seconds(const Simulated& s, double batch_tokens) {
  return s.result.step_seconds * batch_tokens / s.schedule.tokens_per_step;
}

/// Simulated seconds of one step of the global batch (global_batch_of(m, o) sequences)
/// under AF-Pipe with layout `lay`, at the simulated rate (batch_seconds: the simulated
/// step itself runs whole waves of the A groups only); +infinity when the layout is
/// invalid, deadlocks or does not fit memory. The simulator as the planner's step-time
/// oracle. Ping-pong group k.af_group_size, or 2p (the planner's) when 0. One
/// simulation, O(ops log ops).
inline double simulated_step_seconds(const ModelSpec& m, const ClusterSpec& c, const AfLayout& lay,
                                     const CostOptions& o = {}, const PolicyKnobs& k = {}) {
  try {
    PolicyKnobs kk = k;  // the planner's ping-pong group by default (plan::af_group_size)
    if (kk.af_group_size == 0) kk.af_group_size = 2 * lay.groups;
    const auto s = detail::try_simulate(AFPipe::kName, af_problem(m, c, lay, o), kk, c, o, "");
    return s && s->fits ? batch_seconds(*s, double(global_batch_of(m, o)) * m.seq_len)
                        : std::numeric_limits<double>::infinity();
  } catch (const ConfigError&) {
    return std::numeric_limits<double>::infinity();
  }
}

namespace detail {
// " rc" when both sides recompute, " rc=A" or " rc=F" when one does, "" when none.
inline std::string recompute_suffix(plan::Recompute rc) {
  return !rc.any() ? "" : (rc.attention && rc.ffn) ? " rc" : rc.attention ? " rc=A" : " rc=F";
}
// " cp=4" under context parallelism (CostOptions::context_parallel > 1), else "".
inline std::string context_parallel_suffix(const CostOptions& o) {
  return o.context_parallel > 1 ? " cp=" + std::to_string(o.context_parallel) : "";
}
inline std::string af_label(const AfLayout& l, int g, plan::Recompute rc, bool fuse = true) {
  return "p=" + std::to_string(l.groups) + " a/f=" + std::to_string(l.attention_gpus_per_node) + "/" +
         std::to_string(l.ffn_gpus_per_node) + " nic=" + std::to_string(l.attention_nics_per_node) + "/" +
         std::to_string(l.ffn_nics_per_node) +
         (l.mixed_nodes > 0 ? " mixed=" + std::to_string(l.mixed_nodes) : "") + " g=" + std::to_string(g) +
         recompute_suffix(rc) + (fuse ? "" : " unfused");
}
}  // namespace detail

/// The deployments the colocated search tries on `c` (Megatron-Core parallel folding):
/// pipeline depths {1, 2, 4, 8, 16} dividing the GPUs and the layers (or exactly
/// `stages` > 0), times every expert-parallel degree that divides both the GPUs per
/// stage D and the experts (EDP = D / ep), all with DeepEP's per-node deduplication
/// when `o.dedup` (it only moves NIC rows to NVLink). Data parallelism is D (no tensor
/// parallelism), and ZeRO-1 is `o.memory.zero1`: it moves the all-reduce's ring bytes
/// as reduce-scatter + all-gather, so it only saves memory (Rajbhandari et al. 2020
/// §5.1) and is never worth turning off. O(depths × divisors).
inline std::vector<ColocatedLayout> colocated_layouts(const ModelSpec& m, const ClusterSpec& c, const CostOptions& o,
                                                      int stages = 0) {
  std::vector<ColocatedLayout> out;
  for (int p : stages > 0 ? std::vector<int>{stages} : std::vector<int>{1, 2, 4, 8, 16}) {
    if (c.gpus() % p != 0 || p > m.layers) continue;
    const int d = c.gpus() / p;
    for (int ep = 1; ep <= d; ++ep)
      if (d % ep == 0 && m.experts % ep == 0) out.push_back({p, ep, o.dedup});
  }
  return out;
}

/// "stages=2 ep=16 edp=4": a colocated deployment as simulate_best's labels show it.
inline std::string colocated_label(const ModelSpec& m, const ClusterSpec& c, const ColocatedLayout& lay) {
  const int d = c.gpus() / lay.stages;
  const int ep = lay.ep > 0 ? lay.ep : std::gcd(d, m.experts);
  return "stages=" + std::to_string(lay.stages) + " ep=" + std::to_string(ep) + " edp=" + std::to_string(d / ep);
}

/// Simulates `name` on `c` and returns the best layout found (fits memory first, then
/// step time). Baselines: every deployment of colocated_layouts (depth × EP degree).
/// AF-Pipe: exactly `af` when given (fused as k.af_fuse says), else a two-phase search:
/// every A GPUs per node 1..gpus_per_node−1 (F gets the rest) and pair count 1..16 with
/// proportional NICs and ping-pong group 2p, each with stage-aligned fusion on and off,
/// then around the three best and the best and fastest of each A/F split (each with its
/// fusion choice): NIC split ±1, ±2 and group sizes p, 2p, 4p. Each candidate whose
/// activations do not fit is retried with full recomputation on the A side alone and on
/// the F side alone (attention or experts of a colocated worker), and on both where
/// neither fits (sides that `o.memory.recompute` sets stay on). With o.context_parallel = 0
/// all of this runs at each of plan::context_parallel_degrees (layouts whose groups do not
/// divide into its rings skipped, and degrees above 1 whose timelines exceed the budgets)
/// and the best is kept. Throws ConfigError when no layout can run, or
/// when a timeline would exceed the work or memory budget (expect_timeline_fits). Cost: one simulation per
/// candidate (≈ 300 for AF-Pipe on 8-GPU nodes), up to four for one that does not fit
/// without recomputation.
inline Simulated simulate_best(std::string_view name, const ModelSpec& m, const ClusterSpec& c,
                               const CostOptions& o = {}, const PolicyKnobs& k = {}, int stages = 0,
                               std::optional<AfLayout> af = std::nullopt) {
  check_schedule_name(name);
  expect_timeline_fits(name, m, o, k.chunks);
  if (o.context_parallel == 0) {  // each degree's best; degree 1's errors are the search's
    CostOptions oc = o;
    oc.context_parallel = 1;
    std::optional<Simulated> best = simulate_best(name, m, c, oc, k, stages, af);
    for (int cp : plan::context_parallel_degrees(m, c.gpus_per_node)) {
      if (cp == 1) continue;
      oc.context_parallel = cp;
      try {
        Simulated s = simulate_best(name, m, c, oc, k, stages, af);
        if (detail::better(s, best)) best = std::move(s);
      } catch (const ConfigError&) {  // no layout divides into rings of cp, or its timeline is over budget
      }
    }
    return std::move(*best);
  }
  std::optional<Simulated> best;
  // Simulates one candidate, with recomputation on the sides that need it to fit.
  auto run = [&](auto make_problem, const PolicyKnobs& kk, auto label) -> std::optional<Simulated> {
    std::optional<Simulated> r;
    std::vector<plan::Recompute> tried;
    bool invalid = false;
    const auto attempt = [&](plan::Recompute rc) {
      rc = {rc.attention || o.memory.recompute.attention, rc.ffn || o.memory.recompute.ffn};
      if (invalid || std::find(tried.begin(), tried.end(), rc) != tried.end()) return;
      tried.push_back(rc);
      CostOptions oo = o;
      oo.memory.recompute = rc;
      Problem pb;
      try {
        pb = make_problem(oo);
      } catch (const ConfigError&) {
        invalid = true;
        return;
      }
      auto s = detail::try_simulate(name, pb, kk, c, oo, label(rc) + detail::context_parallel_suffix(oo));
      if (s && detail::better(*s, r)) r = std::move(s);
    };
    const auto fits = [&] { return r && r->fits; };
    attempt({false, false});
    if (!fits()) {
      attempt({true, false});
      attempt({false, true});
    }
    if (!fits()) attempt({true, true});
    if (invalid) return std::nullopt;
    return r;
  };
  auto consider = [&](std::optional<Simulated> s) {
    if (s && detail::better(*s, best)) best = std::move(s);
  };
  if (name == AFPipe::kName) {
    auto try_af = [&](const AfLayout& lay, int g, bool fuse) {
      PolicyKnobs kk = k;
      kk.af_group_size = g;
      kk.af_fuse = fuse;
      return run([&](const CostOptions& oo) { return af_problem(m, c, lay, oo); }, kk,
                 [&](plan::Recompute rc) { return detail::af_label(lay, g, rc, fuse); });
    };
    if (af) {
      consider(try_af(*af, k.af_group_size > 0 ? k.af_group_size : 2 * af->groups, k.af_fuse));
      if (!best) af_problem(m, c, *af, o);  // rethrow the layout's own error, if any
    } else {
      struct Cand {
        AfLayout lay;
        bool fuse;
        double seconds_per_token;  // the rate, not the step (batch_seconds)
        bool fits;
      };
      std::vector<Cand> first;
      const bool multi = c.nodes > 1;
      for (int a = 1; a < c.gpus_per_node; ++a)
        for (int p = 1; p <= std::min(16, m.layers); ++p) {
          const int na = std::clamp(c.nics_per_node * a / c.gpus_per_node, 1, std::max(1, c.nics_per_node - 1));
          const AfLayout lay{p, a, c.gpus_per_node - a, multi ? na : 0, multi ? c.nics_per_node - na : 0};
          for (bool fuse : {true, false})
            if (auto s = try_af(lay, 2 * p, fuse)) {
              first.push_back({lay, fuse, 1 / s->result.tokens_per_second, s->fits});
              consider(std::move(s));
            }
        }
      const auto before = [](const Cand& x, const Cand& y) {
        return x.fits != y.fits ? x.fits : x.seconds_per_token < y.seconds_per_token;
      };
      std::stable_sort(first.begin(), first.end(), before);
      // Phase two refines the three best and, for every A/F split, its best candidate
      // and its fastest one (a layout that does not fit with g = 2p may fit with g = p).
      std::vector<Cand> bases;
      auto add_base = [&](const Cand& l) {
        for (const auto& b : bases)
          if (b.lay.groups == l.lay.groups && b.lay.attention_gpus_per_node == l.lay.attention_gpus_per_node &&
              b.fuse == l.fuse)
            return;
        bases.push_back(l);
      };
      for (std::size_t i = 0; i < std::min<std::size_t>(3, first.size()); ++i) add_base(first[i]);
      for (int a = 1; a < c.gpus_per_node; ++a) {
        const Cand* fastest = nullptr;
        for (const auto& x : first) {
          if (x.lay.attention_gpus_per_node != a) continue;
          if (!fastest) add_base(x);  // the first of split a is its best (fits first)
          if (!fastest || x.seconds_per_token < fastest->seconds_per_token) fastest = &x;
        }
        if (fastest) add_base(*fastest);
      }
      for (const Cand& base : bases) {
        for (int d = -2; d <= 2; ++d)
          for (int gm : {1, 2, 4}) {
            if (d == 0 && gm == 2) continue;  // phase one already ran it
            AfLayout lay = base.lay;
            if (multi) {
              lay.attention_nics_per_node += d;
              lay.ffn_nics_per_node -= d;
              if (lay.attention_nics_per_node < 1 || lay.ffn_nics_per_node < 1) continue;
            } else if (d != 0) {
              continue;
            }
            consider(try_af(lay, gm * lay.groups, base.fuse));
          }
      }
    }
  } else {
    if (stages > 0) colocated_problem(m, c, {stages}, o);  // an explicit bad --stages is an error
    expect(c.gpus_per_node % o.context_parallel == 0, "context_parallel", o.context_parallel,
           "a divisor of the GPUs per node (" + std::to_string(c.gpus_per_node) +
               "): a colocated stage's rings stay inside a node");
    for (const ColocatedLayout& lay : colocated_layouts(m, c, o, stages))
      consider(
          run([&](const CostOptions& oo) { return colocated_problem(m, c, lay, oo); }, k,
              [&](plan::Recompute rc) { return colocated_label(m, c, lay) + detail::recompute_suffix(rc); }));
  }
  expect(best.has_value(), "schedule", name,
         "a layout this schedule can run for this model, cluster and batch (try --micro-batches or --stages)");
  return std::move(*best);
}

}  // namespace disagmoe::schedule
