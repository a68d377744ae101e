// SPDX-License-Identifier: Apache-2.0
// Run under mpirun by ctest (tests/comm/CMakeLists.txt): the last rank goes silent (alive,
// asleep: unlike SIGSTOP, mpirun's SIGTERM still ends it once the job fails) after a
// collective, before MPI_Finalize; every other rank
// must leave MPI_Finalize within collective_timeout() with one line naming it and exit
// status 2, never wait forever. Exits 0 only if MPI_Finalize returned (a failure).
#include <disagmoe/backend/mpi/transport.hpp>
#include <disagmoe/comm/all_gather.hpp>

#include <chrono>
#include <cstdio>
#include <thread>

int main(int argc, char** argv) {
  namespace dm = disagmoe;
  dm::mpi::collective_timeout() = std::chrono::milliseconds(2000);
  {
    dm::mpi::Environment env(argc, argv);
    auto world = dm::mpi::Transport::world();
    (void)dm::comm::all_gather(world, {}, world.max_tag(), dm::comm::deadline_after(std::chrono::seconds(30)),
                               "before finalize");  // every rank is here
    if (world.rank() + 1 == world.size()) std::this_thread::sleep_for(std::chrono::hours(1));
  }
  std::puts("MPI_Finalize returned although a rank stopped before it");
  return 0;
}
