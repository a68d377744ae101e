// SPDX-License-Identifier: Apache-2.0
// Seeded generators of small bounded LPs and MILPs for the property tests.
#pragma once

#include <disagmoe/milp/problem.hpp>

#include <random>
#include <vector>

namespace disagmoe::milp::test {

struct RandomSpec {
  int min_vars = 1, max_vars = 4;
  int min_rows = 1, max_rows = 4;
  int max_ints = 0;      // integer variables among the vars (the first ones)
  int int_range = 3;     // integer bounds span at most this many values minus one
  double density = 0.7;
};

// Rows are built around a random point of the box, so most instances are feasible;
// some row bounds are shifted so that a few are infeasible.
inline Problem random_problem(std::uint64_t seed, const RandomSpec& s) {
  std::mt19937_64 rng(seed);
  auto uni = [&](int a, int b) { return std::uniform_int_distribution<int>(a, b)(rng); };
  Problem p;
  const int n = uni(s.min_vars, s.max_vars);
  const int m = uni(s.min_rows, s.max_rows);
  const int ints = std::min(n, uni(0, s.max_ints));
  std::vector<double> x0(n);
  for (int j = 0; j < n; ++j) {
    const bool integer = j < ints;
    const double lb = uni(-2, 1);
    const double ub = lb + uni(0, integer ? s.int_range - 1 : 4) + (integer ? 0.0 : uni(0, 3) * 0.25);
    p.add_var(lb, ub, uni(-5, 5), integer ? VarType::kInteger : VarType::kContinuous);
    x0[j] = integer ? lb + uni(0, static_cast<int>(ub - lb)) : lb + (ub - lb) * uni(0, 4) / 4.0;
  }
  std::bernoulli_distribution keep(s.density);
  for (int i = 0; i < m; ++i) {
    std::vector<int> idx;
    std::vector<double> val;
    double act = 0;
    for (int j = 0; j < n; ++j) {
      if (!keep(rng)) continue;
      const int v = uni(-3, 3);
      if (v == 0) continue;
      idx.push_back(j);
      val.push_back(v);
      act += v * x0[j];
    }
    const double shift = uni(0, 9) == 0 ? -3.0 : uni(0, 2);  // occasionally cut x0 off
    switch (uni(0, 3)) {
      case 0: p.add_row(idx, val, -kInf, act + shift); break;
      case 1: p.add_row(idx, val, act - shift, kInf); break;
      case 2: p.add_row(idx, val, act, act); break;
      default: p.add_row(idx, val, act - shift - 1, act + std::abs(shift)); break;
    }
  }
  if (uni(0, 1) == 1) p.set_sense(Sense::kMaximize);
  return p;
}

}  // namespace disagmoe::milp::test
