// SPDX-License-Identifier: Apache-2.0
// The host back end: thread pool (every task once, shared by concurrent callers,
// errors surface), streams and events (order, cross-stream waits, sticky errors), and
// the kernels enqueued on a stream against the same kernels called directly, plus the
// dL/dgate reduction against a naive loop.
#include <disagmoe/backend/host/backend.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

using namespace disagmoe;

TEST_CASE("ThreadPool runs every task exactly once, also for concurrent callers") {
  for (int workers : {0, 1, 3}) {
    host::ThreadPool pool(workers);
    CHECK(pool.workers() == workers);
    for (std::size_t tasks : {std::size_t{0}, std::size_t{1}, std::size_t{2}, std::size_t{7}, std::size_t{64}}) {
      std::vector<std::atomic<int>> hits(tasks);
      pool.run(tasks, [&](std::size_t i) { hits[i].fetch_add(1); });
      for (std::size_t i = 0; i < tasks; ++i) CHECK(hits[i].load() == 1);
    }
    // Four callers at once, each with its own job: all complete, none is lost.
    std::vector<std::vector<int>> out(4, std::vector<int>(100, 0));
    std::vector<std::jthread> callers;
    for (int c = 0; c < 4; ++c)
      callers.emplace_back([&, c] {
        for (int rep = 0; rep < 20; ++rep)
          pool.run(100, [&](std::size_t i) { out[static_cast<std::size_t>(c)][i] += static_cast<int>(i); });
      });
    callers.clear();
    for (const auto& v : out)
      for (std::size_t i = 0; i < v.size(); ++i) CHECK(v[i] == 20 * static_cast<int>(i));
  }
}

TEST_CASE("ThreadPool rethrows a task's error after every task ran") {
  host::ThreadPool pool(2);
  std::atomic<int> ran{0};
  CHECK_THROWS_WITH_AS(pool.run(9,
                                [&](std::size_t i) {
                                  ran.fetch_add(1);
                                  if (i == 4) throw std::runtime_error("task 4 failed");
                                }),
                       "task 4 failed", std::runtime_error);
  CHECK(ran.load() == 9);
  pool.run(3, [&](std::size_t) { ran.fetch_add(1); });  // the pool is still usable
  CHECK(ran.load() == 12);
}

TEST_CASE("a threaded stream runs its work in order; events mark what was enqueued") {
  auto s = host::Stream::threaded("compute");
  CHECK(s.is_threaded());
  std::atomic<bool> release{false};
  std::vector<int> order;
  s.enqueue([&] {
    while (!release.load()) std::this_thread::yield();
    order.push_back(0);
  });
  const host::Event first = s.record();
  for (int i = 1; i < 50; ++i) s.enqueue([&order, i] { order.push_back(i); });
  const host::Event all = s.record();
  CHECK_FALSE(first.query());  // the first task is still blocked
  release = true;
  all.synchronize();
  CHECK(first.query());
  CHECK(all.query());
  REQUIRE(order.size() == 50);
  for (int i = 0; i < 50; ++i) CHECK(order[static_cast<std::size_t>(i)] == i);
  CHECK(host::Event{}.query());  // a default event is complete
}

TEST_CASE("a stream that waits on another stream's event runs after it") {
  auto producer = host::Stream::threaded("producer");
  auto consumer = host::Stream::threaded("consumer");
  for (int rep = 0; rep < 20; ++rep) {
    std::vector<int> data(1000, 0);
    std::atomic<bool> go{false};
    producer.enqueue([&] {
      while (!go.load()) std::this_thread::yield();
      for (auto& x : data) x = rep + 1;
    });
    consumer.wait(producer.record());
    long sum = 0;
    consumer.enqueue([&] {
      for (int x : data) sum += x;
    });
    go = true;
    consumer.synchronize();
    CHECK(sum == 1000L * (rep + 1));
  }
}

TEST_CASE("stream errors are sticky: later work is skipped, every synchronize reports it") {
  auto s = host::Stream::threaded("fails");
  int after = 0;
  s.enqueue([] { throw std::runtime_error("kernel failed"); });
  s.enqueue([&] { ++after; });
  const auto e = s.record();
  CHECK_THROWS_WITH_AS(e.synchronize(), "kernel failed", std::runtime_error);
  CHECK(e.query());
  CHECK(after == 0);
  CHECK_THROWS_AS(s.synchronize(), std::runtime_error);
  // A caller-served stream runs work inside enqueue, so its error is thrown there.
  auto c = host::Stream::caller();
  CHECK_FALSE(c.is_threaded());
  CHECK_THROWS_WITH_AS(c.enqueue([] { throw std::runtime_error("now"); }), "now", std::runtime_error);
}

TEST_CASE("host::Backend kernels on a threaded stream equal the kernels called directly") {
  static_assert(comm::backend<host::Backend>);
  host::ThreadPool pool(2);
  const host::Backend backend(host::KernelOptions{3, 0, &pool});
  auto s = host::Stream::threaded("comm");
  for (std::uint64_t seed = 1; seed <= 10; ++seed) {
    INFO("seed = " << seed);
    std::mt19937_64 rng(seed);
    const std::size_t rows = 1 + rng() % 40, width = 1 + rng() % 17, out_rows = 1 + rng() % 30;
    std::vector<float> src(rows * width), scale(out_rows);
    for (auto& x : src) x = std::uniform_real_distribution<float>(-1, 1)(rng);
    for (auto& x : scale) x = std::uniform_real_distribution<float>(-1, 1)(rng);
    std::vector<std::int64_t> index(out_rows), seg{0};
    for (auto& i : index) i = static_cast<std::int64_t>(rng() % rows);
    for (std::size_t r = 0; r < out_rows; ++r) seg.push_back(seg.back() + static_cast<std::int64_t>(rng() % 3));
    std::vector<std::int64_t> idx(static_cast<std::size_t>(seg.back()));
    std::vector<float> w(idx.size());
    for (std::size_t q = 0; q < idx.size(); ++q) {
      idx[q] = static_cast<std::int64_t>(rng() % rows);
      w[q] = std::uniform_real_distribution<float>(-1, 1)(rng);
    }
    std::vector<float> g1(out_rows * width), g2(g1.size()), gs1(g1.size()), gs2(g1.size()), c1(g1.size()),
        c2(g1.size());
    std::vector<std::int32_t> bins(rows);
    for (auto& b : bins) b = static_cast<std::int32_t>(rng() % 5);
    std::vector<std::int64_t> h1(5), h2(5), o1(6), o2(6);

    backend.gather_rows<float>(s, src, width, index, g1);
    backend.gather_rows_scaled<float, float>(s, src, width, index, scale, gs1);
    backend.combine_rows<float, float>(s, src, width, seg, idx, w, c1);
    backend.histogram(s, bins, h1);
    backend.exclusive_offsets(s, h1, o1);
    backend.synchronize(backend.record(s));

    host::gather_rows<float>(src, width, index, g2);
    host::gather_rows_scaled<float, float>(src, width, index, scale, gs2);
    host::combine_rows<float, float>(src, width, seg, idx, w, c2);
    host::histogram(bins, h2);
    host::exclusive_offsets(h2, o2);
    CHECK(std::memcmp(g1.data(), g2.data(), g1.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(gs1.data(), gs2.data(), gs1.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(c1.data(), c2.data(), c1.size() * sizeof(float)) == 0);
    CHECK(h1 == h2);
    CHECK(o1 == o2);
  }
}

namespace {
/// row_dot's documented order written independently: lane sums by a column scan, then
/// the butterfly as a recursion (lanes l and l + 16 meet first, evens and odds last).
float dot_by_lanes(const float* a, const float* b, std::size_t width) {
  float lane[32] = {};
  for (std::size_t c = 0; c < width; ++c) lane[(c / 8) % 32] += a[c] * b[c];
  auto tree = [&](auto&& self, int l, int step) -> float {
    return step == 32 ? lane[l] : self(self, l, 2 * step) + self(self, l + step, 2 * step);
  };
  return tree(tree, 0, 1);
}
}  // namespace

TEST_CASE("gate_gradients: one dot product per term, in its slot, against an independent loop and fp64") {
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    INFO("seed = " << seed);
    std::mt19937_64 rng(seed);
    // Widths past 32 lanes x 8 columns, so lanes wrap around.
    const std::size_t rows = rng() % 20, width = 1 + rng() % 700, k = 1 + rng() % 4,
                      out_rows = 1 + rng() % 30;
    std::vector<float> outputs(out_rows * width), grad(rows * width);
    for (auto& x : outputs) x = std::uniform_real_distribution<float>(-1, 1)(rng);
    for (auto& x : grad) x = std::uniform_real_distribution<float>(-1, 1)(rng);
    std::vector<std::int64_t> seg{0}, pos;
    std::vector<std::int32_t> slot;
    for (std::size_t r = 0; r < rows; ++r) {
      std::vector<std::int32_t> slots(k);
      for (std::size_t j = 0; j < k; ++j) slots[j] = static_cast<std::int32_t>(j);
      std::shuffle(slots.begin(), slots.end(), rng);
      const std::size_t terms = rng() % (k + 1);  // distinct slots per row
      for (std::size_t q = 0; q < terms; ++q) {
        pos.push_back(static_cast<std::int64_t>(rng() % out_rows));
        slot.push_back(slots[q]);
      }
      seg.push_back(static_cast<std::int64_t>(pos.size()));
    }
    std::vector<float> got(rows * k, -7.0f), want(rows * k, 0.0f);
    host::gate_gradients<float>(outputs, grad, width, seg, pos, slot, k, got);
    for (std::size_t r = 0; r < rows; ++r)
      for (auto q = static_cast<std::size_t>(seg[r]); q < static_cast<std::size_t>(seg[r + 1]); ++q) {
        const float* a = outputs.data() + static_cast<std::size_t>(pos[q]) * width;
        const float* b = grad.data() + r * width;
        const auto e = r * k + static_cast<std::size_t>(slot[q]);
        want[e] = dot_by_lanes(a, b, width);
        // fp64 oracle: any summation order of n products of [-1, 1] floats errs by at most
        // about n * 2^-24 * sum |a_c b_c| (Higham, Accuracy and Stability, 3.1).
        double exact = 0, magnitude = 0;
        for (std::size_t c = 0; c < width; ++c) {
          exact += double(a[c]) * b[c];
          magnitude += std::fabs(double(a[c]) * b[c]);
        }
        CHECK(std::fabs(got[e] - exact) <= double(width + 1) * std::ldexp(1.0, -24) * magnitude);
      }
    CHECK(got == want);  // exact: the same products summed in the same order
  }
  std::vector<float> o(4), g(4), out(2);
  const std::vector<std::int64_t> seg{0, 1}, pos{3};
  const std::vector<std::int32_t> slot{0};
  CHECK_THROWS_WITH_AS(host::gate_gradients<float>(o, g, 2, seg, pos, slot, 2, out),
                       "gate_gradients pos[q] = 3: expected a row of outputs", ConfigError);
}
