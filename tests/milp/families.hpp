// SPDX-License-Identifier: Apache-2.0
// Seeded generators of small MILP families for the checker sweep and the presolve
// tests: each keeps the integer box small enough for brute force (oracle.hpp), and
// builds its rows around a random point so that most instances are feasible.
//   kWideIntegers  general integers with wide ranges (up to 25 values), negative bounds
//   kPartitioning  equality-heavy set partitioning / covering over binaries
//   kBigKnapsack   knapsack rows with coefficients up to 1e6 beside a continuous column
//   kMixedRows     integers and continuous columns in ranges, equations, both sides
//   kNearParallel  pairs of rows whose coefficients differ by 1e-4 .. 1e-2
//   kBadlyScaled   rows scaled by 1e-3 .. 1e6, fractional coefficients
//   kFixedCharge   single-node flow sets: continuous arc flows x <= u y switched on by
//                  binary or small integer y (fixed cost), demands with fractional
//                  sides, sometimes a general integer in the balance
#pragma once

#include <disagmoe/milp/problem.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace disagmoe::milp::test {

enum class Family : int { kWideIntegers, kPartitioning, kBigKnapsack, kMixedRows, kNearParallel, kBadlyScaled, kFixedCharge };
inline constexpr int kFamilies = 7;

inline const char* family_name(Family f) {
  switch (f) {
    case Family::kWideIntegers: return "wide-integers";
    case Family::kPartitioning: return "partitioning";
    case Family::kBigKnapsack: return "big-knapsack";
    case Family::kMixedRows: return "mixed-rows";
    case Family::kNearParallel: return "near-parallel";
    case Family::kBadlyScaled: return "badly-scaled";
    case Family::kFixedCharge: return "fixed-charge";
  }
  return "?";
}

/// A random instance of family f from `seed`: at most ~4000 integer points, at most 2
/// continuous columns, every bound finite.
inline Problem family_problem(Family f, std::uint64_t seed) {
  std::mt19937_64 rng(seed * 7919 + static_cast<std::uint64_t>(f));
  auto uni = [&](int a, int b) { return std::uniform_int_distribution<int>(a, b)(rng); };
  Problem p;
  std::vector<double> x0;
  auto add_int = [&](double lb, double ub, double c) {
    p.add_var(lb, ub, c, lb == 0 && ub == 1 ? VarType::kBinary : VarType::kInteger);
    x0.push_back(lb + uni(0, static_cast<int>(ub - lb)));
  };
  auto add_cont = [&](double lb, double ub, double c) {
    p.add_var(lb, ub, c);
    x0.push_back(lb + (ub - lb) * uni(0, 4) / 4.0);
  };
  // A row through x0 (activity act) with one of the usual shapes.
  auto add_around = [&](const std::vector<int>& idx, const std::vector<double>& val, double slack) {
    if (idx.empty()) return;
    double act = 0;
    for (std::size_t k = 0; k < idx.size(); ++k) act += val[k] * x0[idx[k]];
    switch (uni(0, 3)) {
      case 0: p.add_row(idx, val, -kInf, act + slack); break;
      case 1: p.add_row(idx, val, act - slack, kInf); break;
      case 2: p.add_row(idx, val, act, act); break;
      default: p.add_row(idx, val, act - slack, act + 2 * slack); break;
    }
  };
  auto random_row = [&](double scale, bool fractional, std::vector<int>& idx, std::vector<double>& val) {
    idx.clear(), val.clear();
    for (int j = 0; j < p.num_vars(); ++j) {
      if (uni(0, 2) == 0) continue;
      double v = uni(-9, 9);
      if (v == 0) continue;
      if (fractional && uni(0, 2) == 0) v += uni(1, 99) * 0.01;
      idx.push_back(j), val.push_back(v * scale);
    }
  };
  std::vector<int> idx;
  std::vector<double> val;
  switch (f) {
    case Family::kWideIntegers: {
      const int ints = uni(1, 3);
      for (int j = 0; j < ints; ++j) {
        const int lb = uni(-12, 3);
        add_int(lb, lb + uni(2, ints == 3 ? 14 : 24), uni(-9, 9));
      }
      if (uni(0, 1)) add_cont(uni(-4, 0), uni(1, 6), uni(-5, 5) * 0.5);
      for (int i = uni(1, 4); i > 0; --i) {
        random_row(1.0, uni(0, 1) == 1, idx, val);
        add_around(idx, val, uni(0, 6) * 0.5);
      }
      break;
    }
    case Family::kPartitioning: {
      const int n = uni(5, 11), m = uni(2, 5);
      for (int j = 0; j < n; ++j) add_int(0, 1, uni(1, 20));
      for (int i = 0; i < m; ++i) {
        idx.clear(), val.clear();
        double act = 0;
        for (int j = 0; j < n; ++j)
          if (uni(0, 2) == 0) idx.push_back(j), val.push_back(1.0), act += x0[j];
        if (idx.size() < 2) continue;
        // Partitioning (= 1) where x0 allows it, else covering (>= 1) or packing (<= 1).
        if (act == 1 && uni(0, 2) != 0) p.add_row(idx, val, 1, 1);
        else if (act >= 1) p.add_row(idx, val, 1, kInf);
        else p.add_row(idx, val, -kInf, 1);
      }
      break;
    }
    case Family::kBigKnapsack: {
      const int n = uni(3, 8);
      for (int j = 0; j < n; ++j) {
        if (uni(0, 3) == 0) add_int(0, uni(2, 3), -uni(1, 50));
        else add_int(0, 1, -uni(1, 50));
      }
      add_cont(0, uni(1, 10), uni(-3, 3));
      for (int i = uni(1, 3); i > 0; --i) {
        idx.clear(), val.clear();
        double total = 0;
        for (int j = 0; j < n; ++j) {
          if (uni(0, 4) == 0) continue;
          const double w = uni(100000, 1000000) + (uni(0, 1) ? uni(1, 999) * 1e-3 : 0.0);
          idx.push_back(j), val.push_back(w), total += w * p.ub(j);
        }
        // A capacity just below the weight of x0 (the rounding trap) over integers only:
        // with a continuous column the 1e-6 tolerance on its bound (times its 1e5
        // coefficient) would decide feasibility, and exact answers would be ill-defined.
        const bool trap = uni(0, 1) == 1;
        if (!trap && uni(0, 1)) idx.push_back(n), val.push_back(uni(1, 9) * 1e5), total += val.back() * p.ub(n);
        if (idx.empty()) continue;
        if (trap) {
          double act = 0;
          for (std::size_t k = 0; k < idx.size(); ++k) act += val[k] * x0[idx[k]];
          p.add_row(idx, val, -kInf, act - uni(1, 300) * 1e-3);
        } else {
          p.add_row(idx, val, -kInf, std::floor(total * uni(30, 60) / 100.0) + uni(0, 1) * 0.5);
        }
      }
      break;
    }
    case Family::kMixedRows:
    case Family::kNearParallel:
    case Family::kBadlyScaled: {
      const int ints = uni(1, 4), conts = uni(0, 2);
      for (int j = 0; j < ints; ++j) {
        const int lb = uni(-4, 1);
        add_int(lb, lb + uni(1, ints <= 2 ? 9 : 4), uni(-9, 9));
      }
      for (int j = 0; j < conts; ++j) add_cont(uni(-3, 0) * 0.5, uni(1, 6) * 0.75, uni(-5, 5) * 0.5);
      for (int i = uni(1, 4); i > 0; --i) {
        const double scale = f == Family::kBadlyScaled ? std::pow(10.0, uni(-3, 6)) : 1.0;
        random_row(scale, f != Family::kMixedRows || uni(0, 1) == 1, idx, val);
        const double slack = uni(0, 3) * scale * 0.5;
        add_around(idx, val, slack);
        if (f == Family::kNearParallel && !idx.empty()) {
          for (double& v : val) v *= 1.0 + std::pow(10.0, -uni(2, 4)) * uni(-3, 3);
          add_around(idx, val, slack);
        }
      }
      break;
    }
    case Family::kFixedCharge: {
      const int arcs = uni(2, 3);
      std::vector<int> flow;
      for (int a = 0; a < arcs; ++a) {
        const double cap = uni(2, 9) + (uni(0, 1) ? uni(1, 9) * 0.1 : 0.0);
        flow.push_back(p.num_vars());
        add_cont(0, cap * (uni(0, 3) == 0 ? 0.75 : 1.0), uni(0, 4) * 0.5);  // sometimes below u
        const int y = p.num_vars();
        add_int(0, uni(0, 3) == 0 ? 2 : 1, uni(3, 20));
        p.add_row({{flow.back(), 1.0}, {y, -cap}}, -kInf, 0.0);  // x <= cap * y
      }
      const bool with_int = uni(0, 1) == 1;
      if (with_int) add_int(0, uni(1, 3), uni(1, 9));
      // Demand: supply arcs in, sometimes one arc out; fractional sides.
      idx.clear(), val.clear();
      for (int a = 0; a < arcs; ++a) idx.push_back(flow[a]), val.push_back(a == arcs - 1 && uni(0, 2) == 0 ? -1.0 : 1.0);
      if (with_int) idx.push_back(p.num_vars() - 1), val.push_back(uni(1, 4) * (uni(0, 1) ? 1.0 : -1.0));
      const double demand = uni(1, 12) + uni(0, 9) * 0.1;
      if (uni(0, 2) == 0) p.add_row(idx, val, demand, demand);
      else p.add_row(idx, val, demand, kInf);
      if (uni(0, 1)) {  // a budget row over the switches
        idx.clear(), val.clear();
        for (int a = 0; a < arcs; ++a) idx.push_back(flow[a] + 1), val.push_back(uni(1, 5));
        p.add_row(idx, val, -kInf, uni(4, 12));
      }
      break;
    }
  }
  if (f != Family::kBigKnapsack && f != Family::kFixedCharge && uni(0, 1)) p.set_sense(Sense::kMaximize);
  p.set_name(std::string(family_name(f)) + "-" + std::to_string(seed));
  return p;
}

}  // namespace disagmoe::milp::test
