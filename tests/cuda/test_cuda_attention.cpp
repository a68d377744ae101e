// SPDX-License-Identifier: Apache-2.0
// cuda::Attention on a GPU against model::ReferenceAttention<float>: MoE and dense
// layers, grouped kv heads, a sliding window, router losses on; forward, backward_input
// and accumulated backward_weight, and the head (loss, logits, backward); fp32 to fp32
// tolerance (GEMM order, exp ulps), bf16 GEMMs to bf16 tolerance. The AdamW kernel
// against runtime::adamw_update bit for bit, and a colocated trainer with both GPU
// computes against the host trainer over a few steps. Exit 77 without a device.
#include <disagmoe/backend/cuda/attention.hpp>
#include <disagmoe/backend/cuda/compute_launch.hpp>
#include <disagmoe/backend/cuda/experts.hpp>
#include <disagmoe/backend/cuda/memory.hpp>
#include <disagmoe/model/reference_attention.hpp>
#include <disagmoe/model/reference_experts.hpp>
#include <disagmoe/runtime/adamw.hpp>
#include <disagmoe/runtime/colocated_trainer.hpp>

#include "matrix_near.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

using namespace disagmoe;
using Mat = model::Matrix<float>;

namespace {

using test::near;


ModelSpec spec_of(std::uint64_t seed) {
  ModelSpec m;
  m.name = "gpu-attention";
  m.layers = 2;
  m.first_dense_layers = 1;  // layer 0 dense, layer 1 MoE
  m.hidden = 16 + 8 * static_cast<int>(seed % 3);
  m.heads = 4;
  m.kv_heads = seed % 2 == 0 ? 2 : 4;
  m.head_dim = 8;
  m.experts = 4 + static_cast<int>(seed % 3);
  m.top_k = 2;
  m.expert_ffn = 24;
  m.dense_ffn = 40;
  m.vocab = 64;
  m.seq_len = 8 + 4 * static_cast<int>(seed % 3);
  m.sliding_window = seed % 3 == 0 ? 5 : 0;
  m.micro_batch = 2;
  m.dtype = DType::kFp32;
  return m;
}

model::DecoderOptions options() {
  model::DecoderOptions o;
  o.aux_loss_coef = 0.02;
  o.z_loss_coef = 1e-3;
  o.init_std = 0.2;  // larger than Mixtral's so the products are not all near zero
  return o;
}

/// One layer through both computes; every output and gradient compared to `tol`.
template <class Host, class Gpu>
void check_layer(const Host& host, const Gpu& gpu, const ModelSpec& spec, int layer, std::uint64_t seed, float tol) {
  model::Rng rng(seed);
  const auto w = host.init(layer, rng);
  const int rows = 2 * spec.seq_len;
  const Mat h = model::normal_matrix<float>(rows, spec.hidden, 1.0, rng);
  runtime::AttentionOutput<float> out_h, out_g;
  typename Host::Saved sh;
  typename Gpu::Saved sg;
  host.forward(w, layer, h, out_h, sh);
  gpu.forward(w, layer, h, out_g, sg);
  CHECK(near(out_g.residual, out_h.residual, tol));
  CHECK(near(out_g.tokens, out_h.tokens, tol));
  CHECK(out_g.topk_ids == out_h.topk_ids);
  CHECK(near(out_g.gates, out_h.gates, tol));
  CHECK(std::abs(out_g.aux_loss - out_h.aux_loss) <= tol * (1 + std::abs(out_h.aux_loss)));
  CHECK(std::abs(out_g.z_loss - out_h.z_loss) <= tol * (1 + std::abs(out_h.z_loss)));
  const Mat d_out = model::normal_matrix<float>(rows, spec.hidden, 1.0, rng);
  const Mat d_tokens = model::normal_matrix<float>(out_h.tokens.rows(), spec.hidden, 1.0, rng);
  const Mat d_gates = model::normal_matrix<float>(out_h.gates.rows(), spec.top_k, 1.0, rng);
  const runtime::AttentionGradients<float> g{&d_out, &d_tokens, &d_gates, 0.5f};
  Mat dh_h, dh_g;
  host.backward_input(w, layer, g, sh, dh_h);
  gpu.backward_input(w, layer, g, sg, dh_g);
  CHECK(near(dh_g, dh_h, tol));
  auto dw_h = host.init(layer, rng), dw_g = dw_h;  // accumulate onto nonzero gradients
  host.backward_weight(w, layer, sh, dw_h);
  gpu.backward_weight(w, layer, sg, dw_g);
  auto ph = host.parameters(dw_h), pg = host.parameters(dw_g);
  for (std::size_t i = 0; i < ph.size(); ++i) {
    INFO("gradient " << ph[i].name);
    CHECK(near(*pg[i].value, *ph[i].value, tol));
  }
}

template <class Host, class Gpu>
void check_head(const Host& host, const Gpu& gpu, const ModelSpec& spec, std::uint64_t seed, float tol) {
  model::Rng rng(seed);
  const auto e = host.init_edges(rng);
  const int rows = 3 * spec.seq_len;
  const Mat h = model::normal_matrix<float>(rows, spec.hidden, 1.0, rng);
  std::vector<int> targets(static_cast<std::size_t>(rows));
  for (auto& t : targets) t = static_cast<int>(rng.next() % static_cast<std::uint64_t>(spec.vocab));
  typename Host::HeadSaved sh;
  typename Gpu::HeadSaved sg;
  const float loss_h = host.head_forward(e, h, targets, sh), loss_g = gpu.head_forward(e, h, targets, sg);
  CHECK(std::abs(loss_g - loss_h) <= tol * loss_h);
  CHECK(std::abs(gpu.head_loss(e, h, targets) - loss_h) <= tol * loss_h);
  Mat lh, lg;
  host.head_logits(e, h, lh);
  gpu.head_logits(e, h, lg);
  CHECK(near(lg, lh, tol));
  Mat dh_h, dh_g;
  host.head_backward_input(e, 0.25f, sh, dh_h);
  gpu.head_backward_input(e, 0.25f, sg, dh_g);
  CHECK(near(dh_g, dh_h, tol));
  auto de_h = e, de_g = e;
  host.head_backward_weight(sh, de_h);
  gpu.head_backward_weight(sg, de_g);
  CHECK(near(de_g.head, de_h.head, tol));
  CHECK(near(de_g.final_norm, de_h.final_norm, tol));
}

}  // namespace

TEST_CASE("GPU attention layers and head match the host reference (fp32)") {
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    INFO("seed = " << seed);
    const ModelSpec spec = spec_of(seed);
    const model::ReferenceAttention<float> host(spec, options());
    const cuda::Attention gpu(spec, options());
    for (int layer = 0; layer < spec.layers; ++layer) {
      INFO("layer " << layer << (spec.is_moe_layer(layer) ? " (MoE)" : " (dense)"));
      check_layer(host, gpu, spec, layer, seed * 10 + static_cast<std::uint64_t>(layer), 2e-4f);
    }
    check_head(host, gpu, spec, seed, 2e-4f);
  }
}

TEST_CASE("GPU attention with bf16 GEMMs stays within bf16 tolerance of the fp32 host reference") {
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    INFO("seed = " << seed);
    const ModelSpec spec = spec_of(seed);
    const model::ReferenceAttention<float> host(spec, options());
    const cuda::Attention gpu(spec, options(), cuda::Precision::kBf16);
    check_layer(host, gpu, spec, 0, seed, 3e-2f);  // dense: no top-k to flip at bf16
    check_head(host, gpu, spec, seed, 3e-2f);
  }
}

TEST_CASE("the AdamW kernel equals runtime::adamw_update bit for bit") {
  model::Rng rng(5);
  const runtime::AdamWOptions o;
  const std::size_t n = 10007;
  Mat p = model::normal_matrix<float>(1, static_cast<Eigen::Index>(n), 1.0, rng), m = Mat::Zero(1, p.cols()),
      v = Mat::Zero(1, p.cols());
  cuda::DeviceBuffer<float> dp, dg, dm, dv;
  for (auto* b : {&dp, &dg, &dm, &dv}) b->resize(n);
  auto up = [](const Mat& x, cuda::DeviceBuffer<float>& d) {
    d.assign(std::span<const float>(x.data(), d.size()));
  };
  up(p, dp);
  up(m, dm);
  up(v, dv);
  for (std::int64_t step = 1; step <= 3; ++step) {
    const Mat g = model::normal_matrix<float>(1, p.cols(), 1e-2, rng);
    up(g, dg);
    runtime::adamw_update(o, 1e-3, 0.7, step, true, p, g, m, v);
    cuda::launch::adamw(nullptr, runtime::adamw_coefficients<float>(o, 1e-3, 0.7, step, true), n, dp.data(),
                        dg.data(), dm.data(), dv.data());
  }
  Mat back(1, p.cols());
  DISAGMOE_CUDA_CHECK(cudaMemcpy(back.data(), dp.data(), n * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(std::memcmp(back.data(), p.data(), n * sizeof(float)) == 0);
}

TEST_CASE("a colocated trainer on GPU computes follows the host trainer's losses") {
  ModelSpec spec = spec_of(2);
  spec.first_dense_layers = 0;
  runtime::TrainOptions topt;
  topt.micro_batches = 2;
  topt.lr.lr = 1e-2;
  using HostTrainer = runtime::ColocatedTrainer<model::ReferenceAttention<float>, model::ReferenceExperts<float>>;
  using GpuTrainer = runtime::ColocatedTrainer<cuda::Attention, cuda::Experts>;
  HostTrainer host(model::ReferenceAttention<float>(spec, options()), model::ReferenceExperts<float>(spec, options()),
                   spec, topt);
  GpuTrainer gpu(cuda::Attention(spec, options()), cuda::Experts(spec, options()), spec, topt);
  model::Rng rng(9);
  const int sequences = 4;
  for (int step = 0; step < 4; ++step) {
    std::vector<int> in(static_cast<std::size_t>(sequences * spec.seq_len)), tg(in.size());
    for (std::size_t i = 0; i < in.size(); ++i) {
      in[i] = static_cast<int>(rng.next() % 64);
      tg[i] = static_cast<int>((in[i] * 7 + 3) % 64);
    }
    const runtime::TokenBatch b{in, tg, sequences};
    const double lh = host.step(b).loss, lg = gpu.step(b).loss;
    INFO("step " << step << ": host " << lh << ", gpu " << lg);
    CHECK(std::abs(lg - lh) <= 1e-4 * lh);
  }
}
