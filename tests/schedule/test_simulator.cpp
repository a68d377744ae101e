// SPDX-License-Identifier: Apache-2.0
#include "uniform.hpp"

#include <disagmoe/schedule/simulator.hpp>

#include <doctest/doctest.h>

namespace ds = disagmoe::schedule;

TEST_CASE("a cyclic schedule is reported as a deadlock naming the waits") {
  ds::Schedule s;
  s.workers = ds::uniform_workers(2);
  ds::Op a;
  a.worker = 0;
  a.seconds = 1;
  a.deps = {1};
  ds::Op b;
  b.worker = 1;
  b.seconds = 1;
  b.deps = {0};
  s.add(a);
  s.add(b);
  const auto r = ds::simulate(s);
  CHECK(r.deadlocked);
  REQUIRE(r.waits.size() == 2);
  CHECK(r.waits[0].waiting_on == std::vector<int>{1});
  CHECK(r.deadlock_report.find("waits on op 1") != std::string::npos);
}
