// SPDX-License-Identifier: Apache-2.0
// Reference ops (RMSNorm, embedding, gated-SiLU experts, LM head + cross-entropy) against
// independent oracles: naive loop forwards, central finite differences of a random scalar
// loss for every gradient, float vs double, closed forms and bad-input errors.
#include <disagmoe/error.hpp>
#include <disagmoe/model/cross_entropy.hpp>
#include <disagmoe/model/embedding.hpp>
#include <disagmoe/model/gated_ffn.hpp>
#include <disagmoe/model/random.hpp>
#include <disagmoe/model/rms_norm.hpp>
#include <disagmoe/model/tensor.hpp>

#include "matrix_util.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <vector>

using namespace disagmoe::model;
using disagmoe::ConfigError;
using disagmoe::test::random_matrix;
using disagmoe::test::rel_err;

namespace {

using MatD = Matrix<double>;
using MatF = Matrix<float>;
using Index = Eigen::Index;

constexpr double kFdStep = 1e-6;
constexpr double kFdTol = 1e-6;     // relative, against the gradient's max-norm
constexpr double kFloatTol = 1e-5;  // float vs double, relative to the max-norm

MatF to_float(const MatD& m) { return m.cast<float>(); }
MatD to_double(const MatF& m) { return m.cast<double>(); }

/// Central differences of `loss` w.r.t. every entry of `p` (restored afterwards).
MatD fd_grad(MatD& p, const std::function<double()>& loss) {
  MatD g(p.rows(), p.cols());
  for (Index i = 0; i < p.rows(); ++i)
    for (Index j = 0; j < p.cols(); ++j) {
      const double v = p(i, j);
      p(i, j) = v + kFdStep;
      const double up = loss();
      p(i, j) = v - kFdStep;
      const double down = loss();
      p(i, j) = v;
      g(i, j) = (up - down) / (2 * kFdStep);
    }
  return g;
}

double weighted_sum(const MatD& y, const MatD& r) { return (y.array() * r.array()).sum(); }

/// `f` throws ConfigError whose message contains `field`.
void check_config_error(const std::function<void()>& f, const std::string& field) {
  CAPTURE(field);
  bool threw = false;
  try {
    f();
  } catch (const ConfigError& e) {
    threw = true;
    const std::string what = e.what();
    CAPTURE(what);
    CHECK(what.find(field) != std::string::npos);
  }
  CHECK(threw);
}

// ---- naive oracles --------------------------------------------------------------------

MatD naive_rms_norm(const MatD& w, double eps, const MatD& x) {
  MatD y(x.rows(), x.cols());
  for (Index r = 0; r < x.rows(); ++r) {
    double ss = 0;
    for (Index j = 0; j < x.cols(); ++j) ss += x(r, j) * x(r, j);
    const double rms = std::sqrt(ss / static_cast<double>(x.cols()) + eps);
    for (Index j = 0; j < x.cols(); ++j) y(r, j) = x(r, j) / rms * w(0, j);
  }
  return y;
}

MatD naive_embedding(const MatD& table, const std::vector<int>& ids) {
  MatD out(static_cast<Index>(ids.size()), table.cols());
  for (std::size_t r = 0; r < ids.size(); ++r)
    for (Index j = 0; j < table.cols(); ++j) out(static_cast<Index>(r), j) = table(ids[r], j);
  return out;
}

MatD naive_gated_ffn(const std::vector<GatedFfnWeights<double>>& experts,
                     const std::vector<std::int64_t>& offsets, const MatD& rows) {
  MatD out = MatD::Zero(rows.rows(), rows.cols());
  for (std::size_t e = 0; e < experts.size(); ++e) {
    const auto& w = experts[e];
    const Index ffn = w.w1.rows();
    for (Index r = offsets[e]; r < offsets[e + 1]; ++r) {
      std::vector<double> act(static_cast<std::size_t>(ffn));
      for (Index f = 0; f < ffn; ++f) {
        double a = 0, b = 0;
        for (Index h = 0; h < rows.cols(); ++h) {
          a += w.w1(f, h) * rows(r, h);
          b += w.w3(f, h) * rows(r, h);
        }
        act[static_cast<std::size_t>(f)] = a / (1.0 + std::exp(-a)) * b;
      }
      for (Index h = 0; h < rows.cols(); ++h) {
        double s = 0;
        for (Index f = 0; f < ffn; ++f) s += w.w2(h, f) * act[static_cast<std::size_t>(f)];
        out(r, h) = s;
      }
    }
  }
  return out;
}

double naive_lm_loss(const MatD& w, const MatD& x, const std::vector<int>& targets) {
  double total = 0;
  for (Index r = 0; r < x.rows(); ++r) {
    // Plain log(sum exp) without the max shift: the test logits are small.
    double z = 0, target_logit = 0;
    for (Index v = 0; v < w.rows(); ++v) {
      double l = 0;
      for (Index j = 0; j < x.cols(); ++j) l += x(r, j) * w(v, j);
      z += std::exp(l);
      if (v == targets[static_cast<std::size_t>(r)]) target_logit = l;
    }
    total += std::log(z) - target_logit;
  }
  return total / static_cast<double>(x.rows());
}

std::vector<GatedFfnWeights<double>> random_experts(Rng& rng, std::size_t n, Index hidden, Index ffn) {
  std::vector<GatedFfnWeights<double>> experts(n);
  for (auto& e : experts) {
    e.w1 = random_matrix(rng, ffn, hidden, 0.5);
    e.w2 = random_matrix(rng, hidden, ffn, 0.5);
    e.w3 = random_matrix(rng, ffn, hidden, 0.5);
  }
  return experts;
}

std::vector<GatedFfnWeights<double>> zero_like(const std::vector<GatedFfnWeights<double>>& experts) {
  std::vector<GatedFfnWeights<double>> g(experts.size());
  for (std::size_t e = 0; e < experts.size(); ++e) {
    g[e].w1 = MatD::Zero(experts[e].w1.rows(), experts[e].w1.cols());
    g[e].w2 = MatD::Zero(experts[e].w2.rows(), experts[e].w2.cols());
    g[e].w3 = MatD::Zero(experts[e].w3.rows(), experts[e].w3.cols());
  }
  return g;
}

std::vector<GatedFfnWeights<float>> to_float(const std::vector<GatedFfnWeights<double>>& experts) {
  std::vector<GatedFfnWeights<float>> f(experts.size());
  for (std::size_t e = 0; e < experts.size(); ++e)
    f[e] = {to_float(experts[e].w1), to_float(experts[e].w2), to_float(experts[e].w3)};
  return f;
}

std::vector<int> random_ids(Rng& rng, std::size_t n, int vocab) {
  std::vector<int> ids(n);
  for (auto& id : ids) id = static_cast<int>(rng.below(static_cast<std::uint64_t>(vocab)));
  return ids;
}

}  // namespace

// ---- RMSNorm ---------------------------------------------------------------------------

TEST_CASE("rms_norm: forward matches the naive loop, gradients match finite differences") {
  for (const std::uint64_t seed : {11u, 12u, 13u}) {
    CAPTURE(seed);
    Rng rng(seed);
    const Index rows = 5, d = 8;
    const double eps = 1e-5;
    MatD x = random_matrix(rng, rows, d);
    MatD w = random_matrix(rng, 1, d);
    const MatD r = random_matrix(rng, rows, d);

    MatD y;
    RmsNormSaved<double> saved;
    rms_norm_forward(w, eps, x, y, saved);
    CHECK(rel_err(y, naive_rms_norm(w, eps, x)) < 1e-14);
    REQUIRE(saved.inv_rms.rows() == rows);
    REQUIRE(saved.inv_rms.cols() == 1);

    // L = sum(y * R) so dL/dy = R.
    MatD dx;
    rms_norm_backward_input(w, saved, r, dx);
    MatD dw = MatD::Zero(1, d);
    rms_norm_backward_weight(saved, r, dw);

    const auto loss = [&] { return weighted_sum(naive_rms_norm(w, eps, x), r); };
    CHECK(rel_err(dx, fd_grad(x, loss)) < kFdTol);
    CHECK(rel_err(dw, fd_grad(w, loss)) < kFdTol);

    // The weight gradient accumulates.
    MatD dw2 = dw;
    rms_norm_backward_weight(saved, r, dw2);
    CHECK(rel_err(dw2, 2 * dw) < 1e-15);

    // dx may be the same object as dy.
    MatD inplace = r;
    rms_norm_backward_input(w, saved, inplace, inplace);
    CHECK(inplace == dx);
  }
}

TEST_CASE("rms_norm: float agrees with double") {
  const std::uint64_t seed = 21;
  CAPTURE(seed);
  Rng rng(seed);
  const Index rows = 6, d = 16;
  const MatD x = random_matrix(rng, rows, d), w = random_matrix(rng, 1, d), r = random_matrix(rng, rows, d);
  MatD y, dx, dw = MatD::Zero(1, d);
  RmsNormSaved<double> sd;
  rms_norm_forward(w, 1e-5, x, y, sd);
  rms_norm_backward_input(w, sd, r, dx);
  rms_norm_backward_weight(sd, r, dw);
  MatF yf, dxf, dwf = MatF::Zero(1, d);
  RmsNormSaved<float> sf;
  const MatF wf = to_float(w);
  rms_norm_forward(wf, 1e-5f, to_float(x), yf, sf);
  rms_norm_backward_input(wf, sf, to_float(r), dxf);
  rms_norm_backward_weight(sf, to_float(r), dwf);
  CHECK(rel_err(to_double(yf), y) < kFloatTol);
  CHECK(rel_err(to_double(dxf), dx) < kFloatTol);
  CHECK(rel_err(to_double(dwf), dw) < kFloatTol);
}

TEST_CASE("rms_norm: bad shapes and eps are ConfigErrors naming the field") {
  const MatD x = MatD::Ones(3, 4);
  MatD y;
  RmsNormSaved<double> s;
  check_config_error([&] { rms_norm_forward(MatD(MatD::Ones(1, 5)), 1e-5, x, y, s); }, "rms_norm w.cols");
  check_config_error([&] { rms_norm_forward(MatD(MatD::Ones(2, 4)), 1e-5, x, y, s); }, "rms_norm w.rows");
  check_config_error([&] { rms_norm_forward(MatD(MatD::Ones(1, 4)), 0.0, x, y, s); }, "rms_norm eps");
  rms_norm_forward(MatD(MatD::Ones(1, 4)), 1e-5, x, y, s);
  MatD dx;
  check_config_error([&] { rms_norm_backward_input(MatD(MatD::Ones(1, 4)), s, MatD(MatD::Ones(2, 4)), dx); },
                     "rms_norm dy.rows");
  MatD dw = MatD::Zero(1, 3);
  check_config_error([&] { rms_norm_backward_weight(s, x, dw); }, "rms_norm dw.cols");
}

// ---- embedding -------------------------------------------------------------------------

TEST_CASE("embedding: gather matches the naive loop, scatter matches finite differences") {
  for (const std::uint64_t seed : {31u, 32u}) {
    CAPTURE(seed);
    Rng rng(seed);
    const int vocab = 7;
    const Index d = 5;
    MatD table = random_matrix(rng, vocab, d);
    // Repeated ids, and some vocab rows never used (their gradient must stay zero).
    const std::vector<int> ids = {3, 1, 3, 0, 3, 1, 5, 3};
    const MatD r = random_matrix(rng, static_cast<Index>(ids.size()), d);

    MatD out;
    embedding_forward(table, std::span<const int>(ids), out);
    CHECK(out == naive_embedding(table, ids));  // a copy: bitwise

    MatD dtable = MatD::Zero(vocab, d);
    embedding_backward_weight(std::span<const int>(ids), r, dtable);
    const auto loss = [&] { return weighted_sum(naive_embedding(table, ids), r); };
    CHECK(rel_err(dtable, fd_grad(table, loss)) < kFdTol);
    CHECK(dtable.row(2).isZero(0.0));
    CHECK(dtable.row(4).isZero(0.0));
    CHECK(dtable.row(6).isZero(0.0));

    // Deterministic: the same token-order accumulation as a naive loop, bit for bit, and it adds.
    MatD naive = MatD::Constant(vocab, d, 0.25);
    for (std::size_t t = 0; t < ids.size(); ++t) naive.row(ids[t]) += r.row(static_cast<Index>(t));
    MatD acc = MatD::Constant(vocab, d, 0.25);
    embedding_backward_weight(std::span<const int>(ids), r, acc);
    CHECK(acc == naive);
  }
}

TEST_CASE("embedding: float agrees with double") {
  Rng rng(41);
  const MatD table = random_matrix(rng, 9, 4);
  const std::vector<int> ids = random_ids(rng, 12, 9);
  const MatD r = random_matrix(rng, 12, 4);
  MatD out, dt = MatD::Zero(9, 4);
  embedding_forward(table, std::span<const int>(ids), out);
  embedding_backward_weight(std::span<const int>(ids), r, dt);
  MatF outf, dtf = MatF::Zero(9, 4);
  embedding_forward(to_float(table), std::span<const int>(ids), outf);
  embedding_backward_weight(std::span<const int>(ids), to_float(r), dtf);
  CHECK(rel_err(to_double(outf), out) < kFloatTol);
  CHECK(rel_err(to_double(dtf), dt) < kFloatTol);
}

TEST_CASE("embedding: ids out of range are ConfigErrors naming embedding ids[r]") {
  const MatD table = MatD::Ones(4, 3);
  MatD out;
  const std::vector<int> high = {0, 1, 4}, low = {-1};
  check_config_error([&] { embedding_forward(table, std::span<const int>(high), out); }, "embedding ids[2]");
  check_config_error([&] { embedding_forward(table, std::span<const int>(low), out); }, "embedding ids[0]");
  MatD dt = MatD::Zero(4, 3);
  check_config_error([&] { embedding_backward_weight(std::span<const int>(high), MatD(MatD::Ones(3, 3)), dt); },
                     "embedding ids[2]");
  CHECK(dt.isZero(0.0));  // validated before any write
  check_config_error([&] { embedding_backward_weight(std::span<const int>(high), MatD(MatD::Ones(2, 3)), dt); },
                     "embedding dout.rows");
}

// ---- gated FFN -------------------------------------------------------------------------

TEST_CASE("gated_ffn: forward matches the naive loop, including empty experts") {
  const std::vector<std::vector<std::int64_t>> layouts = {
      {0, 3, 3, 7, 7}, {0, 0, 2, 2, 5, 5}, {0, 4}, {0, 0, 0}};
  std::uint64_t seed = 51;
  for (const auto& offsets : layouts) {
    CAPTURE(seed);
    Rng rng(seed++);
    const Index hidden = 6, ffn = 5;
    const auto experts = random_experts(rng, offsets.size() - 1, hidden, ffn);
    const MatD rows = random_matrix(rng, offsets.back(), hidden);
    MatD out;
    GatedFfnSaved<double> saved;
    gated_ffn_forward(std::span<const GatedFfnWeights<double>>(experts),
                      std::span<const std::int64_t>(offsets), rows, out, saved);
    REQUIRE(out.rows() == rows.rows());
    REQUIRE(out.cols() == hidden);
    CHECK(rel_err(out, naive_gated_ffn(experts, offsets, rows)) < 1e-14);

    // Deterministic: a second run is bitwise identical.
    MatD again;
    GatedFfnSaved<double> saved2;
    gated_ffn_forward(std::span<const GatedFfnWeights<double>>(experts),
                      std::span<const std::int64_t>(offsets), rows, again, saved2);
    CHECK(again == out);
  }
}

TEST_CASE("gated_ffn: d_rows and dw1/dw2/dw3 match finite differences; empty experts get exactly zero") {
  for (const std::uint64_t seed : {61u, 62u}) {
    CAPTURE(seed);
    Rng rng(seed);
    // Expert 1 (middle) and expert 4 (end) own no rows.
    const std::vector<std::int64_t> offsets = {0, 3, 3, 5, 8, 8};
    const Index hidden = 6, ffn = 5;
    auto experts = random_experts(rng, offsets.size() - 1, hidden, ffn);
    MatD rows = random_matrix(rng, offsets.back(), hidden);
    const MatD r = random_matrix(rng, rows.rows(), hidden);

    MatD out, d_rows;
    GatedFfnSaved<double> saved;
    const std::span<const std::int64_t> off(offsets);
    gated_ffn_forward(std::span<const GatedFfnWeights<double>>(experts), off, rows, out, saved);
    gated_ffn_backward_input(std::span<const GatedFfnWeights<double>>(experts), r, saved, d_rows);
    auto grads = zero_like(experts);
    gated_ffn_backward_weight(saved, std::span<GatedFfnWeights<double>>(grads));

    const auto loss = [&] { return weighted_sum(naive_gated_ffn(experts, offsets, rows), r); };
    CHECK(rel_err(d_rows, fd_grad(rows, loss)) < kFdTol);
    for (std::size_t e = 0; e < experts.size(); ++e) {
      CAPTURE(e);
      if (offsets[e + 1] == offsets[e]) {
        CHECK(grads[e].w1.isZero(0.0));
        CHECK(grads[e].w2.isZero(0.0));
        CHECK(grads[e].w3.isZero(0.0));
        continue;
      }
      CHECK(rel_err(grads[e].w1, fd_grad(experts[e].w1, loss)) < kFdTol);
      CHECK(rel_err(grads[e].w2, fd_grad(experts[e].w2, loss)) < kFdTol);
      CHECK(rel_err(grads[e].w3, fd_grad(experts[e].w3, loss)) < kFdTol);
    }

    // The weight gradients accumulate.
    auto twice = grads;
    gated_ffn_backward_weight(saved, std::span<GatedFfnWeights<double>>(twice));
    for (std::size_t e = 0; e < experts.size(); ++e) {
      CHECK(rel_err(twice[e].w1, 2 * grads[e].w1) < 1e-15);
      CHECK(rel_err(twice[e].w2, 2 * grads[e].w2) < 1e-15);
    }

    // d_rows may be the same object as d_out.
    MatD inplace = r;
    GatedFfnSaved<double> s2;
    gated_ffn_forward(std::span<const GatedFfnWeights<double>>(experts), off, rows, out, s2);
    gated_ffn_backward_input(std::span<const GatedFfnWeights<double>>(experts), inplace, s2, inplace);
    CHECK(inplace == d_rows);
  }
}

TEST_CASE("gated_ffn: no rows at all is a valid call with zero gradients") {
  Rng rng(71);
  const std::vector<std::int64_t> offsets = {0, 0, 0};
  const auto experts = random_experts(rng, 2, 4, 3);
  const MatD rows(0, 4);
  MatD out, d_rows;
  GatedFfnSaved<double> saved;
  gated_ffn_forward(std::span<const GatedFfnWeights<double>>(experts), std::span<const std::int64_t>(offsets),
                    rows, out, saved);
  CHECK(out.rows() == 0);
  CHECK(out.cols() == 4);
  gated_ffn_backward_input(std::span<const GatedFfnWeights<double>>(experts), MatD(0, 4), saved, d_rows);
  CHECK(d_rows.rows() == 0);
  auto grads = zero_like(experts);
  gated_ffn_backward_weight(saved, std::span<GatedFfnWeights<double>>(grads));
  for (const auto& g : grads) CHECK((g.w1.isZero(0.0) && g.w2.isZero(0.0) && g.w3.isZero(0.0)));
}

TEST_CASE("gated_ffn: float agrees with double") {
  const std::uint64_t seed = 81;
  CAPTURE(seed);
  Rng rng(seed);
  const std::vector<std::int64_t> offsets = {0, 6, 6, 13, 20};
  const Index hidden = 16, ffn = 24;
  const auto experts = random_experts(rng, 4, hidden, ffn);
  const MatD rows = random_matrix(rng, 20, hidden), r = random_matrix(rng, 20, hidden);
  const std::span<const std::int64_t> off(offsets);

  MatD out, d_rows;
  GatedFfnSaved<double> sd;
  gated_ffn_forward(std::span<const GatedFfnWeights<double>>(experts), off, rows, out, sd);
  gated_ffn_backward_input(std::span<const GatedFfnWeights<double>>(experts), r, sd, d_rows);
  auto gd = zero_like(experts);
  gated_ffn_backward_weight(sd, std::span<GatedFfnWeights<double>>(gd));

  const auto ef = to_float(experts);
  MatF outf, d_rowsf;
  GatedFfnSaved<float> sf;
  gated_ffn_forward(std::span<const GatedFfnWeights<float>>(ef), off, to_float(rows), outf, sf);
  gated_ffn_backward_input(std::span<const GatedFfnWeights<float>>(ef), to_float(r), sf, d_rowsf);
  auto gf = to_float(zero_like(experts));
  gated_ffn_backward_weight(sf, std::span<GatedFfnWeights<float>>(gf));

  CHECK(rel_err(to_double(outf), out) < kFloatTol);
  CHECK(rel_err(to_double(d_rowsf), d_rows) < kFloatTol);
  for (std::size_t e = 0; e < experts.size(); ++e) {
    CAPTURE(e);
    CHECK(rel_err(to_double(gf[e].w1), gd[e].w1) < kFloatTol);
    CHECK(rel_err(to_double(gf[e].w2), gd[e].w2) < kFloatTol);
    CHECK(rel_err(to_double(gf[e].w3), gd[e].w3) < kFloatTol);
  }
}

TEST_CASE("gated_ffn: bad offsets and shapes are ConfigErrors naming the field") {
  Rng rng(91);
  const auto experts = random_experts(rng, 3, 4, 3);
  const std::span<const GatedFfnWeights<double>> ex(experts);
  const MatD rows = random_matrix(rng, 5, 4);
  MatD out;
  GatedFfnSaved<double> saved;
  const auto run = [&](std::vector<std::int64_t> offsets) {
    return [&, offsets] { gated_ffn_forward(ex, std::span<const std::int64_t>(offsets), rows, out, saved); };
  };
  check_config_error(run({0, 2, 5}), "gated_ffn offsets");        // too few
  check_config_error(run({0, 1, 2, 3, 5}), "gated_ffn offsets");  // too many
  check_config_error(run({1, 2, 3, 5}), "gated_ffn offsets");     // offsets[0] != 0
  check_config_error(run({0, 3, 2, 5}), "gated_ffn offsets");     // decreasing
  check_config_error(run({0, 2, 3, 4}), "gated_ffn offsets");     // back() != rows
  check_config_error(run({0, 2, 3, 6}), "gated_ffn offsets");

  auto bad = experts;
  bad[2].w3 = MatD::Zero(3, 5);
  const std::vector<std::int64_t> ok = {0, 2, 3, 5};
  check_config_error(
      [&] { gated_ffn_forward(std::span<const GatedFfnWeights<double>>(bad), std::span<const std::int64_t>(ok), rows, out, saved); },
      "gated_ffn experts[2].w3.cols");

  // backward_weight before backward_input, and gradients of the wrong shape.
  gated_ffn_forward(ex, std::span<const std::int64_t>(ok), rows, out, saved);
  auto grads = zero_like(experts);
  check_config_error([&] { gated_ffn_backward_weight(saved, std::span<GatedFfnWeights<double>>(grads)); },
                     "gated_ffn saved");
  MatD d_rows;
  check_config_error([&] { gated_ffn_backward_input(ex, MatD(MatD::Ones(4, 4)), saved, d_rows); },
                     "gated_ffn d_out.rows");
  gated_ffn_backward_input(ex, MatD(MatD::Ones(5, 4)), saved, d_rows);
  grads[1].w2 = MatD::Zero(4, 4);
  check_config_error([&] { gated_ffn_backward_weight(saved, std::span<GatedFfnWeights<double>>(grads)); },
                     "gated_ffn grads[1].w2.cols");
}

// ---- LM head + cross-entropy -----------------------------------------------------------

TEST_CASE("lm_head: loss matches the naive loop; dx and dw of scale * loss match finite differences") {
  for (const std::uint64_t seed : {101u, 102u, 103u}) {
    CAPTURE(seed);
    Rng rng(seed);
    const int vocab = 11;
    const Index rows = 9, d = 7;
    MatD w = random_matrix(rng, vocab, d, 0.5);
    MatD x = random_matrix(rng, rows, d);
    const std::vector<int> targets = random_ids(rng, static_cast<std::size_t>(rows), vocab);
    const std::span<const int> tg(targets);
    const double scale = 0.37;

    LmHeadSaved<double> saved;
    const double loss = lm_head_forward(w, x, tg, saved);
    const double naive = naive_lm_loss(w, x, targets);
    CHECK(std::abs(loss - naive) <= 1e-14 * naive);
    CHECK(lm_head_loss(w, x, tg) == loss);
    REQUIRE(saved.probs.rows() == rows);
    CHECK((saved.probs.rowwise().sum().array() - 1.0).abs().maxCoeff() < 1e-14);

    MatD dx;
    lm_head_backward_input(w, scale, saved, dx);
    MatD dw = MatD::Zero(vocab, d);
    lm_head_backward_weight(saved, dw);
    const auto f = [&] { return scale * naive_lm_loss(w, x, targets); };
    CHECK(rel_err(dx, fd_grad(x, f)) < kFdTol);
    CHECK(rel_err(dw, fd_grad(w, f)) < kFdTol);

    MatD dw2 = dw;
    lm_head_backward_weight(saved, dw2);
    CHECK(rel_err(dw2, 2 * dw) < 1e-15);
  }
}

TEST_CASE("lm_head: large logits stay finite (log-sum-exp is shifted)") {
  Rng rng(111);
  const MatD w = random_matrix(rng, 5, 3, 1000.0), x = random_matrix(rng, 4, 3);
  const std::vector<int> targets = {0, 1, 2, 3};
  LmHeadSaved<double> saved;
  const double loss = lm_head_forward(w, x, std::span<const int>(targets), saved);
  CHECK(std::isfinite(loss));
  CHECK(loss >= 0.0);
  CHECK(saved.probs.allFinite());
}

TEST_CASE("lm_head: with w = 0 the loss is log(vocab)") {
  const int vocab = 256;
  Rng rng(121);
  for (const Index rows : {1, 2, 37}) {
    CAPTURE(rows);
    const MatD w = MatD::Zero(vocab, 8), x = random_matrix(rng, rows, 8);
    const std::vector<int> targets = random_ids(rng, static_cast<std::size_t>(rows), vocab);
    LmHeadSaved<double> saved;
    const double loss = lm_head_forward(w, x, std::span<const int>(targets), saved);
    const double want = std::log(static_cast<double>(vocab));
    // Every row's loss is exactly log(vocab); the mean of n equal values is exact for
    // n = 1, 2 and within a few ulps otherwise (n-term rounding).
    if (rows <= 2)
      CHECK(loss == want);
    else
      CHECK(std::abs(loss - want) <= 8 * std::numeric_limits<double>::epsilon() * want);
    CHECK(lm_head_loss(w, x, std::span<const int>(targets)) == loss);
    // exp(-log(vocab)) rounds, so the uniform softmax is 1/vocab to a few ulps only.
    CHECK((saved.probs.array() - 1.0 / vocab).abs().maxCoeff() <= 4 * std::numeric_limits<double>::epsilon() / vocab);

    const MatF wf = MatF::Zero(vocab, 8);
    const float lf = lm_head_loss(wf, to_float(x), std::span<const int>(targets));
    if (rows <= 2) CHECK(lf == std::log(static_cast<float>(vocab)));
  }
}

TEST_CASE("lm_head: float agrees with double") {
  const std::uint64_t seed = 131;
  CAPTURE(seed);
  Rng rng(seed);
  const int vocab = 256;
  const Index rows = 16, d = 12;
  const MatD w = random_matrix(rng, vocab, d, 0.3), x = random_matrix(rng, rows, d);
  const std::vector<int> targets = random_ids(rng, static_cast<std::size_t>(rows), vocab);
  const std::span<const int> tg(targets);
  LmHeadSaved<double> sd;
  const double ld = lm_head_forward(w, x, tg, sd);
  MatD dx, dw = MatD::Zero(vocab, d);
  lm_head_backward_input(w, 0.5, sd, dx);
  lm_head_backward_weight(sd, dw);
  LmHeadSaved<float> sf;
  const MatF wf = to_float(w);
  const float lf = lm_head_forward(wf, to_float(x), tg, sf);
  MatF dxf, dwf = MatF::Zero(vocab, d);
  lm_head_backward_input(wf, 0.5f, sf, dxf);
  lm_head_backward_weight(sf, dwf);
  CHECK(std::abs(static_cast<double>(lf) - ld) <= kFloatTol * ld);
  CHECK(rel_err(to_double(dxf), dx) < kFloatTol);
  CHECK(rel_err(to_double(dwf), dw) < kFloatTol);
}

TEST_CASE("lm_head: bad targets and shapes are ConfigErrors naming the field") {
  const MatD w = MatD::Ones(5, 3), x = MatD::Ones(2, 3);
  LmHeadSaved<double> saved;
  const std::vector<int> high = {0, 5}, low = {-1, 0}, short_t = {0};
  check_config_error([&] { lm_head_forward(w, x, std::span<const int>(high), saved); }, "lm_head targets[1]");
  check_config_error([&] { lm_head_forward(w, x, std::span<const int>(low), saved); }, "lm_head targets[0]");
  check_config_error([&] { lm_head_loss(w, x, std::span<const int>(high)); }, "lm_head targets[1]");
  check_config_error([&] { lm_head_loss(w, x, std::span<const int>(short_t)); }, "lm_head targets.size");
  check_config_error([&] { lm_head_loss(MatD(MatD::Ones(5, 4)), x, std::span<const int>(low)); }, "lm_head w.cols");
  check_config_error([&] { lm_head_loss(w, MatD(0, 3), std::span<const int>()); }, "lm_head x.rows");
  MatD dw = MatD::Zero(5, 3);
  check_config_error([&] { lm_head_backward_weight(saved, dw); }, "lm_head saved");
}
