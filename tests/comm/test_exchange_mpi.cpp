// SPDX-License-Identifier: Apache-2.0
// The M2NChannel suite (exchange_cases.hpp) over mpi::Transport; run by ctest under
// `mpirun -np 4` and `-np 6`. Every rank runs every test case (they are collective).
#define DOCTEST_CONFIG_IMPLEMENT
#include "exchange_cases.hpp"

#include <disagmoe/backend/mpi/transport.hpp>

#include <doctest/doctest.h>

#include <vector>

using namespace disagmoe;

namespace {
/// Runs `body` on this rank, then agrees across the world on whether any rank
/// failed, so one rank's failure fails the test everywhere (and is printed where it
/// happened).
template <class Body>
void collective(Body&& body) {
  auto world = mpi::Transport::world();
  std::string what;
  try {
    body(world);
  } catch (const std::exception& e) {
    what = e.what();
  }
  INFO("world rank " << world.rank() << ": " << what);
  CHECK(what.empty());
  MPI_Barrier(MPI_COMM_WORLD);
}
}  // namespace

TEST_CASE("mpi: messages keep their order per (source, tag) and sub-groups are isolated") {
  collective([](mpi::Transport& world) {
    const int n = world.size(), me = world.rank();
    const std::vector<int> evens = [&] {
      std::vector<int> v;
      for (int r = n - 1; r >= 0; --r)
        if (r % 2 == 0) v.push_back(r);
      return v;
    }();
    auto sub = world.split(evens);
    REQUIRE(sub.has_value() == (me % 2 == 0));
    std::vector<int> out(20), in(20, -1), sub_in(1, -1);
    std::vector<mpi::Transport::Request> reqs;
    const int to = (me + 1) % n, from = (me + n - 1) % n;
    for (int i = 0; i < 20; ++i) out[static_cast<std::size_t>(i)] = me * 100 + i;
    int sub_value = 1000 + me;
    if (sub) {  // same tag as the world traffic, in the sub-group ring
      const int sn = sub->size(), sme = sub->rank();
      reqs.push_back(comm::irecv(*sub, (sme + sn - 1) % sn, 0, std::span<int>(sub_in)));
      auto s = comm::isend(*sub, (sme + 1) % sn, 0, std::span<const int>(&sub_value, 1));
      REQUIRE(sub->wait(s, comm::deadline_after(std::chrono::seconds(10))));
    }
    for (int i = 0; i < 20; ++i)
      reqs.push_back(comm::irecv(world, from, 0, std::span<int>(&in[static_cast<std::size_t>(i)], 1)));
    for (int i = 0; i < 20; ++i) {
      auto s = comm::isend(world, to, 0, std::span<const int>(&out[static_cast<std::size_t>(i)], 1));
      REQUIRE(world.wait(s, comm::deadline_after(std::chrono::seconds(10))));
    }
    std::size_t first = 0;
    if (sub) {
      REQUIRE(sub->wait(reqs[0], comm::deadline_after(std::chrono::seconds(10))));
      const int sn = sub->size();
      CHECK(sub_in[0] == 1000 + evens[static_cast<std::size_t>((sub->rank() + sn - 1) % sn)]);
      first = 1;
    }
    for (std::size_t i = first; i < reqs.size(); ++i) REQUIRE(world.wait(reqs[i], comm::deadline_after(std::chrono::seconds(10))));
    for (int i = 0; i < 20; ++i) CHECK(in[static_cast<std::size_t>(i)] == from * 100 + i);
  });
}

TEST_CASE("mpi: a receive of the wrong size is an IoError; a silent sender a false wait") {
  collective([](mpi::Transport& world) {
    if (world.size() < 2 || world.rank() > 1) return;
    std::vector<double> big(4, 1.0), small(2, 0.0);
    if (world.rank() == 0) {
      auto s = comm::isend(world, 1, 5, std::span<const double>(big));
      REQUIRE(world.wait(s, comm::deadline_after(std::chrono::seconds(10))));
    } else {
      auto r = comm::irecv(world, 0, 5, std::span<double>(small));
      CHECK_THROWS_AS((void)world.wait(r, comm::deadline_after(std::chrono::seconds(10))), IoError);
      auto silent = comm::irecv(world, 0, 6, std::span<double>(small));
      CHECK_FALSE(world.wait(silent, comm::deadline_after(std::chrono::milliseconds(100))));
      world.cancel(silent);
    }
  });
}

TEST_CASE("mpi: randomised exchanges match the oracles") {
  const int world_size = mpi::Transport::world().size();
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    for (bool exact : {true, false}) {
      INFO("seed = " << seed << ", exact = " << exact);
      const auto p = exchange::make_problem(seed, world_size, exact);
      collective([&](mpi::Transport& world) { exchange::run_exchange(world, p); });
    }
  }
}

TEST_CASE("mpi: hand-off exchanges match the oracles") {
  const int world_size = mpi::Transport::world().size();
  for (std::uint64_t seed = 300; seed <= 305; ++seed) {
    for (bool exact : {true, false}) {
      INFO("seed = " << seed << ", exact = " << exact);
      const auto p = exchange::make_problem(seed, world_size, exact, true);
      collective([&](mpi::Transport& world) { exchange::run_exchange(world, p); });
    }
  }
}

TEST_CASE("mpi: a silent F-rank fails the A-ranks within the deadline, naming it") {
  std::string msg;
  collective([&](mpi::Transport& world) { msg = exchange::run_silent_peer(world, world.size() - 1, 200); });
  auto world = mpi::Transport::world();
  const int m = world.size() / 2;
  if (world.rank() < m) {
    INFO(msg);
    CHECK(msg.find("M2NChannel 'moe-test' step 1") != std::string::npos);
    CHECK(msg.find("F-rank " + std::to_string(world.size() - 1 - m)) != std::string::npos);
  }
}

TEST_CASE("mpi: mismatched configurations are detected at channel creation") {
  std::string msg;
  collective([&](mpi::Transport& world) {
    msg = exchange::run_mismatch(world, 1, [](comm::ChannelConfig& c) { c.hidden += 1; });
  });
  INFO(msg);
  CHECK_FALSE(msg.empty());
  if (mpi::Transport::world().rank() != 1) CHECK(msg.find("ChannelConfig.hidden on pair rank 1") != std::string::npos);
}

int main(int argc, char** argv) {
  mpi::Environment env(argc, argv);
  doctest::Context context(argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) context.setOption("minimal", true);  // one summary, failures from every rank
  return context.run();
}
