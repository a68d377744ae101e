// SPDX-License-Identifier: Apache-2.0
/// @file side_metrics.hpp
/// Where each side's GPUs spend a simulated step, so that the causes of a slow step are
/// told apart: compute, communication the schedule did not hide, and waiting with no
/// transfer at all — on a peer's compute (imbalance between the attention and FFN
/// sides) or on the pipeline's fill and drain. A disaggregated worker that idles behind
/// a busier peer group shows up as waiting, not as exposed communication.
#pragma once

#include <disagmoe/schedule/idle_causes.hpp>
#include <disagmoe/schedule/op.hpp>
#include <disagmoe/schedule/simulator.hpp>

#include <algorithm>
#include <cstddef>
#include <vector>

namespace disagmoe::schedule {

/// GPU-weighted mean seconds of one side's workers; the three parts add up to the step.
struct SideTime {
  double gpus = 0;                  ///< GPUs of the side (0: no worker has this role)
  double busy_seconds = 0;          ///< some compute op runs
  /// No compute runs and a transfer touching the worker is in flight (its latency or
  /// its bytes): communication the schedule did not hide (WorkerMetrics::exposed_comm_seconds).
  double exposed_comm_seconds = 0;
  /// No compute and no transfer: waiting on a peer's compute or on the pipeline's fill
  /// and drain.
  double waiting_seconds = 0;
  /// The idle time (exposed communication + waiting) by what the workers wait for: a
  /// transfer moving bytes, its latency, a peer's compute (idle_causes.hpp);
  /// busy_seconds + idle.total() = the step.
  IdleCauses idle;
};

/// SideTime per role.
struct SideBreakdown {
  SideTime attention;  ///< Role::kAttention workers (AF-Pipe's A side)
  SideTime ffn;        ///< Role::kFfn workers (AF-Pipe's F side)
  SideTime colocated;  ///< Role::kColocated workers (the baselines' stages)
  /// The entry of role `r`.
  [[nodiscard]] const SideTime& of(Role r) const {
    return r == Role::kAttention ? attention : r == Role::kFfn ? ffn : colocated;
  }
};

/// The breakdown of result `r` of simulating `s` (r = simulate(s)): per worker, waiting
/// = step − busy − exposed communication (clamped at 0 against rounding), and the idle
/// time by cause (`causes` = idle_causes(s, r)), averaged over the side's GPUs. O(workers).
inline SideBreakdown side_breakdown(const Schedule& s, const SimResult& r, const std::vector<IdleCauses>& causes) {
  SideBreakdown b;
  for (std::size_t w = 0; w < s.workers.size() && w < r.workers.size(); ++w) {
    const Role role = s.workers[w].role;
    SideTime& t = role == Role::kAttention ? b.attention : role == Role::kFfn ? b.ffn : b.colocated;
    const WorkerMetrics& m = r.workers[w];
    const double g = s.workers[w].gpus;
    t.gpus += g;
    t.busy_seconds += g * m.busy_seconds;
    t.exposed_comm_seconds += g * m.exposed_comm_seconds;
    t.waiting_seconds += g * std::max(0.0, r.step_seconds - m.busy_seconds - m.exposed_comm_seconds);
    IdleCauses c = w < causes.size() ? causes[w] : IdleCauses{};
    t.idle += c *= g;
  }
  for (SideTime* t : {&b.attention, &b.ffn, &b.colocated}) {
    if (t->gpus == 0) continue;
    t->busy_seconds /= t->gpus;
    t->exposed_comm_seconds /= t->gpus;
    t->waiting_seconds /= t->gpus;
    t->idle *= 1 / t->gpus;
  }
  return b;
}

/// side_breakdown with the idle causes computed here. O(ops log ops + deps).
inline SideBreakdown side_breakdown(const Schedule& s, const SimResult& r) {
  return side_breakdown(s, r, idle_causes(s, r));
}

}  // namespace disagmoe::schedule
