// SPDX-License-Identifier: Apache-2.0
/// @file colocated_trainer.hpp
/// `ColocatedTrainer`: the whole model on one worker — one `AttentionStage` holding every
/// layer and both edges, one `ExpertStage` holding every expert — trained with gradient
/// accumulation over micro-batches, global-norm clipping and AdamW. It is the reference
/// that a disaggregated run must reproduce, and uses the same stages and computes.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/runtime/adamw.hpp>
#include <disagmoe/runtime/attention_stage.hpp>
#include <disagmoe/runtime/expert_stage.hpp>
#include <disagmoe/runtime/local_dispatch.hpp>
#include <disagmoe/runtime/lr_schedule.hpp>
#include <disagmoe/spec/model_spec.hpp>

#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace disagmoe::runtime {

/// Optimisation knobs of a training run.
struct TrainOptions {
  int micro_batches = 1;     ///< micro-batches per step (gradient accumulation)
  AdamWOptions adamw;
  LrSchedule lr;
  double clip_norm = 1.0;    ///< global gradient-norm clip; 0 disables
};

/// Throws ConfigError naming the first invalid field.
inline void validate(const TrainOptions& o) {
  expect(o.micro_batches >= 1, "TrainOptions.micro_batches", o.micro_batches, "a positive integer");
  validate(o.adamw);
  validate(o.lr);
  expect(o.clip_norm >= 0 && std::isfinite(o.clip_norm), "TrainOptions.clip_norm", o.clip_norm,
         "a finite value >= 0 (0 disables clipping)");
}

namespace detail {

/// The gradient scale of torch.nn.utils.clip_grad_norm_ (max_norm / (norm + 1e-6) when
/// above max_norm). A non-finite norm stops the step: a diverged loss must not turn
/// every weight into NaN behind the user's back.
inline double clip_factor(const TrainOptions& o, double grad_norm, std::int64_t step) {
  if (!std::isfinite(grad_norm))
    fail("step " + std::to_string(step) + " gradient norm", grad_norm,
         "a finite value (the loss diverged; lower the learning rate); no update was made");
  return o.clip_norm > 0 && grad_norm > o.clip_norm ? o.clip_norm / (grad_norm + 1e-6) : 1.0;
}

}  // namespace detail

/// What one step measured. Losses are means over the step's micro-batches.
struct StepStats {
  double loss = 0;       ///< language-model cross-entropy, nats per byte
  double aux_loss = 0;   ///< sum over MoE layers of aux_loss_coef * load-balancing loss
  double z_loss = 0;     ///< sum over MoE layers of z_loss_coef * router z-loss
  double grad_norm = 0;  ///< global gradient norm before clipping
  double lr = 0;         ///< learning rate used
};

/// A batch of `sequences` rows of `seq_len` byte ids, row-major, and their targets.
struct TokenBatch {
  std::span<const int> inputs, targets;
  int sequences = 0;
};

namespace detail {

/// ConfigError unless `b` holds at least one sequence of `spec.seq_len` inputs and targets.
inline void check_batch(const ModelSpec& spec, const TokenBatch& b) {
  expect(b.sequences >= 1, "batch.sequences", b.sequences, "a positive integer");
  const auto n = static_cast<std::size_t>(b.sequences) * static_cast<std::size_t>(spec.seq_len);
  expect(b.inputs.size() == n, "batch.inputs.size()", b.inputs.size(), "sequences * seq_len (" + std::to_string(n) + ")");
  expect(b.targets.size() == n, "batch.targets.size()", b.targets.size(), "sequences * seq_len (" + std::to_string(n) + ")");
}

}  // namespace detail

/// See the file comment. `Attention` and `Experts` must share a scalar type.
template <attention_compute Attention, expert_compute Experts>
class ColocatedTrainer {
 public:
  using T = typename Attention::scalar_type;
  static_assert(std::is_same_v<T, typename Experts::scalar_type>,
                "attention and expert computes must use one scalar type");
  using Matrix = model::Matrix<T>;

  /// `spec.seq_len` is the sequence length the batches are cut into.
  ColocatedTrainer(Attention attention, Experts experts, const ModelSpec& spec, TrainOptions options,
                   StageOptions stage = {})
      : spec_(spec),
        options_(options),
        attention_(std::move(attention), spec, full_attention_layout(spec), stage),
        experts_(std::move(experts), spec, all_experts(spec), stage) {
    validate(options_);
  }

  /// One optimizer step on `batch` (its sequences split evenly into micro-batches):
  /// gradients, global-norm clipping, AdamW at the scheduled rate.
  StepStats step(const TokenBatch& batch) {
    StepStats st = compute_gradients(batch);
    const double clip = detail::clip_factor(options_, st.grad_norm, step_ + 1);
    st.lr = options_.lr.at(step_);
    ++step_;
    attention_.parameters().adamw_step(options_.adamw, st.lr, clip, step_);
    experts_.parameters().adamw_step(options_.adamw, st.lr, clip, step_);
    return st;
  }

  /// Forward and backward of every micro-batch of `batch`: the gradients of the step's
  /// objective (loss + aux_loss + z_loss, each a mean over micro-batches) are left in the
  /// stages' parameter sets; nothing is updated.
  StepStats compute_gradients(const TokenBatch& batch) {
    const int m = options_.micro_batches;
    detail::check_batch(spec_, batch);
    expect(batch.sequences % m == 0, "batch.sequences", batch.sequences,
           "a multiple of the micro-batches (" + std::to_string(m) + ")");
    attention_.parameters().zero_grad();
    experts_.parameters().zero_grad();
    try {
      return accumulate(batch, m);
    } catch (...) {  // a bad batch must not leave saved state that blocks the next step
      attention_.release_all();
      experts_.release_all();
      throw;
    }
  }

  /// Mean language-model loss over `batch` (no auxiliary terms, no state kept),
  /// evaluated `max_sequences` sequences at a time.
  double evaluate(const TokenBatch& batch, int max_sequences = 8) {
    detail::check_batch(spec_, batch);
    expect(max_sequences >= 1, "evaluate max_sequences", max_sequences, "a positive integer");
    double total = 0;
    const auto s = static_cast<std::size_t>(spec_.seq_len);
    for (int first = 0; first < batch.sequences; first += max_sequences) {
      const int n = std::min(max_sequences, batch.sequences - first);
      const auto in = batch.inputs.subspan(static_cast<std::size_t>(first) * s, static_cast<std::size_t>(n) * s);
      const auto tg = batch.targets.subspan(static_cast<std::size_t>(first) * s, static_cast<std::size_t>(n) * s);
      total += static_cast<double>(attention_.head_loss(forward_only(in), tg)) * n;
    }
    return batch.sequences > 0 ? total / batch.sequences : 0.0;
  }

  /// Logits [seq_len, vocab] of one sequence of `seq_len` ids (for sampling).
  Matrix logits(std::span<const int> ids) {
    expect(ids.size() == static_cast<std::size_t>(spec_.seq_len), "logits ids.size()", ids.size(),
           "seq_len (" + std::to_string(spec_.seq_len) + ")");
    Matrix out;
    attention_.head_logits(forward_only(ids), out);
    return out;
  }

  /// How the current model routes `batch`'s tokens (forward only, nothing kept): the
  /// top-k expert ids of every MoE layer, flattened [token][MoE layer][slot], tokens in
  /// batch order (a routing trace, e.g. to fit an expert placement; Expert Coupling,
  /// arXiv 2610.09372). Targets are not used.
  [[nodiscard]] std::vector<std::int32_t> routing(const TokenBatch& batch) {
    detail::check_batch(spec_, batch);
    int moe = 0;
    for (int l = 0; l < spec_.layers; ++l) moe += spec_.is_moe_layer(l) ? 1 : 0;
    const auto s = static_cast<std::size_t>(spec_.seq_len), k = static_cast<std::size_t>(spec_.top_k);
    const auto stride = static_cast<std::size_t>(moe) * k;  // one token's entries
    std::vector<std::int32_t> out(static_cast<std::size_t>(batch.sequences) * s * stride);
    for (int q = 0; q < batch.sequences; ++q) {
      int ordinal = 0;
      (void)forward_only(batch.inputs.subspan(static_cast<std::size_t>(q) * s, s), [&](const model::IndexMatrix& ids) {
        for (std::size_t t = 0; t < s; ++t)
          for (std::size_t j = 0; j < k; ++j)
            out[(static_cast<std::size_t>(q) * s + t) * stride + static_cast<std::size_t>(ordinal) * k + j] =
                ids(static_cast<Eigen::Index>(t), static_cast<Eigen::Index>(j));
        ++ordinal;
      });
    }
    return out;
  }

  /// Steps taken so far (the optimizer's step count).
  [[nodiscard]] std::int64_t steps() const { return step_; }
  /// Restores the step count (resuming from a checkpoint).
  void set_steps(std::int64_t s) { step_ = s; }
  [[nodiscard]] AttentionStage<Attention>& attention() { return attention_; }
  [[nodiscard]] ExpertStage<Experts>& experts() { return experts_; }
  [[nodiscard]] const ModelSpec& spec() const { return spec_; }
  /// Trainable scalars.
  [[nodiscard]] std::int64_t parameter_count() const {
    return attention_.parameters().count() + experts_.parameters().count();
  }

 private:
  // The forward and backward of every micro-batch (compute_gradients without the reset).
  StepStats accumulate(const TokenBatch& batch, int m) {
    StepStats st;
    const std::size_t per = static_cast<std::size_t>(batch.sequences / m) * static_cast<std::size_t>(spec_.seq_len);
    const T scale = static_cast<T>(1.0 / m);
    std::vector<Layer> layers(static_cast<std::size_t>(spec_.layers));
    for (int mb = 0; mb < m; ++mb) {
      const auto in = batch.inputs.subspan(static_cast<std::size_t>(mb) * per, per);
      const auto tg = batch.targets.subspan(static_cast<std::size_t>(mb) * per, per);
      Matrix h;
      attention_.embed(mb, in, h);
      for (int l = 0; l < spec_.layers; ++l) h = forward_layer(l, mb, h, layers[static_cast<std::size_t>(l)], st);
      st.loss += static_cast<double>(attention_.head_forward(mb, h, tg)) / m;
      Matrix dh;
      attention_.head_backward_input(mb, scale, dh);
      attention_.head_backward_weight(mb);
      for (int l = spec_.layers - 1; l >= 0; --l) dh = backward_layer(l, mb, dh, layers[static_cast<std::size_t>(l)], scale);
      attention_.embed_backward(mb, dh);
    }
    st.aux_loss /= m;
    st.z_loss /= m;
    std::vector<std::pair<std::string, double>> sums;
    append_square_sums(attention_.parameters(), sums);
    append_square_sums(experts_.parameters(), sums);
    st.grad_norm = canonical_grad_norm(std::move(sums));
    return st;
  }

  /// What the step keeps per MoE layer between its forward and backward.
  struct Layer {
    std::optional<LocalDispatch> dispatch;
    Matrix expert_out, gates;
  };

  static AttentionStageLayout full_attention_layout(const ModelSpec& spec) {
    AttentionStageLayout l;
    for (int i = 0; i < spec.layers; ++i) l.layers.push_back(i);
    l.embedding = l.head = true;
    return l;
  }

  Matrix forward_layer(int l, int mb, const Matrix& h, Layer& keep, StepStats& st) {
    const AttentionOutput<T>& out = attention_.forward(l, mb, h);
    if (!spec_.is_moe_layer(l)) return out.residual;
    st.aux_loss += static_cast<double>(out.aux_loss);
    st.z_loss += static_cast<double>(out.z_loss);
    keep.dispatch.emplace(out.topk_ids, spec_.experts, spec_.shared_experts);
    keep.gates = out.gates;
    Matrix rows, y;
    group_rows(*keep.dispatch, out.tokens, rows);
    experts_.forward(l, mb, keep.dispatch->offsets, rows, keep.expert_out);
    combine_outputs(*keep.dispatch, keep.expert_out, keep.gates, y);
    return out.residual + y;
  }

  Matrix backward_layer(int l, int mb, const Matrix& dy, Layer& keep, T scale) {
    Matrix dh;
    if (!spec_.is_moe_layer(l)) {
      attention_.backward_input(l, mb, AttentionGradients<T>{&dy, nullptr, nullptr, scale}, dh);
      attention_.backward_weight(l, mb);
      return dh;
    }
    Matrix d_out, d_gates, d_rows, d_tokens;
    combine_backward(*keep.dispatch, keep.expert_out, keep.gates, dy, d_out, d_gates);
    experts_.backward_input(l, mb, d_out, d_rows);
    combine_input_gradients(*keep.dispatch, d_rows, d_tokens);
    attention_.backward_input(l, mb, AttentionGradients<T>{&dy, &d_tokens, &d_gates, scale}, dh);
    experts_.backward_weight(l, mb);
    attention_.backward_weight(l, mb);
    keep = Layer{};
    return dh;
  }

  // Forward through every layer, releasing each layer's saved state at once (under a
  // micro-batch id that training never uses); `routed` sees each MoE layer's top-k ids.
  template <class Routed = void (*)(const model::IndexMatrix&)>
  Matrix forward_only(std::span<const int> ids, Routed&& routed = [](const model::IndexMatrix&) {}) {
    try {
      return forward_only_unguarded(ids, routed);
    } catch (...) {
      attention_.release_all();
      experts_.release_all();
      throw;
    }
  }
  template <class Routed>
  Matrix forward_only_unguarded(std::span<const int> ids, Routed& routed) {
    Matrix h;
    const int mb = kEvalMicroBatch;
    attention_.embed(mb, ids, h);
    attention_.release_embedding(mb);
    for (int l = 0; l < spec_.layers; ++l) {
      const AttentionOutput<T>& out = attention_.forward(l, mb, h);
      if (!spec_.is_moe_layer(l)) {
        h = out.residual;
      } else {
        routed(out.topk_ids);
        LocalDispatch d(out.topk_ids, spec_.experts, spec_.shared_experts);
        Matrix rows, expert_out, y;
        group_rows(d, out.tokens, rows);
        experts_.forward(l, mb, d.offsets, rows, expert_out);
        experts_.release(l, mb);
        combine_outputs(d, expert_out, out.gates, y);
        h = out.residual + y;
      }
      attention_.release(l, mb);
    }
    return h;
  }

  static constexpr int kEvalMicroBatch = -1;

  ModelSpec spec_;
  TrainOptions options_;
  AttentionStage<Attention> attention_;
  ExpertStage<Experts> experts_;
  std::int64_t step_ = 0;
};

}  // namespace disagmoe::runtime
