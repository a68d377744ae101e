// SPDX-License-Identifier: Apache-2.0
/// @file embedding.hpp
/// Token embedding lookup and its weight gradient (a row gather and a row scatter-add,
/// as PyTorch's `nn.Embedding`): out[r] = table[ids[r]], table [vocab, d].
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/model/tensor.hpp>

#include <cstddef>
#include <span>
#include <string>

namespace disagmoe::model {

namespace detail {
/// Throws ConfigError naming "embedding ids[r]" for the first id outside [0, vocab).
inline void check_embedding_ids(std::span<const int> ids, Eigen::Index vocab) {
  for (std::size_t r = 0; r < ids.size(); ++r)
    if (ids[r] < 0 || ids[r] >= vocab)
      fail("embedding ids[" + std::to_string(r) + "]", ids[r],
           "0 <= id < vocab (" + std::to_string(vocab) + ")");
}
}  // namespace detail

/// out[r] = table[ids[r]] for every r; out is resized to [ids.size(), d]. table: [vocab, d];
/// every id in [0, vocab), else ConfigError naming "embedding ids[r]" (out untouched).
/// out must not be the same object as table. Complexity O(ids.size() * d).
template <class T>
void embedding_forward(const Matrix<T>& table, std::span<const int> ids, Matrix<T>& out) {
  detail::check_embedding_ids(ids, table.rows());
  out.resize(static_cast<Eigen::Index>(ids.size()), table.cols());
  for (std::size_t r = 0; r < ids.size(); ++r)
    out.row(static_cast<Eigen::Index>(r)) = table.row(ids[r]);
}

/// dtable[ids[r]] += dout[r] for r = 0, 1, ... in that order, so repeated ids sum in token
/// order and the result is bitwise deterministic. dtable: [vocab, d], already sized;
/// dout: [ids.size(), d]; ids as in `embedding_forward`. Complexity O(ids.size() * d).
template <class T>
void embedding_backward_weight(std::span<const int> ids, const Matrix<T>& dout, Matrix<T>& dtable) {
  if (dout.rows() != static_cast<Eigen::Index>(ids.size()))
    fail("embedding dout.rows", dout.rows(), "== ids.size (" + std::to_string(ids.size()) + ")");
  if (dout.cols() != dtable.cols())
    fail("embedding dout.cols", dout.cols(), "== dtable.cols (" + std::to_string(dtable.cols()) + ")");
  detail::check_embedding_ids(ids, dtable.rows());
  for (std::size_t r = 0; r < ids.size(); ++r)
    dtable.row(ids[r]) += dout.row(static_cast<Eigen::Index>(r));
}

}  // namespace disagmoe::model
