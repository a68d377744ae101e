// SPDX-License-Identifier: Apache-2.0
// Disaggregated AF-Pipe training over MPI processes (run by ctest under `mpirun -np 4`
// and `-np 6`: p = 2 and 3 pairs). Every rank also trains the colocated reference
// locally and checks that its own stage's parameters and every step's statistics equal
// the reference's bit for bit; groups of ranks and the colocated expert-parallel
// baselines match it to float rounding. Then one rank's expert throws: every rank stops within
// the deadline, the failing one naming its worker, op and step.
#define DOCTEST_CONFIG_IMPLEMENT
#include "disaggregated_cases.hpp"

#include <disagmoe/backend/mpi/transport.hpp>
#include <disagmoe/runtime/disaggregated_trainer.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

using namespace disaggregated_test;

namespace {

// A communicator of its own per test, so that traffic a failed test left in flight
// cannot match a later test's.
disagmoe::mpi::Transport fresh_world() {
  auto world = disagmoe::mpi::Transport::world();
  std::vector<int> all(static_cast<std::size_t>(world.size()));
  std::iota(all.begin(), all.end(), 0);
  return std::move(*world.split(all));
}

struct ThrowingExperts : Experts {
  using Experts::Experts;
  bool armed = false;
  template <class... A>
  void forward(A&&... a) const {
    if (armed) throw std::runtime_error("injected expert failure");
    Experts::forward(std::forward<A>(a)...);
  }
};

// Three steps under `opt` (2 micro-batches of 2 sequences per A-rank) against the
// colocated trainer run with attention_ranks x the micro-batches, to float rounding.
void check_close_to_colocated(dm::mpi::Transport& world, const dm::ModelSpec& spec, const rt::DisaggregatedOptions& opt) {
  const int m = 2;
  const auto data = batches(3, 2 * m * opt.attention_ranks, spec.seq_len);
  const Run ref = colocated(spec, m * opt.attention_ranks, data);
  const mo::DecoderOptions o;
  rt::DisaggregatedTrainer<Attention, Experts, dm::mpi::Transport> tr(Attention(spec, o), Experts(spec, o), spec,
                                                                     train_options(m), opt, world);
  std::vector<rt::StepStats> stats;
  for (const auto& b : data) stats.push_back(tr.step(b.view()));
  check_close_stats(ref.stats, stats);
  Parameters mine;
  if (tr.attention() != nullptr) collect(tr.attention()->parameters(), mine);
  if (tr.experts() != nullptr) collect(tr.experts()->parameters(), mine);
  check_close_parameters(ref.params, mine);
}

}  // namespace

TEST_CASE("mpi: disaggregated AF-Pipe equals the colocated trainer bit for bit on every rank") {
  auto world = fresh_world();
  const int p = world.size() / 2;
  REQUIRE(world.size() == 2 * p);
  struct Case {
    int layers, top_k, dense, shared, micro_batches;
    bool fuse;
  };
  for (const Case c : {Case{2 * p, 2, 0, 0, 4, true}, Case{2 * p + 1, 1, 1, 1, 3, false}, Case{p, 2, 0, 1, 2, true}}) {
    CAPTURE(c.layers);
    CAPTURE(c.fuse);
    const auto spec = spec_of(c.layers, c.top_k, c.dense, c.shared);
    const auto data = batches(3, 2 * c.micro_batches, spec.seq_len);
    const Run ref = colocated(spec, c.micro_batches, data);
    rt::DisaggregatedOptions opt;
    opt.pairs = p;
    opt.policy.fuse_combine_dispatch = c.fuse;
    opt.executor.timeout = std::chrono::milliseconds(30000);
    const mo::DecoderOptions o;
    rt::DisaggregatedTrainer<Attention, Experts, dm::mpi::Transport> tr(Attention(spec, o), Experts(spec, o), spec,
                                                                       train_options(c.micro_batches), opt, world);
    std::vector<rt::StepStats> stats;
    for (const auto& b : data) stats.push_back(tr.step(b.view()));
    check_same_stats(ref.stats, stats);
    Parameters mine;
    if (tr.attention() != nullptr) collect(tr.attention()->parameters(), mine);
    if (tr.experts() != nullptr) collect(tr.experts()->parameters(), mine);
    CHECK(differing_parameters(ref.params, mine) == 0);
    CHECK(tr.parameter_count() == static_cast<std::int64_t>([&] {
            std::size_t n = 0;
            for (const auto& [name, v] : ref.params) n += v.size();
            return n;
          }()));
  }
}

TEST_CASE("mpi: groups of ranks through M2NChannel match the colocated trainer") {
  // 4 ranks: one pair of 2 A-ranks + 2 F-ranks; 6 ranks: two pairs of 1 A-rank + 2 F-ranks,
  // whose stage alignment hands off between the pairs. With replicas, experts 0 and 3
  // have a copy on each F-rank (the copies' gradient sum over the F-ranks' group).
  auto world = fresh_world();
  const int size = world.size();
  for (int run = 0; run < 4; ++run) {
    const bool fuse = run % 2 == 1, replicas = run >= 2;
    CAPTURE(fuse);
    CAPTURE(replicas);
    rt::DisaggregatedOptions opt;
    if (replicas) opt.expert_replicas = {{1}, {}, {}, {0}};
    opt.pairs = size == 4 ? 1 : 2;
    opt.attention_ranks = size == 4 ? 2 : 1;
    opt.ffn_ranks = 2;
    opt.policy.fuse_combine_dispatch = fuse;
    opt.executor.timeout = std::chrono::milliseconds(30000);
    REQUIRE(opt.pairs * (opt.attention_ranks + opt.ffn_ranks) == size);
    check_close_to_colocated(world, spec_of(2 * opt.pairs + 1, 2, 1, 1), opt);
  }
}

TEST_CASE("mpi: the colocated expert-parallel baselines match the colocated trainer") {
  // 1F1B-EP on 2 stages of size / 2 ranks and A2A overlap on one stage of all ranks: the
  // all-to-all inside a stage is M2NChannel over MPI with every rank on both ends.
  auto world = fresh_world();
  const int size = world.size();
  struct Case {
    rt::ScheduleKind schedule;
    int stages;
  };
  for (const Case c : {Case{rt::ScheduleKind::kOneFOneB, 2}, Case{rt::ScheduleKind::kA2AOverlap, 1}}) {
    CAPTURE(rt::to_string(c.schedule));
    rt::DisaggregatedOptions opt;
    opt.schedule = c.schedule;
    opt.pairs = c.stages;
    opt.attention_ranks = opt.ffn_ranks = size / c.stages;
    opt.executor.timeout = std::chrono::milliseconds(30000);
    check_close_to_colocated(world, spec_of(4, 2, 1, 1), opt);
  }
}

TEST_CASE("mpi: a throwing expert stops every rank within the deadline, naming worker, op and step") {
  auto world = fresh_world();
  const int p = world.size() / 2;
  const auto spec = spec_of(2 * p, 2, 0, 0);
  const auto data = batches(2, 4, spec.seq_len);
  rt::DisaggregatedOptions opt;
  opt.pairs = p;
  opt.executor.timeout = std::chrono::milliseconds(1000);
  const mo::DecoderOptions o;
  ThrowingExperts experts(spec, o);
  experts.armed = world.rank() == world.size() - 1;  // the last F worker
  rt::DisaggregatedTrainer<Attention, ThrowingExperts, dm::mpi::Transport> tr(Attention(spec, o), experts, spec,
                                                                             train_options(2), opt, world);
  const auto t0 = std::chrono::steady_clock::now();
  std::string what;
  bool timeout = false;
  try {
    tr.step(data[0].view());
  } catch (const dm::TimeoutError& e) {
    what = e.what();
    timeout = true;
  } catch (const dm::Error& e) {
    what = e.what();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CAPTURE(what);
  CHECK(seconds < 10.0);
  if (world.rank() == world.size() - 1) {
    CHECK(what.find("injected expert failure") != std::string::npos);
    CHECK(what.find("worker F" + std::to_string(p - 1) + ", step 1, expert_fwd") != std::string::npos);
  } else {
    CHECK(timeout);
    CHECK(what.find("no progress") != std::string::npos);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char** argv) {
  disagmoe::mpi::Environment env(argc, argv);
  doctest::Context context(argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) context.setOption("minimal", true);  // one summary, failures from every rank
  return context.run();
}
