// SPDX-License-Identifier: Apache-2.0
/// @file disagmoe.hpp
/// Umbrella header: every host-only header that needs nothing beyond `disagmoe::core`
/// (C++20, Eigen). Back ends (MPI, CUDA, NCCL) and JSON I/O have their own headers.
#pragma once

#include <disagmoe/config.hpp>
#include <disagmoe/error.hpp>
#include <disagmoe/spec/cluster_spec.hpp>
#include <disagmoe/spec/dtype.hpp>
#include <disagmoe/spec/model_size.hpp>
#include <disagmoe/spec/model_spec.hpp>
#include <disagmoe/spec/presets.hpp>

// MILP solver (milp/): Problem, solve(), MPS reader/writer.
#include <disagmoe/milp/milp.hpp>
// Planner (plan/): cost model, RooflineModel, layer groups, AdaptiveAllocator, Plan.
#include <disagmoe/plan/adaptive_allocator.hpp>
#include <disagmoe/plan/cost_model.hpp>
#include <disagmoe/plan/layer_assignment.hpp>
#include <disagmoe/plan/roofline.hpp>
// Schedules and simulator (schedule/): AFPipe and the baselines, simulate().
#include <disagmoe/schedule/plan_oracle.hpp>
#include <disagmoe/schedule/schedules.hpp>
// Expert Coupling (placement/): traces, statistics, CorrelatedPlacement, TokenShuffle.
#include <disagmoe/placement/all.hpp>
// Token exchange (comm/, backend/host/): transports, M2NChannel, host token kernels.
#include <disagmoe/backend/host/loopback_transport.hpp>
#include <disagmoe/backend/host/token_kernels.hpp>
#include <disagmoe/comm/groups.hpp>
#include <disagmoe/comm/m2n_channel.hpp>
// Reference compute (model/): Mixtral-style decoder ops with hand-written backward.
#include <disagmoe/model/presets.hpp>
#include <disagmoe/model/reference_attention.hpp>
#include <disagmoe/model/reference_experts.hpp>
// Training (runtime/): compute concepts, stages, AdamW, the colocated trainer, data, checkpoints.
#include <disagmoe/runtime/byte_corpus.hpp>
#include <disagmoe/runtime/checkpoint.hpp>
#include <disagmoe/runtime/colocated_trainer.hpp>
#include <disagmoe/runtime/disaggregated_trainer.hpp>
#include <disagmoe/runtime/pipeline.hpp>
#include <disagmoe/runtime/timeline.hpp>
