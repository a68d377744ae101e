// SPDX-License-Identifier: Apache-2.0
/// @file decoder_options.hpp
/// The hyper-parameters of the reference decoder that `ModelSpec` (which describes
/// shapes for the planner) does not carry.
#pragma once

#include <disagmoe/error.hpp>

#include <cmath>

namespace disagmoe::model {

/// Numerics and loss terms of the reference Mixtral-style decoder.
struct DecoderOptions {
  double rms_norm_eps = 1e-5;   ///< MixtralConfig.rms_norm_eps
  double rope_theta = 10000.0;  ///< rotary base (MixtralConfig.rope_theta)
  double aux_loss_coef = 0.0;   ///< load-balancing loss weight (Mixtral's router_aux_loss_coef: 0.02)
  double z_loss_coef = 0.0;     ///< router z-loss weight (ST-MoE: 1e-3)
  double init_std = 0.02;       ///< normal init of every projection (MixtralConfig.initializer_range)
};

/// Throws ConfigError naming the first invalid field.
inline void validate(const DecoderOptions& o) {
  auto finite_non_negative = [](double v) { return std::isfinite(v) && v >= 0; };
  expect(o.rms_norm_eps > 0 && std::isfinite(o.rms_norm_eps), "DecoderOptions.rms_norm_eps",
         o.rms_norm_eps, "a positive finite value");
  expect(o.rope_theta > 1 && std::isfinite(o.rope_theta), "DecoderOptions.rope_theta", o.rope_theta,
         "a finite value > 1");
  expect(finite_non_negative(o.aux_loss_coef), "DecoderOptions.aux_loss_coef", o.aux_loss_coef,
         "a finite value >= 0");
  expect(finite_non_negative(o.z_loss_coef), "DecoderOptions.z_loss_coef", o.z_loss_coef,
         "a finite value >= 0");
  expect(o.init_std > 0 && std::isfinite(o.init_std), "DecoderOptions.init_std", o.init_std,
         "a positive finite value");
}

}  // namespace disagmoe::model
