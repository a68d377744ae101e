// SPDX-License-Identifier: Apache-2.0
// MoE router: forward against a naive loop implementation (brute-force top-k by repeated
// argmax), backward against central finite differences, float against double, the
// uniform-routing closed form, empty input, and option/shape validation.
#include <disagmoe/model/random.hpp>
#include <disagmoe/model/router.hpp>

#include "matrix_util.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

using namespace disagmoe::model;
using disagmoe::ConfigError;
using disagmoe::test::max_abs;
using disagmoe::test::random_matrix;

namespace {

std::vector<double> naive_logits(const Matrix<double>& wg, const Matrix<double>& x,
                                 Eigen::Index t) {
  std::vector<double> l(static_cast<std::size_t>(wg.rows()), 0.0);
  for (Eigen::Index i = 0; i < wg.rows(); ++i)
    for (Eigen::Index h = 0; h < wg.cols(); ++h) l[static_cast<std::size_t>(i)] += x(t, h) * wg(i, h);
  return l;
}

struct Naive {
  std::vector<std::vector<int>> ids;
  std::vector<std::vector<double>> gates;
  double aux = 0;
  double z = 0;
};

// Straight from the definitions: unshifted softmax (inputs keep logits small), top-k by
// repeated argmax with strict '>' scanning ids upwards (ties -> lower id), Megatron's
// aux = E/(T^2 k) sum_i count_i * sum_t p_ti, z = mean lse^2.
Naive naive_router(int experts, int k, const Matrix<double>& wg, const Matrix<double>& x) {
  Naive n;
  const auto tokens = x.rows();
  std::vector<double> count(static_cast<std::size_t>(experts), 0.0), psum(count);
  for (Eigen::Index t = 0; t < tokens; ++t) {
    const auto l = naive_logits(wg, x, t);
    double s = 0;
    for (double v : l) s += std::exp(v);
    std::vector<double> p;
    for (double v : l) p.push_back(std::exp(v) / s);
    n.z += std::log(s) * std::log(s);
    std::vector<bool> taken(p.size(), false);
    std::vector<int> ids;
    std::vector<double> sel;
    for (int j = 0; j < k; ++j) {
      int best = -1;
      for (int i = 0; i < experts; ++i)
        if (!taken[static_cast<std::size_t>(i)] && (best < 0 || p[static_cast<std::size_t>(i)] > p[static_cast<std::size_t>(best)])) best = i;
      taken[static_cast<std::size_t>(best)] = true;
      ids.push_back(best);
      sel.push_back(p[static_cast<std::size_t>(best)]);
      count[static_cast<std::size_t>(best)] += 1;
    }
    double ssel = 0;
    for (double v : sel) ssel += v;
    for (double& v : sel) v /= ssel;
    for (int i = 0; i < experts; ++i) psum[static_cast<std::size_t>(i)] += p[static_cast<std::size_t>(i)];
    n.ids.push_back(ids);
    n.gates.push_back(sel);
  }
  if (tokens > 0) {
    double acc = 0;
    for (int i = 0; i < experts; ++i) acc += count[static_cast<std::size_t>(i)] * psum[static_cast<std::size_t>(i)];
    const double T = static_cast<double>(tokens);
    n.aux = experts * acc / (T * T * k);
    n.z /= T;
  }
  return n;
}

// Redraws each token's input until the k-th and (k+1)-th logits differ by `gap`, so a
// finite-difference step cannot change the top-k selection.
Matrix<double> separated_input(Rng& rng, const Matrix<double>& wg, Eigen::Index tokens,
                               int k, double gap) {
  Matrix<double> x(tokens, wg.cols());
  for (Eigen::Index t = 0; t < tokens; ++t) {
    for (int attempt = 0;; ++attempt) {
      REQUIRE(attempt < 10000);
      for (Eigen::Index h = 0; h < wg.cols(); ++h) x(t, h) = rng.normal();
      auto l = naive_logits(wg, x, t);
      if (k == static_cast<int>(wg.rows())) break;
      std::sort(l.begin(), l.end(), std::greater<>());
      if (l[static_cast<std::size_t>(k - 1)] - l[static_cast<std::size_t>(k)] > gap) break;
    }
  }
  return x;
}

template <class T>
T objective(const RouterOptions& o, const Matrix<T>& wg, const Matrix<T>& x,
            const Matrix<T>& r, T scale) {
  RouterOutput<T> out;
  RouterSaved<T> saved;
  router_forward(o, wg, x, out, saved);
  return (r.array() * out.gates.array()).sum() +
         scale * (static_cast<T>(o.aux_loss_coef) * out.aux_loss +
                  static_cast<T>(o.z_loss_coef) * out.z_loss);
}

template <class T>
struct Grads {
  Matrix<T> dx, dwg;
};

// Analytic gradients; dx and dwg start from `dx0` / `dwg0` to check that both accumulate.
template <class T>
Grads<T> analytic(const RouterOptions& o, const Matrix<T>& wg, const Matrix<T>& x,
                  const Matrix<T>& r, T scale, const Matrix<T>& dx0, const Matrix<T>& dwg0) {
  RouterOutput<T> out;
  RouterSaved<T> saved;
  router_forward(o, wg, x, out, saved);
  Grads<T> g{dx0, dwg0};
  router_backward_input(o, wg, r, scale, saved, g.dx);
  router_backward_weight(saved, g.dwg);
  g.dx -= dx0;
  g.dwg -= dwg0;
  return g;
}


}  // namespace

TEST_CASE("router forward matches a naive implementation") {
  struct Case {
    int experts, top_k;
  };
  for (const Case c : {Case{6, 2}, Case{6, 1}, Case{5, 5}, Case{8, 3}, Case{1, 1}}) {
    for (std::uint64_t seed : {1u, 2u, 3u}) {
      CAPTURE(seed);
      CAPTURE(c.experts);
      CAPTURE(c.top_k);
      Rng rng(seed);
      const Eigen::Index tokens = 11, hidden = 7;
      const Matrix<double> wg = random_matrix(rng, c.experts, hidden, 0.6);
      const Matrix<double> x = random_matrix(rng, tokens, hidden, 1.0);
      RouterOptions o{c.experts, c.top_k, 0.01, 0.001};
      RouterOutput<double> out;
      RouterSaved<double> saved;
      router_forward(o, wg, x, out, saved);
      const Naive n = naive_router(c.experts, c.top_k, wg, x);
      REQUIRE(out.topk_ids.rows() == tokens);
      REQUIRE(out.topk_ids.cols() == c.top_k);
      REQUIRE(out.gates.rows() == tokens);
      REQUIRE(out.gates.cols() == c.top_k);
      for (Eigen::Index t = 0; t < tokens; ++t) {
        double gsum = 0;
        for (int j = 0; j < c.top_k; ++j) {
          CHECK(out.topk_ids(t, j) == n.ids[static_cast<std::size_t>(t)][static_cast<std::size_t>(j)]);
          CHECK(out.gates(t, j) == doctest::Approx(n.gates[static_cast<std::size_t>(t)][static_cast<std::size_t>(j)]).epsilon(1e-12));
          gsum += out.gates(t, j);
        }
        CHECK(gsum == doctest::Approx(1.0).epsilon(1e-14));
      }
      CHECK(out.aux_loss == doctest::Approx(n.aux).epsilon(1e-12));
      CHECK(out.z_loss == doctest::Approx(n.z).epsilon(1e-12));
    }
  }
}

TEST_CASE("router ties go to the lower expert id") {
  // hidden = 1 makes every logit a single product, so equal weights give bit-equal logits.
  Matrix<double> wg(5, 1);
  wg << 1, 3, 3, 2, 3;
  Matrix<double> x(2, 1);
  x << 1.5, -1.0;
  RouterOptions o{5, 5, 0, 0};
  RouterOutput<double> out;
  RouterSaved<double> saved;
  router_forward(o, wg, x, out, saved);
  const Naive n = naive_router(5, 5, wg, x);
  const std::vector<int> want0{1, 2, 4, 3, 0}, want1{0, 3, 1, 2, 4};
  for (int j = 0; j < 5; ++j) {
    CHECK(out.topk_ids(0, j) == want0[static_cast<std::size_t>(j)]);
    CHECK(out.topk_ids(1, j) == want1[static_cast<std::size_t>(j)]);
    CHECK(n.ids[0][static_cast<std::size_t>(j)] == want0[static_cast<std::size_t>(j)]);
  }
  o.top_k = 2;
  router_forward(o, wg, x, out, saved);
  CHECK(out.topk_ids(0, 0) == 1);
  CHECK(out.topk_ids(0, 1) == 2);
  CHECK(out.gates(0, 0) == 0.5);
  CHECK(out.gates(0, 1) == 0.5);
  // Large logits: the max-shifted softmax stays finite.
  Matrix<double> big = x * 1000.0;
  router_forward(o, wg, big, out, saved);
  CHECK(std::isfinite(out.z_loss));
  // lse = 4500 + log(3) for the first token (three tied maxima), -1000 for the second.
  const double lse0 = 4500.0 + std::log(3.0);
  CHECK(out.z_loss == doctest::Approx((lse0 * lse0 + 1000.0 * 1000.0) / 2).epsilon(1e-12));
  CHECK(out.gates(0, 0) == 0.5);
}

TEST_CASE("router backward matches central finite differences") {
  struct Term {
    const char* name;
    bool gates;
    double a, b;
  };
  struct Case {
    int experts, top_k;
  };
  const Term terms[] = {{"gates", true, 0, 0},
                        {"aux", false, 0.7, 0},
                        {"z", false, 0, 0.3},
                        {"all", true, 0.7, 0.3}};
  for (const Case c : {Case{6, 2}, Case{4, 1}, Case{5, 5}, Case{8, 3}}) {
    for (const Term& term : terms) {
      const std::uint64_t seed = 100 + static_cast<std::uint64_t>(c.experts * 10 + c.top_k);
      CAPTURE(seed);
      CAPTURE(c.experts);
      CAPTURE(c.top_k);
      CAPTURE(std::string(term.name));
      Rng rng(seed);
      const Eigen::Index tokens = 7, hidden = 5;
      const double scale = 1.7;
      const RouterOptions o{c.experts, c.top_k, term.a, term.b};
      Matrix<double> wg = random_matrix(rng, c.experts, hidden, 0.5);
      Matrix<double> x = separated_input(rng, wg, tokens, c.top_k, 0.05);
      const Matrix<double> r = term.gates ? random_matrix(rng, tokens, c.top_k, 1.0)
                                          : Matrix<double>::Zero(tokens, c.top_k);
      const Matrix<double> dx0 = random_matrix(rng, tokens, hidden, 1.0);
      const Matrix<double> dwg0 = random_matrix(rng, c.experts, hidden, 1.0);
      const Grads<double> g = analytic(o, wg, x, r, scale, dx0, dwg0);

      const double h = 1e-6;
      auto fd = [&](Matrix<double>& m, Eigen::Index i, Eigen::Index j) {
        const double keep = m(i, j);
        m(i, j) = keep + h;
        const double up = objective(o, wg, x, r, scale);
        m(i, j) = keep - h;
        const double down = objective(o, wg, x, r, scale);
        m(i, j) = keep;
        return (up - down) / (2 * h);
      };
      Matrix<double> fdx(tokens, hidden), fdw(c.experts, hidden);
      for (Eigen::Index i = 0; i < tokens; ++i)
        for (Eigen::Index j = 0; j < hidden; ++j) fdx(i, j) = fd(x, i, j);
      for (Eigen::Index i = 0; i < c.experts; ++i)
        for (Eigen::Index j = 0; j < hidden; ++j) fdw(i, j) = fd(wg, i, j);

      // Two cases are constant by closed form: top_k = 1 makes every gate 1, and
      // top_k = experts makes f_i = 1/E, so aux = sum_i P_i = 1. Their gradient must
      // vanish; every other case must have a nonzero one to check.
      const bool constant = (!term.gates && term.b == 0 && c.top_k == c.experts) ||
                            (term.gates && term.a == 0 && term.b == 0 && c.top_k == 1);
      const double sx = max_abs(g.dx), sw = max_abs(g.dwg);
      if (constant) {
        CHECK(sx <= 1e-12);
        CHECK(sw <= 1e-12);
        CHECK(max_abs(fdx) <= 1e-8);
        CHECK(max_abs(fdw) <= 1e-8);
      } else {
        CHECK(sx > 1e-3);
        CHECK(sw > 1e-3);
        CHECK(max_abs(g.dx - fdx) <= 1e-6 * sx);
        CHECK(max_abs(g.dwg - fdw) <= 1e-6 * sw);
      }
    }
  }
}

TEST_CASE("router float agrees with double") {
  for (std::uint64_t seed : {7u, 8u}) {
    CAPTURE(seed);
    Rng rng(seed);
    const Eigen::Index tokens = 32, hidden = 16;
    const int experts = 8, k = 2;
    const RouterOptions o{experts, k, 0.5, 0.2};
    const Matrix<double> wg = random_matrix(rng, experts, hidden, 0.25);
    const Matrix<double> x = separated_input(rng, wg, tokens, k, 0.05);
    const Matrix<double> r = random_matrix(rng, tokens, k, 1.0);
    const Matrix<double> dx0 = Matrix<double>::Zero(tokens, hidden);
    const Matrix<double> dwg0 = Matrix<double>::Zero(experts, hidden);
    const double scale = 1.3;

    RouterOutput<double> od;
    RouterSaved<double> sd;
    router_forward(o, wg, x, od, sd);
    RouterOutput<float> of;
    RouterSaved<float> sf;
    const Matrix<float> wgf = wg.cast<float>(), xf = x.cast<float>(), rf = r.cast<float>();
    router_forward(o, wgf, xf, of, sf);
    CHECK(od.topk_ids == of.topk_ids);
    CHECK(max_abs(od.gates - of.gates.cast<double>()) <= 1e-5);
    CHECK(of.aux_loss == doctest::Approx(od.aux_loss).epsilon(1e-5));
    CHECK(of.z_loss == doctest::Approx(od.z_loss).epsilon(1e-5));

    const Grads<double> gd = analytic(o, wg, x, r, scale, dx0, dwg0);
    const Grads<float> gf = analytic(o, wgf, xf, rf, static_cast<float>(scale),
                                     Matrix<float>(dx0.cast<float>()),
                                     Matrix<float>(dwg0.cast<float>()));
    CHECK(max_abs(gd.dx - gf.dx.cast<double>()) <= 1e-5 * std::max(1.0, max_abs(gd.dx)));
    CHECK(max_abs(gd.dwg - gf.dwg.cast<double>()) <= 1e-5 * std::max(1.0, max_abs(gd.dwg)));
  }
}

TEST_CASE("router uniform closed form") {
  // wg = 0: every prob is 1/E, ties pick experts 0..k-1 for every token, so
  // f_i = T/(T k) = 1/k for i < k (0 otherwise) and P_i = 1/E:
  // aux = E * k * (1/k)(1/E) = 1; lse = log(E), z = log(E)^2; gates = 1/k.
  // E, k, T powers of two keep every step exact, so aux is exactly 1.
  const RouterOptions o{8, 2, 1, 1};
  const Matrix<double> wg = Matrix<double>::Zero(8, 3);
  Rng rng(5);
  const Matrix<double> x = random_matrix(rng, 16, 3, 1.0);
  RouterOutput<double> out;
  RouterSaved<double> saved;
  router_forward(o, wg, x, out, saved);
  CHECK(out.aux_loss == 1.0);
  CHECK(out.z_loss == doctest::Approx(std::log(8.0) * std::log(8.0)).epsilon(1e-15));
  for (Eigen::Index t = 0; t < 16; ++t) {
    CHECK(out.topk_ids(t, 0) == 0);
    CHECK(out.topk_ids(t, 1) == 1);
    CHECK(out.gates(t, 0) == 0.5);
    CHECK(out.gates(t, 1) == 0.5);
  }
  // Not a power of two: still 1 up to rounding, in both precisions.
  const RouterOptions o3{6, 3, 0, 0};
  router_forward(o3, Matrix<double>(Matrix<double>::Zero(6, 3)), x, out, saved);
  CHECK(out.aux_loss == doctest::Approx(1.0).epsilon(1e-14));
  CHECK(out.z_loss == doctest::Approx(std::log(6.0) * std::log(6.0)).epsilon(1e-14));
  RouterOutput<float> of;
  RouterSaved<float> sf;
  router_forward(o3, Matrix<float>(Matrix<float>::Zero(6, 3)), Matrix<float>(x.cast<float>()), of, sf);
  CHECK(of.aux_loss == doctest::Approx(1.0).epsilon(1e-6));
  CHECK(of.z_loss == doctest::Approx(std::log(6.0) * std::log(6.0)).epsilon(1e-6));
}

TEST_CASE("router handles no tokens") {
  const RouterOptions o{4, 2, 0.1, 0.1};
  Rng rng(9);
  const Matrix<double> wg = random_matrix(rng, 4, 3, 1.0);
  const Matrix<double> x(0, 3);
  RouterOutput<double> out;
  RouterSaved<double> saved;
  router_forward(o, wg, x, out, saved);
  CHECK(out.topk_ids.rows() == 0);
  CHECK(out.topk_ids.cols() == 2);
  CHECK(out.gates.rows() == 0);
  CHECK(out.aux_loss == 0.0);
  CHECK(out.z_loss == 0.0);
  Matrix<double> dx(0, 3);
  Matrix<double> dwg = Matrix<double>::Zero(4, 3);
  CHECK_THROWS_AS(router_backward_weight(saved, dwg), ConfigError);  // before backward_input
  router_backward_input(o, wg, Matrix<double>(0, 2), 2.0, saved, dx);
  router_backward_weight(saved, dwg);
  CHECK(dwg.isZero(0.0));
}

TEST_CASE("router validation names the field") {
  auto message = [](const RouterOptions& o) {
    try {
      validate(o);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(message({8, 2, 0, 0}).empty());
  CHECK(message({8, 8, 0.01, 0.001}).empty());
  CHECK(message({8, 9, 0, 0}) == "RouterOptions.top_k = 9: expected 1 <= top_k <= experts (8)");
  CHECK(message({8, 0, 0, 0}).find("RouterOptions.top_k = 0") == 0);
  CHECK(message({0, 1, 0, 0}).find("RouterOptions.experts = 0") == 0);
  CHECK(message({8, 2, -1, 0}).find("RouterOptions.aux_loss_coef = -1") == 0);
  CHECK(message({8, 2, 0, -0.5}).find("RouterOptions.z_loss_coef = -0.5") == 0);
  CHECK(message({8, 2, std::nan(""), 0}).find("RouterOptions.aux_loss_coef") == 0);
  CHECK(message({8, 2, 0, HUGE_VAL}).find("RouterOptions.z_loss_coef") == 0);

  // Forward and backward reject bad options and shapes instead of reading out of bounds.
  Rng rng(11);
  const Matrix<double> wg = random_matrix(rng, 4, 3, 1.0);
  const Matrix<double> x = random_matrix(rng, 5, 3, 1.0);
  RouterOutput<double> out;
  RouterSaved<double> saved;
  CHECK_THROWS_AS(router_forward(RouterOptions{4, 5, 0, 0}, wg, x, out, saved), ConfigError);
  CHECK_THROWS_AS(router_forward(RouterOptions{5, 2, 0, 0}, wg, x, out, saved), ConfigError);
  CHECK_THROWS_AS(router_forward(RouterOptions{4, 2, 0, 0}, wg,
                                 Matrix<double>(random_matrix(rng, 5, 2, 1.0)), out, saved),
                  ConfigError);
  const RouterOptions o{4, 2, 0, 0};
  router_forward(o, wg, x, out, saved);
  Matrix<double> dx = Matrix<double>::Zero(5, 3);
  CHECK_THROWS_AS(router_backward_input(o, wg, Matrix<double>(Matrix<double>::Zero(5, 3)), 1.0, saved, dx),
                  ConfigError);
  Matrix<double> bad_dx = Matrix<double>::Zero(4, 3);
  CHECK_THROWS_AS(router_backward_input(o, wg, Matrix<double>(Matrix<double>::Zero(5, 2)), 1.0, saved, bad_dx),
                  ConfigError);
  router_backward_input(o, wg, Matrix<double>(Matrix<double>::Zero(5, 2)), 1.0, saved, dx);
  Matrix<double> bad_dwg = Matrix<double>::Zero(3, 3);
  CHECK_THROWS_AS(router_backward_weight(saved, bad_dwg), ConfigError);
  try {
    router_forward(RouterOptions{4, 2, 0, 0}, wg, Matrix<double>(random_matrix(rng, 5, 2, 1.0)), out, saved);
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()) == "router_forward: x = 5 x 2: expected 5 x 3");
  }
}
