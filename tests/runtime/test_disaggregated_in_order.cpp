// SPDX-License-Identifier: Apache-2.0
// Disaggregated training over a transport that matches messages by issue order per peer
// and has no tags, as NCCL does (tests/comm/in_order_transport.hpp: a receive that meets
// another message than the one it was posted for throws, naming both): with several
// micro-batches' channels in flight on the pair and hand-off groups, which the channel
// exchange lays on lanes (comm/laned_transport.hpp), and the residual and dL/dy beside the
// hand-offs, which the receivers post in their senders' order. Equal to the colocated
// reference as over loopback (test_disaggregated.cpp). Without the lanes (ChannelExchange's
// groups left as the plain transport) both cases fail within the executor's deadline.
#include "../comm/in_order_transport.hpp"
#include "disaggregated_cases.hpp"
#include "disaggregated_loopback.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

namespace {

using namespace disaggregated_test;
using InOrder = nccl_model::InOrderTransport<dm::host::LoopbackTransport>;

const auto in_order = [](dm::host::LoopbackTransport t) { return InOrder(std::move(t)); };

struct Case {
  int layers, top_k, dense, shared, pairs, attention_ranks, ffn_ranks, micro_batches;
  bool fuse;
  rt::Exchange exchange = rt::Exchange::kChannel;
};

rt::DisaggregatedOptions options_of(const Case& c) {
  rt::DisaggregatedOptions opt;
  opt.pairs = c.pairs;
  opt.attention_ranks = c.attention_ranks;
  opt.ffn_ranks = c.ffn_ranks;
  opt.policy.fuse_combine_dispatch = c.fuse;
  opt.exchange = c.exchange;
  opt.executor.timeout = std::chrono::milliseconds(10000);  // a crossing stalls no longer than this
  return opt;
}

}  // namespace

TEST_CASE("in-order transport: one rank per worker, channels of several micro-batches in flight, bit for bit") {
  using X = rt::Exchange;
  const Case cases[] = {{4, 2, 1, 0, 2, 1, 1, 3, true},  {4, 2, 1, 0, 2, 1, 1, 3, false},
                        {5, 2, 1, 1, 3, 1, 1, 3, true},  {3, 2, 0, 0, 1, 1, 1, 4, true},
                        {4, 2, 0, 0, 2, 1, 1, 4, true, X::kDirect}};
  for (const auto& c : cases) {
    CAPTURE(c.layers);
    CAPTURE(c.pairs);
    CAPTURE(c.micro_batches);
    CAPTURE(c.fuse);
    CAPTURE(static_cast<int>(c.exchange));
    const auto spec = spec_of(c.layers, c.top_k, c.dense, c.shared);
    const auto data = batches(3, 2 * c.micro_batches, spec.seq_len);
    check_identical(colocated(spec, c.micro_batches, data),
                    disaggregated(spec, c.micro_batches, data, options_of(c), Experts(spec, {}), in_order));
  }
}

TEST_CASE("in-order transport: groups of ranks (M2NChannel fan-out, hand-offs) match the colocated trainer") {
  // As over loopback: the oracle runs M x the micro-batches; sums regroup (float rounding).
  const Case cases[] = {{4, 2, 1, 1, 2, 2, 3, 2, true}, {5, 2, 0, 0, 3, 2, 1, 3, true}, {4, 2, 0, 0, 2, 1, 2, 3, false}};
  for (const auto& c : cases) {
    CAPTURE(c.layers);
    CAPTURE(c.pairs);
    CAPTURE(c.attention_ranks);
    CAPTURE(c.ffn_ranks);
    CAPTURE(c.micro_batches);
    CAPTURE(c.fuse);
    const auto spec = spec_of(c.layers, c.top_k, c.dense, c.shared);
    const auto data = batches(3, 2 * c.micro_batches * c.attention_ranks, spec.seq_len);
    const Run ref = colocated(spec, c.micro_batches * c.attention_ranks, data);
    const Run got = disaggregated(spec, c.micro_batches, data, options_of(c), Experts(spec, {}), in_order);
    check_close(ref, got);
  }
}

TEST_CASE("in-order transport: colocated baselines are refused by name (their dual-role ends are not laned)") {
  const auto spec = spec_of(3, 2, 0, 0);
  const auto data = batches(1, 4, spec.seq_len);
  rt::DisaggregatedOptions opt;
  opt.schedule = rt::ScheduleKind::kOneFOneB;
  opt.pairs = 1;
  opt.attention_ranks = opt.ffn_ranks = 2;
  try {
    (void)disaggregated(spec, 2, data, opt, Experts(spec, {}), in_order);
    FAIL("a colocated baseline ran over an in-order transport");
  } catch (const dm::ConfigError& e) {
    CHECK(std::string(e.what()).find("colocated expert parallelism over a transport") != std::string::npos);
  }
}
