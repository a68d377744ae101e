// SPDX-License-Identifier: Apache-2.0
/// @file parameter.hpp
/// A named view of one parameter tensor of a layer, the unit that optimizers,
/// checkpoints and gradient all-reduces iterate over.
#pragma once

#include <disagmoe/model/tensor.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace disagmoe::runtime {

/// One parameter of a layer: its name relative to the layer (Hugging Face's suffix,
/// e.g. "self_attn.q_proj.weight"), the matrix holding it and its logical shape (a
/// norm weight is held as a 1 x d matrix but has shape [d]).
template <class T>
struct NamedParameter {
  std::string name;
  model::Matrix<T>* value = nullptr;
  std::vector<std::int64_t> shape;
};

/// The shape of a matrix as a 2-D tensor.
template <class T>
std::vector<std::int64_t> shape_of(const model::Matrix<T>& m) {
  return {static_cast<std::int64_t>(m.rows()), static_cast<std::int64_t>(m.cols())};
}

}  // namespace disagmoe::runtime
