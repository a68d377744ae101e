// SPDX-License-Identifier: Apache-2.0
/// @file recommend.hpp
/// Disaggregate or not: AF-Pipe on the planner's allocation against the best colocated
/// schedule the simulator finds (each baseline at its best deployment: pipeline depth and EP degree, on the same
/// batch, costs and HBM), ranked by simulated step time, with the cause of the gap.
///
/// Every worker's step splits into busy time and idle time charged to what it waits
/// for (side_metrics.hpp, idle_causes.hpp): a transfer (its bytes or its latency), a
/// peer's compute, or nothing an op accounts for. The GPU-weighted means add up to the
/// step, so the gap between two schedules is exactly the sum of their differences. The
/// largest difference names the cause: compute (the loser's GPUs compute longer: SMs
/// held by comm kernels, smaller per-GPU shapes), network (transfers it did not hide)
/// or balance (GPUs idle on a peer's compute: A/F imbalance, pipeline fill and drain);
/// memory when the loser does not fit at all.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/plan/analytic_model.hpp>
#include <disagmoe/schedule/plan_oracle.hpp>
#include <disagmoe/schedule/schedules.hpp>
#include <disagmoe/schedule/side_metrics.hpp>

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace disagmoe::schedule {

/// One simulated schedule at its best layout.
struct RankedSchedule {
  std::string schedule;        ///< policy name
  std::string layout;          ///< Simulated::layout
  double step_seconds = 0;     ///< one step of the plan's batch at the simulated rate (batch_seconds)
  bool fits = false;           ///< peak memory within usable HBM
  double peak_memory_bytes = 0;
  SideTime job;  ///< GPU-weighted means over every worker, scaled as step_seconds: busy + idle.total() = step
};

/// Which schedule to run and why.
struct Recommendation {
  std::string schedule;              ///< the winner
  std::string layout;
  double step_seconds = 0;
  std::string runner_up;             ///< the best of the other family (AF-Pipe vs colocated)
  std::string runner_up_layout;
  double runner_up_step_seconds = 0;
  double speedup = 1;                ///< runner_up_step_seconds / step_seconds
  std::string cause;                 ///< "memory", "compute", "network" or "balance"
  std::string reason;                ///< one sentence with the numbers
  std::vector<RankedSchedule> ranked;  ///< every schedule simulated, best first (fits first)
};

/// GPU-weighted means over all workers of `b` (the three roles together).
inline SideTime whole_job(const SideBreakdown& b) {
  SideTime j;
  for (const SideTime* t : {&b.attention, &b.ffn, &b.colocated}) {
    j.gpus += t->gpus;
    j.busy_seconds += t->gpus * t->busy_seconds;
    j.exposed_comm_seconds += t->gpus * t->exposed_comm_seconds;
    j.waiting_seconds += t->gpus * t->waiting_seconds;
    IdleCauses c = t->idle;
    j.idle += c *= t->gpus;
  }
  if (j.gpus > 0) {
    j.busy_seconds /= j.gpus;
    j.exposed_comm_seconds /= j.gpus;
    j.waiting_seconds /= j.gpus;
    j.idle *= 1 / j.gpus;
  }
  return j;
}

/// The entry of simulated `s` for a batch of `batch_tokens` tokens: its step and its
/// time breakdown scaled by batch_seconds / step, so that entries whose simulated steps
/// carry different tokens compare at equal work. O(workers + ops).
inline RankedSchedule ranked_schedule(const Simulated& s, double batch_tokens) {
  const double k = batch_tokens / s.schedule.tokens_per_step;  // = batch_seconds / step
  SideTime job = whole_job(side_breakdown(s.schedule, s.result));
  job.busy_seconds *= k;
  job.exposed_comm_seconds *= k;
  job.waiting_seconds *= k;
  job.idle *= k;
  return {s.schedule.name, s.layout, s.result.step_seconds * k, s.fits, s.result.peak_memory_bytes, job};
}

/// The verdict between `win` and `lose` (`win` ranked first): speedup, cause, sentence.
/// `capacity`: usable HBM bytes per GPU. O(1).
inline Recommendation verdict(const RankedSchedule& win, const RankedSchedule& lose, double capacity) {
  Recommendation r;
  r.schedule = win.schedule;
  r.layout = win.layout;
  r.step_seconds = win.step_seconds;
  r.runner_up = lose.schedule;
  r.runner_up_layout = lose.layout;
  r.runner_up_step_seconds = lose.step_seconds;
  r.speedup = win.step_seconds > 0 ? lose.step_seconds / win.step_seconds : 1;
  std::ostringstream s;
  s << std::fixed << std::setprecision(1);
  s << "use " << win.schedule << " (" << win.layout << "): ";
  if (!lose.fits) {
    r.cause = "memory";
    s << lose.schedule << " (" << lose.layout << ") needs " << lose.peak_memory_bytes / 1e9 << " GB per GPU, over the "
      << capacity / 1e9 << " GB usable";
    if (!win.fits) s << ", and " << win.schedule << " does not fit either (" << win.peak_memory_bytes / 1e9 << " GB)";
  } else {
    // The gap, term by term (each side's terms add up to its step): idle time behind
    // transfers (bytes and latency) is the network's, behind a peer's compute (or
    // nothing an op accounts for) the balance's.
    const auto network = [](const SideTime& t) { return t.idle.network_seconds + t.idle.latency_seconds; };
    const auto waiting = [](const SideTime& t) { return t.idle.peer_compute_seconds + t.idle.other_seconds; };
    const double d_busy = lose.job.busy_seconds - win.job.busy_seconds;
    const double d_comm = network(lose.job) - network(win.job);
    const double d_wait = waiting(lose.job) - waiting(win.job);
    r.cause = d_busy >= d_comm && d_busy >= d_wait ? "compute" : d_comm >= d_wait ? "network" : "balance";
    // Each term is the runner-up's time less the winner's: "more" or "less", never a
    // negative time.
    const auto term = [](double d, const char* what) {
      std::ostringstream t;
      t << std::fixed << std::setprecision(0) << std::abs(d) * 1e3 << " ms " << (d < 0 ? "less " : "more ") << what;
      return t.str();
    };
    s << std::setprecision(2) << r.speedup << "x faster than " << lose.schedule << " (" << lose.layout
      << "); per GPU, of the " << std::setprecision(0) << (lose.step_seconds - win.step_seconds) * 1e3 << " ms gap, "
      << term(d_wait, "waiting on peers' compute (balance: imbalance, fill and drain), ")
      << term(d_comm, "waiting on transfers (network) and ") << term(d_busy, "compute");
  }
  r.reason = s.str();
  return r;
}

/// Ranks AF-Pipe on allocation `x` of `model` (simulate_plan) against each colocated
/// schedule in `colocated` at its best deployment (simulate_best: depth × EP degree, recomputation only
/// where activations do not fit; context parallelism at its fastest degree), all under the plan's batch,
/// costs and usable HBM, and recommends the better of AF-Pipe and the best colocated one. A schedule that
/// cannot run the batch is left out; ConfigError when none can. Cost: one simulate_best per colocated
/// schedule (≈ 30 deployments each on 128 GPUs) plus one.
inline Recommendation recommend(const plan::AnalyticModel& model, const plan::Allocation& x,
                                const std::vector<std::string>& colocated = {
                                    "1f1b", "interleaved", "a2a-overlap", "chunked", "comet", "dualpipe",
                                    "dualpipev"}) {
  std::vector<RankedSchedule> all;
  std::optional<RankedSchedule> af;
  const double batch_tokens = double(model.options().global_batch) * model.model().seq_len;
  try {
    af = ranked_schedule(simulate_plan(model, x), batch_tokens);
    all.push_back(*af);
  } catch (const ConfigError&) {
  }
  CostOptions base = cost_options(model.options(), model.model(), x);
  base.memory.recompute = model.options().memory.recompute;  // the baselines choose their own,
  base.context_parallel = 0;                                 // and their own context parallelism
  std::optional<RankedSchedule> col;
  const auto before = [](const RankedSchedule& a, const RankedSchedule& b) {
    return a.fits != b.fits ? a.fits : a.step_seconds < b.step_seconds;
  };
  for (const auto& name : colocated) {
    check_schedule_name(name);
    expect(name != AFPipe::kName, "colocated", name, "a colocated schedule");
    try {
      const RankedSchedule r =
          ranked_schedule(simulate_best(name, model.model(), model.cluster(), base), batch_tokens);
      if (!col || before(r, *col)) col = r;
      all.push_back(r);
    } catch (const ConfigError&) {
    }
  }
  expect(af || col, "schedule", "afpipe and colocated", "a schedule that can run this batch on this cluster");
  std::stable_sort(all.begin(), all.end(), before);
  Recommendation r;
  if (af && col) r = before(*col, *af) ? verdict(*col, *af, model.capacity()) : verdict(*af, *col, model.capacity());
  else {
    const RankedSchedule& only = af ? *af : *col;
    r.schedule = only.schedule;
    r.layout = only.layout;
    r.step_seconds = only.step_seconds;
    r.cause = "memory";
    r.reason = "use " + only.schedule + " (" + only.layout + "): " + (af ? "no colocated schedule" : "AF-Pipe") +
               " can run this batch here";
  }
  r.ranked = std::move(all);
  return r;
}

}  // namespace disagmoe::schedule
