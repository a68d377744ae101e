// SPDX-License-Identifier: Apache-2.0
// The disaggregated trainer over nccl::Transport: one thread per rank, each on a GPU of
// its own (NCCL docs, "Creating a Communicator": one device as two ranks of a
// communicator is not supported and may hang), the channels of several micro-batches in
// flight on lanes (runtime/channel_exchange.hpp), rows in host memory (host::Backend)
// staged through the devices by the transport. Equal to the colocated reference as over
// loopback and over the host model of NCCL matching (tests/runtime/
// test_disaggregated_in_order.cpp). Needs 2 GPUs (one pair) and runs the cases of 4 and 6
// ranks where there are as many; exit 77 with fewer than 2.
#define DOCTEST_CONFIG_IMPLEMENT
#include "../runtime/disaggregated_cases.hpp"
#include "../runtime/disaggregated_loopback.hpp"

#include <disagmoe/backend/cuda/check.hpp>
#include <disagmoe/backend/nccl/transport.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <thread>
#include <vector>

namespace {

using namespace disaggregated_test;
using namespace std::chrono_literals;

/// Calls body(world) on `size` threads, thread r on GPU r with rank r of one NCCL
/// communicator; rethrows the lowest failing rank's error.
template <class Body>
void on_gpus(int size, Body&& body) {
  ncclUniqueId id{};
  DISAGMOE_NCCL_CHECK(ncclGetUniqueId(&id));
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      try {
        DISAGMOE_CUDA_CHECK(cudaSetDevice(r));
        dm::nccl::Options o;
        o.timeout = 60s;
        o.name = "disaggregated";
        auto world = dm::nccl::Transport::create(id, r, size, o);
        body(world);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

struct Case {
  int layers, top_k, dense, shared, pairs, attention_ranks, ffn_ranks, micro_batches;
  bool fuse;
};

Run run_on_gpus(const Case& c, const dm::ModelSpec& spec, const std::vector<Batch>& data) {
  rt::DisaggregatedOptions opt;
  opt.pairs = c.pairs;
  opt.attention_ranks = c.attention_ranks;
  opt.ffn_ranks = c.ffn_ranks;
  opt.policy.fuse_combine_dispatch = c.fuse;
  opt.exchange = rt::Exchange::kChannel;
  opt.executor.timeout = 30000ms;
  auto for_each_rank = [&](auto&& body) { on_gpus(rt::world_size(opt), body); };
  return disaggregated_on(for_each_rank, spec, c.micro_batches, data, opt, Experts(spec, {}));
}

}  // namespace

TEST_CASE("nccl: the disaggregated trainer with channels of several micro-batches in flight matches the colocated trainer") {
  const Case cases[] = {{3, 2, 0, 0, 1, 1, 1, 3, true}, {4, 2, 1, 0, 2, 1, 1, 3, true}, {4, 2, 1, 0, 2, 1, 1, 3, false},
                        {4, 2, 1, 1, 2, 1, 2, 2, true}, {5, 2, 0, 0, 3, 1, 1, 3, true}};
  for (const auto& c : cases) {
    const int ranks = c.pairs * (c.attention_ranks + c.ffn_ranks);
    if (ranks > dm::cuda::device_count()) {
      MESSAGE("skipped (needs " << ranks << " GPUs): pairs " << c.pairs << ", ffn ranks " << c.ffn_ranks);
      continue;
    }
    CAPTURE(c.layers);
    CAPTURE(c.pairs);
    CAPTURE(c.ffn_ranks);
    CAPTURE(c.micro_batches);
    CAPTURE(c.fuse);
    const auto spec = spec_of(c.layers, c.top_k, c.dense, c.shared);
    const auto data = batches(3, 2 * c.micro_batches, spec.seq_len);
    const Run ref = colocated(spec, c.micro_batches, data);
    const Run got = run_on_gpus(c, spec, data);
    if (c.ffn_ranks == 1) {
      check_identical(ref, got);  // one rank per worker: bit for bit, as over loopback
    } else {
      check_close_stats(ref.stats, got.stats);
      REQUIRE(got.params.size() == ref.params.size());
      check_close_parameters(ref.params, got.params);
    }
  }
}

int main(int argc, char** argv) {
  if (dm::cuda::device_count() < 2) {
    std::printf("skipped: needs 2 CUDA devices (one NCCL rank per device), found %d\n", dm::cuda::device_count());
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
