// SPDX-License-Identifier: Apache-2.0
// cuda::Experts on a GPU against model::ReferenceExperts<float> on random grouped rows:
// routed experts with empty ones, a shared expert of another width, zero rows in all;
// forward, backward_input and accumulated backward_weight, to fp32 tolerance (the GEMMs
// sum in another order). Exit 77 without a device.
#include <disagmoe/backend/cuda/experts.hpp>
#include <disagmoe/model/reference_experts.hpp>

#include "matrix_near.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

using namespace disagmoe;

namespace {

bool near(const model::Matrix<float>& a, const model::Matrix<float>& b) { return test::near(a, b, 1e-4f); }

ModelSpec spec_of(std::uint64_t seed) {
  ModelSpec m;
  m.name = "gpu-experts";
  m.layers = 2;
  m.hidden = 16 + 8 * static_cast<int>(seed % 3);
  m.heads = 2;
  m.kv_heads = 2;
  m.head_dim = m.hidden / 2;
  m.experts = 4 + static_cast<int>(seed % 3);
  m.top_k = 2;
  m.expert_ffn = 24 + static_cast<int>(seed % 5);
  m.shared_experts = 1;
  m.shared_expert_ffn = 40;
  m.vocab = 256;
  m.seq_len = 8;
  m.micro_batch = 2;
  m.dtype = DType::kFp32;
  return m;
}

}  // namespace

TEST_CASE("GPU experts match the host reference: forward, backward input, accumulated weight gradients") {
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    INFO("seed = " << seed);
    const ModelSpec spec = spec_of(seed);
    const model::DecoderOptions opt;
    model::ReferenceExperts<float> host(spec, opt);
    cuda::Experts gpu(spec, opt);
    model::Rng rng(seed);
    const int total = spec.experts + spec.shared_experts;
    std::vector<model::GatedFfnWeights<float>> w, g_host, g_gpu;
    for (int e = 0; e < total; ++e) w.push_back(host.init(0, e, rng));
    // Rows per expert: some empty, and every seed's last case has no rows at all.
    std::vector<std::int64_t> offsets{0};
    for (int e = 0; e < total; ++e) offsets.push_back(offsets.back() + ((e + static_cast<int>(seed)) % 3 == 0 ? 0 : 1 + static_cast<int>(rng.next() % 9)));
    for (const auto& off : {offsets, std::vector<std::int64_t>(static_cast<std::size_t>(total) + 1, 0)}) {
      const auto n = static_cast<Eigen::Index>(off.back());
      const model::Matrix<float> x = model::normal_matrix<float>(n, spec.hidden, 1.0, rng);
      const model::Matrix<float> dy = model::normal_matrix<float>(n, spec.hidden, 1.0, rng);
      g_host = w;
      g_gpu = w;  // accumulate onto nonzero gradients: += is part of the contract
      model::ReferenceExperts<float>::Saved hs;
      cuda::Experts::Saved gs;
      model::Matrix<float> y_host, y_gpu, dx_host, dx_gpu;
      host.forward(w, off, x, y_host, hs);
      gpu.forward(w, off, x, y_gpu, gs);
      CHECK(near(y_gpu, y_host));
      host.backward_input(w, dy, hs, dx_host);
      gpu.backward_input(w, dy, gs, dx_gpu);
      CHECK(near(dx_gpu, dx_host));
      host.backward_weight(hs, g_host);
      gpu.backward_weight(gs, g_gpu);
      for (int e = 0; e < total; ++e) {
        INFO("expert " << e);
        CHECK(near(g_gpu[static_cast<std::size_t>(e)].w1, g_host[static_cast<std::size_t>(e)].w1));
        CHECK(near(g_gpu[static_cast<std::size_t>(e)].w2, g_host[static_cast<std::size_t>(e)].w2));
        CHECK(near(g_gpu[static_cast<std::size_t>(e)].w3, g_host[static_cast<std::size_t>(e)].w3));
      }
    }
  }
}

TEST_CASE("bad offsets name the field") {
  const ModelSpec spec = spec_of(1);
  cuda::Experts gpu(spec, {});
  model::Rng rng(3);
  std::vector<model::GatedFfnWeights<float>> w{gpu.init(0, 0, rng)};
  const model::Matrix<float> x = model::normal_matrix<float>(4, spec.hidden, 1.0, rng);
  model::Matrix<float> y;
  cuda::Experts::Saved s;
  const std::vector<std::int64_t> bad{0, 3};
  CHECK_THROWS_WITH_AS(gpu.forward(w, bad, x, y, s), doctest::Contains("gated_ffn offsets[1]"), ConfigError);
}
