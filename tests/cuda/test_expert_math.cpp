// SPDX-License-Identifier: Apache-2.0
// The element-wise arithmetic of the CUDA experts (expert_math.hpp), run on the host,
// against model/gated_ffn.hpp: the act and dL/dh1, dL/dh3 the reference keeps in its
// saved state, on random experts.
#include <disagmoe/backend/cuda/expert_math.hpp>
#include <disagmoe/model/gated_ffn.hpp>
#include <disagmoe/model/init.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

using namespace disagmoe;

namespace {
/// |a - b| within `ulps` units in the last place of the larger (the reference's exp may be
/// Eigen's vectorised one, a few ulps from expf).
bool close(float a, float b, float ulps = 8) {
  const float scale = std::max(std::abs(a), std::abs(b));
  return std::abs(a - b) <= ulps * std::numeric_limits<float>::epsilon() * std::max(scale, 1e-30f);
}
}  // namespace

TEST_CASE("silu gate and its backward equal the reference's element-wise passes") {
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    INFO("seed = " << seed);
    model::Rng rng(seed);
    const int hidden = 3 + static_cast<int>(seed % 5), ffn = 2 + static_cast<int>(seed % 7), n = 5 + static_cast<int>(seed % 4);
    std::vector<model::GatedFfnWeights<float>> w(1);
    const double std_dev = 0.5 + static_cast<double>(seed);  // large pre-activations reach the saturated tails
    w[0].w1 = model::normal_matrix<float>(ffn, hidden, std_dev, rng);
    w[0].w2 = model::normal_matrix<float>(hidden, ffn, std_dev, rng);
    w[0].w3 = model::normal_matrix<float>(ffn, hidden, std_dev, rng);
    const model::Matrix<float> x = model::normal_matrix<float>(n, hidden, 1.0, rng);
    const model::Matrix<float> dy = model::normal_matrix<float>(n, hidden, 1.0, rng);
    const std::vector<std::int64_t> offsets{0, n};
    model::GatedFfnSaved<float> saved;
    model::Matrix<float> y, dx;
    model::gated_ffn_forward<float>(w, offsets, x, y, saved);
    model::gated_ffn_backward_input<float>(w, dy, saved, dx);
    const model::Matrix<float> g_ref = saved.d_out * w[0].w2;  // dL/dact, the backward pass's input
    for (Eigen::Index i = 0; i < saved.h1.size(); ++i) {
      const float h1 = saved.h1.data()[i], h3 = saved.h3.data()[i];
      CHECK(close(cuda::silu_gate(h1, h3), saved.act.data()[i]));
      float dh1 = 0, dh3 = 0;
      cuda::silu_gate_backward(g_ref.data()[i], h1, h3, dh1, dh3);
      INFO("i = " << i << ", h1 = " << h1 << ", g = " << g_ref.data()[i]);
      CHECK(close(dh1, saved.dh1.data()[i], 64));
      CHECK(close(dh3, saved.dh3.data()[i], 64));
    }
  }
}

TEST_CASE("saturated tails: no NaN, the limits of silu") {
  CHECK(cuda::sigmoid(-200.0f) == 0.0f);
  CHECK(cuda::sigmoid(200.0f) == 1.0f);
  CHECK(cuda::silu_gate(-200.0f, 3.0f) == 0.0f);
  CHECK(cuda::silu_gate(200.0f, 0.5f) == 100.0f);
  float dh1 = 1, dh3 = 1;
  cuda::silu_gate_backward(2.0f, -200.0f, 3.0f, dh1, dh3);
  CHECK(dh1 == 0.0f);
  CHECK(dh3 == 0.0f);
  cuda::silu_gate_backward(2.0f, 200.0f, 3.0f, dh1, dh3);  // silu'(a) -> 1, silu(a) -> a
  CHECK(dh1 == 6.0f);
  CHECK(dh3 == 400.0f);
}
