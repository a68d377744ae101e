// SPDX-License-Identifier: Apache-2.0
// The validity check every cut family's test shares: a separator's cuts, separated on
// random instances of some families at the root LP optimum and at random points of the
// box, are violated where separated and hold at every vertex of every integer slice of
// the feasible set (oracle.hpp), hence at every feasible point: a linear function attains
// its minimum over a slice at a vertex.
#pragma once

#include "families.hpp"
#include "oracle.hpp"

#include <disagmoe/milp/cover_cuts.hpp>
#include <disagmoe/milp/dual_simplex.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <random>
#include <vector>

namespace disagmoe::milp::test {

inline double activity(const detail::LinearCut& cut, const std::vector<double>& x) {
  double act = 0;
  for (const auto& [j, a] : cut.terms) act += a * x[j];
  return act;
}

/// What check_cuts_hold saw: instances with feasible points, and cuts checked.
struct CutsChecked {
  int instances = 0;
  int cuts = 0;
};

/// Separates `Separator(p)` on seeds 1..`seeds` of each of `families` at the LP optimum
/// and `box_points` random points of the box; CHECKs each cut as the file comment says.
template <class Separator>
CutsChecked check_cuts_hold(std::initializer_list<Family> families, std::uint64_t seeds, int box_points) {
  CutsChecked seen;
  for (const Family f : families) {
    for (std::uint64_t seed = 1; seed <= seeds; ++seed) {
      const Problem p = family_problem(f, seed);
      INFO("family " << family_name(f) << ", seed " << seed);
      const auto points = slice_vertices(p);
      if (points.empty()) continue;
      ++seen.instances;
      std::vector<std::vector<double>> at;
      detail::DualSimplex lp(p);
      if (lp.solve() == LpStatus::kOptimal) {
        std::vector<double> x(p.num_vars());
        for (int j = 0; j < p.num_vars(); ++j) x[j] = lp.value(j);
        at.push_back(x);
      }
      std::mt19937_64 rng(seed);
      std::uniform_real_distribution<double> u01(0.0, 1.0);
      for (int t = 0; t < box_points; ++t) {
        std::vector<double> x(p.num_vars());
        for (int j = 0; j < p.num_vars(); ++j) x[j] = p.lb(j) + (p.ub(j) - p.lb(j)) * u01(rng);
        at.push_back(x);
      }
      const Separator sep(p);
      for (const auto& x : at) {
        for (const detail::LinearCut& cut : sep.separate(x, p.lbs(), p.ubs())) {
          CHECK(activity(cut, x) > cut.hi);  // reported cuts are violated where separated
          double hi = -std::numeric_limits<double>::infinity(), scale = 1;
          for (const auto& pt : points) {
            hi = std::max(hi, activity(cut, pt));
            for (const auto& [j, a] : cut.terms) scale = std::max(scale, std::abs(a * pt[j]));
          }
          CHECK(hi <= cut.hi + 1e-7 * scale);
          ++seen.cuts;
        }
      }
    }
  }
  return seen;
}

}  // namespace disagmoe::milp::test
