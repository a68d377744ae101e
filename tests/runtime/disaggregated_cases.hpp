// SPDX-License-Identifier: Apache-2.0
// Shared by the loopback and MPI tests of disaggregated training: small models, data,
// the colocated reference run (the oracle) and the bitwise comparison.
#pragma once

#include <disagmoe/model/reference_attention.hpp>
#include <disagmoe/model/reference_experts.hpp>
#include <disagmoe/runtime/colocated_trainer.hpp>
#include <disagmoe/runtime/disaggregated_options.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <string>
#include <vector>

namespace disaggregated_test {

namespace dm = disagmoe;
namespace rt = disagmoe::runtime;
namespace mo = disagmoe::model;

using Attention = mo::ReferenceAttention<float>;
using Experts = mo::ReferenceExperts<float>;
using Parameters = std::map<std::string, std::vector<float>>;

inline dm::ModelSpec spec_of(int layers, int top_k, int dense, int shared) {
  dm::ModelSpec m;
  m.layers = layers;
  m.hidden = 8;
  m.heads = 4;
  m.kv_heads = 2;
  m.head_dim = 4;
  m.experts = 4;
  m.top_k = top_k;
  m.expert_ffn = 6;
  m.first_dense_layers = dense;
  m.dense_ffn = dense > 0 ? 10 : 0;
  m.shared_experts = shared;
  m.shared_expert_ffn = shared > 0 ? 5 : 0;
  m.vocab = 256;
  m.seq_len = 6;
  return m;
}

inline rt::TrainOptions train_options(int micro_batches) {
  rt::TrainOptions t;
  t.micro_batches = micro_batches;
  t.lr = {3e-2, 3e-3, 1, 20};
  t.clip_norm = 0.5;  // clipping is active: the norm must agree to the bit
  return t;
}

struct Batch {
  std::vector<int> in, tg;
  int sequences = 0;
  rt::TokenBatch view() const { return {in, tg, sequences}; }
};

inline std::vector<Batch> batches(int steps, int sequences, int seq_len) {
  mo::Rng rng(11);
  std::vector<Batch> out(static_cast<std::size_t>(steps));
  for (auto& b : out) {
    b.sequences = sequences;
    for (int i = 0; i < sequences * seq_len; ++i) {
      b.in.push_back(static_cast<int>(rng.below(256)));
      b.tg.push_back(static_cast<int>(rng.below(256)));
    }
  }
  return out;
}

/// A disaggregated run of spec_of's model: `pairs` A/F pairs of `attention_ranks` and
/// `ffn_ranks` ranks, `micro_batches` micro-batches of 2 sequences per A-rank, and
/// optionally an expert placement (expert_rank, empty for the default) with replicas.
struct Layout {
  const char* name;
  int layers, top_k, dense, shared, pairs, attention_ranks, ffn_ranks, micro_batches;
  std::vector<int> expert_rank;
  std::vector<std::vector<int>> replicas;
  bool fuse = false;
  rt::ScheduleKind schedule = rt::ScheduleKind::kAfPipe;

  dm::ModelSpec spec() const { return spec_of(layers, top_k, dense, shared); }
  std::vector<Batch> data(int steps) const { return batches(steps, 2 * micro_batches * attention_ranks, spec().seq_len); }
  /// The colocated reference takes each A-rank's share as a micro-batch.
  int reference_micro_batches() const { return micro_batches * attention_ranks; }
  rt::DisaggregatedOptions options() const {
    rt::DisaggregatedOptions opt;
    opt.schedule = schedule;
    opt.pairs = pairs;
    opt.attention_ranks = attention_ranks;
    opt.ffn_ranks = ffn_ranks;
    opt.expert_rank = expert_rank;
    opt.expert_replicas = replicas;
    opt.policy.fuse_combine_dispatch = fuse;
    opt.executor.timeout = std::chrono::milliseconds(20000);
    return opt;
  }
};

template <class Set>
void collect(const Set& ps, Parameters& out) {
  for (const auto& s : ps.slots()) out[s.name].assign(s.value->data(), s.value->data() + s.value->size());
}

struct Run {
  std::vector<rt::StepStats> stats;
  Parameters params;
};

inline Run colocated(const dm::ModelSpec& spec, int m, const std::vector<Batch>& data) {
  const mo::DecoderOptions o;
  rt::ColocatedTrainer<Attention, Experts> tr(Attention(spec, o), Experts(spec, o), spec, train_options(m));
  Run r;
  for (const auto& b : data) r.stats.push_back(tr.step(b.view()));
  collect(tr.attention().parameters(), r.params);
  collect(tr.experts().parameters(), r.params);
  return r;
}

/// Every parameter of `got` equals the one of the same name in `ref`, bit for bit
/// (`got` may hold a subset: one worker's parameters). Returns how many differ.
inline std::size_t differing_parameters(const Parameters& ref, const Parameters& got) {
  std::size_t differing = 0;
  for (const auto& [name, v] : got) {
    const auto it = ref.find(name);
    REQUIRE(it != ref.end());
    if (it->second != v) {
      ++differing;
      MESSAGE("parameter differs: " << name);
    }
  }
  return differing;
}

/// Largest over tensors of `got` of max |got - ref| / max |ref| (the tensor's own scale).
inline double max_tensor_rel_diff(const Parameters& ref, const Parameters& got) {
  double worst = 0;
  for (const auto& [name, w] : got) {
    const auto& v = ref.at(name);
    double diff = 0, scale = 1e-30;
    for (std::size_t i = 0; i < v.size(); ++i) {
      diff = std::max(diff, static_cast<double>(std::abs(w[i] - v[i])));
      scale = std::max(scale, static_cast<double>(std::abs(v[i])));
    }
    worst = std::max(worst, diff / scale);
  }
  return worst;
}

/// The statistics of every step agree bit for bit.
inline void check_same_stats(const std::vector<rt::StepStats>& ref, const std::vector<rt::StepStats>& got) {
  REQUIRE(ref.size() == got.size());
  for (std::size_t i = 0; i < ref.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i].loss == ref[i].loss);
    CHECK(got[i].aux_loss == ref[i].aux_loss);
    CHECK(got[i].z_loss == ref[i].z_loss);
    CHECK(got[i].grad_norm == ref[i].grad_norm);
    CHECK(got[i].lr == ref[i].lr);
  }
}

/// The statistics of every step agree to float rounding (groups of ranks regroup sums).
inline void check_close_stats(const std::vector<rt::StepStats>& ref, const std::vector<rt::StepStats>& got) {
  REQUIRE(ref.size() == got.size());
  for (std::size_t i = 0; i < ref.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i].loss == doctest::Approx(ref[i].loss).epsilon(1e-6));
    CHECK(got[i].aux_loss == doctest::Approx(ref[i].aux_loss).epsilon(1e-6));
    CHECK(got[i].grad_norm == doctest::Approx(ref[i].grad_norm).epsilon(1e-5));
  }
}

/// Every tensor of `got` within 1e-4 of the largest entry of its namesake in `ref` (after a
/// few AdamW steps float rounding leaves about 2e-5).
inline void check_close_parameters(const Parameters& ref, const Parameters& got) {
  const double worst = max_tensor_rel_diff(ref, got);
  MESSAGE("largest relative parameter difference " << worst);
  CHECK(worst < 1e-4);
}

/// Statistics and every parameter of `got` agree with `ref`'s to float rounding.
inline void check_close(const Run& ref, const Run& got) {
  check_close_stats(ref.stats, got.stats);
  REQUIRE(got.params.size() == ref.params.size());
  check_close_parameters(ref.params, got.params);
}

/// Statistics and every parameter of `got` equal `ref`'s, bit for bit.
inline void check_identical(const Run& ref, const Run& got) {
  check_same_stats(ref.stats, got.stats);
  REQUIRE(got.params.size() == ref.params.size());
  CHECK(differing_parameters(ref.params, got.params) == 0);
}

}  // namespace disaggregated_test
