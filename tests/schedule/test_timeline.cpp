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

#include <sstream>

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
