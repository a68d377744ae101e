// SPDX-License-Identifier: Apache-2.0
/// @file rotary.hpp
/// Rotary position embeddings (RoPE; Su et al., "RoFormer: Enhanced Transformer with
/// Rotary Position Embedding", 2021) in the rotate-half convention of Hugging Face
/// transformers (`modeling_llama.py`: `LlamaRotaryEmbedding`, `rotate_half`,
/// `apply_rotary_pos_emb`; Mixtral and Mistral share it), so weights converted from a
/// Hugging Face checkpoint need no permutation.
///
/// For head_dim D the pairs are (i, i + D/2), i < D/2, with
///   inv_freq_i = theta^(-2i/D),  angle(p, i) = p * inv_freq_i,
///   x'_i       = x_i * cos - x_{i+D/2} * sin,
///   x'_{i+D/2} = x_{i+D/2} * cos + x_i * sin,
/// which is HF's q * cos + rotate_half(q) * sin with cos/sin repeated over both halves.
/// Each pair is a plane rotation, so the rotation is orthogonal: its inverse and its
/// transpose (what backward needs) are both the rotation by -angle.
#pragma once

#include <disagmoe/error.hpp>
#include <disagmoe/model/tensor.hpp>

#include <cmath>
#include <string>

namespace disagmoe::model {

/// Which way `rotary_apply` turns: by +angle (forward) or -angle (inverse and transpose).
enum class RotaryDirection : unsigned char { kForward, kInverse };

/// cos/sin of angle(p, i) for positions p in [0, seq_len) and i in [0, head_dim / 2).
template <class T>
struct RotaryTable {
  int seq_len = 0;      ///< positions covered
  int head_dim = 0;     ///< D (even)
  double theta = 0.0;   ///< RoPE base (Hugging Face `rope_theta`)
  Matrix<T> cos;        ///< [seq_len, head_dim / 2]
  Matrix<T> sin;        ///< [seq_len, head_dim / 2]

  /// True if this table was built for exactly these parameters.
  [[nodiscard]] bool matches(int len, int dim, double base) const {
    return seq_len == len && head_dim == dim && theta == base;
  }
};

/// Builds the cos/sin table. Angles are evaluated in double and rounded to T once, so a
/// float table is as accurate as float allows (HF computes inv_freq in float32; the
/// values agree to float rounding). Throws ConfigError unless seq_len >= 0, head_dim > 0
/// and even, and theta > 0 and finite. O(seq_len * head_dim) trigonometric calls.
template <class T>
RotaryTable<T> make_rotary_table(int seq_len, int head_dim, double theta) {
  expect(seq_len >= 0, "RotaryTable.seq_len", seq_len, ">= 0");
  expect(head_dim > 0 && head_dim % 2 == 0, "RotaryTable.head_dim", head_dim, "a positive even number");
  expect(theta > 0.0 && std::isfinite(theta), "RotaryTable.theta", theta, "a positive finite number");
  RotaryTable<T> table;
  table.seq_len = seq_len;
  table.head_dim = head_dim;
  table.theta = theta;
  const int half = head_dim / 2;
  table.cos.resize(seq_len, half);
  table.sin.resize(seq_len, half);
  for (int i = 0; i < half; ++i) {
    // inv_freq_i = 1 / theta^(2i / D) (HF: 1.0 / base ** (arange(0, dim, 2) / dim)).
    const double inv_freq = std::pow(theta, -2.0 * i / head_dim);
    for (int p = 0; p < seq_len; ++p) {
      const double angle = static_cast<double>(p) * inv_freq;
      table.cos(p, i) = static_cast<T>(std::cos(angle));
      table.sin(p, i) = static_cast<T>(std::sin(angle));
    }
  }
  return table;
}

/// Rotates, in place, every head of every row of `x` ([rows, heads * head_dim], head h
/// in columns [h * head_dim, (h + 1) * head_dim)); row r is at position
/// r % table.seq_len (sequences stored contiguously). kInverse rotates by -angle, which
/// undoes kForward and is also its transpose, i.e. maps the gradient with respect to the
/// rotated values to the gradient with respect to the inputs.
/// Throws ConfigError if x.cols() != heads * table.head_dim or x has rows but the table
/// has no positions. O(rows * heads * head_dim).
template <class T>
void rotary_apply(const RotaryTable<T>& table, Matrix<T>& x, int heads,
                  RotaryDirection direction = RotaryDirection::kForward) {
  expect(heads > 0 && x.cols() == static_cast<Eigen::Index>(heads) * table.head_dim, "rotary x.cols()",
         x.cols(), "heads * head_dim (" + std::to_string(heads) + " * " + std::to_string(table.head_dim) + ")");
  expect(x.rows() == 0 || table.seq_len > 0, "RotaryTable.seq_len", table.seq_len, "> 0 for a non-empty input");
  const Eigen::Index half = table.head_dim / 2;
  // Inverse: the rotation by -angle has the same cos and the negated sin.
  const T sign = direction == RotaryDirection::kForward ? T(1) : T(-1);
  Eigen::Array<T, 1, Eigen::Dynamic> lo(half);
  for (Eigen::Index r = 0; r < x.rows(); ++r) {
    const Eigen::Index p = r % table.seq_len;
    const auto c = table.cos.row(p).array();
    const auto s = (sign * table.sin.row(p).array()).eval();
    for (int h = 0; h < heads; ++h) {
      auto a = x.row(r).segment(static_cast<Eigen::Index>(h) * table.head_dim, half).array();
      auto b = x.row(r).segment(static_cast<Eigen::Index>(h) * table.head_dim + half, half).array();
      lo = a;  // a is overwritten before b reads it
      a = lo * c - b * s;
      b = b * c + lo * s;
    }
  }
}

}  // namespace disagmoe::model
