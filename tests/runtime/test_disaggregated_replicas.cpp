// SPDX-License-Identifier: Apache-2.0
// Redundant experts in disaggregated training (DisaggregatedOptions::expert_replicas, as
// DeepSeek's EPLB replicates hot experts): on loopback worker threads against the
// colocated trainer (the oracle), for layouts with an expert on every F-rank, an F-rank
// holding only replicas, per-layer replicas beside dense and shared layers, stage
// alignment, and the colocated 1F1B baseline. Checked: statistics and final parameters
// to float rounding (a replicated expert's gradient is a sum of its copies' partial sums),
// every copy of an expert bit-identical to the others after the steps, the reported
// model (gathered parameters, parameter count) counting each expert once, and, recounted
// from the rows each copy's compute sees, every token-expert pair served exactly once.
#include "disaggregated_cases.hpp"

#include <disagmoe/backend/host/loopback_transport.hpp>
#include <disagmoe/runtime/disaggregated_trainer.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

namespace {

using namespace disaggregated_test;

// Rows each expert copy's compute receives: reference experts that count, per
// (layer, expert, F-rank), the rows of every forward, each copy identified by the address
// of its first weight (registered by the test after the stage is built).
struct RowCounts {
  std::mutex mu;
  std::map<const float*, std::tuple<int, int, int>> copy;  // w1 data -> (layer, expert, F-rank)
  std::map<std::tuple<int, int, int>, std::int64_t> rows;  // (layer, expert, F-rank) -> rows served
};

struct CountingExperts : Experts {
  using Experts::Experts;
  std::shared_ptr<RowCounts> counts = std::make_shared<RowCounts>();
  void forward(std::span<const Weights> experts, std::span<const std::int64_t> offsets, const mo::Matrix<float>& rows,
               mo::Matrix<float>& out, Saved& saved) const {
    {
      const std::lock_guard lock(counts->mu);
      for (std::size_t k = 0; k < experts.size(); ++k)
        counts->rows[counts->copy.at(experts[k].w1.data())] += offsets[k + 1] - offsets[k];
    }
    Experts::forward(experts, offsets, rows, out, saved);
  }
};
static_assert(rt::expert_compute<CountingExperts>);

// Registers every expert `stage` holds under F-rank `rank`.
template <class Stage>
void register_copies(Stage& stage, int rank, RowCounts& counts) {
  const auto& layout = stage.layout();
  const std::lock_guard lock(counts.mu);
  for (std::size_t i = 0; i < layout.layers.size(); ++i)
    for (const int e : layout.experts[i]) {
      const auto first = stage.expert_slots(layout.layers[i], e).first;
      const auto& slot = stage.parameters().slots()[first];
      REQUIRE(slot.name.find("w1.weight") != std::string::npos);
      counts.copy[slot.value->data()] = {layout.layers[i], e, rank};
    }
}

template <class Set>
void collect_gradients(const Set& ps, Parameters& out) {
  for (const auto& s : ps.slots()) out[s.name].assign(s.grad->data(), s.grad->data() + s.grad->size());
}

struct ReplicaRun {
  Run run;                                                 // rank 0's statistics, the reported parameters
  Parameters gradients;                                    // of the last step, as reported
  std::map<std::string, std::vector<std::vector<float>>> copies, copy_gradients;  // every rank's expert tensors
  Parameters gathered;                                     // gather_parameters on rank 0
  std::int64_t parameter_count = 0;
  std::map<std::tuple<int, int, int>, std::int64_t> rows;  // (layer, expert, F-rank) -> rows served
  std::vector<std::vector<std::int64_t>> expert_rows;      // gather_expert_rows of the last step
};

// Trains on `data` (`optimize`), or only computes the gradients of data[0] (`!optimize`).
ReplicaRun replicated(const dm::ModelSpec& spec, int m, const std::vector<Batch>& data,
                      const rt::DisaggregatedOptions& opt, bool optimize) {
  const mo::DecoderOptions o;
  const CountingExperts experts(spec, o);
  dm::host::LoopbackWorld world(rt::world_size(opt));
  ReplicaRun r;
  std::mutex mu;
  dm::host::run_ranks(world, [&](dm::host::LoopbackTransport& t) {
    rt::DisaggregatedTrainer<Attention, CountingExperts, dm::host::LoopbackTransport> tr(Attention(spec, o), experts,
                                                                                        spec, train_options(m), opt, t);
    if (tr.experts() != nullptr) register_copies(*tr.experts(), tr.rank_in_worker(), *experts.counts);
    std::vector<rt::StepStats> stats;
    for (const auto& b : data) stats.push_back(optimize ? tr.step(b.view()) : tr.compute_gradients(b.view()));
    // The whole model as the ranks report it, into a colocated model's parameter sets.
    rt::ColocatedTrainer<Attention, Experts> whole(Attention(spec, o), Experts(spec, o), spec, train_options(m));
    std::vector<rt::ParameterSet<float>*> into;
    if (t.rank() == 0) into = {&whole.attention().parameters(), &whole.experts().parameters()};
    tr.gather_parameters(into);
    const auto expert_rows = tr.gather_expert_rows();
    const std::lock_guard lock(mu);
    if (t.rank() == 0) {
      r.expert_rows = expert_rows;
      r.run.stats = stats;
      r.parameter_count = tr.parameter_count();
      collect(whole.attention().parameters(), r.gathered);
      collect(whole.experts().parameters(), r.gathered);
    }
    if (tr.attention() != nullptr && tr.rank_in_worker() == 0) {
      collect(tr.attention()->parameters(), r.run.params);
      collect_gradients(tr.attention()->parameters(), r.gradients);
    }
    if (tr.experts() == nullptr) return;
    collect(tr.experts()->parameters(), r.run.params);
    collect_gradients(tr.experts()->parameters(), r.gradients);
    for (const auto& s : tr.experts()->parameters().slots()) {
      r.copies[s.name].emplace_back(s.value->data(), s.value->data() + s.value->size());
      r.copy_gradients[s.name].emplace_back(s.grad->data(), s.grad->data() + s.grad->size());
    }
  });
  r.rows = experts.counts->rows;
  return r;
}

// The colocated trainer's gradients of `batch` and rows per (layer, expert): the oracle.
struct ColocatedGradients {
  rt::StepStats stats;
  Parameters gradients;
  std::map<std::pair<int, int>, std::int64_t> rows;
};
ColocatedGradients colocated_gradients(const dm::ModelSpec& spec, int m, const Batch& batch) {
  const mo::DecoderOptions o;
  CountingExperts experts(spec, o);
  rt::ColocatedTrainer<Attention, CountingExperts> tr(Attention(spec, o), experts, spec, train_options(m));
  register_copies(tr.experts(), 0, *experts.counts);
  ColocatedGradients g;
  g.stats = tr.compute_gradients(batch.view());
  collect_gradients(tr.attention().parameters(), g.gradients);
  collect_gradients(tr.experts().parameters(), g.gradients);
  for (const auto& [key, n] : experts.counts->rows) g.rows[{std::get<0>(key), std::get<1>(key)}] += n;
  return g;
}

const std::vector<Layout>& layouts() {
  static const std::vector<Layout> all = {
      // Expert 1 on every F-rank (primary on 0, replicas on 1 and 2).
      {"expert on every F-rank", 3, 2, 0, 0, 1, 1, 3, 2, {0, 0, 1, 2}, {{}, {1, 2}, {}, {}}},
      // F-rank 2 holds only replicas (the shared expert lives on F-rank 0); M = 2 A-ranks.
      {"F-rank of replicas only", 3, 2, 0, 1, 1, 2, 3, 2, {0, 0, 1, 1}, {{2}, {}, {}, {2}}},
      // A replica layout per layer beside a dense layer, on two pairs; layer 3 replicates
      // every expert (each F-rank holds all four).
      {"per-layer replicas, two pairs", 4, 2, 1, 0, 2, 1, 2, 2, {},
       {{}, {}, {}, {},  {1}, {}, {}, {},  {}, {}, {0}, {},  {1}, {1}, {0}, {0}}},
      // Stage alignment: F_l hands its rows to A_{l+1}'s ranks.
      {"stage alignment", 4, 2, 0, 1, 2, 2, 2, 2, {}, {{1}, {}, {0}, {}}, true},
      // The colocated expert-parallel baseline: a token's own rank is its home.
      {"1F1B expert parallel", 3, 2, 0, 0, 1, 2, 2, 2, {}, {{1}, {}, {}, {0}}, false, rt::ScheduleKind::kOneFOneB},
  };
  return all;
}

}  // namespace

// Every tensor holding several copies (several ranks' values of one name) has the same
// bits in each; returns how many such tensors there are.
int check_identical_copies(const std::map<std::string, std::vector<std::vector<float>>>& copies) {
  int replicated_tensors = 0;
  for (const auto& tensor : copies) {  // (no structured bindings: CAPTURE is a lambda)
    CAPTURE(tensor.first);
    const auto& values = tensor.second;
    replicated_tensors += values.size() > 1;
    for (const auto& v : values) CHECK(v == values.front());
  }
  return replicated_tensors;
}

TEST_CASE("redundant experts: one step's gradients match the colocated trainer's; each pair served once, recounted") {
  // At the initial weights both runs route every token alike, so: the rows every copy's
  // compute received, summed over an expert's copies, equal the rows of the colocated
  // trainer's single copy; each copy sits on an F-rank the layout gives it; the replicas
  // take a share. The gradients (summed over the copies) equal the colocated ones to
  // float rounding (the copies' partial sums regroup the token sum), with the same bits
  // on every copy.
  for (const auto& c : layouts()) {
    CAPTURE(std::string(c.name));
    const auto spec = c.spec();
    const auto data = c.data(1);
    const auto opt = c.options();
    REQUIRE(rt::has_replicas(opt));
    const auto ref = colocated_gradients(spec, c.reference_micro_batches(), data[0]);
    const ReplicaRun got = replicated(spec, c.micro_batches, data, opt, false);
    check_close_stats({ref.stats}, got.run.stats);
    REQUIRE(got.gradients.size() == ref.gradients.size());
    const double worst = max_tensor_rel_diff(ref.gradients, got.gradients);
    MESSAGE("largest relative gradient difference " << worst);
    CHECK(worst < 1e-5);
    CHECK(check_identical_copies(got.copy_gradients) > 0);
    std::map<std::pair<int, int>, std::int64_t> served, per_rank;  // (layer, expert), (worker, rank)
    std::int64_t by_replicas = 0, pairs = 0;
    for (const auto& copy : got.rows) {
      const int l = std::get<0>(copy.first), e = std::get<1>(copy.first), rank = std::get<2>(copy.first);
      CAPTURE(l);
      CAPTURE(e);
      CAPTURE(rank);
      const auto hosts = rt::expert_hosts(opt, spec, l)[static_cast<std::size_t>(e)];
      REQUIRE(std::find(hosts.begin(), hosts.end(), rank) != hosts.end());
      served[{l, e}] += copy.second;
      per_rank[{l % c.pairs, rank}] += copy.second;  // AF-Pipe: layer l on pair l mod p (1F1B here: one stage)
      by_replicas += rank != hosts.front() ? copy.second : 0;
    }
    for (const auto& expert : ref.rows) {
      CAPTURE(expert.first.first);
      CAPTURE(expert.first.second);
      CHECK(served[expert.first] == expert.second);
      pairs += expert.second;
    }
    CHECK(served.size() == ref.rows.size());
    int moe = 0;
    for (int l = 0; l < spec.layers; ++l) moe += spec.is_moe_layer(l);
    CHECK(pairs == static_cast<std::int64_t>(data[0].in.size()) * moe * (spec.top_k + spec.shared_experts));
    CHECK(by_replicas > 0);
    // What the trainer reports as each rank's rows (the load the replicas balance).
    REQUIRE(got.expert_rows.size() == static_cast<std::size_t>(c.pairs));
    for (int i = 0; i < c.pairs; ++i)
      for (int rank = 0; rank < c.ffn_ranks; ++rank) {
        CAPTURE(i);
        CAPTURE(rank);
        CHECK(got.expert_rows[static_cast<std::size_t>(i)].at(static_cast<std::size_t>(rank)) == per_rank[{i, rank}]);
      }
  }
}

TEST_CASE("redundant experts: disaggregated training matches the colocated trainer, every copy identical") {
  // Three steps: statistics as the other channel runs (losses within 1e-6), parameters
  // within 5e-4 of each tensor's largest entry. Looser than the 1e-4 of runs without
  // replicas: AdamW divides each entry's step by its own gradient's size, so an entry
  // whose gradient nearly cancels over the tokens turns the rounding of a regrouped sum
  // (an expert's tokens split over its copies) into a step difference of up to lr times
  // its relative error (measured: at most 1.2e-4; skipping the copies' gradient sum
  // leaves differences of order 1).
  for (const auto& c : layouts()) {
    CAPTURE(std::string(c.name));
    const auto spec = c.spec();
    const auto data = c.data(3);
    const Run ref = colocated(spec, c.reference_micro_batches(), data);
    const ReplicaRun got = replicated(spec, c.micro_batches, data, c.options(), true);
    check_close_stats(ref.stats, got.run.stats);
    REQUIRE(got.run.params.size() == ref.params.size());
    const double worst = max_tensor_rel_diff(ref.params, got.run.params);
    MESSAGE("largest relative parameter difference " << worst);
    CHECK(worst < 5e-4);
    // Each expert once in the reported model, and every copy the same bits.
    CHECK(got.gathered == got.run.params);
    std::int64_t count = 0;
    for (const auto& tensor : ref.params) count += static_cast<std::int64_t>(tensor.second.size());
    CHECK(got.parameter_count == count);
    CHECK(check_identical_copies(got.copies) > 0);
  }
}

TEST_CASE("redundant experts: layouts the run cannot hold are errors naming the field") {
  const auto spec = spec_of(3, 2, 0, 0);
  rt::DisaggregatedOptions opt;
  opt.ffn_ranks = 2;
  opt.expert_rank = {0, 0, 1, 1};
  opt.expert_replicas = {{1}, {}};
  CHECK_THROWS_WITH_AS(rt::validate(opt, spec, 3), doctest::Contains("expert_replicas.size() = 2"), dm::ConfigError);
  opt.expert_replicas = {{1}, {}, {0}, {1}};  // expert 3's primary is F-rank 1
  CHECK_THROWS_WITH_AS(rt::validate(opt, spec, 3),
                       doctest::Contains("expert_replicas[3] = 1: expected an F-rank in [0, ffn_ranks = 2) holding no "
                                         "other copy of expert 3 of layer 0 (its primary is F-rank 1)"),
                       dm::ConfigError);
  opt.expert_replicas = {{1}, {}, {2}, {}};
  CHECK_THROWS_WITH_AS(rt::validate(opt, spec, 3), doctest::Contains("expert_replicas[2] = 2"), dm::ConfigError);
  opt.expert_replicas = {{1}, {}, {0}, {}};
  CHECK_NOTHROW(rt::validate(opt, spec, 3));
  const auto hosts = rt::expert_hosts(opt, spec, 1);
  CHECK(hosts == std::vector<std::vector<std::int32_t>>{{0, 1}, {0}, {1, 0}, {1}});
  opt.ffn_ranks = 1;  // one F-rank: no other rank for a copy
  opt.expert_rank.clear();
  CHECK_THROWS_WITH_AS(rt::validate(opt, spec, 2), doctest::Contains("expert_replicas[0] = 1"), dm::ConfigError);
}
