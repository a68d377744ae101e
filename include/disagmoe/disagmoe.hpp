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
