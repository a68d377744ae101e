// SPDX-License-Identifier: Apache-2.0
/// @file binding.hpp
/// The constraint that binds an allocation: what stops the planner from giving the
/// bottleneck side more GPUs ("F memory forces 112 F GPUs"), or the links when the
/// network bounds the step.
#pragma once

#include <disagmoe/plan/analytic_model.hpp>

#include <algorithm>
#include <limits>
#include <sstream>
#include <string>

namespace disagmoe::plan {

/// The binding constraint of an allocation.
struct Binding {
  /// "network": the bottleneck side's links; "memory": every valid split that gives the
  /// bottleneck side more GPUs per node exceeds HBM; "group sizes": no valid split does;
  /// "balance": the splits that do are slower (the other side becomes the bottleneck);
  /// "search": one of them is faster and the search missed it.
  std::string kind;
  std::string text;  ///< one clause with the numbers
};

/// The binding constraint of allocation `x` under `model`: the bottleneck of
/// model.estimate(x); for compute, every valid allocation (any pair count and
/// recomputation, x's NIC split) that moves GPUs per node from the other side to the
/// bottleneck side is checked against memory and step time. O(max_groups × GPUs per
/// node × estimate).
inline Binding binding_constraint(const AnalyticModel& model, const Allocation& x) {
  const ClusterSpec& c = model.cluster();
  const StepEstimate e = model.estimate(x);
  std::ostringstream s;
  s.precision(3);
  if (e.bottleneck == Bottleneck::kNetwork) {
    const bool f_side = e.ffn_link_seconds >= e.attention_link_seconds;
    s << "the " << (f_side ? "F" : "A") << " side's " << (f_side ? ffn_nics(x, c) : attention_nics(x, c))
      << " NICs: " << std::max(e.attention_link_seconds, e.ffn_link_seconds) * 1e3
      << " ms per micro-batch on the links against " << e.attention_compute_seconds * 1e3 << " ms A and "
      << e.ffn_compute_seconds * 1e3 << " ms F compute";
    return {"network", s.str()};
  }
  const bool a_side = e.bottleneck == Bottleneck::kAttention;
  const char* side = a_side ? "A" : "F";
  const char* other = a_side ? "F" : "A";
  const int mine = a_side ? x.attention_gpus_per_node : x.ffn_gpus_per_node;
  const int others = a_side ? ffn_gpus(x, c) : attention_gpus(x, c);
  int valid = 0, fit = 0, other_short = 0;
  double best = std::numeric_limits<double>::infinity();
  Allocation best_y;
  for (int p = 1; p <= model.max_groups(); ++p)
    for (bool ra : model.recompute_choices())
      for (bool rf : model.recompute_choices())
        // Under a mixed split F averages fewer than `mine` GPUs per node: its uniform
        // `mine` gives it more.
        for (int k = mine + (x.mixed_nodes > 0 && !a_side ? 0 : 1); k < c.gpus_per_node; ++k) {
          Allocation y = x;
          y.groups = p;
          y.recompute = {ra, rf};
          y.mixed_nodes = 0;  // whole GPUs per node more for this side
          (a_side ? y.attention_gpus_per_node : y.ffn_gpus_per_node) = k;
          (a_side ? y.ffn_gpus_per_node : y.attention_gpus_per_node) = c.gpus_per_node - k;
          if (!model.valid(y)) continue;
          ++valid;
          const FitReport m = model.memory(y);
          if (!m.fits()) {
            if (!(a_side ? m.ffn_fits() : m.attention_fits())) ++other_short;
            continue;
          }
          ++fit;
          const double t = model.estimate(y).step_seconds;
          if (t < best) best = t, best_y = y;
        }
  s << side << " compute (" << (a_side ? e.attention_compute_seconds : e.ffn_compute_seconds) * 1e3
    << " ms per micro-batch)";
  if (valid == 0) {
    s << ": no valid split gives " << side << " more than " << mine << " GPUs per node (group sizes)";
    return {"group sizes", s.str()};
  }
  if (fit == 0) {
    std::ostringstream m;
    m.precision(3);
    if (other_short == valid)
      m << other << " memory forces " << others << " " << other << " GPUs: with fewer, an " << other
        << " GPU needs more than the " << model.capacity() / 1e9 << " GB usable";
    else
      m << "memory: every split with more " << side << " GPUs needs more than the " << model.capacity() / 1e9
        << " GB usable per GPU";
    return {"memory", m.str() + "; the step is bound by " + s.str()};
  }
  if (best >= e.step_seconds) {
    s << ", balanced: giving " << side << " more GPUs per node is slower (best " << best << " s against "
      << e.step_seconds << " s)";
    return {"balance", s.str()};
  }
  s << "; " << model.describe_allocation(best_y) << " predicts " << best << " s against " << e.step_seconds
    << " s: the search stopped before it";
  return {"search", s.str()};
}

}  // namespace disagmoe::plan
