// SPDX-License-Identifier: Apache-2.0
/// @file gated_ffn.hpp
/// Gated-SiLU (SwiGLU) expert MLPs over rows grouped by expert, with hand-written backward.
///
/// Each expert e computes, for a row x of width `hidden`,
///   E_e(x) = w2 (silu(w1 x) * (w3 x)),   silu(a) = a * sigmoid(a)
/// with w1, w3: [ffn, hidden] and w2: [hidden, ffn] (Shazeer, "GLU Variants Improve
/// Transformer", 2020, FFN_SwiGLU with beta = 1; Hugging Face
/// `MixtralBlockSparseTop2MLP`; SiLU from Elfwing, Uchibe and Doya 2018). In the row
/// convention of `tensor.hpp` this is out = (silu(x w1^T) * (x w3^T)) w2^T.
///
/// Rows arrive sorted by local expert: expert e owns rows [offsets[e], offsets[e+1]).
/// Every product is one Eigen GEMM over an expert's contiguous row block (no copies), so
/// throughput tracks plain GEMM; the element-wise parts run once over all rows.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/model/tensor.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace disagmoe::model {

/// One expert's parameters (or their gradients): w1 (gate) and w3 (up) [ffn, hidden],
/// w2 (down) [hidden, ffn].
template <class T>
struct GatedFfnWeights {
  Matrix<T> w1;  ///< gate projection, [ffn, hidden]
  Matrix<T> w2;  ///< down projection, [hidden, ffn]
  Matrix<T> w3;  ///< up projection, [ffn, hidden]
};

/// What the forward pass keeps, and what `gated_ffn_backward_input` adds for
/// `gated_ffn_backward_weight`. n = total rows. The forward clears the backward fields,
/// so a weight gradient can never be computed from a previous step's d_out.
template <class T>
struct GatedFfnSaved {
  Matrix<T> rows;                     ///< the input rows, [n, hidden]
  std::vector<std::int64_t> offsets;  ///< the expert row offsets (experts + 1 entries)
  Matrix<T> h1;                       ///< gate pre-activation x w1^T, [n, ffn]
  Matrix<T> h3;                       ///< up projection x w3^T, [n, ffn]
  Matrix<T> act;                      ///< silu(h1) * h3, the input of w2, [n, ffn]
  Matrix<T> d_out;                    ///< after backward_input: the output gradient, [n, hidden]
  Matrix<T> dh1;                      ///< after backward_input: dL/dh1, [n, ffn]
  Matrix<T> dh3;                      ///< after backward_input: dL/dh3, [n, ffn]
};

namespace detail {

inline void check_gated_ffn_offsets(std::span<const std::int64_t> offsets, std::size_t experts,
                                    Eigen::Index rows) {
  const std::string field = "gated_ffn offsets";
  if (offsets.size() != experts + 1)
    fail(field + ".size", offsets.size(), "== experts + 1 (" + std::to_string(experts + 1) + ")");
  if (offsets[0] != 0) fail(field + "[0]", offsets[0], "0");
  for (std::size_t e = 0; e < experts; ++e)
    if (offsets[e + 1] < offsets[e])
      fail(field + "[" + std::to_string(e + 1) + "]", offsets[e + 1],
           ">= offsets[" + std::to_string(e) + "] (" + std::to_string(offsets[e]) + "): nondecreasing");
  if (offsets[experts] != rows)
    fail(field + "[" + std::to_string(experts) + "]", offsets[experts],
         "== rows.rows (" + std::to_string(rows) + ")");
}

inline void check_gated_ffn_dim(Eigen::Index got, Eigen::Index want, const std::string& field,
                                const char* what) {
  if (got != want) fail(field, got, "== " + std::string(what) + " (" + std::to_string(want) + ")");
}

/// Every expert in `experts` must be [ffn, hidden] / [hidden, ffn]; `name` prefixes fields.
template <class T>
void check_gated_ffn_weights(std::span<const GatedFfnWeights<T>> experts, Eigen::Index hidden,
                             Eigen::Index ffn, const std::string& name) {
  for (std::size_t e = 0; e < experts.size(); ++e) {
    const std::string p = name + "[" + std::to_string(e) + "].";
    const GatedFfnWeights<T>& w = experts[e];
    check_gated_ffn_dim(w.w1.rows(), ffn, p + "w1.rows", "ffn");
    check_gated_ffn_dim(w.w1.cols(), hidden, p + "w1.cols", "hidden");
    check_gated_ffn_dim(w.w3.rows(), ffn, p + "w3.rows", "ffn");
    check_gated_ffn_dim(w.w3.cols(), hidden, p + "w3.cols", "hidden");
    check_gated_ffn_dim(w.w2.rows(), hidden, p + "w2.rows", "hidden");
    check_gated_ffn_dim(w.w2.cols(), ffn, p + "w2.cols", "ffn");
  }
}

/// Overflow-safe logistic: exp(-a) -> inf gives 0, never NaN.
template <class T>
T sigmoid(T a) {
  return T(1) / (T(1) + std::exp(-a));
}

}  // namespace detail

/// out[rows of e] = E_e(rows of e) for every expert e; out is resized to [n, hidden].
/// Preconditions (else ConfigError naming the field): offsets.size() == experts.size() + 1,
/// offsets[0] == 0, nondecreasing, offsets.back() == rows.rows() ("gated_ffn offsets");
/// every expert has the shapes of experts[0] with w1.cols() == rows.cols()
/// ("gated_ffn experts[e].w1.cols", ...), ffn >= 1. An expert with no rows is legal and
/// does nothing. `out` must not be the same object as `rows`.
/// Complexity O(n * hidden * ffn) in 3 GEMMs per non-empty expert; memory 3 [n, ffn].
template <class T>
void gated_ffn_forward(std::span<const GatedFfnWeights<T>> experts,
                       std::span<const std::int64_t> offsets, const Matrix<T>& rows,
                       Matrix<T>& out, GatedFfnSaved<T>& saved) {
  const std::size_t n_exp = experts.size();
  detail::check_gated_ffn_offsets(offsets, n_exp, rows.rows());
  const Eigen::Index n = rows.rows();
  const Eigen::Index hidden = rows.cols();
  const Eigen::Index ffn = n_exp == 0 ? 0 : experts[0].w1.rows();
  if (n_exp > 0) expect(ffn >= 1, "gated_ffn experts[0].w1.rows", ffn, ">= 1 (ffn)");
  detail::check_gated_ffn_weights(experts, hidden, ffn, "gated_ffn experts");

  saved.rows = rows;
  saved.offsets.assign(offsets.begin(), offsets.end());
  saved.h1.resize(n, ffn);
  saved.h3.resize(n, ffn);
  saved.d_out.resize(0, 0);
  saved.dh1.resize(0, 0);
  saved.dh3.resize(0, 0);
  out.resize(n, hidden);

  // The same contractions as linear_forward, written on row blocks so that each expert
  // is one GEMM on its slice without copying the slice out.
  for (std::size_t e = 0; e < n_exp; ++e) {
    const Eigen::Index b = offsets[e];
    const Eigen::Index m = offsets[e + 1] - b;
    if (m == 0) continue;  // empty expert: nothing to compute
    const auto x = saved.rows.middleRows(b, m);
    saved.h1.middleRows(b, m).noalias() = x * experts[e].w1.transpose();
    saved.h3.middleRows(b, m).noalias() = x * experts[e].w3.transpose();
  }
  // silu(a) = a / (1 + exp(-a)) (Elfwing et al. 2018); the offsets partition [0, n), so
  // every row of h1/h3 was written above.
  saved.act = (saved.h1.array() / (T(1) + (-saved.h1.array()).exp()) * saved.h3.array()).matrix();
  for (std::size_t e = 0; e < n_exp; ++e) {
    const Eigen::Index b = offsets[e];
    const Eigen::Index m = offsets[e + 1] - b;
    if (m == 0) continue;
    out.middleRows(b, m).noalias() = saved.act.middleRows(b, m) * experts[e].w2.transpose();
  }
}

/// d_rows = dL/drows given d_out = dL/dout; d_rows is resized to [n, hidden]. Also stores
/// d_out, dL/dh1 and dL/dh3 in `saved` for `gated_ffn_backward_weight`. With
/// s = sigmoid(h1) and g = d_out w2 (the gradient of act):
///   dh3 = g * silu(h1),  dh1 = g * h3 * s (1 + h1 (1 - s)),  d_rows = dh1 w1 + dh3 w3
/// (chain rule; silu'(a) = s (1 + a (1 - s)), Elfwing, Uchibe and Doya 2018, sec. 2).
/// Preconditions: `saved` from `gated_ffn_forward` with these experts; d_out [n, hidden].
/// d_rows may be the same object as d_out. Complexity O(n * hidden * ffn), 3 GEMMs per
/// non-empty expert.
template <class T>
void gated_ffn_backward_input(std::span<const GatedFfnWeights<T>> experts, const Matrix<T>& d_out,
                              GatedFfnSaved<T>& saved, Matrix<T>& d_rows) {
  const std::size_t n_exp = experts.size();
  if (saved.offsets.empty())
    fail("gated_ffn saved.offsets.size", 0, ">= 1: run gated_ffn_forward first");
  if (saved.offsets.size() != n_exp + 1)
    fail("gated_ffn experts.size", n_exp,
         "== the forward's (" + std::to_string(saved.offsets.size() - 1) + ")");
  const Eigen::Index n = saved.rows.rows();
  const Eigen::Index hidden = saved.rows.cols();
  const Eigen::Index ffn = saved.h1.cols();
  detail::check_gated_ffn_weights(experts, hidden, ffn, "gated_ffn experts");
  detail::check_gated_ffn_dim(d_out.rows(), n, "gated_ffn d_out.rows", "rows.rows");
  detail::check_gated_ffn_dim(d_out.cols(), hidden, "gated_ffn d_out.cols", "hidden");

  // Copy first: d_rows may alias d_out, and backward_weight needs d_out for dw2.
  saved.d_out = d_out;
  saved.dh1.resize(n, ffn);  // holds g = d_out w2 until the element-wise pass
  saved.dh3.resize(n, ffn);
  for (std::size_t e = 0; e < n_exp; ++e) {
    const Eigen::Index b = saved.offsets[e];
    const Eigen::Index m = saved.offsets[e + 1] - b;
    if (m == 0) continue;
    saved.dh1.middleRows(b, m).noalias() = saved.d_out.middleRows(b, m) * experts[e].w2;
  }
  // All four [n, ffn] matrices are row-major and contiguous, so one flat loop covers them.
  const Eigen::Index len = n * ffn;
  const T* h1 = saved.h1.data();
  const T* h3 = saved.h3.data();
  T* dh1 = saved.dh1.data();
  T* dh3 = saved.dh3.data();
  for (Eigen::Index i = 0; i < len; ++i) {
    const T g = dh1[i];
    const T s = detail::sigmoid(h1[i]);
    dh3[i] = g * (h1[i] * s);
    dh1[i] = g * h3[i] * (s * (T(1) + h1[i] * (T(1) - s)));
  }
  d_rows.resize(n, hidden);
  for (std::size_t e = 0; e < n_exp; ++e) {
    const Eigen::Index b = saved.offsets[e];
    const Eigen::Index m = saved.offsets[e + 1] - b;
    if (m == 0) continue;
    d_rows.middleRows(b, m).noalias() = saved.dh1.middleRows(b, m) * experts[e].w1;
    d_rows.middleRows(b, m).noalias() += saved.dh3.middleRows(b, m) * experts[e].w3;
  }
}

/// grads[e].w1 += dh1_e^T x_e, grads[e].w3 += dh3_e^T x_e, grads[e].w2 += d_out_e^T act_e
/// (the weight gradients of the three linears; cf. linear_backward_weight), where _e is
/// expert e's row block. An expert with no rows adds nothing. grads: one entry per expert,
/// already shaped like the weights (the caller zeroes them). Preconditions:
/// `gated_ffn_backward_input` ran on `saved` since its forward.
/// Complexity O(n * hidden * ffn), 3 GEMMs per non-empty expert.
template <class T>
void gated_ffn_backward_weight(const GatedFfnSaved<T>& saved, std::span<GatedFfnWeights<T>> grads) {
  const std::size_t n_exp = saved.offsets.empty() ? 0 : saved.offsets.size() - 1;
  const Eigen::Index n = saved.rows.rows();
  const Eigen::Index hidden = saved.rows.cols();
  const Eigen::Index ffn = saved.h1.cols();
  if (saved.offsets.empty() || saved.d_out.rows() != n || saved.d_out.cols() != hidden ||
      saved.dh1.rows() != n || saved.dh1.cols() != ffn)
    fail("gated_ffn saved.d_out.rows", saved.d_out.rows(),
         "== rows (" + std::to_string(n) + "): run gated_ffn_backward_input first");
  if (grads.size() != n_exp)
    fail("gated_ffn grads.size", grads.size(), "== experts (" + std::to_string(n_exp) + ")");
  detail::check_gated_ffn_weights(std::span<const GatedFfnWeights<T>>(grads.data(), grads.size()),
                                  hidden, ffn, "gated_ffn grads");
  for (std::size_t e = 0; e < n_exp; ++e) {
    const Eigen::Index b = saved.offsets[e];
    const Eigen::Index m = saved.offsets[e + 1] - b;
    if (m == 0) continue;  // zero contribution; skipping also avoids depth-0 GEMMs
    const auto x = saved.rows.middleRows(b, m);
    grads[e].w1.noalias() += saved.dh1.middleRows(b, m).transpose() * x;
    grads[e].w3.noalias() += saved.dh3.middleRows(b, m).transpose() * x;
    grads[e].w2.noalias() += saved.d_out.middleRows(b, m).transpose() * saved.act.middleRows(b, m);
  }
}

}  // namespace disagmoe::model
