// SPDX-License-Identifier: Apache-2.0
// A model on a small cluster: the cases the exhaustive-enumeration oracles run on.
#pragma once

#include <disagmoe/plan/analytic_model.hpp>
#include <disagmoe/spec/presets.hpp>

#include "tiny_model.hpp"

#include <string>

namespace disagmoe::plan::test {

struct SmallCase {
  const char* model;  ///< a preset name, or "tiny" for tiny_model()
  int seq;
  int nodes, gpus, nics;
  double hbm;
  int global_batch;  ///< 0: the planner's default
  RecomputePolicy rc;
  int context_parallel = 1;  ///< PlanOptions::context_parallel
  bool embedding_head = false;  ///< PlanOptions::embedding_head

  [[nodiscard]] AnalyticModel analytic_model() const {
    ModelSpec m = std::string(model) == "tiny" ? tiny_model() : model_preset(model);
    m.seq_len = seq;
    PlanOptions o{global_batch, {}, {}, rc};
    o.context_parallel = context_parallel;
    o.embedding_head = embedding_head;
    return AnalyticModel(m, small_cluster(nodes, gpus, nics, hbm), o);
  }
};

}  // namespace disagmoe::plan::test
