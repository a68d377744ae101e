// SPDX-License-Identifier: Apache-2.0
// Run under mpirun by ctest (tests/comm/CMakeLists.txt): the last rank goes silent (alive,
// asleep) right before mpi::Transport::split, a collective over the world; every other
// rank must leave split within collective_timeout() with a TimeoutError naming it, report
// it in one line and end the job (Environment::fail_job), never wait in MPI_Comm_create.
// Prints "split returned" (a failure) if split came back although a rank never joined.
#include <disagmoe/backend/mpi/transport.hpp>
#include <disagmoe/comm/all_gather.hpp>

#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  namespace dm = disagmoe;
  using Clock = std::chrono::steady_clock;
  dm::mpi::collective_timeout() = std::chrono::milliseconds(2000);
  dm::mpi::Environment env(argc, argv);
  auto world = dm::mpi::Transport::world();
  (void)dm::comm::all_gather(world, {}, world.max_tag(), dm::comm::deadline_after(std::chrono::seconds(30)),
                             "before split");  // every rank is here
  if (world.rank() + 1 == world.size()) std::this_thread::sleep_for(std::chrono::hours(1));
  const std::vector<int> members{0, 1};
  const auto start = Clock::now();
  try {
    auto sub = world.split(members);
  } catch (const dm::TimeoutError& e) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    std::fprintf(stderr, "error: %s (rank %d, %lld ms in split)\n", e.what(), world.rank(), static_cast<long long>(ms));
    env.fail_job(2);
    return 2;
  }
  std::puts("split returned although a rank stopped before it");
  return 0;
}
