// SPDX-License-Identifier: Apache-2.0
// Compiled by ctest (tests/runtime/CMakeLists.txt) with one CASE_* macro: CASE_model
// composes a valid pipeline type and must compile; every other case passes a wrong
// template argument and must fail naming the violated concept.
#include <disagmoe/backend/host/loopback_transport.hpp>
#include <disagmoe/model/reference_attention.hpp>
#include <disagmoe/model/reference_experts.hpp>
#include <disagmoe/runtime/disaggregated_trainer.hpp>

namespace {

namespace rt = disagmoe::runtime;
namespace mo = disagmoe::model;
struct NotATransport {
  int rank() const { return 0; }
  int size() const { return 1; }
};

struct NotABackend {
  using Stream = int;
};

#if defined(CASE_not_a_transport)
using Pipeline = rt::DisaggregatedTrainer<mo::ReferenceAttention<float>, mo::ReferenceExperts<float>, NotATransport>;
#elif defined(CASE_not_a_backend)
using Pipeline = rt::DisaggregatedTrainer<mo::ReferenceAttention<float>, mo::ReferenceExperts<float>,
                                          disagmoe::host::LoopbackTransport, NotABackend>;
#elif defined(CASE_swapped_computes)
using Pipeline = rt::DisaggregatedTrainer<mo::ReferenceExperts<float>, mo::ReferenceAttention<float>,
                                          disagmoe::host::LoopbackTransport>;
#else
using Pipeline = rt::DisaggregatedTrainer<mo::ReferenceAttention<float>, mo::ReferenceExperts<float>,
                                          disagmoe::host::LoopbackTransport, disagmoe::host::Backend>;
#endif

}  // namespace

static_assert(sizeof(Pipeline) > 0, "a pipeline type composed of two computes, a transport and a back end");
