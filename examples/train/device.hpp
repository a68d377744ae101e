// SPDX-License-Identifier: Apache-2.0
// disagmoe-train --device: where the compute runs. cpu: model::ReferenceAttention and
// model::ReferenceExperts; cuda: cuda::Attention and cuda::Experts (cuBLAS + kernels), in
// a build of the cuda preset with a visible GPU, their GEMMs in --precision (fp32, or
// bf16 operands with fp32 accumulation). The embedding and the optimizer stay on the
// host, which owns the fp32 master weights. Worker schedules on loopback threads run the
// same computes, every worker on the one GPU (the token exchange between workers stays on
// the host); MPI ranks run the host compute.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/model/decoder_options.hpp>
#include <disagmoe/spec/model_spec.hpp>

#ifdef DISAGMOE_TRAIN_WITH_CUDA
#include <disagmoe/backend/cuda/attention.hpp>
#include <disagmoe/backend/cuda/check.hpp>
#include <disagmoe/backend/cuda/experts.hpp>
#endif

#include <string>
#include <type_traits>

namespace disagmoe::train_cli {

/// ConfigError naming --device, --precision (or --transport) unless this build and
/// machine can run them.
inline void check_device(const std::string& device, const std::string& transport,
                         const std::string& precision) {
  expect(device == "cpu" || device == "cuda", "--device", device, "cpu or cuda");
  expect(precision == "fp32" || precision == "bf16", "--precision", precision, "fp32 or bf16");
  if (device == "cpu") {
    expect(precision == "fp32", "--precision", precision, "fp32 with --device cpu");
    return;
  }
  expect(transport == "loopback", "--transport", transport,
         "loopback with --device cuda (MPI ranks run host compute)");
#ifndef DISAGMOE_TRAIN_WITH_CUDA
  fail("--device", device, "cpu: this build has no CUDA (configure it with the cuda preset: cmake --preset cuda)");
#else
  expect(cuda::device_count() > 0, "--device", device,
         "cpu: no CUDA device is visible: " + cuda::no_device_reason());
#endif
}

/// A compute of type C for `spec`; a CUDA compute's GEMMs in `precision` (checked by
/// check_device), a host one ignores it.
template <class C>
C make_compute(const ModelSpec& spec, const model::DecoderOptions& options, const std::string& precision) {
#ifdef DISAGMOE_TRAIN_WITH_CUDA
  if constexpr (std::is_constructible_v<C, ModelSpec, model::DecoderOptions, cuda::Precision>)
    return C(spec, options, precision == "bf16" ? cuda::Precision::kBf16 : cuda::Precision::kFp32);
  else
#endif
  {
    (void)precision;
    return C(spec, options);
  }
}

}  // namespace disagmoe::train_cli
