// SPDX-License-Identifier: Apache-2.0
/// @file expert_stage.hpp
/// `ExpertStage<Compute>`: the experts one FFN worker owns (DisagMoE's F side) for some
/// MoE layers, routed and shared. It owns their parameters, gradients and AdamW
/// moments, and keeps the saved activations of every (layer, micro-batch) in flight.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/model/random.hpp>
#include <disagmoe/runtime/expert_compute.hpp>
#include <disagmoe/runtime/parameter_set.hpp>
#include <disagmoe/runtime/stage_options.hpp>
#include <disagmoe/spec/model_spec.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace disagmoe::runtime {

/// Which experts an expert stage holds: for each MoE layer it serves, the expert ids,
/// ascending; ids at and above `ModelSpec::experts` are the layer's shared experts.
struct ExpertStageLayout {
  std::vector<int> layers;                ///< MoE layers, ascending
  std::vector<std::vector<int>> experts;  ///< experts[i]: local experts of layers[i]
};

/// Every expert (routed and shared) of every MoE layer of `spec`: the colocated layout.
inline ExpertStageLayout all_experts(const ModelSpec& spec) {
  ExpertStageLayout l;
  std::vector<int> ids(static_cast<std::size_t>(spec.experts + spec.shared_experts));
  for (std::size_t e = 0; e < ids.size(); ++e) ids[e] = static_cast<int>(e);
  for (int layer = 0; layer < spec.layers; ++layer)
    if (spec.is_moe_layer(layer)) {
      l.layers.push_back(layer);
      l.experts.push_back(ids);
    }
  return l;
}

/// See the file comment. Per (layer, micro-batch): forward, then backward_input, then
/// backward_weight (which releases the saved state).
template <expert_compute Compute>
class ExpertStage {
 public:
  using T = typename Compute::scalar_type;
  using Matrix = model::Matrix<T>;

  ExpertStage(Compute compute, const ModelSpec& spec, ExpertStageLayout layout, StageOptions options = {})
      : compute_(std::move(compute)), spec_(spec), layout_(std::move(layout)), options_(options) {
    validate(spec_);
    expect(layout_.experts.size() == layout_.layers.size(), "ExpertStageLayout.experts.size()",
           layout_.experts.size(), "layers.size() (" + std::to_string(layout_.layers.size()) + ")");
    const int total = spec_.experts + spec_.shared_experts;
    detail::check_stage_layers(layout_.layers, "ExpertStageLayout.layers",
                               [&](int l) { return l >= 0 && l < spec_.layers && spec_.is_moe_layer(l); },
                               "an MoE layer of the model");
    for (std::size_t i = 0; i < layout_.layers.size(); ++i) {
      const auto& ids = layout_.experts[i];
      for (std::size_t k = 0; k < ids.size(); ++k)
        expect(ids[k] >= 0 && ids[k] < total && (k == 0 || ids[k - 1] < ids[k]),
               "ExpertStageLayout.experts[" + std::to_string(i) + "][" + std::to_string(k) + "]", ids[k],
               "ascending expert ids in [0, " + std::to_string(total) + ")");
    }
    weights_.resize(layout_.layers.size());
    grads_.resize(layout_.layers.size());
    for (std::size_t i = 0; i < layout_.layers.size(); ++i)
      for (const int e : layout_.experts[i]) {
        model::Rng rng(model::derive_seed(options_.seed, static_cast<std::uint64_t>(SeedStream::kExpert),
                                          static_cast<std::uint64_t>(layout_.layers[i]), static_cast<std::uint64_t>(e)));
        weights_[i].push_back(compute_.init(layout_.layers[i], e, rng));
        grads_[i].push_back(weights_[i].back());
      }
    register_parameters();
  }

  ExpertStage(const ExpertStage&) = delete;  // the parameter set points into this object
  ExpertStage& operator=(const ExpertStage&) = delete;

  /// Forward of `layer`'s local experts for micro-batch `mb` on grouped `rows`: local
  /// expert k (the k-th id of the layout) owns rows [offsets[k], offsets[k + 1]).
  void forward(int layer, int mb, std::span<const std::int64_t> offsets, const Matrix& rows, Matrix& out) {
    const std::size_t i = index_of(layer);
    expect(offsets.size() == weights_[i].size() + 1, field("forward", layer, mb) + " offsets.size()", offsets.size(),
           "local experts + 1 (" + std::to_string(weights_[i].size() + 1) + ")");
    const auto it = [&] {
      const std::lock_guard lock(map_mu_);
      auto [at, fresh] = saved_.try_emplace({layer, mb});
      expect(fresh, field("forward", layer, mb), "already in flight", "backward_weight() before the next forward");
      return at;
    }();
    compute_.forward(weights_[i], offsets, rows, out, it->second.saved);
    if (options_.recompute.ffn) {
      it->second.rows = rows;
      it->second.offsets.assign(offsets.begin(), offsets.end());
      it->second.saved = {};
    }
  }

  /// d_rows = dL/d rows from d_out = dL/d(expert outputs), already gate-weighted.
  void backward_input(int layer, int mb, const Matrix& d_out, Matrix& d_rows) {
    const std::size_t i = index_of(layer);
    const auto it = find_locked(layer, mb);
    if (it == saved_.end()) fail(field("backward_input", layer, mb), "not in flight", "forward() first");
    Entry& e = it->second;
    if (options_.recompute.ffn) {
      Matrix scratch;
      compute_.forward(weights_[i], e.offsets, e.rows, scratch, e.saved);
      e.rows = Matrix();
    }
    compute_.backward_input(weights_[i], d_out, e.saved, d_rows);
    e.input_done = true;
  }

  /// Accumulates the experts' weight gradients for `mb` and releases the saved state.
  void backward_weight(int layer, int mb) {
    const std::size_t i = index_of(layer);
    const auto it = find_locked(layer, mb);
    if (it == saved_.end() || !it->second.input_done)
      fail(field("backward_weight", layer, mb), "not ready", "backward_input() first");
    compute_.backward_weight(it->second.saved, grads_[i]);
    const std::lock_guard lock(map_mu_);
    saved_.erase(it);
  }

  /// Drops the saved state of (`layer`, `mb`) without a backward (evaluation).
  void release(int layer, int mb) {
    const std::lock_guard lock(map_mu_);
    saved_.erase({layer, mb});
  }
  /// Drops every saved state (after a failed step, so the next one can start).
  void release_all() {
    const std::lock_guard lock(map_mu_);
    saved_.clear();
  }

  [[nodiscard]] ParameterSet<T>& parameters() { return params_; }
  [[nodiscard]] const ParameterSet<T>& parameters() const { return params_; }
  [[nodiscard]] std::size_t in_flight() const {
    const std::lock_guard lock(map_mu_);
    return saved_.size();
  }
  [[nodiscard]] const ExpertStageLayout& layout() const { return layout_; }
  /// The slots of `parameters()` that hold expert `expert` of `layer`: [first, second).
  /// ConfigError when the stage does not hold it. O(log experts).
  [[nodiscard]] std::pair<std::size_t, std::size_t> expert_slots(int layer, int expert) const {
    const std::size_t i = index_of(layer);
    const auto& ids = layout_.experts[i];
    const auto it = std::lower_bound(ids.begin(), ids.end(), expert);
    if (it == ids.end() || *it != expert)
      fail("ExpertStage.expert_slots(layer " + std::to_string(layer) + ") expert", expert, "an expert this stage holds");
    const auto k = static_cast<std::size_t>(it - ids.begin());
    return {slot_begin_[i][k], slot_begin_[i][k + 1]};
  }

 private:
  struct Entry {
    typename Compute::Saved saved;
    Matrix rows;  ///< inputs kept instead of `saved` under recomputation
    std::vector<std::int64_t> offsets;
    bool input_done = false;
  };

  void register_parameters() {
    slot_begin_.resize(weights_.size());
    for (std::size_t i = 0; i < weights_.size(); ++i)
      for (std::size_t k = 0; k <= weights_[i].size(); ++k) {
        slot_begin_[i].push_back(params_.slots().size());
        if (k == weights_[i].size()) break;
        const int e = layout_.experts[i][k];
        const std::string prefix = "model.layers." + std::to_string(layout_.layers[i]) + ".block_sparse_moe." +
                                   (e < spec_.experts ? "experts." + std::to_string(e)
                                                      : "shared_experts." + std::to_string(e - spec_.experts)) +
                                   ".";
        auto values = compute_.parameters(weights_[i][k]);
        auto grads = compute_.parameters(grads_[i][k]);
        for (std::size_t p = 0; p < values.size(); ++p)
          params_.add(prefix + values[p].name, values[p].shape, *values[p].value, *grads[p].value);
      }
  }
  // Lookups and updates of the saved state lock (forward and backward streams run at
  // once); compute does not, and each entry is used by one stream at a time.
  auto find_locked(int layer, int mb) {
    const std::lock_guard lock(map_mu_);
    return saved_.find({layer, mb});
  }
  std::size_t index_of(int layer) const { return detail::stage_layer_index(layout_.layers, layer, "ExpertStage"); }
  static std::string field(const char* call, int layer, int mb) {
    return std::string("ExpertStage.") + call + "(layer " + std::to_string(layer) + ", micro-batch " +
           std::to_string(mb) + ")";
  }

  Compute compute_;
  ModelSpec spec_;
  ExpertStageLayout layout_;
  StageOptions options_;
  std::vector<std::vector<typename Compute::Weights>> weights_, grads_;
  ParameterSet<T> params_;
  std::vector<std::vector<std::size_t>> slot_begin_;  // [layer][expert]: first slot; one past the last expert
  mutable std::mutex map_mu_;
  std::map<std::pair<int, int>, Entry> saved_;
};

}  // namespace disagmoe::runtime
