// SPDX-License-Identifier: Apache-2.0
// Timeline writers: the Chrome trace parses as JSON and holds exactly one complete event
// per op at the simulated times; the SVG is one self-contained document.
#include "uniform.hpp"

#include <disagmoe/io/chrome_trace.hpp>
#include <disagmoe/io/svg_gantt.hpp>
#include <disagmoe/schedule/baselines.hpp>
#include <disagmoe/schedule/simulator.hpp>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace ds = disagmoe::schedule;

TEST_CASE("chrome trace: one process per worker, one thread per stream, one X event per op") {
  auto pb = ds::test::uniform_problem(3, 6, 6);
  pb.workers[1].name = "S\"1\\";  // must be escaped
  const auto s = ds::Interleaved1F1B{2}.build(pb);
  const auto r = ds::simulate(s);
  std::ostringstream os;
  disagmoe::io::write_chrome_trace(os, s, r);
  const auto j = nlohmann::json::parse(os.str());
  int procs = 0, threads = 0, events = 0;
  for (const auto& e : j.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "process_name") ++procs;
    if (e.at("ph") == "M" && e.at("name") == "thread_name") ++threads;
    if (e.at("ph") == "X") {
      ++events;
      const int id = e.at("args").at("op").get<int>();
      const auto& t = r.timings[static_cast<std::size_t>(id)];
      CHECK(e.at("ts").get<double>() == doctest::Approx(t.start * 1e6));
      CHECK(e.at("dur").get<double>() == doctest::Approx((t.end - t.start) * 1e6));
      CHECK(e.at("pid").get<int>() == s.ops[static_cast<std::size_t>(id)].worker);
    }
  }
  CHECK(procs == 3);
  CHECK(threads == 9);
  CHECK(events == static_cast<int>(s.ops.size()));
  CHECK(j.at("otherData").at("step_seconds").get<double>() == doctest::Approx(r.step_seconds));
}

TEST_CASE("chrome trace: a run names only the workers it has events for") {
  const auto s = ds::OneFOneB{}.build(ds::test::uniform_problem(3, 3, 3));
  const auto r = ds::simulate(s);
  auto full = disagmoe::io::simulated_run(s, r, "simulated");
  auto partial = full;  // as a per-rank run of a worker of several ranks among workers of one
  partial.label = "measured rank 1";
  std::erase_if(partial.events, [](const disagmoe::io::TraceEvent& e) { return e.worker != 1; });
  REQUIRE(!partial.events.empty());
  const std::vector<disagmoe::io::TraceRun> runs{full, partial};
  std::ostringstream os;
  disagmoe::io::write_chrome_trace(os, s, runs);
  const auto j = nlohmann::json::parse(os.str());
  std::vector<std::string> names;
  for (const auto& e : j.at("traceEvents"))
    if (e.at("ph") == "M" && e.at("name") == "process_name") names.push_back(e.at("args").at("name").get<std::string>());
  REQUIRE(names.size() == s.workers.size() + 1);
  CHECK(names.back().rfind("measured rank 1 " + s.workers[1].name, 0) == 0);
}

TEST_CASE("svg gantt: a single document with bars, axis and legend") {
  const auto s = ds::OneFOneB{}.build(ds::test::uniform_problem(2, 2, 3));
  const auto r = ds::simulate(s);
  std::ostringstream os;
  disagmoe::io::write_svg_gantt(os, s, r);
  const std::string svg = os.str();
  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(svg.find("</svg>") == svg.size() - 7);
  CHECK(svg.find("attn_fwd mb 2") != std::string::npos);
  CHECK(svg.find("expert_wgrad") != std::string::npos);
  CHECK_THROWS_AS(disagmoe::io::write_svg_gantt("/nonexistent-dir/x.svg", s, r), disagmoe::IoError);
}

namespace {
// Busy seconds per row (worker × stream) recounted from the timings: the union of the
// row's op intervals.
std::vector<double> busy_per_row(const ds::Schedule& s, const ds::SimResult& r) {
  std::vector<std::vector<std::pair<double, double>>> rows(s.workers.size() * ds::kStreams);
  for (std::size_t i = 0; i < s.ops.size(); ++i) {
    const auto& t = r.timings[i];
    if (t.start >= 0 && t.end > t.start)
      rows[static_cast<std::size_t>(s.ops[i].worker) * ds::kStreams + static_cast<std::size_t>(s.ops[i].stream)]
          .push_back({t.start, t.end});
  }
  std::vector<double> out;
  for (auto& v : rows) {
    std::sort(v.begin(), v.end());
    double busy = 0, end = -1;
    for (const auto& [a, b] : v) {
      busy += std::max(0.0, b - std::max(a, end));
      end = std::max(end, b);
    }
    out.push_back(busy);
  }
  return out;
}

// Sum of the bars' data-busy per row, rows told apart by their y (top 30, 14 px each).
std::vector<double> svg_busy_per_row(const std::string& svg, std::size_t rows, std::size_t* bars) {
  std::vector<double> out(rows, 0.0);
  *bars = 0;
  for (std::size_t at = svg.find("data-busy="); at != std::string::npos; at = svg.find("data-busy=", at + 1)) {
    const std::size_t open = svg.rfind("<rect", at), y = svg.find(" y=\"", open) + 4;
    const auto row = static_cast<std::size_t>(std::lround((std::stod(svg.substr(y)) - 31) / 14));
    REQUIRE(row < rows);
    out[row] += std::stod(svg.substr(at + 11));
    ++*bars;
  }
  return out;
}
}  // namespace

TEST_CASE("svg gantt: the bars' busy time per row equals the timeline's, and a 300k-op step stays under 2 MB") {
  // A real schedule (bars wider than a pixel, one per op or same-kind run).
  {
    const auto s = ds::Interleaved1F1B{2}.build(ds::test::uniform_problem(3, 6, 6));
    const auto r = ds::simulate(s);
    std::ostringstream os;
    disagmoe::io::write_svg_gantt(os, s, r);
    std::size_t bars = 0;
    const auto want = busy_per_row(s, r);
    const auto got = svg_busy_per_row(os.str(), want.size(), &bars);
    for (std::size_t i = 0; i < want.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-5));
  }
  // A synthetic step of 4 workers × 3 streams × 25000 ops of alternating kinds, far
  // narrower than a pixel, with a gap now and then and overlapping comm ops.
  ds::Schedule s;
  s.name = "large";
  s.workers = ds::uniform_workers(4);
  ds::SimResult r;
  const ds::OpKind compute[] = {ds::OpKind::kAttentionForward, ds::OpKind::kExpertForward};
  for (int w = 0; w < 4; ++w)
    for (int st = 0; st < ds::kStreams; ++st) {
      double t = 0;
      for (int i = 0; i < 25000; ++i) {
        ds::Op op;
        op.worker = op.peer = w;
        op.stream = static_cast<ds::Stream>(st);
        op.kind = st == 2 ? ds::OpKind::kAllToAll : compute[i % 2];
        s.add(op);
        const double d = 1e-6 * (1 + (i * 7 + w) % 5);
        if (i % 97 == 0) t += 2e-3;  // a gap of several pixels
        const double start = st == 2 && i % 3 == 1 ? t - d / 2 : t;  // comm ops may overlap
        r.timings.push_back({start, start + d});
        t = start + d;
        r.step_seconds = std::max(r.step_seconds, t);
      }
    }
  std::ostringstream os;
  disagmoe::io::write_svg_gantt(os, s, r);
  const std::string svg = os.str();
  std::size_t bars = 0;
  const auto want = busy_per_row(s, r);
  const auto got = svg_busy_per_row(svg, want.size(), &bars);
  for (std::size_t i = 0; i < want.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-5));
  CHECK(svg.size() < 2'000'000);
  CHECK(bars < s.ops.size() / 20);  // merged, not one bar per op
  CHECK(svg.find("</svg>") == svg.size() - 7);
}
