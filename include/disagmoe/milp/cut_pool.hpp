// SPDX-License-Identifier: Apache-2.0
/// @file cut_pool.hpp
/// One round's cut candidates from every family, and the choice of those that enter the
/// LP (Achterberg, "Constraint integer programming", PhD thesis, TU Berlin 2007, §8.9;
/// SCIP's sepastore): candidates are taken in order of efficacy (violation at the LP
/// point divided by the Euclidean norm of the cut) and one is skipped when it is nearly
/// parallel to a cut already chosen (|cos| above `max_parallelism`), as such a cut
/// mostly repeats that cut's effect and only grows the LP.
#pragma once

#include <disagmoe/milp/cover_cuts.hpp>

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace disagmoe::milp::detail {

/// A candidate: the cut, whether its activity is integer at every integer point (its
/// logical then counts as an integer for GMI), its origin for debug reports and its
/// family (the caller's index, for counts).
struct PoolCut {
  LinearCut cut;
  bool integral = false;
  std::string origin;
  int family = 0;
};

class CutPool {
 public:
  /// Adds a candidate (terms are sorted by column here).
  void add(LinearCut cut, bool integral, std::string origin, int family = 0) {
    std::sort(cut.terms.begin(), cut.terms.end());
    cands_.push_back({std::move(cut), integral, std::move(origin), family});
  }

  std::size_t size() const { return cands_.size(); }

  /// Takes out the chosen candidates, best first: efficacy at x at least
  /// `min_efficacy`, at most `max_cuts`, no two with |cos| > `max_parallelism`.
  /// Empties the pool. O(c log c + chosen * c * cut length).
  std::vector<PoolCut> select(std::span<const double> x, std::size_t max_cuts, double min_efficacy = 1e-5,
                              double max_parallelism = 0.98) {
    std::vector<std::pair<double, std::size_t>> order;
    std::vector<double> norms(cands_.size()), effs(cands_.size(), 0.0);
    for (std::size_t c = 0; c < cands_.size(); ++c) {
      const LinearCut& cut = cands_[c].cut;
      double act = 0, norm = 0;
      for (const auto& [j, a] : cut.terms) act += a * x[j], norm += a * a;
      norms[c] = std::sqrt(norm);
      if (norms[c] == 0) continue;
      effs[c] = std::max(cut.lo - act, act - cut.hi) / norms[c];
      if (effs[c] >= min_efficacy) order.emplace_back(-effs[c], c);
    }
    std::sort(order.begin(), order.end());
    std::vector<std::size_t> chosen;
    for (const auto& entry : order) {
      if (chosen.size() >= max_cuts) break;
      const std::size_t c = entry.second;
      bool parallel = false;
      for (std::size_t s : chosen) {
        if (std::abs(dot(cands_[c].cut, cands_[s].cut)) > max_parallelism * norms[c] * norms[s]) {
          parallel = true;
          break;
        }
      }
      if (!parallel) chosen.push_back(c);
    }
    std::vector<PoolCut> out;
    out.reserve(chosen.size());
    for (std::size_t c : chosen) {
      cands_[c].cut.efficacy = effs[c];
      out.push_back(std::move(cands_[c]));
    }
    cands_.clear();
    return out;
  }

 private:
  // Sparse dot product of two cuts with sorted terms.
  static double dot(const LinearCut& a, const LinearCut& b) {
    double s = 0;
    std::size_t p = 0, q = 0;
    while (p < a.terms.size() && q < b.terms.size()) {
      if (a.terms[p].first < b.terms[q].first) ++p;
      else if (a.terms[p].first > b.terms[q].first) ++q;
      else s += a.terms[p++].second * b.terms[q++].second;
    }
    return s;
  }

  std::vector<PoolCut> cands_;
};

}  // namespace disagmoe::milp::detail
