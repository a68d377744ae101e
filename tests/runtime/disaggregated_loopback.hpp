// SPDX-License-Identifier: Apache-2.0
// The disaggregated trainer on loopback worker threads, one per rank, each rank's transport
// optionally wrapped (e.g. by the host model of NCCL's issue-order matching): the run the
// loopback tests compare with the colocated reference (disaggregated_cases.hpp).
#pragma once

#include "disaggregated_cases.hpp"

#include <disagmoe/backend/host/loopback_transport.hpp>
#include <disagmoe/runtime/disaggregated_trainer.hpp>

#include <doctest/doctest.h>

#include <mutex>
#include <utility>
#include <vector>

namespace disaggregated_test {

/// Leaves a rank's loopback transport as it is.
struct Unwrapped {
  dm::host::LoopbackTransport operator()(dm::host::LoopbackTransport t) const { return t; }
};

/// Trains on `data` with `opt` on `rt::world_size(opt)` loopback threads, the world of
/// each rank being `wrap(its loopback transport)`; checks that every rank reports the
/// same statistics and returns rank 0's with every worker's final parameters. Rethrows
/// the first rank's error.
template <class Experts_ = Experts, class Wrap = Unwrapped>
Run disaggregated(const dm::ModelSpec& spec, int m, const std::vector<Batch>& data, rt::DisaggregatedOptions opt,
                  const Experts_& experts, Wrap wrap = {}) {
  using World = decltype(wrap(std::declval<dm::host::LoopbackTransport>()));
  const mo::DecoderOptions o;
  const int size = rt::world_size(opt);
  dm::host::LoopbackWorld world(size);
  Run r;
  std::mutex mu;
  std::vector<std::vector<rt::StepStats>> per_rank(static_cast<std::size_t>(size));
  dm::host::run_ranks(world, [&](dm::host::LoopbackTransport& t) {
    World w = wrap(std::move(t));
    rt::DisaggregatedTrainer<Attention, Experts_, World> tr(Attention(spec, o), experts, spec, train_options(m), opt, w);
    for (const auto& b : data) per_rank[static_cast<std::size_t>(w.rank())].push_back(tr.step(b.view()));
    const std::lock_guard lock(mu);
    if (tr.attention() != nullptr && tr.rank_in_worker() == 0) collect(tr.attention()->parameters(), r.params);
    if (tr.experts() != nullptr) collect(tr.experts()->parameters(), r.params);
  });
  for (const auto& s : per_rank) {  // every worker reports the same statistics
    REQUIRE(s.size() == data.size());
    for (std::size_t i = 0; i < s.size(); ++i) {
      CHECK(s[i].loss == per_rank[0][i].loss);
      CHECK(s[i].grad_norm == per_rank[0][i].grad_norm);
    }
  }
  r.stats = per_rank[0];
  return r;
}

}  // namespace disaggregated_test
