// SPDX-License-Identifier: Apache-2.0
// Online re-placement in disaggregated training: the routing the workers' own routers
// chose (DisaggregatedTrainer::gather_routing) against the colocated trainer's routing of
// the same batch and model; experts moved between F-ranks mid-run (take_state into a
// trainer with another placement) against the colocated trainer over the whole run; and
// OnlineExpertPlacement against placement::OnlineReplacer on the same trace.
#include "disaggregated_cases.hpp"

#include <disagmoe/backend/host/loopback_transport.hpp>
#include <disagmoe/error.hpp>
#include <disagmoe/placement/online.hpp>
#include <disagmoe/runtime/disaggregated_trainer.hpp>
#include <disagmoe/runtime/online_expert_placement.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace {

using namespace disaggregated_test;
using Trainer = rt::DisaggregatedTrainer<Attention, Experts, dm::host::LoopbackTransport>;
using Colocated = rt::ColocatedTrainer<Attention, Experts>;

// The colocated trainer's routing of each batch, taken before the step that trains on it.
std::vector<std::vector<std::int32_t>> colocated_routing(const Layout& c, const std::vector<Batch>& data) {
  const auto spec = c.spec();
  Colocated tr(Attention(spec, {}), Experts(spec, {}), spec, train_options(c.reference_micro_batches()));
  std::vector<std::vector<std::int32_t>> out;
  for (const auto& b : data) {
    out.push_back(tr.routing(b.view()));
    (void)tr.step(b.view());
  }
  return out;
}

}  // namespace

TEST_CASE("gather_routing: the workers' routers choose what the colocated trainer's do, in batch order") {
  const Layout layouts[] = {
      {"one rank per worker, dense first layer, two pairs", 4, 2, 1, 0, 2, 1, 1, 2},
      {"data- and expert-parallel workers, stage alignment", 4, 2, 0, 0, 2, 2, 2, 2, {}, {}, true},
      {"1F1B expert parallel", 3, 2, 0, 0, 1, 2, 2, 2, {}, {}, false, rt::ScheduleKind::kOneFOneB},
      {"A2A overlap, looped stages, shared expert", 4, 2, 1, 1, 2, 2, 2, 2, {}, {}, false,
       rt::ScheduleKind::kA2AOverlap},
  };
  for (const auto& c : layouts) {
    CAPTURE(std::string(c.name));
    const auto spec = c.spec();
    const auto data = c.data(2);
    const auto expected = colocated_routing(c, data);
    dm::host::LoopbackWorld world(rt::world_size(c.options()));
    std::vector<std::vector<std::vector<std::int32_t>>> got(static_cast<std::size_t>(world.size()));
    dm::host::run_ranks(world, [&](dm::host::LoopbackTransport& t) {
      Trainer tr(Attention(spec, {}), Experts(spec, {}), spec, train_options(c.micro_batches), c.options(), t);
      CHECK_THROWS_AS((void)tr.gather_routing(), dm::ConfigError);  // before any step: nothing routed
      for (const auto& b : data) {
        (void)tr.step(b.view());
        got[static_cast<std::size_t>(t.rank())].push_back(tr.gather_routing());
      }
    });
    // On every rank the first step's routing is the colocated one exactly (same model, same
    // tokens); later steps only where the runs agree to the bit (one rank per worker):
    // elsewhere float rounding may tip a near tie.
    for (const auto& rank : got) {
      REQUIRE(rank.size() == data.size());
      CHECK(rank[0] == expected[0]);
      if (c.attention_ranks == 1 && c.ffn_ranks == 1) CHECK(rank[1] == expected[1]);
    }
  }
}

TEST_CASE("take_state: experts moved to other F-ranks mid-run train on as the colocated trainer") {
  // Two steps with contiguous blocks (F-rank 0: experts 0 and 1), then every MoE layer's
  // experts regrouped ({1, 2} on F-rank 0) and two more steps; the dense layer keeps its
  // row. Oracle: the colocated trainer over all four steps, and the run that never moved.
  for (const bool fuse : {false, true}) {
    CAPTURE(fuse);
    const Layout c{"moved", 4, 2, 1, 0, 2, 1, 2, 2, {}, {}, fuse};
    const auto spec = c.spec();
    const auto data = c.data(4);
    Layout moved = c;
    for (int l = 0; l < spec.layers; ++l)
      for (const int r : {1, 0, 0, 1}) moved.expert_rank.push_back(spec.is_moe_layer(l) ? r : 0);
    const Run ref = colocated(spec, c.reference_micro_batches(), data);
    Run got;
    std::vector<int> steps_after(static_cast<std::size_t>(rt::world_size(c.options())));
    std::mutex mu;
    dm::host::LoopbackWorld world(rt::world_size(c.options()));
    dm::host::run_ranks(world, [&](dm::host::LoopbackTransport& t) {
      auto tr = std::make_unique<Trainer>(Attention(spec, {}), Experts(spec, {}), spec, train_options(c.micro_batches),
                                          c.options(), t);
      std::vector<rt::StepStats> stats;
      for (std::size_t i = 0; i < data.size(); ++i) {
        if (i == 2) {
          auto next = std::make_unique<Trainer>(Attention(spec, {}), Experts(spec, {}), spec,
                                                train_options(c.micro_batches), moved.options(), t);
          next->take_state(*tr);
          tr = std::move(next);
          if (tr->experts() != nullptr) {  // the new layout: F-rank 0 holds experts 1 and 2 of every MoE layer
            const auto& layout = tr->experts()->layout();
            for (std::size_t k = 0; k < layout.layers.size(); ++k)
              CHECK(layout.experts[k] == (tr->rank_in_worker() == 0 ? std::vector<int>{1, 2} : std::vector<int>{0, 3}));
          }
        }
        stats.push_back(tr->step(data[i].view()));
      }
      Colocated whole(Attention(spec, {}), Experts(spec, {}), spec, train_options(c.reference_micro_batches()));
      std::vector<rt::ParameterSet<float>*> into;
      if (t.rank() == 0) into = {&whole.attention().parameters(), &whole.experts().parameters()};
      tr->gather_parameters(into);
      const std::lock_guard lock(mu);
      steps_after[static_cast<std::size_t>(t.rank())] = static_cast<int>(tr->steps());
      if (t.rank() != 0) return;
      got.stats = stats;
      collect(whole.attention().parameters(), got.params);
      collect(whole.experts().parameters(), got.params);
    });
    for (const int s : steps_after) CHECK(s == 4);
    check_close(ref, got);
  }
}

TEST_CASE("OnlineExpertPlacement: the replacer's decisions on the run's routing, in the run's layers") {
  // Three layers (the first dense), four experts, top-2, two F-ranks. Tokens choose {0, 2}
  // or {1, 3} on both MoE layers: contiguous blocks ({0, 1} | {2, 3}) send every token to
  // both ranks, pairing them sends it once, so a refit moves experts when the saving is
  // credited over enough windows (and not over a tenth of one).
  const auto spec = spec_of(3, 2, 1, 0);
  const int tokens_per_step = 24;
  std::vector<std::int32_t> step;
  for (int t = 0; t < tokens_per_step; ++t)
    for (int l = 0; l < 2; ++l)
      for (const int e : t % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3}) step.push_back(e);
  for (const double horizon : {1000.0, 0.1}) {
    CAPTURE(horizon);
    rt::OnlineExpertPlacement online(spec, 2, {}, 2 * tokens_per_step, horizon);
    const std::vector<int> start = online.expert_rank();
    CHECK(start == std::vector<int>{0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1});
    // The oracle: the library's replacer on the same tokens over the MoE layers.
    dm::placement::OnlineOptions o;
    o.window_tokens = 2 * tokens_per_step;
    o.horizon_windows = horizon;
    o.row_bytes = spec.hidden * 4.0;
    o.expert_bytes = 9.0 * spec.hidden * spec.expert_ffn * 4.0;
    o.fit.threads = 1;
    dm::placement::OnlineReplacer oracle(
        dm::placement::Placement(2, 4, {2, 2}, std::vector<std::int32_t>{0, 0, 1, 1, 0, 0, 1, 1}), o);
    const dm::placement::RoutingTrace trace(tokens_per_step, 2, 2, 4,
                                            std::vector<dm::placement::ExpertId>(step.begin(), step.end()));
    for (int s = 0; s < 4; ++s) {
      CAPTURE(s);
      oracle.observe(trace);
      const bool moved = online.observe(step);
      // A refit runs at the end of every second step; it moves at most once (then paired).
      CHECK(moved == (horizon > 1 && s == 1));
      REQUIRE(online.decisions().size() == oracle.decisions().size());
      for (std::size_t i = 0; i < oracle.decisions().size(); ++i) {
        CHECK(online.decisions()[i].moved == oracle.decisions()[i].moved);
        CHECK(online.decisions()[i].experts_moved == oracle.decisions()[i].experts_moved);
        CHECK(online.decisions()[i].rows_candidate == oracle.decisions()[i].rows_candidate);
        CHECK(online.decisions()[i].migration_bytes == oracle.decisions()[i].migration_bytes);
      }
    }
    const auto& rank = online.expert_rank();
    for (int e = 0; e < 4; ++e) CHECK(rank[static_cast<std::size_t>(e)] == start[static_cast<std::size_t>(e)]);  // dense
    for (int l = 1; l < 3; ++l)
      for (int e = 0; e < 4; ++e)
        CHECK(rank[static_cast<std::size_t>(4 * l + e)] == oracle.placement().gpu(l - 1, e));
    if (horizon > 1) {
      CHECK(rank[4] == rank[6]);  // experts 0 and 2 together, 1 and 3 together, on each MoE layer
      CHECK(rank[5] == rank[7]);
      CHECK(rank[4] != rank[5]);
    } else {
      CHECK(rank == start);
    }
  }
  // One row of E stands for every layer, as DisaggregatedOptions::expert_rank takes it.
  CHECK(rt::OnlineExpertPlacement(spec, 2, {1, 1, 0, 0}, 48).expert_rank() ==
        std::vector<int>{1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0});
  CHECK_THROWS_AS(rt::OnlineExpertPlacement(spec, 3, {}, 48), dm::ConfigError);     // 3 does not divide 4 experts
  CHECK_THROWS_AS(rt::OnlineExpertPlacement(spec, 2, {0, 1}, 48), dm::ConfigError); // not layers x experts
  CHECK_THROWS_AS(rt::OnlineExpertPlacement(spec, 2, {}, 47), dm::ConfigError);     // odd window
  CHECK_THROWS_AS(rt::OnlineExpertPlacement(spec_of(2, 2, 2, 0), 2, {}, 48), dm::ConfigError);  // no MoE layer
  rt::OnlineExpertPlacement online(spec, 2, {}, 48);
  CHECK_THROWS_AS((void)online.observe(std::vector<std::int32_t>(5)), dm::ConfigError);  // not tokens x layers x k
}
