// SPDX-License-Identifier: Apache-2.0
/// @file cross_entropy.hpp
/// Language-model head and mean token cross-entropy, with hand-written backward.
///
///   logits = x w^T                          (w [vocab, d], as `linear_forward`)
///   loss   = (1/rows) sum_r ( lse(logits_r) - logits_r[targets[r]] )
/// i.e. the mean of -log softmax(logits_r)[targets[r]] (PyTorch `F.cross_entropy`,
/// reduction "mean"). lse is computed as m + log sum_j exp(l_j - m) with m = max_j l_j,
/// which cannot overflow (Goodfellow, Bengio and Courville, "Deep Learning", 2016, sec. 4.1).
/// The gradient w.r.t. the logits is (1/rows) (softmax(logits_r) - onehot(targets[r]))
/// (Bishop, "Pattern Recognition and Machine Learning", 2006, eq. 4.109).
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/model/tensor.hpp>

#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace disagmoe::model {

/// What `lm_head_forward` keeps, and what `lm_head_backward_input` adds for the weight
/// gradient. The forward clears `dlogits`.
template <class T>
struct LmHeadSaved {
  Matrix<T> x;               ///< the input, [rows, d]
  std::vector<int> targets;  ///< the target token per row
  Matrix<T> probs;           ///< softmax(logits) per row, [rows, vocab]
  Matrix<T> dlogits;         ///< after backward_input: d(scale * loss)/dlogits, [rows, vocab]
};

namespace detail {

template <class T>
void check_lm_head(const Matrix<T>& w, const Matrix<T>& x, std::span<const int> targets) {
  expect(x.rows() >= 1, "lm_head x.rows", x.rows(), ">= 1 (the mean needs a row)");
  expect(w.rows() >= 1, "lm_head w.rows", w.rows(), ">= 1 (vocab)");
  if (w.cols() != x.cols()) fail("lm_head w.cols", w.cols(), "== x.cols (" + std::to_string(x.cols()) + ")");
  if (targets.size() != static_cast<std::size_t>(x.rows()))
    fail("lm_head targets.size", targets.size(), "== x.rows (" + std::to_string(x.rows()) + ")");
  for (std::size_t r = 0; r < targets.size(); ++r)
    if (targets[r] < 0 || targets[r] >= w.rows())
      fail("lm_head targets[" + std::to_string(r) + "]", targets[r],
           "0 <= target < vocab (" + std::to_string(w.rows()) + ")");
}

/// Mean cross-entropy of `logits` against `targets`; when `to_probs`, each row of `logits`
/// is then overwritten by its softmax. Both uses do the same operations in the same order,
/// so `lm_head_loss` and `lm_head_forward` return bitwise the same value.
template <class T>
T mean_cross_entropy(Matrix<T>& logits, std::span<const int> targets, bool to_probs) {
  T total = 0;
  for (Eigen::Index r = 0; r < logits.rows(); ++r) {
    auto l = logits.row(r);
    const T m = l.maxCoeff();
    const T lse = m + std::log((l.array() - m).exp().sum());
    total += lse - l(targets[static_cast<std::size_t>(r)]);
    if (to_probs) l = (l.array() - lse).exp().matrix();
  }
  return total / static_cast<T>(logits.rows());
}

}  // namespace detail

/// Returns the mean cross-entropy of softmax(x w^T) against `targets` and fills `saved`
/// (x, targets, the [rows, vocab] softmax). x: [rows, d], rows >= 1; w: [vocab, d];
/// targets.size() == rows, each in [0, vocab), else ConfigError naming the field
/// ("lm_head targets[r]", ...). Complexity O(rows * vocab * d); memory [rows, vocab].
template <class T>
T lm_head_forward(const Matrix<T>& w, const Matrix<T>& x, std::span<const int> targets,
                  LmHeadSaved<T>& saved) {
  detail::check_lm_head(w, x, targets);
  saved.x = x;
  saved.targets.assign(targets.begin(), targets.end());
  saved.dlogits.resize(0, 0);
  linear_forward(saved.x, w, saved.probs);  // logits, turned into probabilities in place
  return detail::mean_cross_entropy(saved.probs, targets, true);
}

/// The same value as `lm_head_forward`, keeping no state (evaluation). Same preconditions.
/// Complexity O(rows * vocab * d); memory [rows, vocab] for the logits.
template <class T>
T lm_head_loss(const Matrix<T>& w, const Matrix<T>& x, std::span<const int> targets) {
  detail::check_lm_head(w, x, targets);
  Matrix<T> logits;
  linear_forward(x, w, logits);
  return detail::mean_cross_entropy(logits, targets, false);
}

/// dx = d(scale * loss)/dx = dlogits w with dlogits = (scale/rows)(probs - onehot(targets));
/// dx is resized to [rows, d] and dlogits is kept in `saved` for the weight gradient.
/// `scale` lets a caller fold in a loss weight or 1/micro-batches. Preconditions: `saved`
/// from `lm_head_forward` with this w. Complexity O(rows * vocab * d).
template <class T>
void lm_head_backward_input(const Matrix<T>& w, T scale, LmHeadSaved<T>& saved, Matrix<T>& dx) {
  const Eigen::Index rows = saved.x.rows();
  if (rows < 1 || saved.probs.rows() != rows || saved.targets.size() != static_cast<std::size_t>(rows))
    fail("lm_head saved.probs.rows", saved.probs.rows(),
         "== saved.x.rows (" + std::to_string(rows) + ") >= 1: run lm_head_forward first");
  if (w.rows() != saved.probs.cols())
    fail("lm_head w.rows", w.rows(), "== vocab of the forward (" + std::to_string(saved.probs.cols()) + ")");
  if (w.cols() != saved.x.cols())
    fail("lm_head w.cols", w.cols(), "== x.cols (" + std::to_string(saved.x.cols()) + ")");
  const T c = scale / static_cast<T>(rows);
  saved.dlogits = saved.probs * c;
  for (Eigen::Index r = 0; r < rows; ++r) saved.dlogits(r, saved.targets[static_cast<std::size_t>(r)]) -= c;
  linear_backward_input(saved.dlogits, w, dx);
}

/// dw += dlogits^T x (see `linear_backward_weight`). dw: [vocab, d], already sized.
/// Preconditions: `lm_head_backward_input` ran on `saved` since its forward.
/// Complexity O(rows * vocab * d).
template <class T>
void lm_head_backward_weight(const LmHeadSaved<T>& saved, Matrix<T>& dw) {
  if (saved.x.rows() < 1 || saved.dlogits.rows() != saved.x.rows() ||
      saved.dlogits.cols() != saved.probs.cols())
    fail("lm_head saved.dlogits.rows", saved.dlogits.rows(),
         "== saved.x.rows (" + std::to_string(saved.x.rows()) + "): run lm_head_backward_input first");
  if (dw.rows() != saved.dlogits.cols())
    fail("lm_head dw.rows", dw.rows(), "== vocab (" + std::to_string(saved.dlogits.cols()) + ")");
  if (dw.cols() != saved.x.cols())
    fail("lm_head dw.cols", dw.cols(), "== x.cols (" + std::to_string(saved.x.cols()) + ")");
  linear_backward_weight(saved.dlogits, saved.x, dw);
}

}  // namespace disagmoe::model
