// SPDX-License-Identifier: Apache-2.0
// Compiled by ctest (tests/runtime/CMakeLists.txt) with one CASE_* macro: CASE_model
// composes valid pipeline types (with and without a schedule policy) and must compile; every other case passes a wrong
// template argument and must fail naming the violated concept.
#include <disagmoe/backend/host/loopback_transport.hpp>
#include <disagmoe/model/reference_attention.hpp>
#include <disagmoe/model/reference_experts.hpp>
#include <disagmoe/runtime/disaggregated_trainer.hpp>
#include <disagmoe/runtime/pipeline.hpp>
#include <disagmoe/schedule/dualpipe.hpp>

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
#elif defined(CASE_not_a_policy)
using Pipeline = rt::Pipeline<int, mo::ReferenceAttention<float>, mo::ReferenceExperts<float>,
                              disagmoe::host::LoopbackTransport>;
#elif defined(CASE_simulator_only_policy)  // a schedule_policy the runtime cannot execute
using Pipeline = rt::Pipeline<disagmoe::schedule::DualPipe, mo::ReferenceAttention<float>, mo::ReferenceExperts<float>,
                              disagmoe::host::LoopbackTransport>;
#elif defined(CASE_policy_transport_swapped)
using Pipeline = rt::Pipeline<disagmoe::schedule::AFPipe, mo::ReferenceAttention<float>, mo::ReferenceExperts<float>,
                              disagmoe::host::Backend, disagmoe::host::LoopbackTransport>;
#else
using Trainer = rt::DisaggregatedTrainer<mo::ReferenceAttention<float>, mo::ReferenceExperts<float>,
                                         disagmoe::host::LoopbackTransport, disagmoe::host::Backend>;
using Pipeline = rt::Pipeline<disagmoe::schedule::A2AOverlap, mo::ReferenceAttention<float>,
                              mo::ReferenceExperts<float>, disagmoe::host::LoopbackTransport, disagmoe::host::Backend>;
static_assert(sizeof(Trainer) > 0 && std::is_base_of_v<Trainer, Pipeline>);
#endif

}  // namespace

static_assert(sizeof(Pipeline) > 0, "a pipeline type composed of two computes, a transport and a back end");
