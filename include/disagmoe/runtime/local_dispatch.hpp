// SPDX-License-Identifier: Apache-2.0
/// @file local_dispatch.hpp
/// The token exchange of one MoE layer when attention and experts share a worker (the
/// colocated reference): rows grouped by expert, the gate-weighted combine and its
/// backward, on the host token kernels, in the summation order of comm/m2n_channel.hpp
/// with a single FFN rank: y_t = g_{t0} f_{e_t0}(x_t) + g_{t1} f_{e_t1}(x_t) + ... (slots
/// ascending), then the shared experts with weight 1 (ascending).
#pragma once

#include <disagmoe/backend/host/token_kernels.hpp>
#include <disagmoe/error.hpp>
#include <disagmoe/model/tensor.hpp>

#include <cstdint>
#include <span>
#include <vector>

namespace disagmoe::runtime {

/// Grouping of one micro-batch's tokens by expert. Grouped row r carries token
/// `row_token[r]`; expert e (routed ids first, then shared) owns rows
/// [offsets[e], offsets[e + 1]), tokens ascending within an expert. Token t's output
/// terms are grouped rows `term_row[q]`, q in [term_begin[t], term_begin[t + 1]): its
/// top-k slots in order, then its shared experts; `slot_row[t * k + j]` is slot j's row.
struct LocalDispatch {
  std::vector<std::int64_t> row_token, offsets, term_begin, term_row, slot_row;
  int top_k = 0;
  int shared = 0;

  /// Builds the grouping from `topk_ids` [tokens, k] over `experts` routed and `shared`
  /// shared experts. ConfigError naming the first id outside [0, experts). O(tokens k + E).
  LocalDispatch(const model::IndexMatrix& topk_ids, int experts, int shared_experts)
      : top_k(static_cast<int>(topk_ids.cols())), shared(shared_experts) {
    const auto tokens = static_cast<std::int64_t>(topk_ids.rows());
    const auto k = static_cast<std::int64_t>(topk_ids.cols());
    std::vector<std::int64_t> counts(static_cast<std::size_t>(experts + shared), 0);
    for (std::int64_t i = 0; i < tokens * k; ++i) {
      const int e = topk_ids.data()[i];
      if (e < 0 || e >= experts) fail("topk_ids[" + std::to_string(i / k) + "][" + std::to_string(i % k) + "]", e,
                                      "an expert id in [0, " + std::to_string(experts) + ")");
      ++counts[static_cast<std::size_t>(e)];
    }
    for (int s = 0; s < shared; ++s) counts[static_cast<std::size_t>(experts + s)] = tokens;
    offsets.assign(counts.size() + 1, 0);
    host::exclusive_offsets(counts, offsets);
    std::vector<std::int64_t> next(offsets.begin(), offsets.end() - 1);
    row_token.assign(static_cast<std::size_t>(offsets.back()), 0);
    slot_row.assign(static_cast<std::size_t>(tokens * k), 0);
    term_begin.assign(static_cast<std::size_t>(tokens) + 1, 0);
    term_row.assign(static_cast<std::size_t>(tokens * (k + shared)), 0);
    // Tokens in ascending order land in ascending rows of each expert (a stable grouping).
    for (std::int64_t t = 0; t < tokens; ++t) {
      const auto q0 = static_cast<std::size_t>(t * (k + shared));
      term_begin[static_cast<std::size_t>(t)] = static_cast<std::int64_t>(q0);
      for (std::int64_t j = 0; j < k; ++j) {
        const std::int64_t r = next[static_cast<std::size_t>(topk_ids(t, j))]++;
        row_token[static_cast<std::size_t>(r)] = t;
        slot_row[static_cast<std::size_t>(t * k + j)] = r;
        term_row[q0 + static_cast<std::size_t>(j)] = r;
      }
      for (int s = 0; s < shared; ++s) {
        const std::int64_t r = next[static_cast<std::size_t>(experts + s)]++;
        row_token[static_cast<std::size_t>(r)] = t;
        term_row[q0 + static_cast<std::size_t>(k + s)] = r;
      }
    }
    term_begin[static_cast<std::size_t>(tokens)] = static_cast<std::int64_t>(term_row.size());
  }

  [[nodiscard]] std::int64_t tokens() const { return static_cast<std::int64_t>(term_begin.size()) - 1; }

  /// Term weights of the combine: token t's gates in slot order, then 1 per shared expert.
  template <class T>
  std::vector<T> term_weights(const model::Matrix<T>& gates) const {
    const std::int64_t k = top_k, per = top_k + shared;
    std::vector<T> w(term_row.size(), T{1});
    for (std::int64_t t = 0; t < tokens(); ++t)
      for (std::int64_t j = 0; j < k; ++j) w[static_cast<std::size_t>(t * per + j)] = gates(t, j);
    return w;
  }
};

/// rows = tokens grouped by expert.
template <class T>
void group_rows(const LocalDispatch& d, const model::Matrix<T>& tokens, model::Matrix<T>& rows) {
  rows.resize(static_cast<Eigen::Index>(d.row_token.size()), tokens.cols());
  host::gather_rows<T>({tokens.data(), static_cast<std::size_t>(tokens.size())}, static_cast<std::size_t>(tokens.cols()),
                       d.row_token, {rows.data(), static_cast<std::size_t>(rows.size())});
}

/// y_t = sum of token t's gate-weighted expert outputs (the contract in the file comment).
template <class T>
void combine_outputs(const LocalDispatch& d, const model::Matrix<T>& expert_out, const model::Matrix<T>& gates,
                  model::Matrix<T>& y) {
  const auto w = d.term_weights(gates);
  y.resize(static_cast<Eigen::Index>(d.tokens()), expert_out.cols());
  host::combine_rows<T, T>({expert_out.data(), static_cast<std::size_t>(expert_out.size())},
                           static_cast<std::size_t>(expert_out.cols()), d.term_begin, d.term_row, w,
                           {y.data(), static_cast<std::size_t>(y.size())});
}

/// Backward of `combine_outputs`: d_out rows = gate * dy of their token (what each expert's
/// backward consumes), and d_gates[t][j] = <expert_out row of (t, j), dy_t>.
template <class T>
void combine_backward(const LocalDispatch& d, const model::Matrix<T>& expert_out, const model::Matrix<T>& gates,
                      const model::Matrix<T>& dy, model::Matrix<T>& d_out, model::Matrix<T>& d_gates) {
  const auto width = static_cast<std::size_t>(dy.cols());
  std::vector<T> scale(d.row_token.size(), T{1});
  for (std::int64_t t = 0; t < d.tokens(); ++t)
    for (int j = 0; j < d.top_k; ++j) scale[static_cast<std::size_t>(d.slot_row[static_cast<std::size_t>(t * d.top_k + j)])] = gates(t, j);
  d_out.resize(static_cast<Eigen::Index>(d.row_token.size()), dy.cols());
  host::gather_rows_scaled<T, T>({dy.data(), static_cast<std::size_t>(dy.size())}, width, d.row_token, scale,
                                 {d_out.data(), static_cast<std::size_t>(d_out.size())});
  d_gates.resize(static_cast<Eigen::Index>(d.tokens()), d.top_k);
  for (std::int64_t t = 0; t < d.tokens(); ++t)
    for (int j = 0; j < d.top_k; ++j)
      d_gates(t, j) = host::row_dot(expert_out.row(d.slot_row[static_cast<std::size_t>(t * d.top_k + j)]).data(),
                                    dy.row(t).data(), width);
}

/// dL/d tokens: the sum of each token's expert input gradients (slots, then shared).
template <class T>
void combine_input_gradients(const LocalDispatch& d, const model::Matrix<T>& d_rows, model::Matrix<T>& d_tokens) {
  d_tokens.resize(static_cast<Eigen::Index>(d.tokens()), d_rows.cols());
  host::combine_rows<T, T>({d_rows.data(), static_cast<std::size_t>(d_rows.size())}, static_cast<std::size_t>(d_rows.cols()),
                           d.term_begin, d.term_row, {}, {d_tokens.data(), static_cast<std::size_t>(d_tokens.size())});
}

}  // namespace disagmoe::runtime
