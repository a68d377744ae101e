// SPDX-License-Identifier: Apache-2.0
// Disaggregated AF-Pipe training on loopback worker threads against the colocated
// trainer (the oracle): loss, auxiliary losses, gradient norm of every step and every
// final parameter bit for bit, over pairs p (1 included), micro-batch counts, top-k,
// dense and shared-expert layers, stage alignment on and off and ping-pong group sizes.
// Faults: a throwing expert stops its worker with an error naming it, the op and the
// step, and every other worker with a timeout, within the deadline.
#include "disaggregated_cases.hpp"
#include "disaggregated_loopback.hpp"

#include <disagmoe/backend/host/loopback_transport.hpp>
#include <disagmoe/runtime/disaggregated_trainer.hpp>
#include <disagmoe/runtime/pipeline.hpp>
#include <disagmoe/runtime/timeline.hpp>
#include <disagmoe/schedule/simulator.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace {

using namespace disaggregated_test;

// The same run through a `Pipeline` type composed from `policy`'s type.
template <class Policy>
Run pipeline_run(const Policy& policy, const dm::ModelSpec& spec, int m, const std::vector<Batch>& data,
                 const rt::DisaggregatedOptions& layout) {
  const mo::DecoderOptions o;
  const int size = rt::world_size(rt::with_schedule(policy, layout));
  dm::host::LoopbackWorld world(size);
  Run r;
  std::mutex mu;
  dm::host::run_ranks(world, [&](dm::host::LoopbackTransport& t) {
    rt::Pipeline<Policy, Attention, Experts, dm::host::LoopbackTransport> tr(policy, Attention(spec, o),
                                                                              Experts(spec, o), spec,
                                                                              train_options(m), layout, t);
    std::vector<rt::StepStats> stats;
    for (const auto& b : data) stats.push_back(tr.step(b.view()));
    const std::lock_guard lock(mu);
    if (t.rank() == 0) r.stats = stats;
    if (tr.attention() != nullptr && tr.rank_in_worker() == 0) collect(tr.attention()->parameters(), r.params);
    if (tr.experts() != nullptr) collect(tr.experts()->parameters(), r.params);
  });
  return r;
}

}  // namespace

TEST_CASE("disaggregated AF-Pipe equals the colocated trainer bit for bit") {
  // One rank per worker. Direct: one message per transfer, stage alignment on or off.
  // Channel: M2NChannel's send-once rows, fan-out, combine and backward, which keep the
  // colocated order of every sum with one F-rank (shared experts ride as extra slots);
  // with stage alignment the channel hands off to A_{l+1} (a plain return for one pair).
  using X = rt::Exchange;
  struct Case {
    int layers, top_k, dense, shared, pairs, micro_batches, group;
    bool fuse;
    X exchange;
  };
  const Case cases[] = {
      {3, 2, 0, 0, 1, 1, 0, true, X::kDirect},   {3, 2, 0, 0, 1, 3, 0, false, X::kDirect},
      {4, 2, 0, 0, 2, 4, 0, true, X::kDirect},   {4, 1, 1, 0, 2, 4, 2, false, X::kDirect},
      {5, 2, 1, 1, 3, 3, 1, true, X::kDirect},   {4, 2, 0, 1, 2, 5, 2, true, X::kDirect},
      {3, 1, 0, 0, 3, 2, 0, false, X::kDirect},  {4, 2, 2, 0, 2, 3, 0, true, X::kDirect},
      {3, 2, 0, 1, 1, 2, 0, false, X::kChannel}, {4, 2, 1, 0, 2, 3, 0, false, X::kChannel},
      {3, 1, 0, 2, 3, 2, 2, false, X::kChannel}, {3, 2, 0, 0, 1, 2, 0, true, X::kChannel},
      {4, 2, 1, 0, 2, 3, 0, true, X::kChannel},  {5, 2, 1, 1, 3, 3, 1, true, X::kChannel},
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
    CAPTURE(static_cast<int>(c.exchange));
    const auto spec = spec_of(c.layers, c.top_k, c.dense, c.shared);
    const auto data = batches(3, 2 * c.micro_batches, spec.seq_len);
    rt::DisaggregatedOptions opt;
    opt.pairs = c.pairs;
    opt.policy.group_size = c.group;
    opt.policy.fuse_combine_dispatch = c.fuse;
    opt.exchange = c.exchange;
    opt.executor.timeout = std::chrono::milliseconds(20000);
    check_identical(colocated(spec, c.micro_batches, data), disaggregated(spec, c.micro_batches, data, opt, Experts(spec, {})));
  }
}

TEST_CASE("M2NChannel exchange: data-parallel A-ranks and expert-parallel F-ranks match the colocated trainer") {
  // M A-ranks split each micro-batch: the colocated oracle runs M x the micro-batches (so
  // the router losses see the same tokens). Sums regroup (replicas' gradients, partial rows
  // of several F-ranks, an expert's rows at another offset of a GEMM), so the match is to
  // float rounding: losses within 1e-6, each parameter tensor within 1e-4 of its largest
  // entry after three AdamW steps (measured: 2e-5 at most). With stage alignment (fuse)
  // the channel hands off to the next pair's A-ranks.
  struct Case {
    int layers, top_k, dense, shared, pairs, attention_ranks, ffn_ranks, micro_batches;
    std::vector<int> placement;
    bool fuse = false;
  };
  const Case cases[] = {{3, 2, 0, 0, 1, 2, 2, 2, {}},    {4, 2, 1, 1, 2, 2, 3, 2, {}}, {3, 3, 0, 0, 1, 2, 2, 1, {}},
                        {3, 2, 0, 0, 1, 1, 2, 3, {}},    {4, 2, 0, 0, 2, 1, 2, 2, {1, 0, 0, 1}},
                        {3, 1, 0, 1, 1, 1, 4, 2, {3, 1, 2, 0}},
                        {3, 2, 0, 0, 1, 2, 2, 2, {}, true},  {4, 2, 1, 1, 2, 2, 3, 2, {}, true},
                        {5, 2, 0, 0, 3, 2, 1, 2, {}, true},  {4, 2, 0, 0, 2, 1, 2, 2, {1, 0, 0, 1}, true}};
  for (const auto& c : cases) {
    CAPTURE(c.layers);
    CAPTURE(c.pairs);
    CAPTURE(c.attention_ranks);
    CAPTURE(c.ffn_ranks);
    CAPTURE(c.placement.size());
    CAPTURE(c.fuse);
    const auto spec = spec_of(c.layers, c.top_k, c.dense, c.shared);
    const auto data = batches(3, 2 * c.micro_batches * c.attention_ranks, spec.seq_len);
    rt::DisaggregatedOptions opt;
    opt.pairs = c.pairs;
    opt.attention_ranks = c.attention_ranks;
    opt.ffn_ranks = c.ffn_ranks;
    opt.expert_rank = c.placement;
    opt.policy.fuse_combine_dispatch = c.fuse;
    const Run ref = colocated(spec, c.micro_batches * c.attention_ranks, data);
    const Run got = disaggregated(spec, c.micro_batches, data, opt, Experts(spec, {}));
    check_close(ref, got);
  }
}

TEST_CASE("colocated expert-parallel baselines (1F1B, A2A overlap) on the same runtime match the colocated trainer") {
  // Every stage's G ranks run attention data-parallel and the experts expert-parallel; the
  // all-to-all is both ends of one M2NChannel per rank. One rank per stage keeps every
  // colocated sum in order: bit for bit. G > 1 regroups sums as the channel exchange
  // does: the same float-rounding tolerance.
  using S = rt::ScheduleKind;
  struct Case {
    S schedule;
    int layers, top_k, dense, shared, stages, ranks, chunks, micro_batches;
    std::vector<int> placement;
  };
  const Case cases[] = {
      {S::kOneFOneB, 3, 2, 0, 0, 1, 1, 1, 2, {}},   {S::kOneFOneB, 4, 2, 1, 1, 2, 1, 1, 3, {}},
      {S::kOneFOneB, 5, 1, 0, 2, 3, 1, 1, 4, {}},   {S::kA2AOverlap, 4, 2, 0, 0, 1, 1, 2, 3, {}},
      {S::kA2AOverlap, 4, 2, 1, 1, 2, 1, 2, 4, {}}, {S::kA2AOverlap, 6, 1, 0, 0, 3, 1, 2, 3, {}},
      {S::kOneFOneB, 3, 2, 0, 0, 1, 2, 1, 2, {}},   {S::kOneFOneB, 4, 2, 1, 1, 2, 2, 1, 2, {1, 0, 0, 1}},
      {S::kA2AOverlap, 4, 3, 0, 0, 2, 2, 2, 2, {}}, {S::kOneFOneB, 3, 1, 0, 1, 1, 3, 1, 2, {2, 0, 1, 2}},
  };
  for (const auto& c : cases) {
    CAPTURE(rt::to_string(c.schedule));
    CAPTURE(c.layers);
    CAPTURE(c.stages);
    CAPTURE(c.ranks);
    CAPTURE(c.micro_batches);
    const auto spec = spec_of(c.layers, c.top_k, c.dense, c.shared);
    const auto data = batches(3, 2 * c.micro_batches * c.ranks, spec.seq_len);
    rt::DisaggregatedOptions opt;
    opt.schedule = c.schedule;
    opt.pairs = c.stages;
    opt.attention_ranks = opt.ffn_ranks = c.ranks;
    opt.a2a_overlap.virtual_stages = c.chunks;
    opt.expert_rank = c.placement;
    opt.executor.timeout = std::chrono::milliseconds(20000);
    const Run ref = colocated(spec, c.micro_batches * c.ranks, data);
    const Run got = disaggregated(spec, c.micro_batches, data, opt, Experts(spec, {}));
    if (c.ranks == 1) {
      check_identical(ref, got);
      continue;
    }
    check_close(ref, got);
  }
}

TEST_CASE("a placement per layer: every F-rank holds its layer's experts, and training matches the colocated trainer") {
  // [layer][expert]; layer 0 is dense (its row is not used). Layer 3 is unbalanced.
  const std::vector<int> placement = {0, 0, 0, 0, 1, 0, 0, 1, 0, 1, 1, 0, 1, 1, 1, 0};
  const auto spec = spec_of(4, 2, 1, 0);
  for (const bool fuse : {false, true}) {
    CAPTURE(fuse);
    rt::DisaggregatedOptions opt;
    opt.pairs = 2;
    opt.ffn_ranks = 2;
    opt.expert_rank = placement;
    opt.policy.fuse_combine_dispatch = fuse;
    const auto data = batches(3, 4, spec.seq_len);
    const Run ref = colocated(spec, 2, data);
    // Which F-rank holds each expert's parameters, recounted from the names they carry.
    std::mutex mu;
    std::map<std::pair<int, int>, int> holder;  // (layer, expert) -> F-rank
    Run got;
    dm::host::LoopbackWorld world(rt::world_size(opt));
    std::vector<rt::StepStats> stats;
    dm::host::run_ranks(world, [&](dm::host::LoopbackTransport& t) {
      rt::DisaggregatedTrainer<Attention, Experts, dm::host::LoopbackTransport> tr(Attention(spec, {}), Experts(spec, {}),
                                                                                  spec, train_options(2), opt, t);
      std::vector<rt::StepStats> mine;
      for (const auto& b : data) mine.push_back(tr.step(b.view()));
      const std::lock_guard lock(mu);
      if (t.rank() == 0) stats = mine;
      if (tr.attention() != nullptr) collect(tr.attention()->parameters(), got.params);
      if (tr.experts() == nullptr) return;
      collect(tr.experts()->parameters(), got.params);
      for (const auto& slot : tr.experts()->parameters().slots()) {
        int l = -1, e = -1;
        if (std::sscanf(slot.name.c_str(), "model.layers.%d.block_sparse_moe.experts.%d.", &l, &e) == 2) {
          const auto [it, fresh] = holder.emplace(std::pair{l, e}, tr.rank_in_worker());
          CHECK((fresh || it->second == tr.rank_in_worker()));
        }
      }
    });
    got.stats = stats;
    for (int l = 1; l < spec.layers; ++l)
      for (int e = 0; e < spec.experts; ++e) {
        CAPTURE(l);
        CAPTURE(e);
        REQUIRE(holder.count({l, e}) == 1);
        CHECK(holder.at({l, e}) == placement[static_cast<std::size_t>(l * spec.experts + e)]);
      }
    check_close(ref, got);
  }
}

TEST_CASE("a Pipeline type composed from each executable schedule policy trains the colocated model") {
  // The policy type, not DisaggregatedOptions::schedule, decides what runs: the layout
  // below names another schedule on purpose. One rank per worker or stage: bit for bit.
  const auto spec = spec_of(4, 2, 1, 1);
  const int m = 4;
  const auto data = batches(3, 2 * m, spec.seq_len);
  const Run ref = colocated(spec, m, data);
  rt::DisaggregatedOptions layout;
  layout.pairs = 2;
  layout.executor.timeout = std::chrono::milliseconds(20000);
  auto check = [&](const auto& policy, rt::ScheduleKind other) {
    CAPTURE(std::string(std::decay_t<decltype(policy)>::kName));
    layout.schedule = other;
    const Run got = pipeline_run(policy, spec, m, data, layout);
    check_identical(ref, got);
  };
  dm::schedule::AFPipe afpipe;
  afpipe.group_size = 2;
  check(afpipe, rt::ScheduleKind::kOneFOneB);
  check(dm::schedule::OneFOneB{}, rt::ScheduleKind::kAfPipe);
  check(dm::schedule::A2AOverlap{.virtual_stages = 2}, rt::ScheduleKind::kAfPipe);
  // visit_schedule hands each run-time choice to the matching policy type.
  for (const auto kind : {rt::ScheduleKind::kAfPipe, rt::ScheduleKind::kOneFOneB, rt::ScheduleKind::kA2AOverlap}) {
    rt::DisaggregatedOptions o;
    o.schedule = kind;
    const std::string name = rt::visit_schedule(o, [](const auto& p) { return std::string(p.kName); });
    CHECK(name == rt::to_string(kind));
  }
}

TEST_CASE("disaggregated runs reject layouts they cannot run, naming the field") {
  const auto spec = spec_of(3, 2, 0, 0);
  rt::DisaggregatedOptions opt;
  opt.pairs = 4;  // more pairs than layers
  CHECK_THROWS_WITH_AS(rt::validate(opt, spec, 8), doctest::Contains("DisaggregatedOptions.pairs = 4"), dm::ConfigError);
  opt.pairs = 2;
  CHECK_THROWS_WITH_AS(rt::validate(opt, spec, 3),
                       doctest::Contains("world size = 3: expected pairs * (attention_ranks + ffn_ranks) = 4"),
                       dm::ConfigError);
  opt.attention_ranks = 2;
  opt.ffn_ranks = 2;
  opt.expert_rank = {0, 1, 2, 0};
  CHECK_THROWS_WITH_AS(rt::validate(opt, spec, 8), doctest::Contains("expert_rank[2] = 2: expected an F-rank in [0, ffn_ranks = 2)"),
                       dm::ConfigError);
  opt.expert_rank = {0, 1};
  CHECK_THROWS_WITH_AS(rt::validate(opt, spec, 8), doctest::Contains("expert_rank.size() = 2"), dm::ConfigError);
  opt.attention_ranks = opt.ffn_ranks = 1;
  opt.expert_rank.clear();
  opt.executor.timeout = std::chrono::milliseconds(0);
  CHECK_THROWS_WITH_AS(rt::validate(opt, spec, 4), doctest::Contains("timeout"), dm::ConfigError);
  opt.executor.timeout = std::chrono::milliseconds(1000);
  // Colocated baselines: p stages of G ranks that run both attention and experts.
  opt.schedule = rt::ScheduleKind::kOneFOneB;
  opt.attention_ranks = 2;
  CHECK_THROWS_WITH_AS(rt::validate(opt, spec, 4), doctest::Contains("ffn_ranks = 1: expected attention_ranks (2)"),
                       dm::ConfigError);
  opt.ffn_ranks = 2;
  CHECK(rt::world_size(opt) == 4);
  CHECK_THROWS_WITH_AS(rt::validate(opt, spec, 8),
                       doctest::Contains("world size = 8: expected pairs * attention_ranks = 4 (1f1b"), dm::ConfigError);
  opt.exchange = rt::Exchange::kDirect;
  CHECK_THROWS_WITH_AS(rt::validate(opt, spec, 4), doctest::Contains("exchange = \"direct\": expected auto or channel"), dm::ConfigError);
  opt.exchange = rt::Exchange::kAuto;
  CHECK_NOTHROW(rt::validate(opt, spec, 4));
  opt.schedule = rt::ScheduleKind::kA2AOverlap;  // 2 stages x 2 chunks > 3 layers
  CHECK_THROWS_WITH_AS(rt::validate(opt, spec, 4), doctest::Contains("pipeline stages x model chunks = 4"),
                       dm::ConfigError);
  opt.a2a_overlap.virtual_stages = 1;
  CHECK_NOTHROW(rt::validate(opt, spec, 4));
  opt.a2a_overlap.virtual_stages = 2;
  const auto deep = spec_of(4, 2, 0, 0);  // interleaving needs micro-batches % stages == 0
  CHECK_THROWS_WITH_AS(rt::build_schedule(deep, opt, 3), doctest::Contains("micro_batches = 3"), dm::ConfigError);
}

TEST_CASE("ranks launched with different options are one clear error, not mismatched messages") {
  const auto spec = spec_of(2, 2, 0, 0);
  const auto data = batches(1, 4, spec.seq_len);
  dm::host::LoopbackWorld world(2);
  std::vector<std::string> errors(2);
  dm::host::run_ranks(world, [&](dm::host::LoopbackTransport& t) {
    rt::DisaggregatedOptions opt;
    opt.policy.group_size = t.rank() == 0 ? 1 : 2;  // a different ping-pong group on rank 1
    opt.executor.timeout = std::chrono::milliseconds(5000);
    const mo::DecoderOptions o;
    rt::DisaggregatedTrainer<Attention, Experts, dm::host::LoopbackTransport> tr(Attention(spec, o), Experts(spec, o),
                                                                                spec, train_options(4), opt, t);
    try {
      tr.step(data[0].view());
    } catch (const dm::ConfigError& e) {
      errors[static_cast<std::size_t>(t.rank())] = e.what();
    }
  });
  for (const auto& e : errors) {
    CAPTURE(e);
    CHECK(e.find("layout and model fingerprint of rank") != std::string::npos);
  }
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
  // AF-Pipe on 2 pairs, and 1F1B-EP on 2 stages of 2 ranks (the all-to-all's other end
  // waits for the failed rank's rows and times out).
  const auto spec = spec_of(4, 2, 0, 0);
  const auto data = batches(2, 4, spec.seq_len);
  struct Case {
    rt::ScheduleKind schedule;
    int ranks, fail_at;  // expert calls per step: AF-Pipe 2 F x 2 layers x 2 mb; 1F1B-EP 4 ranks x 2 x 2
    const char* worker;
  };
  for (const Case c : {Case{rt::ScheduleKind::kAfPipe, 1, 10, "worker F"}, Case{rt::ScheduleKind::kOneFOneB, 2, 21, "worker S"}}) {
    CAPTURE(rt::to_string(c.schedule));
    rt::DisaggregatedOptions opt;
    opt.schedule = c.schedule;
    opt.pairs = 2;
    opt.attention_ranks = opt.ffn_ranks = c.ranks;
    // Long enough that a rank starved of CPU by other tests for a moment does not time
    // out in step 1; the bound below still holds every rank to a few deadlines.
    opt.executor.timeout = std::chrono::milliseconds(1000);
    FailingExperts experts(spec, {});
    experts.fail_at = c.fail_at;  // in step 2
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
      const std::string& e = errors[static_cast<std::size_t>(r)];
      CAPTURE(r);
      CAPTURE(e);
      REQUIRE_FALSE(e.empty());
      if (e.find("injected expert failure") != std::string::npos) {
        ++injected;
        CHECK(e.find(c.worker) != std::string::npos);
        CHECK(e.find("expert_fwd") != std::string::npos);
        CHECK(e.find("step 2") != std::string::npos);
      } else {
        CHECK(timeouts[static_cast<std::size_t>(r)]);  // waiting on a peer: no progress, or a transfer it names
        CHECK(e.find("step 2") != std::string::npos);
      }
    }
    CHECK(injected == 1);
  }
}

namespace {

// Exact oracle of exposed communication per worker (and of its compute time, in `busy`):
// cut time at every interval end point and test each elementary segment's midpoint.
std::vector<double> exposed_oracle_per_worker(const disagmoe::schedule::Schedule& s, const disagmoe::io::TraceRun& run,
                                              std::vector<double>& busy_time) {
  namespace ds = disagmoe::schedule;
  const std::size_t nw = s.workers.size();
  std::vector<std::vector<std::pair<double, double>>> busy(nw), comm(nw);
  std::map<int, double> post, arrive;
  for (const auto& e : run.events) {
    const auto& op = s.ops[static_cast<std::size_t>(e.op)];
    if (!ds::is_comm(op.kind)) busy[static_cast<std::size_t>(e.worker)].emplace_back(e.start, e.end);
    else if (op.peer == op.worker) comm[static_cast<std::size_t>(e.worker)].emplace_back(e.start, e.end);
    else if (!e.receive) post[e.op] = e.start, arrive.emplace(e.op, e.end);
    else arrive[e.op] = e.end;
  }
  for (const auto& [op, t] : post) {
    const auto& o = s.ops[static_cast<std::size_t>(op)];
    comm[static_cast<std::size_t>(o.worker)].emplace_back(t, arrive[op]);
    comm[static_cast<std::size_t>(o.peer)].emplace_back(t, arrive[op]);
  }
  std::vector<double> exposed(nw, 0.0);
  busy_time.assign(nw, 0.0);
  for (std::size_t w = 0; w < nw; ++w) {
    std::vector<double> cuts;
    for (const auto* v : {&busy[w], &comm[w]})
      for (const auto& [a, b] : *v) cuts.push_back(a), cuts.push_back(b);
    std::sort(cuts.begin(), cuts.end());
    for (std::size_t i = 1; i < cuts.size(); ++i) {
      const double mid = 0.5 * (cuts[i - 1] + cuts[i]);
      auto inside = [&](const std::vector<std::pair<double, double>>& v) {
        for (const auto& [a, b] : v)
          if (a < mid && mid < b) return true;
        return false;
      };
      if (inside(comm[w]) && !inside(busy[w])) exposed[w] += cuts[i] - cuts[i - 1];
      if (inside(busy[w])) busy_time[w] += cuts[i] - cuts[i - 1];
    }
  }
  return exposed;
}

// AF-Pipe with p pairs on links slow enough that communication shows: 5 micro-batches.
disagmoe::schedule::Schedule slow_link_schedule(int p, bool fuse) {
  rt::DisaggregatedOptions opt;
  opt.pairs = p;
  opt.policy.fuse_combine_dispatch = fuse;
  opt.bytes_per_second = 2e6;
  opt.latency_seconds = 1e-4;
  auto spec = spec_of(2 * p + 1, 2, 1, 0);
  spec.micro_batch = 2;
  return rt::build_schedule(spec, opt, 5);
}

double exposed_oracle(const disagmoe::schedule::Schedule& s, const disagmoe::io::TraceRun& run) {
  std::vector<double> busy;
  const auto per = exposed_oracle_per_worker(s, run, busy);
  double total = 0;
  for (double e : per) total += e;
  return total / static_cast<double>(per.size());
}

}  // namespace

TEST_CASE("exposed communication: interval sweep equals the exact oracle and the simulator's own figure; the bottleneck's share") {
  namespace ds = disagmoe::schedule;
  for (int p : {1, 2, 3})
    for (bool fuse : {true, false}) {
      CAPTURE(p);
      CAPTURE(fuse);
      const auto s = slow_link_schedule(p, fuse);
      const auto r = ds::simulate(s);
      const auto run = disagmoe::io::simulated_run(s, r);
      const double got = rt::exposed_comm_seconds(s, run);
      CHECK(got == doctest::Approx(exposed_oracle(s, run)).epsilon(1e-9));
      CHECK(got == doctest::Approx(r.exposed_comm_seconds).epsilon(1e-9));
      CHECK(got > 0);
      // The bottleneck's share: the worker computing longest, by the oracle's own count.
      std::vector<double> busy;
      const auto per = exposed_oracle_per_worker(s, run, busy);
      const auto w = static_cast<std::size_t>(std::max_element(busy.begin(), busy.end()) - busy.begin());
      CHECK(rt::bottleneck_exposed_comm_seconds(s, run) == doctest::Approx(per[w]).epsilon(1e-9));
    }
}

TEST_CASE("calibration recovers a per-transfer software overhead the network model lacks") {
  namespace ds = disagmoe::schedule;
  for (int p : {1, 2})
    for (bool fuse : {true, false}) {
      CAPTURE(p);
      CAPTURE(fuse);
      const auto s = slow_link_schedule(p, fuse);
      // The "measured" run: the same schedule where every message costs 3e-4 s more.
      const double overhead = 3e-4;
      auto truth = s;
      truth.network.nic_latency += overhead;
      truth.network.nvlink_latency += overhead;
      const auto truth_sim = ds::simulate(truth);
      auto run = disagmoe::io::simulated_run(truth, truth_sim);
      // A minority of transfers also waited for their receiver: 5 ms longer.
      std::size_t comm = 0, late = 0;
      for (auto& e : run.events)
        if (ds::is_comm(s.ops[static_cast<std::size_t>(e.op)].kind) && comm++ % 5 == 0) e.end += 5e-3, ++late;
      REQUIRE(late > 0);
      CHECK(rt::comm_overhead_seconds(s, run) == doctest::Approx(overhead).epsilon(1e-6));
      const auto cal = rt::calibrated(s, run);
      for (std::size_t i = 0; i < s.ops.size(); ++i)
        if (rt::is_worker_transfer(s.ops[i].kind)) CHECK(cal.ops[i].seconds == doctest::Approx(overhead).epsilon(1e-6));
      CHECK(ds::simulate(cal).step_seconds == doctest::Approx(truth_sim.step_seconds).epsilon(1e-6));
    }
  // Nothing but compute: no overhead to find. Four workers on one shared host core run
  // their compute one op at a time (the step is at least the sum); on a core each they
  // overlap.
  auto spec = spec_of(5, 2, 1, 0);
  spec.micro_batch = 2;
  rt::DisaggregatedOptions opt;
  opt.pairs = 2;
  const auto s = rt::build_schedule(spec, opt, 4);
  double compute = 0;
  for (const auto& op : s.ops) compute += ds::is_comm(op.kind) ? 0.0 : op.seconds;
  const auto measured = disagmoe::io::simulated_run(s, ds::simulate(s));
  CHECK(ds::simulate(rt::calibrated(s, measured, {}, 1)).step_seconds >= compute * (1 - 1e-12));
  CHECK(ds::simulate(rt::calibrated(s, measured)).step_seconds < 0.9 * compute);
  disagmoe::io::TraceRun compute_only{"m", 0, {}};
  for (const auto& e : disagmoe::io::simulated_run(s, ds::simulate(s)).events)
    if (!ds::is_comm(s.ops[static_cast<std::size_t>(e.op)].kind)) compute_only.events.push_back(e);
  CHECK(rt::comm_overhead_seconds(s, compute_only) == 0.0);
}

TEST_CASE("calibration gives every all-to-all inside a worker its own measured cost") {
  namespace ds = disagmoe::schedule;
  // 1F1B-EP on one stage of 2 ranks: its only transfers are all-to-alls, one at a time.
  rt::DisaggregatedOptions opt;
  opt.schedule = rt::ScheduleKind::kOneFOneB;
  opt.pairs = 1;
  opt.attention_ranks = opt.ffn_ranks = 2;
  opt.bytes_per_second = 2e6;
  opt.latency_seconds = 1e-4;
  auto spec = spec_of(3, 2, 1, 0);
  spec.micro_batch = 2;
  const auto s = rt::build_schedule(spec, opt, 4);
  // The "measured" run: each all-to-all costs its own overhead beyond the network model.
  auto truth = s;
  int a2a = 0;
  for (auto& op : truth.ops)
    if (op.kind == ds::OpKind::kAllToAll) op.seconds = 1e-4 * (1 + a2a++ % 3);
  REQUIRE(a2a > 0);
  const auto truth_sim = ds::simulate(truth);
  const auto run = disagmoe::io::simulated_run(truth, truth_sim);
  const auto cal = rt::calibrated(s, run);
  for (std::size_t i = 0; i < s.ops.size(); ++i)
    if (s.ops[i].kind == ds::OpKind::kAllToAll) CHECK(cal.ops[i].seconds == doctest::Approx(truth.ops[i].seconds).epsilon(1e-9));
  CHECK(ds::simulate(cal).step_seconds == doctest::Approx(truth_sim.step_seconds).epsilon(1e-6));
  // Calibrating the calibrated schedule again changes nothing.
  const auto again = rt::calibrated(cal, run);
  for (std::size_t i = 0; i < s.ops.size(); ++i)
    if (s.ops[i].kind == ds::OpKind::kAllToAll) CHECK(again.ops[i].seconds == doctest::Approx(cal.ops[i].seconds).epsilon(1e-9));
  // Measured as modelled: nothing to add.
  const auto plain = rt::calibrated(s, disagmoe::io::simulated_run(s, ds::simulate(s)));
  for (const auto& op : plain.ops)
    if (op.kind == ds::OpKind::kAllToAll) CHECK(op.seconds <= 1e-12);
}

TEST_CASE("an all-to-all posted while its in-order comm stream was still busy costs from when the stream freed") {
  namespace ds = disagmoe::schedule;
  // Worker 0 (2 GPUs on one node) sends to worker 1, then runs an all-to-all on the same
  // comm stream. Measured: the send posted at 0 and arrived at 5; the all-to-all posted
  // at 1 and ended at 8. In order, it could only start at 5: it cost 3, not 7.
  for (bool in_order : {true, false}) {
    CAPTURE(in_order);
    ds::Schedule s;
    s.workers.resize(2);
    for (auto& w : s.workers) {
      w.gpus = 2;
      w.nic_bandwidth = 1e3;
      w.nvlink_bandwidth = 1e6;
      w.in_order_comm = in_order;
    }
    ds::Op send;
    send.kind = ds::OpKind::kSend;
    send.stream = ds::Stream::kComm;
    send.worker = 0;
    send.peer = 1;
    send.bytes = 1e3;
    s.add(send);
    ds::Op a2a = send;
    a2a.kind = ds::OpKind::kAllToAll;
    a2a.peer = 0;
    s.add(a2a);
    disagmoe::io::TraceRun run{"measured", 8, {}};
    run.events.push_back({0, 0, ds::Stream::kComm, 0.0, 0.1, false});
    run.events.push_back({1, 0, ds::Stream::kComm, 0.1, 5.0, true});
    run.events.push_back({0, 1, ds::Stream::kComm, 1.0, 8.0, false});
    const auto sim = ds::simulate(s);
    const double modelled = sim.timings[1].end - sim.timings[1].start;
    REQUIRE(modelled < 1);
    const auto cal = rt::calibrated_all_to_alls(s, run);
    CHECK(cal.ops[1].seconds == doctest::Approx((in_order ? 3.0 : 7.0) - modelled).epsilon(1e-12));
    CHECK(cal.ops[0].seconds == 0.0);  // transfers between workers are not its business
    // A posted send keeps no turn (Worker::posted_sends): the all-to-all was free to start
    // at 1 and cost 7. The runtime posts its sends, so `calibrated` says so.
    auto posted = s;
    for (auto& w : posted.workers) w.posted_sends = true;
    const auto psim = ds::simulate(posted);
    const double posted_modelled = psim.timings[1].end - psim.timings[1].start;
    CHECK(rt::calibrated_all_to_alls(posted, run).ops[1].seconds ==
          doctest::Approx(7.0 - posted_modelled).epsilon(1e-12));
    const auto full = rt::calibrated(s, run);
    for (const auto& w : full.workers) CHECK(w.posted_sends);
    // Costed from its posting at 1 (about 7 s), not from the send's end at 5 (about 3 s);
    // the send's fitted overhead moves the all-to-all's modelled part by under 1 ms.
    CHECK(full.ops[1].seconds == doctest::Approx(7.0).epsilon(1e-3));
  }
}

TEST_CASE("calibration charges the comm threads' CPU to the host cores as comm kernels' SMs are on a GPU") {
  namespace ds = disagmoe::schedule;
  for (int p : {1, 2})
    for (bool fuse : {true, false})
      for (int cores : {1, 2, 64}) {
        CAPTURE(p);
        CAPTURE(fuse);
        CAPTURE(cores);
        const auto s = slow_link_schedule(p, fuse);
        // The "measured" run: host threads on `cores` cores, each comm thread taking 40% of
        // a core while a transfer touches its worker (it slows compute only where the
        // cores are oversubscribed).
        const double share = 0.4;
        auto truth = s;
        truth.network.host_cores = cores;
        truth.network.comm_sm_fraction = share;
        truth.network.rdma_sm_fraction = 0;
        for (auto& op : truth.ops) op.uses_sms = ds::is_comm(op.kind);
        const auto truth_sim = ds::simulate(truth);
        const auto run = disagmoe::io::simulated_run(truth, truth_sim);
        // What the workers measured: compute at its full-rate cost, and comm-thread CPU
        // adding up to the share of the time a transfer touched the worker, spread over
        // the transfers touching it.
        const auto active = rt::worker_exposure(truth, run).active;
        std::vector<std::vector<rt::MeasuredOp>> timelines(s.workers.size(), std::vector<rt::MeasuredOp>(s.ops.size()));
        std::vector<int> touching(s.workers.size(), 0);
        for (const auto& op : s.ops)
          if (ds::is_comm(op.kind)) {
            ++touching[static_cast<std::size_t>(op.worker)];
            if (op.peer != op.worker) ++touching[static_cast<std::size_t>(op.peer)];
          }
        for (std::size_t i = 0; i < s.ops.size(); ++i) {
          const auto& op = s.ops[i];
          if (!ds::is_comm(op.kind)) {
            timelines[static_cast<std::size_t>(op.worker)][i].cpu = op.seconds;
            continue;
          }
          for (int w : {op.worker, op.peer}) {
            const auto k = static_cast<std::size_t>(w);
            timelines[k][i].cpu = share * active[k] / touching[k];
          }
        }
        CHECK(rt::comm_cpu_share(s, run, timelines) == doctest::Approx(share).epsilon(1e-9));
        const auto cal = rt::calibrated(s, run, timelines, cores);
        CHECK(cal.network.comm_sm_fraction == doctest::Approx(share).epsilon(1e-9));
        CHECK(ds::simulate(cal).step_seconds == doctest::Approx(truth_sim.step_seconds).epsilon(1e-6));
        // Without the comm threads' CPU the same calibration misses the step by over 1% on
        // one core at p = 2 (on more cores the threads rarely oversubscribe them; at p = 1
        // compute and transfers alternate, and the per-transfer overhead fit takes up the
        // slowdown).
        if (p == 1 || cores > 1) continue;
        for (auto& t : timelines)
          for (std::size_t i = 0; i < s.ops.size(); ++i)
            if (ds::is_comm(s.ops[i].kind)) t[i].cpu = -1;
        const double blind = ds::simulate(rt::calibrated(s, run, timelines, cores)).step_seconds;
        CHECK(std::abs(blind - truth_sim.step_seconds) > 0.01 * truth_sim.step_seconds);
      }
}

TEST_CASE("calibration moves the bytes each transfer's sender measured, not the schedule's model") {
  // The "measured" run sends 0.6x the modelled bytes on every transfer between workers
  // (send-once dispatch to fewer ranks than the model's bound) over the schedule's slow
  // links. Its timelines carry each sender's bytes: calibrated from them, the simulation
  // predicts the run's step; from the model's bytes it predicts it over 10% slow.
  namespace ds = disagmoe::schedule;
  for (int p : {1, 2})
    for (bool fuse : {true, false}) {
      CAPTURE(p);
      CAPTURE(fuse);
      const auto s = slow_link_schedule(p, fuse);
      auto truth = s;
      for (auto& w : truth.workers) w.posted_sends = true;  // as calibrated() sets them
      std::vector<std::vector<rt::MeasuredOp>> timelines(s.workers.size(),
                                                         std::vector<rt::MeasuredOp>(s.ops.size()));
      for (std::size_t i = 0; i < s.ops.size(); ++i) {
        auto& op = truth.ops[i];
        auto& sender = timelines[static_cast<std::size_t>(op.worker)][i];
        if (!ds::is_comm(op.kind)) {
          sender.cpu = op.seconds;
          continue;
        }
        if (op.kind == ds::OpKind::kAllReduce) continue;  // keeps its model (the runtime runs it after)
        op.bytes *= 0.6;
        sender.bytes = op.bytes;
        if (op.peer != op.worker)
          timelines[static_cast<std::size_t>(op.peer)][i].bytes = 0;  // the receiver posts none
      }
      const auto truth_sim = ds::simulate(truth);
      const auto run = disagmoe::io::simulated_run(truth, truth_sim);
      const auto cal = rt::calibrated(s, run, timelines);
      for (std::size_t i = 0; i < s.ops.size(); ++i) CHECK(cal.ops[i].bytes == truth.ops[i].bytes);
      CHECK(ds::simulate(cal).step_seconds == doctest::Approx(truth_sim.step_seconds).epsilon(1e-6));
      for (auto& t : timelines)
        for (auto& m : t) m.bytes = -1;
      const auto modelled = rt::calibrated(s, run, timelines);
      for (std::size_t i = 0; i < s.ops.size(); ++i) CHECK(modelled.ops[i].bytes == s.ops[i].bytes);
      CHECK(ds::simulate(modelled).step_seconds > 1.1 * truth_sim.step_seconds);
    }
  // The all-to-alls inside a worker keep the model's bytes (their measured duration is
  // their cost); a pipeline send between stages moves what it posted.
  rt::DisaggregatedOptions colocated;
  colocated.schedule = rt::ScheduleKind::kOneFOneB;
  colocated.pairs = 2;
  colocated.attention_ranks = colocated.ffn_ranks = 2;
  const auto s = rt::build_schedule(spec_of(4, 2, 0, 0), colocated, 4);
  std::vector<std::vector<rt::MeasuredOp>> timelines(s.workers.size(),
                                                     std::vector<rt::MeasuredOp>(s.ops.size()));
  for (std::size_t i = 0; i < s.ops.size(); ++i)
    timelines[static_cast<std::size_t>(s.ops[i].worker)][i].bytes = 7;
  const auto with = rt::with_measured_bytes(s, timelines);
  int a2a = 0, sends = 0;
  for (std::size_t i = 0; i < s.ops.size(); ++i) {
    const auto k = s.ops[i].kind;
    a2a += k == ds::OpKind::kAllToAll;
    sends += k == ds::OpKind::kSend;
    CHECK(with.ops[i].bytes == (k == ds::OpKind::kSend ? 7 : s.ops[i].bytes));
  }
  CHECK(a2a > 0);
  CHECK(sends > 0);
}

TEST_CASE("a worker of several ranks reports its first rank's timeline, its slowest rank's CPU time per compute op, and every rank's own") {
  namespace ds = disagmoe::schedule;
  const auto spec = spec_of(3, 2, 0, 0);
  const auto data = batches(2, 8, spec.seq_len);
  rt::DisaggregatedOptions opt;
  opt.schedule = rt::ScheduleKind::kOneFOneB;
  opt.pairs = 1;
  opt.attention_ranks = opt.ffn_ranks = 2;  // one stage of two expert-parallel ranks
  dm::host::LoopbackWorld world(2);
  std::vector<std::vector<rt::MeasuredOp>> own(2), gathered;
  rt::RankTimelines by_rank;
  ds::Schedule schedule;
  std::mutex mu;
  dm::host::run_ranks(world, [&](dm::host::LoopbackTransport& t) {
    rt::DisaggregatedTrainer<Attention, Experts, dm::host::LoopbackTransport> tr(Attention(spec, {}), Experts(spec, {}),
                                                                                spec, train_options(2), opt, t);
    for (const auto& b : data) tr.step(b.view());
    auto all = tr.gather_timelines();
    auto ranks = tr.gather_rank_timelines();
    const std::lock_guard lock(mu);
    own[static_cast<std::size_t>(t.rank())] = tr.timeline();
    if (t.rank() == 0) gathered = std::move(all), by_rank = std::move(ranks), schedule = tr.schedule();
  });
  REQUIRE(gathered.size() == 1);
  // Every rank's own timeline, as it measured it.
  REQUIRE(by_rank.size() == 1);
  REQUIRE(by_rank[0].size() == 2);
  for (std::size_t r = 0; r < 2; ++r)
    for (std::size_t op = 0; op < schedule.ops.size(); ++op) {
      CHECK(by_rank[0][r][op].start == own[r][op].start);
      CHECK(by_rank[0][r][op].end == own[r][op].end);
      CHECK(by_rank[0][r][op].cpu == own[r][op].cpu);
    }
  int compute = 0;
  for (std::size_t op = 0; op < schedule.ops.size(); ++op) {
    if (ds::is_comm(schedule.ops[op].kind)) continue;
    ++compute;
    CHECK(gathered[0][op].cpu == std::max(own[0][op].cpu, own[1][op].cpu));
    CHECK(gathered[0][op].start == own[0][op].start);
    CHECK(gathered[0][op].end == own[0][op].end);
  }
  CHECK(compute > 0);
}

TEST_CASE("measured timelines: every task ran once, after its dependencies, in stream order; receives after sends") {
  namespace ds = disagmoe::schedule;
  const auto spec = spec_of(5, 2, 1, 1);
  const auto data = batches(2, 8, spec.seq_len);
  rt::DisaggregatedOptions opt;
  opt.pairs = 2;
  opt.executor.epoch = std::chrono::steady_clock::now();
  // An emulated network slow enough that transfers take visible time.
  disagmoe::host::NetworkConfig net;
  net.nic_bandwidth = 5e6;
  net.latency = 2e-4;
  dm::host::LoopbackWorld world(4, net);
  std::vector<std::vector<rt::MeasuredOp>> timelines;
  ds::Schedule schedule;
  ds::LoweredSchedule lowered;
  std::mutex mu;
  dm::host::run_ranks(world, [&](dm::host::LoopbackTransport& t) {
    const mo::DecoderOptions o;
    rt::DisaggregatedTrainer<Attention, Experts, dm::host::LoopbackTransport> tr(Attention(spec, o), Experts(spec, o),
                                                                                spec, train_options(4), opt, t);
    for (const auto& b : data) tr.step(b.view());
    auto all = tr.gather_timelines();
    const std::lock_guard lock(mu);
    if (t.rank() == 0) {
      timelines = std::move(all);
      schedule = tr.schedule();
      lowered = tr.lowered();
    }
  });
  REQUIRE(timelines.size() == 4);
  std::size_t events = 0;
  for (const auto& prog : lowered.workers) {
    const auto& tl = timelines[static_cast<std::size_t>(prog.worker)];
    for (int k = 0; k < ds::kStreams; ++k) {
      const auto& tasks = prog.streams[static_cast<std::size_t>(k)];
      for (std::size_t i = 0; i < tasks.size(); ++i) {
        const auto& m = tl[static_cast<std::size_t>(tasks[i].op)];
        REQUIRE(m.start >= 0);
        REQUIRE(m.end >= m.start);
        ++events;
        for (int d : tasks[i].deps) REQUIRE(tl[static_cast<std::size_t>(d)].end <= m.start);
        if (k != static_cast<int>(ds::Stream::kComm) && i > 0)
          REQUIRE(tl[static_cast<std::size_t>(tasks[i - 1].op)].end <= m.start);
        if (tasks[i].kind == ds::TaskKind::kRecv)  // arrives after its sender posted it
          REQUIRE(m.end >= timelines[static_cast<std::size_t>(tasks[i].peer)][static_cast<std::size_t>(tasks[i].op)].start);
      }
    }
  }
  const auto run = rt::measured_run(lowered, timelines);
  CHECK(run.events.size() == events);
  CHECK(rt::exposed_comm_seconds(schedule, run) == doctest::Approx(exposed_oracle(schedule, run)).epsilon(1e-9));
  // The calibrated simulation keeps the schedule and takes the measured compute times.
  const auto cal = rt::calibrated(schedule, run);
  for (const auto& e : run.events)
    if (!ds::is_comm(schedule.ops[static_cast<std::size_t>(e.op)].kind))
      CHECK(cal.ops[static_cast<std::size_t>(e.op)].seconds == doctest::Approx(e.end - e.start));
  CHECK_FALSE(ds::simulate(cal).deadlocked);
}

TEST_CASE(
    "the schedule's transfer bytes are the bytes each rank of the run sends, and each op's posted bytes add "
    "up to them") {
  // What the simulator is told each AF-Pipe transfer moves, recounted against the bytes
  // the emulated network saw each rank send. A step also sends what the schedule has no
  // op for (the statistics, the norm, the replicas' gradient sum), whose size does not
  // depend on the batch: so the recount is the difference between a step of 2S sequences
  // and one of S, against the same difference of the schedules. With one F-rank per
  // worker, send-once rows are exact (every token goes to that rank once), and the model
  // is exact up to what one figure for the dispatch and the backward return cannot say:
  // the return's dL/dgate per slot is 4 bytes where the dispatch's id + gate is 8, and
  // the channel's hand-off sends the routing (id + gate per slot) to A_{l+1} forward
  // only. The hand-off also sends dL/dy for the residual branch from A_{l+1} to A_l where
  // the model has F_l return it: the same bytes from another sender, so there only the
  // world's total is exact. With one pair the residual stays on A_0 whether or not the
  // layer is fused, so fused and unfused direct exchange send the same bytes.
  // With several F-ranks (and in the colocated baselines' all-to-all) the model is an
  // upper bound: it sends a token's rows to min(k + shared, N) ranks, send-once dispatch
  // to the ranks its experts are on. The bytes each rank posted on the ops its worker
  // sends (MeasuredOp::bytes, what the calibrated simulation moves) are, step against
  // step, what the network saw, and the ops it only receives posted none.
  namespace ds = disagmoe::schedule;
  using X = rt::Exchange;
  using S = rt::ScheduleKind;
  struct Case {
    int pairs, attention_ranks;
    bool fuse;
    X exchange;
    int ffn_ranks = 1;
    S schedule = S::kAfPipe;
  };
  const Case cases[] = {
      {1, 1, true, X::kDirect},     {1, 1, false, X::kDirect},    {2, 1, true, X::kDirect},
      {1, 1, true, X::kChannel},    {2, 1, true, X::kChannel},    {1, 1, false, X::kChannel},
      {1, 2, true, X::kChannel},    {2, 2, true, X::kChannel},    {2, 1, false, X::kChannel},
      {1, 2, true, X::kChannel, 2}, {2, 2, true, X::kChannel, 2}, {1, 2, false, X::kAuto, 2, S::kOneFOneB}};
  std::map<bool, double> direct_one_pair;  // fuse -> the world's bytes
  for (const auto& c : cases) {
    CAPTURE(c.pairs);
    CAPTURE(c.attention_ranks);
    CAPTURE(c.ffn_ranks);
    CAPTURE(c.fuse);
    CAPTURE(static_cast<int>(c.exchange));
    CAPTURE(static_cast<int>(c.schedule));
    const auto spec = spec_of(4, 2, 0, 0);
    const int m = 2, small = m * c.attention_ranks;
    const auto one = batches(1, small, spec.seq_len), two = batches(1, 2 * small, spec.seq_len);
    rt::DisaggregatedOptions opt;
    opt.schedule = c.schedule;
    opt.pairs = c.pairs;
    opt.attention_ranks = c.attention_ranks;
    opt.ffn_ranks = c.ffn_ranks;
    opt.policy.fuse_combine_dispatch = c.fuse;
    opt.exchange = c.exchange;
    opt.executor.timeout = std::chrono::milliseconds(20000);
    const int size = rt::world_size(opt);
    dm::host::LoopbackWorld world(size, dm::host::NetworkConfig{});
    std::barrier sync(size);
    // [rank] step(2S) - step(S): what the network saw, what the rank's ops posted; and the
    // ops the rank runs without sending them that still recorded bytes
    std::vector<double> sent(static_cast<std::size_t>(size)), posted(sent.size());
    std::vector<int> misplaced(sent.size(), 0);
    const rt::RankLayout layout(opt);
    dm::host::run_ranks(world, [&](dm::host::LoopbackTransport& t) {
      rt::DisaggregatedTrainer<Attention, Experts, dm::host::LoopbackTransport> tr(
          Attention(spec, {}), Experts(spec, {}), spec, train_options(m), opt, t);
      auto bytes_of_step = [&](const Batch& b) {
        sync.arrive_and_wait();  // every rank's earlier traffic is counted before
        const auto before = world.network()->sent_bytes(t.rank());
        sync.arrive_and_wait();
        (void)tr.step(b.view());
        sync.arrive_and_wait();
        double ops = 0;  // over the ops this rank's worker sends
        const int me = layout.worker_of(t.rank());
        for (std::size_t i = 0; i < tr.timeline().size(); ++i) {
          const double bytes = tr.timeline()[i].bytes;
          if (tr.schedule().ops[i].worker == me)
            ops += std::max(0.0, bytes);
          else
            misplaced[static_cast<std::size_t>(t.rank())] += bytes > 0;
        }
        return std::pair{static_cast<double>(world.network()->sent_bytes(t.rank()) - before), ops};
      };
      const auto first = bytes_of_step(one[0]), second = bytes_of_step(two[0]);
      sent[static_cast<std::size_t>(t.rank())] = second.first - first.first;
      posted[static_cast<std::size_t>(t.rank())] = second.second - first.second;
    });
    for (int r = 0; r < size; ++r) {
      CAPTURE(r);
      CHECK(sent[static_cast<std::size_t>(r)] > 0);
      CHECK(posted[static_cast<std::size_t>(r)] == sent[static_cast<std::size_t>(r)]);
      CHECK(misplaced[static_cast<std::size_t>(r)] == 0);
    }
    const rt::RankLayout ranks(opt);
    const bool hand_off = c.exchange == X::kChannel && c.pairs > 1 && c.fuse;
    auto model_bytes = [&](int sequences) {  // [worker]
      auto mb_spec = spec;
      mb_spec.micro_batch = sequences / m;
      const auto s = rt::build_schedule(mb_spec, opt, m);
      // What a backward return does not send of its modelled bytes: 4 per slot of the
      // micro-batch's tokens, 12 where the hand-off's routing went forward only.
      const double slots = spec.top_k * spec.seq_len * mb_spec.micro_batch;
      auto unsent = [&](const ds::Op& o) {
        if (!o.backward || o.kind != ds::OpKind::kReturn) return 0.0;
        return (hand_off && o.layer + 1 < spec.layers ? 12.0 : 4.0) * slots;
      };
      std::vector<double> w(static_cast<std::size_t>(ranks.workers()));
      for (const auto& o : s.ops)
        if (ds::is_comm(o.kind))
          w[static_cast<std::size_t>(o.worker)] += o.bytes * s.workers[static_cast<std::size_t>(o.worker)].gpus - unsent(o);
      return w;
    };
    const auto model_one = model_bytes(small), model_two = model_bytes(2 * small);
    const bool exact = c.ffn_ranks == 1 && c.schedule == S::kAfPipe;
    double total_sent = 0, total_model = 0;
    for (int w = 0; w < ranks.workers(); ++w) {
      CAPTURE(w);
      double worker_sent = 0;
      const int members = w < c.pairs ? c.attention_ranks : c.ffn_ranks;
      for (int i = 0; i < members; ++i) worker_sent += sent[static_cast<std::size_t>(ranks.world_rank(w, i))];
      const double expected = model_two[static_cast<std::size_t>(w)] - model_one[static_cast<std::size_t>(w)];
      if (exact && !hand_off) CHECK(worker_sent == doctest::Approx(expected).epsilon(1e-9));
      if (!exact && !hand_off) CHECK(worker_sent <= expected);
      total_sent += worker_sent;
      total_model += expected;
    }
    if (exact) CHECK(total_sent == doctest::Approx(total_model).epsilon(1e-9));
    // Top-2 of 4 experts on 2 ranks: a third of the tokens send one row where the model sends two.
    else
      CHECK(total_sent < 0.95 * total_model);
    if (c.exchange == X::kDirect && c.pairs == 1) direct_one_pair[c.fuse] = total_sent;
  }
  REQUIRE(direct_one_pair.size() == 2);
  CHECK(direct_one_pair[true] == direct_one_pair[false]);
}
