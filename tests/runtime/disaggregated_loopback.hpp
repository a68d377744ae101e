// SPDX-License-Identifier: Apache-2.0
// The disaggregated trainer on one thread per rank, over any transport (the GPU test runs
// it over NCCL), and on loopback threads with each rank's transport optionally wrapped
// (e.g. by the host model of NCCL's issue-order matching): the runs the tests compare
// with the colocated reference (disaggregated_cases.hpp).
#pragma once

#include "disaggregated_cases.hpp"

#include <disagmoe/backend/host/loopback_transport.hpp>
#include <disagmoe/runtime/disaggregated_trainer.hpp>

#include <doctest/doctest.h>

#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

namespace disaggregated_test {

/// Leaves a rank's loopback transport as it is.
struct Unwrapped {
  dm::host::LoopbackTransport operator()(dm::host::LoopbackTransport t) const { return t; }
};

/// Trains on `data` with `opt` on every rank that `for_each_rank(body)` runs (it calls
/// `body(world transport)` once per rank of `rt::world_size(opt)`, concurrently, and
/// rethrows the first error); checks that every rank reports the same statistics and
/// returns rank 0's with every worker's final parameters.
template <class Experts_, class ForEachRank>
Run disaggregated_on(ForEachRank&& for_each_rank, const dm::ModelSpec& spec, int m, const std::vector<Batch>& data,
                     const rt::DisaggregatedOptions& opt, const Experts_& experts) {
  const mo::DecoderOptions o;
  Run r;
  std::mutex mu;
  std::vector<std::vector<rt::StepStats>> per_rank(static_cast<std::size_t>(rt::world_size(opt)));
  for_each_rank([&](auto& w) {
    using World = std::remove_cvref_t<decltype(w)>;
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

/// `disaggregated_on` loopback threads, the world of each rank being `wrap(its loopback
/// transport)`.
template <class Experts_ = Experts, class Wrap = Unwrapped>
Run disaggregated(const dm::ModelSpec& spec, int m, const std::vector<Batch>& data, const rt::DisaggregatedOptions& opt,
                  const Experts_& experts, Wrap wrap = {}) {
  const dm::host::LoopbackWorld world(rt::world_size(opt));
  auto on_threads = [&](auto&& body) {
    dm::host::run_ranks(world, [&](dm::host::LoopbackTransport& t) {
      auto w = wrap(std::move(t));
      body(w);
    });
  };
  return disaggregated_on(on_threads, spec, m, data, opt, experts);
}

}  // namespace disaggregated_test
