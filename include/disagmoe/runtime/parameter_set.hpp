// SPDX-License-Identifier: Apache-2.0
/// @file parameter_set.hpp
/// The parameters a stage owns, with their gradients and AdamW moments, in a fixed
/// order, so that norms, updates and checkpoints visit them identically everywhere.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/model/tensor.hpp>
#include <disagmoe/runtime/adamw.hpp>
#include <disagmoe/runtime/parameter.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace disagmoe::runtime {

/// One trainable tensor: full name, logical shape, and the matrices holding its value,
/// gradient and AdamW first and second moments (all of the same size).
template <class T>
struct ParameterSlot {
  std::string name;
  std::vector<std::int64_t> shape;
  model::Matrix<T>* value = nullptr;
  model::Matrix<T>* grad = nullptr;
  model::Matrix<T> m;  ///< AdamW first moment
  model::Matrix<T> v;  ///< AdamW second moment
};

/// The ordered parameters of a stage. Slots point into the stage's own storage, so a
/// ParameterSet must not outlive (or be copied apart from) the tensors it was built on.
template <class T>
class ParameterSet {
 public:
  /// Adds a parameter; `grad` is resized to `value`'s size and zeroed, moments zeroed.
  void add(std::string name, std::vector<std::int64_t> shape, model::Matrix<T>& value, model::Matrix<T>& grad) {
    grad.setZero(value.rows(), value.cols());
    ParameterSlot<T> s{std::move(name), std::move(shape), &value, &grad, {}, {}};
    s.m.setZero(value.rows(), value.cols());
    s.v.setZero(value.rows(), value.cols());
    slots_.push_back(std::move(s));
  }

  /// Zeroes every gradient (start of a step).
  void zero_grad() {
    for (auto& s : slots_) s.grad->setZero();
  }

  /// Sum of squared gradient entries of one slot, accumulated in double in storage order.
  [[nodiscard]] static double grad_square_sum(const ParameterSlot<T>& s) {
    double acc = 0;
    for (Eigen::Index i = 0; i < s.grad->size(); ++i) {
      const double g = static_cast<double>(s.grad->data()[i]);
      acc += g * g;
    }
    return acc;
  }

  /// One AdamW update of every parameter with gradients multiplied by `grad_scale`
  /// (the clipping factor). `step` counts from 1.
  void adamw_step(const AdamWOptions& o, double lr, double grad_scale, std::int64_t step) {
    for (auto& s : slots_) adamw_update(o, lr, grad_scale, step, decays(s), *s.value, *s.grad, s.m, s.v);
  }

  /// The slots, in order.
  [[nodiscard]] std::vector<ParameterSlot<T>>& slots() { return slots_; }
  [[nodiscard]] const std::vector<ParameterSlot<T>>& slots() const { return slots_; }
  /// Number of scalar parameters.
  [[nodiscard]] std::int64_t count() const {
    std::int64_t n = 0;
    for (const auto& s : slots_) n += s.value->size();
    return n;
  }

 private:
  // Weight decay applies to matrices, not to gains (norm weights): nanoGPT's and
  // Megatron's default grouping.
  static bool decays(const ParameterSlot<T>& s) { return s.shape.size() >= 2; }

  std::vector<ParameterSlot<T>> slots_;
};

/// The global gradient norm over named per-slot square sums, summed in name order, so
/// that every split of the model over stages and workers gets the same bits.
inline double canonical_grad_norm(std::vector<std::pair<std::string, double>> square_sums) {
  std::sort(square_sums.begin(), square_sums.end());
  double acc = 0;
  for (const auto& [name, sq] : square_sums) acc += sq;
  return std::sqrt(acc);
}

/// Copies value and AdamW moments of every slot of `from` into the slot of the same name
/// among `to` (a model split differently over stages); returns how many were copied.
/// ConfigError when a name's shapes differ. O(slots log slots + elements).
template <class T>
std::size_t copy_matching(std::span<const ParameterSet<T>* const> from, std::span<ParameterSet<T>* const> to) {
  std::map<std::string, ParameterSlot<T>*> index;
  for (auto* ps : to)
    for (auto& s : ps->slots()) index[s.name] = &s;
  std::size_t copied = 0;
  for (const auto* ps : from)
    for (const auto& s : ps->slots()) {
      const auto it = index.find(s.name);
      if (it == index.end()) continue;
      ParameterSlot<T>& d = *it->second;
      expect(d.value->rows() == s.value->rows() && d.value->cols() == s.value->cols(), "parameter " + s.name + " rows",
             s.value->rows(), "the shape of the parameter it is copied into");
      *d.value = *s.value;
      d.m = s.m;
      d.v = s.v;
      ++copied;
    }
  return copied;
}

/// Appends (name, square sum) of every slot of `p` to `out`.
template <class T>
void append_square_sums(const ParameterSet<T>& p, std::vector<std::pair<std::string, double>>& out) {
  for (const auto& s : p.slots()) out.emplace_back(s.name, ParameterSet<T>::grad_square_sum(s));
}

}  // namespace disagmoe::runtime
