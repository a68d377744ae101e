// SPDX-License-Identifier: Apache-2.0
// Uses each linked component once; prints "consumer: ok" when all agree.
#include <disagmoe/disagmoe.hpp>

#include <iostream>

#if DISAGMOE_HAS_IO()
#include <disagmoe/io/spec_json.hpp>
#endif
#if DISAGMOE_HAS_MPI()
#include <mpi.h>
#endif

int main() {
  const auto model = disagmoe::model_preset("mixtral-8x7b");
  bool ok = disagmoe::total_params(model) > 46'000'000'000LL;
#if DISAGMOE_HAS_IO()
  ok = ok && disagmoe::io::model_from_json(disagmoe::io::to_json(model)).hidden == model.hidden;
#endif
#if DISAGMOE_HAS_MPI()
  int version = 0, sub = 0;
  MPI_Get_version(&version, &sub);
  ok = ok && version >= 3;
#endif
  std::cout << (ok ? "consumer: ok" : "consumer: FAILED") << '\n';
  return ok ? 0 : 1;
}
