// SPDX-License-Identifier: Apache-2.0
// Disaggregated AF-Pipe training on loopback worker threads against the colocated
// trainer (the oracle): loss, auxiliary losses, gradient norm of every step and every
// final parameter bit for bit, over pairs p (1 included), micro-batch counts, top-k,
// dense and shared-expert layers, stage alignment on and off and ping-pong group sizes.
// Faults: a throwing expert stops its worker with an error naming it, the op and the
// step, and every other worker with a timeout, within the deadline.
#include "disaggregated_cases.hpp"

#include <disagmoe/backend/host/loopback_transport.hpp>
#include <disagmoe/runtime/disaggregated_trainer.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace {

using namespace disaggregated_test;

template <class Experts_ = Experts>
Run disaggregated(const dm::ModelSpec& spec, int m, const std::vector<Batch>& data, rt::DisaggregatedOptions opt,
                  const Experts_& experts) {
  const mo::DecoderOptions o;
  dm::host::LoopbackWorld world(2 * opt.pairs);
  Run r;
  std::mutex mu;
  std::vector<std::vector<rt::StepStats>> per_rank(static_cast<std::size_t>(2 * opt.pairs));
  dm::host::run_ranks(world, [&](dm::host::LoopbackTransport& t) {
    rt::DisaggregatedTrainer<Attention, Experts_, dm::host::LoopbackTransport> tr(Attention(spec, o), experts, spec,
                                                                                 train_options(m), opt, t);
    for (const auto& b : data) per_rank[static_cast<std::size_t>(t.rank())].push_back(tr.step(b.view()));
    const std::lock_guard lock(mu);
    if (tr.attention() != nullptr) collect(tr.attention()->parameters(), r.params);
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

void check_identical(const Run& ref, const Run& got) {
  check_same_stats(ref.stats, got.stats);
  REQUIRE(got.params.size() == ref.params.size());
  CHECK(differing_parameters(ref.params, got.params) == 0);
}

}  // namespace

TEST_CASE("disaggregated AF-Pipe equals the colocated trainer bit for bit") {
  struct Case {
    int layers, top_k, dense, shared, pairs, micro_batches, group;
    bool fuse;
  };
  const Case cases[] = {
      {3, 2, 0, 0, 1, 1, 0, true},  {3, 2, 0, 0, 1, 3, 0, false}, {4, 2, 0, 0, 2, 4, 0, true},
      {4, 1, 1, 0, 2, 4, 2, false}, {5, 2, 1, 1, 3, 3, 1, true},  {4, 2, 0, 1, 2, 5, 2, true},
      {3, 1, 0, 0, 3, 2, 0, false}, {4, 2, 2, 0, 2, 3, 0, true},
  };
  for (const auto& c : cases) {
    CAPTURE(c.layers);
    CAPTURE(c.top_k);
    CAPTURE(c.dense);
    CAPTURE(c.shared);
    CAPTURE(c.pairs);
    CAPTURE(c.micro_batches);
    CAPTURE(c.group);
    CAPTURE(c.fuse);
    const auto spec = spec_of(c.layers, c.top_k, c.dense, c.shared);
    const auto data = batches(3, 2 * c.micro_batches, spec.seq_len);
    rt::DisaggregatedOptions opt;
    opt.pairs = c.pairs;
    opt.policy.group_size = c.group;
    opt.policy.fuse_combine_dispatch = c.fuse;
    opt.executor.timeout = std::chrono::milliseconds(20000);
    check_identical(colocated(spec, c.micro_batches, data), disaggregated(spec, c.micro_batches, data, opt, Experts(spec, {})));
  }
}

TEST_CASE("disaggregated runs reject layouts they cannot run, naming the field") {
  const auto spec = spec_of(3, 2, 0, 0);
  rt::DisaggregatedOptions opt;
  opt.pairs = 4;  // more pairs than layers
  CHECK_THROWS_WITH_AS(rt::validate(opt, spec, 8), doctest::Contains("DisaggregatedOptions.pairs = 4"), dm::ConfigError);
  opt.pairs = 2;
  CHECK_THROWS_WITH_AS(rt::validate(opt, spec, 3), doctest::Contains("world size = 3: expected 2 * pairs (4)"),
                       dm::ConfigError);
  opt.executor.timeout = std::chrono::milliseconds(0);
  CHECK_THROWS_WITH_AS(rt::validate(opt, spec, 4), doctest::Contains("timeout"), dm::ConfigError);
}

namespace {

// Reference experts whose `fail_at`-th forward call (over all copies) throws.
struct FailingExperts : Experts {
  using Experts::Experts;
  std::shared_ptr<std::atomic<int>> calls = std::make_shared<std::atomic<int>>(0);
  int fail_at = 0;
  template <class... A>
  void forward(A&&... a) const {
    if (calls->fetch_add(1) == fail_at) throw std::runtime_error("injected expert failure");
    Experts::forward(std::forward<A>(a)...);
  }
};
static_assert(rt::expert_compute<FailingExperts>);

}  // namespace

TEST_CASE("a throwing worker stops every worker within the deadline, the error naming worker, op and step") {
  const auto spec = spec_of(4, 2, 0, 0);
  const auto data = batches(2, 4, spec.seq_len);
  rt::DisaggregatedOptions opt;
  opt.pairs = 2;
  opt.executor.timeout = std::chrono::milliseconds(400);
  FailingExperts experts(spec, {});
  experts.fail_at = 10;  // two F workers x 2 layers x 2 micro-batches = 8 calls per step: fails in step 2
  dm::host::LoopbackWorld world(4);
  std::mutex mu;
  std::vector<std::string> errors(4);
  std::vector<bool> timeouts(4, false);
  const auto t0 = std::chrono::steady_clock::now();
  dm::host::run_ranks(world, [&](dm::host::LoopbackTransport& t) {
    const mo::DecoderOptions o;
    rt::TrainOptions train = train_options(2);
    rt::DisaggregatedTrainer<Attention, FailingExperts, dm::host::LoopbackTransport> tr(Attention(spec, o), experts,
                                                                                       spec, train, opt, t);
    try {
      for (const auto& b : data) tr.step(b.view());
    } catch (const dm::Error& e) {
      const std::lock_guard lock(mu);
      errors[static_cast<std::size_t>(t.rank())] = e.what();
      timeouts[static_cast<std::size_t>(t.rank())] = dynamic_cast<const dm::TimeoutError*>(&e) != nullptr;
    }
    CHECK_THROWS_WITH_AS(tr.step(data[0].view()), doctest::Contains("failed"), dm::ConfigError);
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(seconds < 5.0);
  int injected = 0;
  for (int r = 0; r < 4; ++r) {
    CAPTURE(r);
    CAPTURE(errors[static_cast<std::size_t>(r)]);
    REQUIRE_FALSE(errors[static_cast<std::size_t>(r)].empty());
    if (errors[static_cast<std::size_t>(r)].find("injected expert failure") != std::string::npos) {
      ++injected;
      CHECK(errors[static_cast<std::size_t>(r)].find("worker F") != std::string::npos);
      CHECK(errors[static_cast<std::size_t>(r)].find("expert_fwd") != std::string::npos);
      CHECK(errors[static_cast<std::size_t>(r)].find("step 2") != std::string::npos);
    } else {
      CHECK(timeouts[static_cast<std::size_t>(r)]);
      CHECK(errors[static_cast<std::size_t>(r)].find("no progress") != std::string::npos);
    }
  }
  CHECK(injected == 1);
}
