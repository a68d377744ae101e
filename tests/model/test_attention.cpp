// SPDX-License-Identifier: Apache-2.0
// Attention and RoPE: forward against a naive scalar-loop implementation (its own RoPE
// with std::cos/std::sin per element, explicit masks, explicit repeat_kv), every
// gradient against central finite differences, float against double, GQA against MHA
// with repeated kv weights, RoPE's algebra, and validation messages.
#include <disagmoe/model/attention.hpp>
#include <disagmoe/model/random.hpp>
#include <disagmoe/model/rotary.hpp>

#include "matrix_util.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

using namespace disagmoe::model;
using disagmoe::ConfigError;
using disagmoe::test::random_matrix;
using disagmoe::test::rel_err;

namespace {

using Mat = Matrix<double>;

AttentionWeights<double> random_weights(Rng& rng, const AttentionShape& s) {
  // Scaled so that scores are O(1): softmax neither uniform nor one-hot.
  const double sc = 1.5 / std::sqrt(static_cast<double>(s.hidden));
  AttentionWeights<double> w;
  w.wq = random_matrix(rng, s.heads * s.head_dim, s.hidden, sc);
  w.wk = random_matrix(rng, s.kv_heads * s.head_dim, s.hidden, sc);
  w.wv = random_matrix(rng, s.kv_heads * s.head_dim, s.hidden, sc);
  w.wo = random_matrix(rng, s.hidden, s.heads * s.head_dim, 1.0 / std::sqrt(static_cast<double>(s.heads * s.head_dim)));
  return w;
}

AttentionWeights<double> zeros_like(const AttentionWeights<double>& w) {
  return {Mat::Zero(w.wq.rows(), w.wq.cols()), Mat::Zero(w.wk.rows(), w.wk.cols()),
          Mat::Zero(w.wv.rows(), w.wv.cols()), Mat::Zero(w.wo.rows(), w.wo.cols())};
}

template <class To, class From>
Matrix<To> cast(const Matrix<From>& m) {
  return m.template cast<To>();
}

/// HF rotate-half RoPE written element by element: out[d] = x[d] cos(a) + rh(x)[d] sin(a)
/// with rh(x) = cat(-x2, x1) and a = pos * theta^(-2 (d mod D/2) / D).
std::vector<double> naive_rope(const std::vector<double>& x, int pos, double theta) {
  const int D = static_cast<int>(x.size()), half = D / 2;
  std::vector<double> out(x.size());
  for (int d = 0; d < D; ++d) {
    const int i = d % half;
    const double angle = pos * std::pow(theta, -2.0 * i / D);
    const double rh = d < half ? -x[d + half] : x[d - half];
    out[d] = x[d] * std::cos(angle) + rh * std::sin(angle);
  }
  return out;
}

/// Scalar-loop attention forward: loops over sequence, head, query i, key j.
Mat naive_forward(const AttentionShape& s, const AttentionWeights<double>& w, const Mat& x) {
  const int L = s.seq_len, D = s.head_dim, rows = static_cast<int>(x.rows());
  auto project = [&](const Mat& wm, int r, int c) {  // (x wm^T)(r, c)
    double acc = 0;
    for (int t = 0; t < s.hidden; ++t) acc += x(r, t) * wm(c, t);
    return acc;
  };
  auto head_vec = [&](const Mat& wm, int r, int head, bool rope) {
    std::vector<double> v(D);
    for (int d = 0; d < D; ++d) v[d] = project(wm, r, head * D + d);
    return rope ? naive_rope(v, r % L, s.rope_theta) : v;
  };
  Mat o = Mat::Zero(rows, s.heads * D);
  for (int b = 0; b < rows / L; ++b)
    for (int h = 0; h < s.heads; ++h) {
      const int g = h / (s.heads / s.kv_heads);
      for (int i = 0; i < L; ++i) {
        const auto q = head_vec(w.wq, b * L + i, h, true);
        std::vector<double> score(L, -std::numeric_limits<double>::infinity());
        double mx = -std::numeric_limits<double>::infinity();
        for (int j = 0; j < L; ++j) {
          const bool allowed = j <= i && (s.window == 0 || j > i - s.window);
          if (!allowed) continue;
          const auto k = head_vec(w.wk, b * L + j, g, true);
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += q[d] * k[d];
          score[j] = dot / std::sqrt(static_cast<double>(D));
          mx = std::max(mx, score[j]);
        }
        double sum = 0;
        for (int j = 0; j < L; ++j) sum += std::exp(score[j] - mx);
        for (int j = 0; j < L; ++j) {
          const double p = std::exp(score[j] - mx) / sum;
          if (p == 0) continue;
          const auto v = head_vec(w.wv, b * L + j, g, false);
          for (int d = 0; d < D; ++d) o(b * L + i, h * D + d) += p * v[d];
        }
      }
    }
  Mat y = Mat::Zero(rows, s.hidden);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < s.hidden; ++c)
      for (int t = 0; t < s.heads * D; ++t) y(r, c) += o(r, t) * w.wo(c, t);
  return y;
}

struct Case {
  AttentionShape shape;
  int batch;
};

AttentionShape make_shape(int hidden, int heads, int kv, int dim, int len, int window, double theta = 10000.0) {
  AttentionShape s;
  s.hidden = hidden;
  s.heads = heads;
  s.kv_heads = kv;
  s.head_dim = dim;
  s.seq_len = len;
  s.window = window;
  s.rope_theta = theta;
  return s;
}

// Small shapes: MHA, GQA (kv 2 and 1), windows of 1, 3 and > seq_len, odd seq_len,
// head_dim != hidden / heads, batches of 1 to 3 sequences.
std::vector<Case> small_cases() {
  return {
      {make_shape(12, 3, 3, 4, 5, 0), 2},         // MHA, full causal
      {make_shape(10, 4, 2, 6, 7, 3), 2},         // GQA, window 3, head_dim*heads != hidden
      {make_shape(8, 4, 1, 4, 9, 0, 500.0), 3},   // MQA, full causal, small theta
      {make_shape(6, 4, 2, 2, 5, 1), 2},          // window 1: each query sees itself only
      {make_shape(9, 2, 1, 8, 6, 10), 1},         // window > seq_len == full causal
      {make_shape(7, 4, 4, 6, 1, 0), 3},          // seq_len 1
  };
}

// Shapes with seq_len > the query tile (128), so the tiling and the window's tile start
// are exercised.
std::vector<Case> long_cases() {
  return {
      {make_shape(8, 2, 1, 4, 301, 0), 2},
      {make_shape(8, 4, 2, 4, 263, 50), 1},
      {make_shape(6, 2, 2, 2, 200, 129), 2},
  };
}

/// Loss sum(y o R) evaluated through attention_forward.
double loss(const AttentionShape& s, const AttentionWeights<double>& w, const Mat& x, const Mat& r) {
  Mat y;
  AttentionSaved<double> saved;
  attention_forward(s, w, x, y, saved);
  return (y.array() * r.array()).sum();
}

/// Central differences for the chosen entries of `target` (entries: all if `sample` <= 0,
/// else `sample` random ones); other entries of the result are copied from `analytic` so
/// that the comparison covers exactly the sampled entries.
template <class Eval>
Mat finite_difference(Mat& target, const Mat& analytic, Eval&& eval, Rng& rng, int sample) {
  const double h = 1e-5;
  Mat num = analytic;
  auto one = [&](Eigen::Index i, Eigen::Index j) {
    const double saved = target(i, j);
    target(i, j) = saved + h;
    const double fp = eval();
    target(i, j) = saved - h;
    const double fm = eval();
    target(i, j) = saved;
    num(i, j) = (fp - fm) / (2 * h);
  };
  if (sample <= 0) {
    for (Eigen::Index i = 0; i < target.rows(); ++i)
      for (Eigen::Index j = 0; j < target.cols(); ++j) one(i, j);
  } else {
    for (int t = 0; t < sample; ++t)
      one(static_cast<Eigen::Index>(rng.below(static_cast<std::uint64_t>(target.rows()))),
          static_cast<Eigen::Index>(rng.below(static_cast<std::uint64_t>(target.cols()))));
  }
  return num;
}

void check_gradients(const Case& c, std::uint64_t seed, int sample) {
  const AttentionShape& s = c.shape;
  CAPTURE(seed);
  CAPTURE(s.hidden);
  CAPTURE(s.heads);
  CAPTURE(s.kv_heads);
  CAPTURE(s.head_dim);
  CAPTURE(s.seq_len);
  CAPTURE(s.window);
  CAPTURE(c.batch);
  Rng rng(seed);
  AttentionWeights<double> w = random_weights(rng, s);
  Mat x = random_matrix(rng, c.batch * s.seq_len, s.hidden, 1.0);
  const Mat r = random_matrix(rng, x.rows(), s.hidden, 1.0);

  Mat y, dx;
  AttentionSaved<double> saved;
  attention_forward(s, w, x, y, saved);
  attention_backward_input(s, w, r, saved, dx);  // dL/dy = R
  AttentionWeights<double> g = zeros_like(w);
  attention_backward_weight(s, saved, g);

  auto eval = [&] { return loss(s, w, x, r); };
  const double tol = 1e-6;
  CHECK(rel_err(dx, finite_difference(x, dx, eval, rng, sample)) < tol);
  CHECK(rel_err(g.wq, finite_difference(w.wq, g.wq, eval, rng, sample)) < tol);
  CHECK(rel_err(g.wk, finite_difference(w.wk, g.wk, eval, rng, sample)) < tol);
  CHECK(rel_err(g.wv, finite_difference(w.wv, g.wv, eval, rng, sample)) < tol);
  CHECK(rel_err(g.wo, finite_difference(w.wo, g.wo, eval, rng, sample)) < tol);
}

}  // namespace

TEST_CASE("attention forward matches a naive scalar-loop implementation") {
  std::uint64_t seed = 11;
  std::vector<Case> cases = small_cases();
  for (const Case& c : long_cases()) cases.push_back(c);
  for (const Case& c : cases) {
    const AttentionShape& s = c.shape;
    CAPTURE(seed);
    CAPTURE(s.heads);
    CAPTURE(s.kv_heads);
    CAPTURE(s.seq_len);
    CAPTURE(s.window);
    Rng rng(seed++);
    const AttentionWeights<double> w = random_weights(rng, s);
    const Mat x = random_matrix(rng, c.batch * s.seq_len, s.hidden, 1.0);
    Mat y;
    AttentionSaved<double> saved;
    attention_forward(s, w, x, y, saved);
    REQUIRE(y.rows() == x.rows());
    REQUIRE(y.cols() == s.hidden);
    CHECK(rel_err(y, naive_forward(s, w, x)) < 1e-12);

    // Deterministic: a second run (reusing `saved` and `y`) is bitwise identical.
    Mat y2 = Mat::Constant(3, 3, 7.0);
    attention_forward(s, w, x, y2, saved);
    CHECK(y2 == y);
  }
}

TEST_CASE("sequences of a batch do not attend to each other") {
  const std::uint64_t seed = 5;
  CAPTURE(seed);
  Rng rng(seed);
  const AttentionShape s = make_shape(8, 4, 2, 4, 6, 0);
  const AttentionWeights<double> w = random_weights(rng, s);
  Mat x = random_matrix(rng, 3 * s.seq_len, s.hidden, 1.0);
  Mat y, y_changed, y_alone;
  AttentionSaved<double> saved;
  attention_forward(s, w, x, y, saved);
  const Mat middle = x.middleRows(s.seq_len, s.seq_len);
  attention_forward(s, w, middle, y_alone, saved);
  CHECK(rel_err(y_alone, y.middleRows(s.seq_len, s.seq_len)) < 1e-14);
  x.topRows(s.seq_len).setRandom();
  x.bottomRows(s.seq_len).setRandom();
  attention_forward(s, w, x, y_changed, saved);
  CHECK(y_changed.middleRows(s.seq_len, s.seq_len) == y.middleRows(s.seq_len, s.seq_len));
}

TEST_CASE("GQA equals MHA with repeated key/value heads (HF repeat_kv)") {
  const std::uint64_t seed = 21;
  CAPTURE(seed);
  Rng rng(seed);
  const AttentionShape gqa = make_shape(10, 6, 2, 4, 11, 4);
  AttentionShape mha = gqa;
  mha.kv_heads = mha.heads;
  const AttentionWeights<double> w = random_weights(rng, gqa);
  AttentionWeights<double> wm = w;
  const int group = gqa.heads / gqa.kv_heads, D = gqa.head_dim;
  wm.wk.resize(mha.heads * D, gqa.hidden);
  wm.wv.resize(mha.heads * D, gqa.hidden);
  for (int h = 0; h < mha.heads; ++h) {
    wm.wk.middleRows(h * D, D) = w.wk.middleRows(h / group * D, D);
    wm.wv.middleRows(h * D, D) = w.wv.middleRows(h / group * D, D);
  }
  const Mat x = random_matrix(rng, 2 * gqa.seq_len, gqa.hidden, 1.0);
  const Mat r = random_matrix(rng, x.rows(), gqa.hidden, 1.0);
  Mat y, ym, dx, dxm;
  AttentionSaved<double> sg, sm;
  attention_forward(gqa, w, x, y, sg);
  attention_forward(mha, wm, x, ym, sm);
  CHECK(rel_err(y, ym) < 1e-13);
  attention_backward_input(gqa, w, r, sg, dx);
  attention_backward_input(mha, wm, r, sm, dxm);
  CHECK(rel_err(dx, dxm) < 1e-13);
  // A shared kv head's gradient is the sum of its copies' gradients.
  AttentionWeights<double> g = zeros_like(w), gm = zeros_like(wm);
  attention_backward_weight(gqa, sg, g);
  attention_backward_weight(mha, sm, gm);
  Mat wk_sum = Mat::Zero(w.wk.rows(), w.wk.cols()), wv_sum = wk_sum;
  for (int h = 0; h < mha.heads; ++h) {
    wk_sum.middleRows(h / group * D, D) += gm.wk.middleRows(h * D, D);
    wv_sum.middleRows(h / group * D, D) += gm.wv.middleRows(h * D, D);
  }
  CHECK(rel_err(g.wk, wk_sum) < 1e-13);
  CHECK(rel_err(g.wv, wv_sum) < 1e-13);
  CHECK(rel_err(g.wq, gm.wq) < 1e-13);
  CHECK(rel_err(g.wo, gm.wo) < 1e-13);
}

TEST_CASE("attention gradients match central finite differences") {
  std::uint64_t seed = 101;
  for (const Case& c : small_cases()) check_gradients(c, seed++, 0);      // every entry
  for (const Case& c : long_cases()) check_gradients(c, seed++, 12);      // sampled entries
}

TEST_CASE("attention_backward_weight accumulates and needs backward_input") {
  const std::uint64_t seed = 7;
  CAPTURE(seed);
  Rng rng(seed);
  const AttentionShape s = make_shape(8, 4, 2, 4, 5, 2);
  const AttentionWeights<double> w = random_weights(rng, s);
  const Mat x = random_matrix(rng, 2 * s.seq_len, s.hidden, 1.0);
  const Mat dy = random_matrix(rng, x.rows(), s.hidden, 1.0);
  Mat y, dx;
  AttentionSaved<double> saved;
  AttentionWeights<double> g = zeros_like(w);
  CHECK_THROWS_AS(attention_backward_input(s, w, dy, saved, dx), ConfigError);  // no forward yet
  attention_forward(s, w, x, y, saved);
  CHECK_THROWS_WITH_AS(attention_backward_weight(s, saved, g), doctest::Contains("has_backward"), ConfigError);
  CHECK_THROWS_WITH_AS(attention_backward_input(s, w, Mat(dy.topRows(3)), saved, dx), doctest::Contains("dy"),
                       ConfigError);
  attention_backward_input(s, w, dy, saved, dx);
  attention_backward_weight(s, saved, g);
  AttentionWeights<double> g2 = g;
  attention_backward_weight(s, saved, g2);
  CHECK(rel_err(g2.wq, 2 * g.wq) < 1e-15);
  CHECK(rel_err(g2.wk, 2 * g.wk) < 1e-15);
  CHECK(rel_err(g2.wv, 2 * g.wv) < 1e-15);
  CHECK(rel_err(g2.wo, 2 * g.wo) < 1e-15);
  AttentionWeights<double> bad = g;
  bad.wk.resize(3, 3);
  CHECK_THROWS_WITH_AS(attention_backward_weight(s, saved, bad), doctest::Contains("grads.wk"), ConfigError);
  // A new forward invalidates the previous backward.
  attention_forward(s, w, x, y, saved);
  CHECK_THROWS_AS(attention_backward_weight(s, saved, g), ConfigError);
}

TEST_CASE("float attention agrees with double") {
  std::uint64_t seed = 303;
  std::vector<Case> cases = small_cases();
  cases.push_back(long_cases()[1]);
  for (const Case& c : cases) {
    const AttentionShape& s = c.shape;
    CAPTURE(seed);
    CAPTURE(s.seq_len);
    CAPTURE(s.window);
    Rng rng(seed++);
    const AttentionWeights<double> w = random_weights(rng, s);
    const Mat x = random_matrix(rng, c.batch * s.seq_len, s.hidden, 1.0);
    const Mat dy = random_matrix(rng, x.rows(), s.hidden, 1.0);
    const AttentionWeights<float> wf{cast<float>(w.wq), cast<float>(w.wk), cast<float>(w.wv), cast<float>(w.wo)};
    // Compare against double run on the float-rounded inputs, so only compute rounding counts.
    const AttentionWeights<double> wr{cast<double>(wf.wq), cast<double>(wf.wk), cast<double>(wf.wv),
                                      cast<double>(wf.wo)};
    const Matrix<float> xf = cast<float>(x), dyf = cast<float>(dy);

    Mat y, dx;
    AttentionSaved<double> sd;
    attention_forward(s, wr, cast<double>(xf), y, sd);
    attention_backward_input(s, wr, cast<double>(dyf), sd, dx);
    AttentionWeights<double> g = zeros_like(w);
    attention_backward_weight(s, sd, g);

    Matrix<float> yf, dxf;
    AttentionSaved<float> sf;
    attention_forward(s, wf, xf, yf, sf);
    attention_backward_input(s, wf, dyf, sf, dxf);
    AttentionWeights<float> gf{Matrix<float>::Zero(wf.wq.rows(), wf.wq.cols()),
                               Matrix<float>::Zero(wf.wk.rows(), wf.wk.cols()),
                               Matrix<float>::Zero(wf.wv.rows(), wf.wv.cols()),
                               Matrix<float>::Zero(wf.wo.rows(), wf.wo.cols())};
    attention_backward_weight(s, sf, gf);
    const double tol = 1e-4;
    CHECK(rel_err(cast<double>(yf), y) < tol);
    CHECK(rel_err(cast<double>(dxf), dx) < tol);
    CHECK(rel_err(cast<double>(gf.wq), g.wq) < tol);
    CHECK(rel_err(cast<double>(gf.wk), g.wk) < tol);
    CHECK(rel_err(cast<double>(gf.wv), g.wv) < tol);
    CHECK(rel_err(cast<double>(gf.wo), g.wo) < tol);
  }
}

TEST_CASE("RoPE: position 0 is the identity, inverse undoes forward, matches the HF formula") {
  const std::uint64_t seed = 42;
  CAPTURE(seed);
  Rng rng(seed);
  const int heads = 3, D = 8, L = 7;
  const double theta = 10000.0;
  const RotaryTable<double> table = make_rotary_table<double>(L, D, theta);
  const Mat x = random_matrix(rng, 2 * L, heads * D, 1.0);
  Mat y = x;
  rotary_apply(table, y, heads);
  CHECK(y.row(0) == x.row(0));  // cos 0 = 1, sin 0 = 0 exactly
  CHECK(y.row(L) == x.row(L));  // first row of the second sequence
  CHECK(rel_err(y.row(1), x.row(1)) > 1e-3);
  for (Eigen::Index r = 0; r < y.rows(); ++r)
    for (int h = 0; h < heads; ++h) {
      std::vector<double> v(x.row(r).segment(h * D, D).data(), x.row(r).segment(h * D, D).data() + D);
      const auto ref = naive_rope(v, static_cast<int>(r % L), theta);
      for (int d = 0; d < D; ++d) CHECK(y(r, h * D + d) == doctest::Approx(ref[d]).epsilon(1e-14));
    }
  Mat back = y;
  rotary_apply(table, back, heads, RotaryDirection::kInverse);
  CHECK(rel_err(back, x) < 1e-15 * 10);
  // Rotations preserve norms per head and row.
  CHECK(std::abs(y.norm() - x.norm()) < 1e-12 * x.norm());
}

TEST_CASE("RoPE scores depend only on the relative position") {
  // <R_p q, R_p' k> = <q, R_{p'-p} k> (RoFormer Sec. 3.4.2): shifting both positions
  // by the same amount leaves the score unchanged.
  const std::uint64_t seed = 43;
  CAPTURE(seed);
  Rng rng(seed);
  const int D = 6, L = 12;
  const RotaryTable<double> table = make_rotary_table<double>(L, D, 100.0);
  const Mat q = random_matrix(rng, 1, D, 1.0), k = random_matrix(rng, 1, D, 1.0);
  Mat qs(L, D), ks(L, D);
  for (int p = 0; p < L; ++p) {
    qs.row(p) = q;
    ks.row(p) = k;
  }
  rotary_apply(table, qs, 1);
  rotary_apply(table, ks, 1);
  for (int shift = 1; shift + 5 < L; ++shift)
    CHECK(qs.row(5 + shift).dot(ks.row(2 + shift)) == doctest::Approx(qs.row(5).dot(ks.row(2))).epsilon(1e-12));
}

TEST_CASE("attention validation names the field") {
  AttentionShape s = make_shape(16, 8, 3, 4, 4, 0);
  CHECK_THROWS_WITH_AS(validate(s), "AttentionShape.kv_heads = 3: expected a divisor of heads (8)", ConfigError);
  s.kv_heads = 2;
  CHECK_NOTHROW(validate(s));
  s.head_dim = 5;
  CHECK_THROWS_WITH_AS(validate(s), doctest::Contains("AttentionShape.head_dim = 5"), ConfigError);
  s.head_dim = 4;
  s.window = -1;
  CHECK_THROWS_WITH_AS(validate(s), doctest::Contains("AttentionShape.window"), ConfigError);
  s.window = 0;
  s.seq_len = 0;
  CHECK_THROWS_WITH_AS(validate(s), doctest::Contains("AttentionShape.seq_len"), ConfigError);
  s.seq_len = 4;
  s.rope_theta = 0;
  CHECK_THROWS_WITH_AS(validate(s), doctest::Contains("AttentionShape.rope_theta"), ConfigError);
  s.rope_theta = 10000.0;

  Rng rng(1);
  const AttentionWeights<double> w = random_weights(rng, s);
  Mat y;
  AttentionSaved<double> saved;
  CHECK_THROWS_WITH_AS(attention_forward(s, w, Mat(Mat::Zero(10, s.hidden)), y, saved),
                       "x.rows() = 10: expected a multiple of AttentionShape.seq_len (4)", ConfigError);
  CHECK_THROWS_WITH_AS(attention_forward(s, w, Mat(Mat::Zero(8, s.hidden + 1)), y, saved),
                       doctest::Contains("x.cols()"), ConfigError);
  AttentionWeights<double> bad = w;
  bad.wo.resize(s.hidden, 3);
  CHECK_THROWS_WITH_AS(attention_forward(s, bad, Mat(Mat::Zero(8, s.hidden)), y, saved),
                       doctest::Contains("AttentionWeights.wo"), ConfigError);
  // An empty batch is valid.
  attention_forward(s, w, Mat(0, s.hidden), y, saved);
  CHECK(y.rows() == 0);
  CHECK_THROWS_WITH_AS(make_rotary_table<double>(4, 3, 10000.0), doctest::Contains("RotaryTable.head_dim"),
                       ConfigError);
}
