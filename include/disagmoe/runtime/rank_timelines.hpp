// SPDX-License-Identifier: Apache-2.0
/// @file rank_timelines.hpp
/// Every rank's measured timeline, for a worker made of several ranks (data-parallel
/// A-ranks, expert-parallel F-ranks, a colocated stage's EP ranks): the one timeline per
/// worker the simulator is calibrated with (`merged_timelines`), one trace run per rank
/// index (`rank_runs`), and where each rank's wall time goes (`rank_times`): its compute
/// ops' wall time against their CPU time (the difference is time off its core: on a
/// host with fewer cores than threads, waiting to be scheduled), the time it waits in
/// each all-to-all for the worker's last rank to enter, and how long the all-to-all runs
/// after that last entry.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/io/chrome_trace.hpp>
#include <disagmoe/runtime/worker_executor.hpp>
#include <disagmoe/schedule/lowering.hpp>
#include <disagmoe/schedule/op.hpp>

#include <algorithm>
#include <string>
#include <vector>

namespace disagmoe::runtime {

/// Measured timelines of one step, [worker][rank in worker][op] (one epoch for all).
using RankTimelines = std::vector<std::vector<std::vector<MeasuredOp>>>;

namespace detail {
inline void expect_rank_timelines(const schedule::Schedule& s, const RankTimelines& t) {
  expect(t.size() == s.workers.size(), "rank timelines", t.size(),
         "one entry per worker (" + std::to_string(s.workers.size()) + ")");
  for (std::size_t w = 0; w < t.size(); ++w) {
    expect(!t[w].empty(), "rank timelines of worker " + std::to_string(w), 0, "at least one rank");
    for (const auto& r : t[w])
      expect(r.size() == s.ops.size(), "timeline of worker " + std::to_string(w), r.size(),
             "one entry per op (" + std::to_string(s.ops.size()) + ")");
  }
}
}  // namespace detail

/// One timeline per worker: its first rank's, except that an all-to-all starts when the
/// worker's last rank enters it (until then the others wait for a peer that is still
/// computing: a bubble, not communication) and ends when its last rank leaves it, and
/// that every op's CPU time is its slowest rank's: the worker goes on when all its ranks
/// are done, and its bytes its busiest rank's, as the simulator's representative GPU
/// moves them. (Ending an all-to-all at its first rank's end instead left the calibrated
/// prediction of 1F1B-EP on one stage of 4 ranks 14–17% short: its ranks leave at their
/// own times, the busiest last, and the lockstep worker of the simulator then computes.)
/// O(ranks · ops).
inline std::vector<std::vector<MeasuredOp>> merged_timelines(const schedule::Schedule& s, const RankTimelines& t) {
  detail::expect_rank_timelines(s, t);
  std::vector<std::vector<MeasuredOp>> out(t.size());
  for (std::size_t w = 0; w < t.size(); ++w) {
    auto& m = out[w];
    m = t[w][0];
    for (std::size_t r = 1; r < t[w].size(); ++r)
      for (std::size_t op = 0; op < m.size(); ++op) {
        const MeasuredOp& o = t[w][r][op];
        if (s.ops[op].kind == schedule::OpKind::kAllToAll && m[op].start >= 0 && o.start >= 0) {
          m[op].end = std::max(m[op].end, o.end);
          m[op].start = std::max(m[op].start, o.start);
        }
        m[op].cpu = std::max(m[op].cpu, o.cpu);
        m[op].bytes = std::max(m[op].bytes, o.bytes);
      }
  }
  return out;
}

/// One trace run per rank index r, labelled "`label` rank r", holding rank r of every
/// worker that has more than r ranks (so workers of one rank appear once, in rank 0's
/// run); none when every worker has one rank (the merged run says it all). O(events).
inline std::vector<io::TraceRun> rank_runs(const schedule::LoweredSchedule& low, const RankTimelines& t,
                                           const std::string& label = "measured") {
  expect(t.size() == low.workers.size(), "rank timelines", t.size(),
         "one entry per worker (" + std::to_string(low.workers.size()) + ")");
  std::size_t ranks = 0;
  for (const auto& w : t) ranks = std::max(ranks, w.size());
  std::vector<io::TraceRun> runs;
  if (ranks < 2) return runs;
  for (std::size_t r = 0; r < ranks; ++r) {
    io::TraceRun run{label + " rank " + std::to_string(r), 0, {}};
    for (const auto& prog : low.workers) {
      const auto& ranks_of = t[static_cast<std::size_t>(prog.worker)];
      if (r >= ranks_of.size()) continue;
      for (int k = 0; k < schedule::kStreams; ++k)
        for (const auto& task : prog.streams[static_cast<std::size_t>(k)]) {
          expect(static_cast<std::size_t>(task.op) < ranks_of[r].size(),
                 "timeline of worker " + std::to_string(prog.worker) + " rank " + std::to_string(r),
                 ranks_of[r].size(), "an entry for op " + std::to_string(task.op) + " of the lowered schedule");
          const MeasuredOp& m = ranks_of[r][static_cast<std::size_t>(task.op)];
          if (m.start < 0 || m.end < 0) continue;
          run.events.push_back({prog.worker, task.op, static_cast<schedule::Stream>(k), m.start, m.end,
                                task.kind == schedule::TaskKind::kRecv});
          run.step_seconds = std::max(run.step_seconds, m.end);
        }
    }
    runs.push_back(std::move(run));
  }
  return runs;
}

/// Where one rank's step went (seconds, summed over the step's ops).
struct RankTime {
  double compute_wall = 0;      ///< its compute ops, start to end
  double compute_cpu = 0;       ///< their CPU time (MeasuredOp::cpu; wall where not measured)
  double wait_for_ranks = 0;    ///< in all-to-alls, from its entry to its worker's last rank's
  double after_last_entry = 0;  ///< in all-to-alls, from the last rank's entry to its own end
  /// Compute time off the core: wall time a compute op took beyond its CPU time.
  [[nodiscard]] double off_core() const { return std::max(0.0, compute_wall - compute_cpu); }
};

/// rank_times[w][r]: where rank r of worker w spent its step. O(ranks · ops).
inline std::vector<std::vector<RankTime>> rank_times(const schedule::Schedule& s, const RankTimelines& t) {
  detail::expect_rank_timelines(s, t);
  std::vector<std::vector<RankTime>> out(t.size());
  for (std::size_t w = 0; w < t.size(); ++w) {
    const auto& ranks = t[w];
    out[w].resize(ranks.size());
    for (std::size_t op = 0; op < s.ops.size(); ++op) {
      const schedule::OpKind kind = s.ops[op].kind;
      double last_entry = -1;
      if (kind == schedule::OpKind::kAllToAll)
        for (const auto& r : ranks) last_entry = std::max(last_entry, r[op].start);
      for (std::size_t r = 0; r < ranks.size(); ++r) {
        const MeasuredOp& m = ranks[r][op];
        if (m.start < 0 || m.end < 0) continue;
        RankTime& rt = out[w][r];
        if (!schedule::is_comm(kind)) {
          rt.compute_wall += m.end - m.start;
          rt.compute_cpu += m.cpu >= 0 ? m.cpu : m.end - m.start;
        } else if (kind == schedule::OpKind::kAllToAll) {
          rt.wait_for_ranks += last_entry - m.start;
          rt.after_last_entry += std::max(0.0, m.end - last_entry);
        }
      }
    }
  }
  return out;
}

}  // namespace disagmoe::runtime
