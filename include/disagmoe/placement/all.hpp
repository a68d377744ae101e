// SPDX-License-Identifier: Apache-2.0
/// @file all.hpp
/// Every public header of the placement module (disagmoe::placement): routing traces
/// and .npy I/O, synthetic traces, coupling statistics, placements (correlated
/// heuristic, exact oracle, baselines), send-once dispatch plans, metrics and token
/// shuffling. Host-only, standard library + Eigen-free.
#pragma once

#include <disagmoe/placement/balanced_assignment.hpp>
#include <disagmoe/placement/correlated.hpp>
#include <disagmoe/placement/coupling_stats.hpp>
#include <disagmoe/placement/dispatch_plan.hpp>
#include <disagmoe/placement/exact.hpp>
#include <disagmoe/placement/fast_assignment.hpp>
#include <disagmoe/placement/metrics.hpp>
#include <disagmoe/placement/multilevel.hpp>
#include <disagmoe/placement/npy.hpp>
#include <disagmoe/placement/objective.hpp>
#include <disagmoe/placement/online.hpp>
#include <disagmoe/placement/placement.hpp>
#include <disagmoe/placement/routing_trace.hpp>
#include <disagmoe/placement/replication.hpp>
#include <disagmoe/placement/step_shuffle.hpp>
#include <disagmoe/placement/synthetic.hpp>
#include <disagmoe/placement/token_shuffle.hpp>
