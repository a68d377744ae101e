// SPDX-License-Identifier: Apache-2.0
// run_worker with an async_comm_handler, on a lowered AF-Pipe program of one worker and a
// handler with no peers whose comm tasks finish after a few polls: tasks start in the
// program's order and only once their dependencies are done, several are in flight at
// once, every op runs once, and a task that never finishes is a TimeoutError naming it.
#include "disaggregated_cases.hpp"

#include <disagmoe/runtime/disaggregated_options.hpp>
#include <disagmoe/runtime/worker_executor.hpp>
#include <disagmoe/schedule/describe.hpp>
#include <disagmoe/schedule/lowering.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace rt = disagmoe::runtime;
namespace ds = disagmoe::schedule;

namespace {

ds::Schedule small_schedule() {
  auto spec = disaggregated_test::spec_of(3, 2, 0, 0);
  spec.micro_batch = 1;
  rt::DisaggregatedOptions o;
  o.pairs = 1;
  return rt::build_schedule(spec, o, 4);
}

// Comm tasks finish on their `polls`-th progress call (never when polls < 0).
struct CountingHandler {
  std::mutex mu;
  std::vector<int> ran;                 // compute ops, as run
  std::vector<int> started;             // comm tasks, in start order
  std::map<int, int> polls_left;        // in flight: polls until done
  std::vector<char> finished;           // comm ops done
  std::size_t max_in_flight = 0;
  int polls = 3;
  int never = -1;                       // this op never finishes
  double burn = 0;                      // CPU seconds each progress call spends
  double burned = 0;                    // CPU seconds spent in progress calls, in all

  void compute(int op) {
    const std::lock_guard lock(mu);
    ran.push_back(op);
  }
  void start(const ds::Task& t) {
    for (int d : t.deps) REQUIRE((finished[static_cast<std::size_t>(d)] || done_compute(d)));
    started.push_back(t.op);
    polls_left[t.op] = polls;
    max_in_flight = std::max(max_in_flight, polls_left.size());
  }
  bool progress(const ds::Task& t) {
    if (burn > 0) {  // busy work on the comm thread, counted by the thread's own clock
      const double t0 = rt::detail::thread_cpu_seconds();
      double now = t0;
      while (now - t0 < burn) now = rt::detail::thread_cpu_seconds();
      burned += now - t0;
    }
    if (t.op == never) return false;
    if (--polls_left.at(t.op) > 0) return false;
    polls_left.erase(t.op);
    finished[static_cast<std::size_t>(t.op)] = 1;
    return true;
  }
  bool done_compute(int op) {
    const std::lock_guard lock(mu);
    return std::find(ran.begin(), ran.end(), op) != ran.end();
  }
};
static_assert(rt::async_comm_handler<CountingHandler>);

// Posts 1000 + op bytes when a task starts and 1 byte per progress call.
struct PostingHandler : CountingHandler {
  std::int64_t posted = 0;
  void start(const ds::Task& t) {
    CountingHandler::start(t);
    posted += 1000 + t.op;
  }
  bool progress(const ds::Task& t) {
    ++posted;
    return CountingHandler::progress(t);
  }
  std::int64_t bytes_posted() const { return posted; }
};

}  // namespace

TEST_CASE("async comm: in-order starts after dependencies, several exchanges in flight, every op once") {
  const ds::Schedule s = small_schedule();
  const ds::LoweredSchedule low = ds::lower(s);
  for (const auto& program : low.workers) {
    CAPTURE(program.worker);
    CountingHandler h;
    h.finished.assign(s.ops.size(), 0);
    rt::ExecutorOptions opt;
    opt.timeout = std::chrono::milliseconds(5000);
    const auto times = rt::run_worker(s, program, h, opt);
    std::vector<int> comm_order;
    for (const auto& t : program.streams[static_cast<std::size_t>(ds::Stream::kComm)]) comm_order.push_back(t.op);
    CHECK(h.started == comm_order);
    std::size_t computes = program.streams[0].size() + program.streams[1].size();
    CHECK(h.ran.size() == computes);
    for (const auto& stream : program.streams)
      for (const auto& t : stream) {
        const auto& m = times[static_cast<std::size_t>(t.op)];
        CHECK(m.start >= 0);
        CHECK(m.end >= m.start);
        for (int d : t.deps) CHECK(times[static_cast<std::size_t>(d)].end <= m.start);
      }
    if (comm_order.size() > 4) CHECK(h.max_in_flight > 1);
  }
}

TEST_CASE("async comm: the comm thread's CPU time is charged to the comm ops in flight, and only to them") {
  const ds::Schedule s = small_schedule();
  const ds::LoweredSchedule low = ds::lower(s);
  const auto& program = low.workers[0];
  CountingHandler h;
  h.finished.assign(s.ops.size(), 0);
  h.burn = 2e-4;
  rt::ExecutorOptions opt;
  opt.timeout = std::chrono::milliseconds(5000);
  const auto t0 = std::chrono::steady_clock::now();
  const auto times = rt::run_worker(s, program, h, opt);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double charged = 0;
  for (const auto& t : program.streams[static_cast<std::size_t>(ds::Stream::kComm)]) {
    const double cpu = times[static_cast<std::size_t>(t.op)].cpu;
    CHECK(cpu >= 0);
    charged += cpu;
  }
  // Every progress call's CPU is charged (besides the loop's own), and one thread cannot
  // use more CPU than the run's wall time.
  REQUIRE(h.burned > 0);
  CHECK(charged >= h.burned);
  CHECK(charged <= wall);
  // Compute ops keep their own thread's CPU time, bounded by their wall time.
  for (int stream : {0, 1})
    for (const auto& t : program.streams[static_cast<std::size_t>(stream)]) {
      const auto& m = times[static_cast<std::size_t>(t.op)];
      CHECK(m.cpu >= 0);
      CHECK(m.cpu <= m.end - m.start + 1e-3);
    }
}

TEST_CASE("async comm: a task that never finishes is a TimeoutError naming worker, step and op") {
  const ds::Schedule s = small_schedule();
  const ds::LoweredSchedule low = ds::lower(s);
  const auto& program = low.workers[0];
  const auto& comm = program.streams[static_cast<std::size_t>(ds::Stream::kComm)];
  REQUIRE(!comm.empty());
  CountingHandler h;
  h.finished.assign(s.ops.size(), 0);
  h.never = comm.front().op;
  rt::ExecutorOptions opt;
  opt.timeout = std::chrono::milliseconds(300);
  opt.step = 7;
  const auto t0 = std::chrono::steady_clock::now();
  std::string what;
  try {
    (void)rt::run_worker(s, program, h, opt);
  } catch (const disagmoe::TimeoutError& e) {
    what = e.what();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CAPTURE(what);
  CHECK(seconds < 3.0);
  CHECK(what.find("worker " + s.workers[0].name + ", step 7, " + ds::describe_op(s, h.never)) != std::string::npos);
  CHECK(what.find("no progress") != std::string::npos);
}

TEST_CASE(
    "async comm: what a task's start and progress calls post is its measured bytes; none measured without a "
    "counter") {
  const ds::Schedule s = small_schedule();
  const ds::LoweredSchedule low = ds::lower(s);
  for (const auto& program : low.workers) {
    CAPTURE(program.worker);
    PostingHandler h;
    h.finished.assign(s.ops.size(), 0);
    CountingHandler silent;
    silent.finished.assign(s.ops.size(), 0);
    rt::ExecutorOptions opt;
    opt.timeout = std::chrono::milliseconds(5000);
    const auto times = rt::run_worker(s, program, h, opt);
    const auto unmeasured = rt::run_worker(s, program, silent, opt);
    double total = 0;
    for (int stream = 0; stream < ds::kStreams; ++stream)
      for (const auto& t : program.streams[static_cast<std::size_t>(stream)]) {
        const double bytes = times[static_cast<std::size_t>(t.op)].bytes;
        CHECK(unmeasured[static_cast<std::size_t>(t.op)].bytes == -1);
        if (stream != static_cast<int>(ds::Stream::kComm)) {
          CHECK(bytes == -1);
          continue;
        }
        CHECK(bytes == 1000 + t.op + h.polls);  // done on its polls-th progress call
        total += bytes;
      }
    CHECK(total == static_cast<double>(h.posted));
  }
}
