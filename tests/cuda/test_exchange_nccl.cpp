// SPDX-License-Identifier: Apache-2.0
// The M2NChannel suite (tests/comm/exchange_cases.hpp) over nccl::Transport, one MPI
// rank per GPU (NCCL does not support two ranks of a communicator on one device): the
// same randomised and hand-off exchanges as over loopback threads and MPI, rows in host
// memory (host::Backend), staged through the devices by the transport. Exits 77 on
// every rank where a node has fewer GPUs than ranks. Run by ctest under mpirun -np 4.
#define DOCTEST_CONFIG_IMPLEMENT
#include "../comm/exchange_cases.hpp"

#include <disagmoe/backend/cuda/check.hpp>
#include <disagmoe/backend/mpi/transport.hpp>
#include <disagmoe/backend/nccl/transport.hpp>

#include <doctest/doctest.h>

#include <cstdio>
#include <optional>
#include <string>

using namespace disagmoe;

namespace {

/// The world communicator, created once in main (after the device is chosen).
std::optional<nccl::Transport>& world() {
  static std::optional<nccl::Transport> w;
  return w;
}

/// Runs `body` on this rank, then agrees across the world on whether any rank failed (see
/// test_exchange_mpi.cpp).
template <class Body>
void collective(Body&& body) {
  std::string what;
  try {
    body(*world());
  } catch (const std::exception& e) {
    what = e.what();
  }
  INFO("world rank " << world()->rank() << ": " << what);
  CHECK(what.empty());
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace

TEST_CASE("nccl: randomised exchanges match the oracles") {
  const int world_size = world()->size();
  for (std::uint64_t seed = 1; seed <= 8; ++seed) {
    for (bool exact : {true, false}) {
      INFO("seed = " << seed << ", exact = " << exact);
      const auto p = exchange::make_problem(seed, world_size, exact);
      collective([&](nccl::Transport& w) { exchange::run_exchange(w, p); });
    }
  }
}

TEST_CASE("nccl: hand-off exchanges match the oracles") {
  const int world_size = world()->size();
  for (std::uint64_t seed = 300; seed <= 303; ++seed) {
    INFO("seed = " << seed);
    const auto p = exchange::make_problem(seed, world_size, false, true);
    collective([&](nccl::Transport& w) { exchange::run_exchange(w, p); });
  }
}

int main(int argc, char** argv) {
  mpi::Environment env(argc, argv);
  int rank = 0, size = 1, local = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int local_size = 1;
  MPI_Comm_rank(node, &local);
  MPI_Comm_size(node, &local_size);
  MPI_Comm_free(&node);
  int enough = cuda::device_count() >= local_size ? 1 : 0, all_enough = 0;
  MPI_Allreduce(&enough, &all_enough, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (all_enough == 0) {
    if (rank == 0) std::printf("skipped: a node has fewer GPUs than MPI ranks\n");
    return 77;
  }
  DISAGMOE_CUDA_CHECK(cudaSetDevice(local));
  ncclUniqueId id{};
  if (rank == 0) DISAGMOE_NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_Bcast(id.internal, static_cast<int>(sizeof(id.internal)), MPI_BYTE, 0, MPI_COMM_WORLD);
  nccl::Options opts;
  opts.name = "exchange-world";
  world() = nccl::Transport::create(id, rank, size, opts);
  doctest::Context context(argc, argv);
  if (rank != 0) context.setOption("minimal", true);
  const int rc = context.run();
  world().reset();  // before MPI_Finalize
  return rc;
}
