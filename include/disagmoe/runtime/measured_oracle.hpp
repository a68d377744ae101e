// SPDX-License-Identifier: Apache-2.0
/// @file measured_oracle.hpp
/// Measured step times for the planner's local search. DisagMoE (arXiv 2605.11005,
/// "Adaptive worker allocation") refines the MILP's allocation by local search over
/// measured per-step times, which include what the analytic model leaves out.
/// `MeasuredStepOracle` is a `plan::step_time_oracle` that turns an allocation into the
/// runtime's layout (`layout_of`) and asks a measurement for its step time;
/// `LoopbackMeasurement` is one: it trains a few steps of a disaggregated run on worker
/// threads over the emulated network and returns the median step.
#pragma once

#include <disagmoe/backend/host/loopback_transport.hpp>
#include <disagmoe/error.hpp>
#include <disagmoe/model/decoder_options.hpp>
#include <disagmoe/plan/analytic_model.hpp>
#include <disagmoe/plan/step_time_oracle.hpp>
#include <disagmoe/runtime/disaggregated_options.hpp>
#include <disagmoe/runtime/disaggregated_trainer.hpp>

#include <algorithm>
#include <chrono>
#include <concepts>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace disagmoe::runtime {

/// The runtime layout of allocation `x` under `model`: p = x.groups pairs, each attention
/// worker of (A GPUs in the cluster) / p ranks and each FFN worker of (F GPUs) / p ranks;
/// everything else from `base`. Precondition: `model.valid(x)`.
[[nodiscard]] inline DisaggregatedOptions layout_of(const plan::AnalyticModel& model, const plan::Allocation& x,
                                                    DisaggregatedOptions base = {}) {
  expect(model.valid(x), "allocation", "invalid", "an allocation the analytic model accepts (AnalyticModel::valid)");
  base.schedule = ScheduleKind::kAfPipe;
  base.pairs = x.groups;
  base.attention_ranks = model.attention_group_size(x);
  base.ffn_ranks = model.ffn_group_size(x);
  base.expert_rank.clear();  // contiguous: a placement (and replicas) for other F-ranks would not apply
  base.expert_replicas.clear();
  return base;
}

/// A `plan::step_time_oracle` from measurements: `step_seconds(x)` is +infinity where the
/// analytic model says `x` does not fit memory (nothing is run), else
/// `measure(layout_of(*model, x, base))`, the measured step seconds of that layout.
/// `Measure` is called through a const reference; the local search calls it once per
/// distinct allocation, so a measurement may take seconds.
template <class Measure>
  requires std::invocable<const Measure&, const DisaggregatedOptions&> &&
           std::convertible_to<std::invoke_result_t<const Measure&, const DisaggregatedOptions&>, double>
struct MeasuredStepOracle {
  using oracle_concept = plan::step_time_oracle_tag;
  const plan::AnalyticModel* model = nullptr;  ///< not owned; must outlive the oracle
  DisaggregatedOptions base{};                 ///< exchange, policy, rates, deadline of every run
  Measure measure;                             ///< measured step seconds of a layout

  [[nodiscard]] double step_seconds(const plan::Allocation& x) const {
    if (!model->estimate(x).fits()) return std::numeric_limits<double>::infinity();
    return static_cast<double>(measure(layout_of(*model, x, base)));
  }
};

/// Measures a layout by training it: `steps` optimizer steps of `spec` (micro-batches of
/// `train.micro_batches`, batch `batches[i % batches.size()]`) on loopback worker threads
/// over the emulated `network` (if set), starting from the seeded initial weights every
/// time, so layouts are measured on the same work. Returns the median step seconds of the
/// steps after the first (which also builds the schedule and the channels).
template <attention_compute Attention, expert_compute Experts>
struct LoopbackMeasurement {
  ModelSpec spec;
  TrainOptions train;
  model::DecoderOptions decoder{};
  std::vector<TokenBatch> batches;  ///< views of data that outlives the measurement
  int steps = 4;                    ///< >= 2
  std::optional<host::NetworkConfig> network;

  [[nodiscard]] double operator()(const DisaggregatedOptions& layout) const {
    expect(steps >= 2, "LoopbackMeasurement.steps", steps, "at least 2 (the first step is not timed)");
    expect(!batches.empty(), "LoopbackMeasurement.batches", 0, "at least one batch");
    host::LoopbackWorld world(world_size(layout), network);
    std::vector<double> seconds;
    std::mutex mu;
    host::run_ranks(world, [&](host::LoopbackTransport& t) {
      DisaggregatedTrainer<Attention, Experts, host::LoopbackTransport> tr(Attention(spec, decoder),
                                                                           Experts(spec, decoder), spec, train, layout, t);
      for (int s = 0; s < steps; ++s) {
        const auto t0 = std::chrono::steady_clock::now();
        (void)tr.step(batches[static_cast<std::size_t>(s) % batches.size()]);  // collective: ends together
        const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (t.rank() == 0 && s > 0) {
          const std::lock_guard lock(mu);
          seconds.push_back(dt);
        }
      }
    });
    std::nth_element(seconds.begin(), seconds.begin() + static_cast<std::ptrdiff_t>(seconds.size() / 2), seconds.end());
    return seconds[seconds.size() / 2];
  }
};

}  // namespace disagmoe::runtime
