// SPDX-License-Identifier: Apache-2.0
// disagmoe-train --device: where the expert compute runs. cpu: model::ReferenceExperts;
// cuda: cuda::Experts (cuBLAS), in a build of the cuda preset with a visible GPU. The
// attention side and the optimizer stay on the host; worker schedules still run the
// host compute (colocated only for now).
#pragma once

#include <disagmoe/error.hpp>

#ifdef DISAGMOE_TRAIN_WITH_CUDA
#include <disagmoe/backend/cuda/check.hpp>
#include <disagmoe/backend/cuda/experts.hpp>
#endif

#include <string>

namespace disagmoe::train_cli {

/// ConfigError naming --device (or --schedule) unless this build and machine can run it.
inline void check_device(const std::string& device, const std::string& schedule) {
  expect(device == "cpu" || device == "cuda", "--device", device, "cpu or cuda");
  if (device == "cpu") return;
#ifndef DISAGMOE_TRAIN_WITH_CUDA
  (void)schedule;
  fail("--device", device, "cpu: this build has no CUDA (configure it with the cuda preset: cmake --preset cuda)");
#else
  expect(cuda::device_count() > 0, "--device", device, "cpu: no CUDA device is visible");
  expect(schedule == "colocated", "--schedule", schedule, "colocated with --device cuda (workers run host compute)");
#endif
}

}  // namespace disagmoe::train_cli
