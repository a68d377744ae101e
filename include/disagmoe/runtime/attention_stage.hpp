// SPDX-License-Identifier: Apache-2.0
/// @file attention_stage.hpp
/// `AttentionStage<Compute>`: the attention layers one attention worker owns (DisagMoE's
/// A side), optionally with the embedding (first stage) and the LM head (last stage).
/// It owns their parameters, gradients and AdamW moments, and keeps the saved
/// activations of every (layer, micro-batch) in flight between forward and backward,
/// so that a pipeline schedule may run many micro-batches interleaved.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/model/random.hpp>
#include <disagmoe/runtime/attention_compute.hpp>
#include <disagmoe/runtime/parameter_set.hpp>
#include <disagmoe/runtime/stage_options.hpp>
#include <disagmoe/spec/model_spec.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace disagmoe::runtime {

/// Which parts of the model an attention stage holds.
struct AttentionStageLayout {
  std::vector<int> layers;   ///< transformer layers, ascending
  bool embedding = false;    ///< holds the token embedding (the first stage)
  bool head = false;         ///< holds the final norm and LM head (the last stage)
};

/// See the file comment. Calls for one micro-batch follow the model's data flow:
/// forward(l, mb) for each layer, then backward_input(l, mb) in reverse, each followed
/// at any later time by backward_weight(l, mb), which releases the saved state.
template <attention_compute Compute>
class AttentionStage {
 public:
  using T = typename Compute::scalar_type;
  using Matrix = model::Matrix<T>;

  /// Initialises the weights of `layout` for `spec` (`validate(spec)` must pass).
  AttentionStage(Compute compute, const ModelSpec& spec, AttentionStageLayout layout, StageOptions options = {})
      : compute_(std::move(compute)), spec_(spec), layout_(std::move(layout)), options_(options) {
    validate(spec_);
    detail::check_stage_layers(layout_.layers, "AttentionStageLayout.layers",
                               [&](int l) { return l >= 0 && l < spec_.layers; },
                               "a layer in [0, " + std::to_string(spec_.layers) + ")");
    weights_.reserve(layout_.layers.size());
    grads_.reserve(layout_.layers.size());
    for (const int l : layout_.layers) {
      model::Rng rng(model::derive_seed(options_.seed, static_cast<std::uint64_t>(SeedStream::kAttentionLayer),
                                        static_cast<std::uint64_t>(l)));
      weights_.push_back(compute_.init(l, rng));
      grads_.push_back(weights_.back());
    }
    if (layout_.embedding || layout_.head) {
      model::Rng rng(model::derive_seed(options_.seed, static_cast<std::uint64_t>(SeedStream::kEdges)));
      edges_ = compute_.init_edges(rng);
      edge_grads_ = *edges_;
    }
    register_parameters();
  }

  AttentionStage(const AttentionStage&) = delete;  // the parameter set points into this object
  AttentionStage& operator=(const AttentionStage&) = delete;

  /// Forward of `layer` for micro-batch `mb` on the residual stream `h`. The returned
  /// reference stays valid until the next forward of this stage.
  const AttentionOutput<T>& forward(int layer, int mb, const Matrix& h) {
    const std::size_t i = index_of(layer);
    auto it = emplace(saved_, std::pair{layer, mb}, "forward", layer, mb);
    compute_.forward(weights_[i], layer, h, output_, it->second.saved);
    if (options_.recompute.attention) {
      it->second.input = h;
      it->second.saved = {};
    }
    return output_;
  }

  /// dh = dL/dh of `layer` for `mb`. With recomputation, the layer's forward runs again first.
  void backward_input(int layer, int mb, const AttentionGradients<T>& g, Matrix& dh) {
    const std::size_t i = index_of(layer);
    Entry& e = entry(layer, mb, "backward_input");
    if (options_.recompute.attention) {
      AttentionOutput<T> scratch;
      compute_.forward(weights_[i], layer, e.input, scratch, e.saved);
      e.input = Matrix();
    }
    compute_.backward_input(weights_[i], layer, g, e.saved, dh);
    e.input_done = true;
  }

  /// Accumulates `layer`'s weight gradients for `mb` and releases its saved state.
  void backward_weight(int layer, int mb) {
    const std::size_t i = index_of(layer);
    const auto it = find_locked(saved_, std::pair{layer, mb});
    if (it == saved_.end() || !it->second.input_done)
      fail(field("backward_weight", layer, mb), "not ready", "backward_input() of this layer and micro-batch first");
    compute_.backward_weight(weights_[i], layer, it->second.saved, grads_[i]);
    erase_locked(saved_, it);
  }

  /// Drops the saved state of (`layer`, `mb`) without a backward (evaluation).
  void release(int layer, int mb) {
    const std::lock_guard lock(map_mu_);
    saved_.erase({layer, mb});
  }
  /// Drops the ids kept for the embedding backward of `mb` (evaluation).
  void release_embedding(int mb) {
    const std::lock_guard lock(map_mu_);
    ids_.erase(mb);
  }
  /// Drops every saved state (after a failed step, so the next one can start).
  void release_all() {
    const std::lock_guard lock(map_mu_);
    saved_.clear();
    head_saved_.clear();
    ids_.clear();
  }

  /// h = embedding of `ids` for micro-batch `mb` (first stage only).
  void embed(int mb, std::span<const int> ids, Matrix& h) {
    require_edge(layout_.embedding, "embed");
    compute_.embed(*edges_, ids, h);
    const std::lock_guard lock(map_mu_);
    ids_[mb].assign(ids.begin(), ids.end());
  }
  /// Accumulates the embedding gradient of micro-batch `mb`.
  void embed_backward(int mb, const Matrix& dh) {
    require_edge(layout_.embedding, "embed_backward");
    const auto it = find_locked(ids_, mb);
    if (it == ids_.end()) fail(field("embed_backward", -1, mb), "not in flight", "embed() first");
    compute_.embed_backward(it->second, dh, *edge_grads_);
    erase_locked(ids_, it);
  }

  /// Mean loss of micro-batch `mb` (last stage only); keeps what the backward needs.
  T head_forward(int mb, const Matrix& h, std::span<const int> targets) {
    require_edge(layout_.head, "head_forward");
    auto it = emplace(head_saved_, mb, "head_forward", -1, mb);
    return compute_.head_forward(*edges_, h, targets, it->second);
  }
  /// The loss of `h` against `targets` without keeping state (evaluation).
  T head_loss(const Matrix& h, std::span<const int> targets) const {
    require_edge(layout_.head, "head_loss");
    return compute_.head_loss(*edges_, h, targets);
  }
  /// Next-token logits of `h` (evaluation and sampling).
  void head_logits(const Matrix& h, Matrix& logits) const {
    require_edge(layout_.head, "head_logits");
    compute_.head_logits(*edges_, h, logits);
  }
  /// dh = d(scale * loss)/dh of micro-batch `mb`.
  void head_backward_input(int mb, T scale, Matrix& dh) {
    require_edge(layout_.head, "head_backward_input");
    compute_.head_backward_input(*edges_, scale, head_entry(mb), dh);
  }
  /// Accumulates the head gradients of `mb` and releases its state.
  void head_backward_weight(int mb) {
    require_edge(layout_.head, "head_backward_weight");
    compute_.head_backward_weight(head_entry(mb), *edge_grads_);
    const std::lock_guard lock(map_mu_);
    head_saved_.erase(mb);
  }

  /// Parameters, gradients and optimizer state, in a fixed order.
  [[nodiscard]] ParameterSet<T>& parameters() { return params_; }
  [[nodiscard]] const ParameterSet<T>& parameters() const { return params_; }
  /// (layer, micro-batch) pairs and heads whose saved state is still held.
  [[nodiscard]] std::size_t in_flight() const {
    const std::lock_guard lock(map_mu_);
    return saved_.size() + head_saved_.size() + ids_.size();
  }
  [[nodiscard]] const AttentionStageLayout& layout() const { return layout_; }
  [[nodiscard]] const Compute& compute() const { return compute_; }

 private:
  struct Entry {
    typename Compute::Saved saved;
    Matrix input;  ///< the layer input, kept instead of `saved` under recomputation
    bool input_done = false;
  };

  void register_parameters() {
    if (layout_.embedding) add_edge(0);
    for (std::size_t i = 0; i < weights_.size(); ++i) {
      auto values = compute_.parameters(weights_[i]);
      auto grads = compute_.parameters(grads_[i]);
      const std::string prefix = "model.layers." + std::to_string(layout_.layers[i]) + ".";
      for (std::size_t k = 0; k < values.size(); ++k)
        params_.add(prefix + values[k].name, values[k].shape, *values[k].value, *grads[k].value);
    }
    if (layout_.head) add_edge(1), add_edge(2);
  }
  // Edge tensors in the compute's order: embedding first, then final norm and head.
  void add_edge(std::size_t k) {
    auto values = compute_.edge_parameters(*edges_);
    auto grads = compute_.edge_parameters(*edge_grads_);
    expect(values.size() == 3, "attention_compute edge_parameters().size()", values.size(),
           "3 (embedding, final norm, head)");
    params_.add(values[k].name, values[k].shape, *values[k].value, *grads[k].value);
  }

  std::size_t index_of(int layer) const { return detail::stage_layer_index(layout_.layers, layer, "AttentionStage"); }
  // The maps of saved state are touched by the forward and backward streams at once
  // (runtime/worker_executor.hpp); only lookups and updates hold the lock, never compute,
  // and an entry is used by one stream at a time (std::map nodes do not move).
  template <class Map, class Key>
  auto emplace(Map& map, const Key& key, const char* call, int layer, int mb) {
    const std::lock_guard lock(map_mu_);
    auto [it, fresh] = map.try_emplace(key);
    expect(fresh, field(call, layer, mb), "already in flight", "the backward of this micro-batch first");
    return it;
  }
  template <class Map, class Key>
  auto find_locked(Map& map, const Key& key) {
    const std::lock_guard lock(map_mu_);
    return map.find(key);
  }
  template <class Map, class It>
  void erase_locked(Map& map, It it) {
    const std::lock_guard lock(map_mu_);
    map.erase(it);
  }
  Entry& entry(int layer, int mb, const char* call) {
    const auto it = find_locked(saved_, std::pair{layer, mb});
    if (it == saved_.end()) fail(field(call, layer, mb), "not in flight", "forward() of this layer and micro-batch first");
    return it->second;
  }
  typename Compute::HeadSaved& head_entry(int mb) {
    const auto it = find_locked(head_saved_, mb);
    if (it == head_saved_.end()) fail(field("head backward", -1, mb), "not in flight", "head_forward() first");
    return it->second;
  }
  void require_edge(bool held, const char* call) const {
    if (!held) fail(std::string("AttentionStage.") + call, "not held", "a stage whose layout holds this edge");
  }
  static std::string field(const char* call, int layer, int mb) {
    return std::string("AttentionStage.") + call + "(layer " + std::to_string(layer) + ", micro-batch " +
           std::to_string(mb) + ")";
  }

  Compute compute_;
  ModelSpec spec_;
  AttentionStageLayout layout_;
  StageOptions options_;
  std::vector<typename Compute::Weights> weights_, grads_;
  std::optional<typename Compute::EdgeWeights> edges_, edge_grads_;
  ParameterSet<T> params_;
  mutable std::mutex map_mu_;
  std::map<std::pair<int, int>, Entry> saved_;
  std::map<int, typename Compute::HeadSaved> head_saved_;
  std::map<int, std::vector<int>> ids_;
  AttentionOutput<T> output_;
};

}  // namespace disagmoe::runtime
