// SPDX-License-Identifier: Apache-2.0
/// @file reference_experts.hpp
/// `ReferenceExperts<T>`: gated-SiLU experts on Eigen (HF MixtralBlockSparseTop2MLP:
/// w2(silu(w1 x) * w3 x)), a model of `runtime::expert_compute`. Expert ids
/// 0 .. experts-1 are routed experts of width `expert_ffn`; ids from `experts` on are
/// shared experts of width `shared_expert_ffn` (DeepSeekMoE's always-active experts).
#pragma once

#include <disagmoe/model/decoder_options.hpp>
#include <disagmoe/model/gated_ffn.hpp>
#include <disagmoe/model/init.hpp>
#include <disagmoe/runtime/expert_compute.hpp>
#include <disagmoe/spec/model_spec.hpp>

#include <cstdint>
#include <string>
#include <span>
#include <vector>

namespace disagmoe::model {

/// See the file comment.
template <class T>
class ReferenceExperts {
 public:
  using expert_compute_concept = runtime::expert_compute_tag;
  using scalar_type = T;
  using Weights = GatedFfnWeights<T>;
  /// One grouped call's state per run of equal-width experts.
  struct Saved {
    std::vector<GatedFfnSaved<T>> parts;
    std::vector<std::size_t> runs;             ///< run r holds experts [runs[r], runs[r + 1])
    std::vector<Eigen::Index> row_begin;       ///< and rows [row_begin[r], row_begin[r + 1])
  };

  ReferenceExperts(ModelSpec spec, DecoderOptions options) : spec_(std::move(spec)), options_(options) {
    validate(spec_);
    validate(options_);
  }

  /// Fresh weights of expert `expert` of `layer`, drawn from `rng` (w1, w2, w3 in order).
  [[nodiscard]] Weights init(int /*layer*/, int expert, Rng& rng) const {
    const int f = expert < spec_.experts ? spec_.expert_ffn : spec_.shared_expert_ffn;
    const double s = options_.init_std;
    Weights w;
    w.w1 = normal_matrix<T>(f, spec_.hidden, s, rng);
    w.w2 = normal_matrix<T>(spec_.hidden, f, s, rng);
    w.w3 = normal_matrix<T>(f, spec_.hidden, s, rng);
    return w;
  }

  /// The expert's tensors, named as in HF Mixtral relative to the expert.
  [[nodiscard]] std::vector<runtime::NamedParameter<T>> parameters(Weights& w) const {
    return {{"w1.weight", &w.w1, runtime::shape_of(w.w1)},
            {"w2.weight", &w.w2, runtime::shape_of(w.w2)},
            {"w3.weight", &w.w3, runtime::shape_of(w.w3)}};
  }

  /// Forward of grouped `rows`. Experts of different widths (routed and shared) run as
  /// separate grouped calls over maximal runs of equal width.
  void forward(std::span<const Weights> experts, std::span<const std::int64_t> offsets, const Matrix<T>& rows,
               Matrix<T>& out, Saved& s) const {
    expect(offsets.size() == experts.size() + 1, "ReferenceExperts offsets.size()", offsets.size(),
           "experts + 1 (" + std::to_string(experts.size() + 1) + ")");
    s.runs = runs_of(experts);
    s.parts.resize(s.runs.size() - 1);
    if (s.parts.size() == 1) return gated_ffn_forward(experts, offsets, rows, out, s.parts[0]);
    out.resize(rows.rows(), spec_.hidden);
    for (std::size_t r = 0; r + 1 < s.runs.size(); ++r) {
      const auto [e0, e1, r0, n] = bounds(s, r, offsets);
      std::vector<std::int64_t> local(offsets.begin() + e0, offsets.begin() + e1 + 1);
      for (auto& o : local) o -= r0;
      Matrix<T> part_out;
      gated_ffn_forward(experts.subspan(e0, e1 - e0), local, Matrix<T>(rows.middleRows(r0, n)), part_out, s.parts[r]);
      out.middleRows(r0, n) = part_out;
    }
  }
  /// d_rows from the gate-weighted d_out of the forward's rows.
  void backward_input(std::span<const Weights> experts, const Matrix<T>& d_out, Saved& s, Matrix<T>& d_rows) const {
    if (s.parts.size() == 1) return gated_ffn_backward_input(experts, d_out, s.parts[0], d_rows);
    d_rows.resize(d_out.rows(), d_out.cols());
    for (std::size_t r = 0; r < s.parts.size(); ++r) {
      const auto e0 = s.runs[r], e1 = s.runs[r + 1];
      const auto r0 = s.row_begin[r], n = s.row_begin[r + 1] - r0;
      Matrix<T> part;
      gated_ffn_backward_input(experts.subspan(e0, e1 - e0), Matrix<T>(d_out.middleRows(r0, n)), s.parts[r], part);
      d_rows.middleRows(r0, n) = part;
    }
  }
  /// Accumulates the experts' weight gradients.
  void backward_weight(const Saved& s, std::span<Weights> grads) const {
    for (std::size_t r = 0; r < s.parts.size(); ++r)
      gated_ffn_backward_weight(s.parts[r], grads.subspan(s.runs[r], s.runs[r + 1] - s.runs[r]));
  }

 private:
  static std::vector<std::size_t> runs_of(std::span<const Weights> experts) {
    std::vector<std::size_t> runs{0};
    for (std::size_t e = 1; e < experts.size(); ++e)
      if (experts[e].w1.rows() != experts[e - 1].w1.rows()) runs.push_back(e);
    runs.push_back(experts.size());
    return runs;
  }
  struct Bounds {
    std::size_t e0, e1;
    Eigen::Index r0, n;
  };
  static Bounds bounds(Saved& s, std::size_t r, std::span<const std::int64_t> offsets) {
    if (r == 0) s.row_begin.assign(1, 0);
    const auto r1 = static_cast<Eigen::Index>(offsets[s.runs[r + 1]]);
    const auto r0 = static_cast<Eigen::Index>(offsets[s.runs[r]]);
    s.row_begin.push_back(r1);
    return {s.runs[r], s.runs[r + 1], r0, r1 - r0};
  }

  ModelSpec spec_;
  DecoderOptions options_;
};

static_assert(runtime::expert_compute<ReferenceExperts<float>>);
static_assert(runtime::expert_compute<ReferenceExperts<double>>);

}  // namespace disagmoe::model
