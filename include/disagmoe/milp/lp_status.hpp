// SPDX-License-Identifier: Apache-2.0
/// @file lp_status.hpp
/// The two small vocabularies of the LP engine: how an LP solve ended and where a
/// variable sits in a simplex basis (shared by the ratio test, the dual simplex and
/// branch and bound).
#pragma once

#include <cstdint>

namespace disagmoe::milp {

/// Outcome of an LP solve.
enum class LpStatus : std::uint8_t {
  kOptimal, kInfeasible, kUnbounded, kCutoff, kIterationLimit, kTimeLimit
};

/// Position of a variable (structural or logical) in a simplex basis.
enum class BasisStatus : std::uint8_t { kBasic, kAtLower, kAtUpper, kFree };

}  // namespace disagmoe::milp
