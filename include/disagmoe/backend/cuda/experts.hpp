// SPDX-License-Identifier: Apache-2.0
/// @file experts.hpp
/// `cuda::Experts`: gated-SiLU experts (w2(silu(w1 x) * w3 x), HF
/// MixtralBlockSparseTop2MLP) on the GPU, a model of `runtime::expert_compute` with the
/// weights, names and initialisation of model::ReferenceExperts<float> (it delegates
/// `init` and `parameters` there), so a stage switches between them by template argument
/// and checkpoints are interchangeable.
///
/// Per expert, each product is one fp32 cuBLAS GEMM over its contiguous row block (the
/// grouped layout of expert_compute.hpp); the element-wise SiLU gate and its backward
/// run as one kernel over all rows (expert_math.hpp). Routed and shared experts may differ
/// in width: the intermediates of expert e start at sum over e' < e of rows(e') * ffn(e').
/// Results equal the host reference up to GEMM summation order (tolerance, not bits).
///
/// Memory: the concept hands host matrices in and out, and the runtime's optimizer and
/// checkpoints own the weights as host matrices, so each call uploads what it reads
/// (rows, the weights of experts with rows, the gradients it accumulates into) and
/// downloads what it writes; what the backward needs stays on the device in `Saved`.
/// A device-resident weight copy needs the runtime to tell a compute when weights change.
///
/// Precision: fp32 GEMMs by default; Precision::kBf16 multiplies bf16-rounded operands
/// with fp32 accumulation (blas.hpp), the weights staying fp32 masters.
///
/// Concurrency: const calls may run at once from several threads (expert_compute.hpp):
/// each call takes a lane (compute_lane.hpp) and synchronises its stream before returning. Kernels run on
/// the device current when the compute was created.
/// Host code; link CUDA::cublas and instantiate the kernels once (instantiate.cuh).
#pragma once

#include <disagmoe/backend/cuda/blas.hpp>
#include <disagmoe/backend/cuda/check.hpp>
#include <disagmoe/backend/cuda/compute_lane.hpp>
#include <disagmoe/backend/cuda/expert_launch.hpp>
#include <disagmoe/backend/cuda/memory.hpp>
#include <disagmoe/backend/cuda/stream.hpp>
#include <disagmoe/model/gated_ffn.hpp>
#include <disagmoe/model/reference_experts.hpp>
#include <disagmoe/runtime/expert_compute.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace disagmoe::cuda {

/// See the file comment.
class Experts {
 public:
  using expert_compute_concept = runtime::expert_compute_tag;
  using scalar_type = float;
  using Weights = model::GatedFfnWeights<float>;
  /// What one micro-batch's experts keep on the device between forward and backward.
  struct Saved {
    std::vector<std::int64_t> offsets;  ///< expert row offsets (experts + 1)
    std::vector<std::int64_t> ffn;      ///< width of each expert
    std::vector<std::size_t> mid;       ///< first element of expert e's [rows, ffn] blocks
    DeviceBuffer<float> rows, h1, h3, act, d_out, dh1, dh3;
    bool has_backward = false;
  };

  /// `precision`: what the GEMMs multiply in (blas.hpp); the weights and every other
  /// operation stay fp32.
  Experts(ModelSpec spec, model::DecoderOptions options, Precision precision = Precision::kFp32)
      : host_(spec, options), spec_(std::move(spec)), pool_(std::make_shared<LanePool>(precision)) {}

  [[nodiscard]] Weights init(int layer, int expert, model::Rng& rng) const { return host_.init(layer, expert, rng); }
  [[nodiscard]] std::vector<runtime::NamedParameter<float>> parameters(Weights& w) const { return host_.parameters(w); }

  /// out[rows of e] = E_e(rows of e). Preconditions as model::gated_ffn_forward (ConfigError
  /// naming the field otherwise). O(n * hidden * ffn) in 3 GEMMs per non-empty expert.
  void forward(std::span<const Weights> experts, std::span<const std::int64_t> offsets, const model::Matrix<float>& x,
               model::Matrix<float>& out, Saved& s) const {
    const auto h = static_cast<int>(x.cols());
    model::detail::check_gated_ffn_offsets(offsets, experts.size(), x.rows());
    expect(h == spec_.hidden, "cuda::Experts rows.cols", h, "== hidden (" + std::to_string(spec_.hidden) + ")");
    s.offsets.assign(offsets.begin(), offsets.end());
    s.ffn.clear();
    s.mid.assign(1, 0);
    for (std::size_t e = 0; e < experts.size(); ++e) {
      const auto f = experts[e].w1.rows();
      model::detail::check_gated_ffn_weights(experts.subspan(e, 1), h, f, "cuda::Experts experts[" + std::to_string(e) + "]");
      s.ffn.push_back(f);
      s.mid.push_back(s.mid.back() + static_cast<std::size_t>(rows_of(s, e) * f));
    }
    s.has_backward = false;
    const std::size_t n = static_cast<std::size_t>(x.rows()), mid = s.mid.back();
    for (auto* b : {&s.h1, &s.h3, &s.act}) b->resize(mid);
    s.rows.resize(n * static_cast<std::size_t>(h));
    Lane lane(*pool_);
    lane.upload(x.data(), s.rows.data(), x.size());
    lane.scratch().resize(n * static_cast<std::size_t>(h) + 3 * max_weight(experts));
    float* y = lane.scratch().data();
    float* w = y + n * static_cast<std::size_t>(h);
    for (std::size_t e = 0; e < experts.size(); ++e) {
      const int m = static_cast<int>(rows_of(s, e)), f = static_cast<int>(s.ffn[e]);
      if (m == 0) continue;
      const float* xe = s.rows.data() + static_cast<std::size_t>(s.offsets[e]) * static_cast<std::size_t>(h);
      const std::size_t wn = static_cast<std::size_t>(f) * static_cast<std::size_t>(h);
      lane.upload(experts[e].w1.data(), w, wn);
      lane.upload(experts[e].w3.data(), w + wn, wn);
      lane.upload(experts[e].w2.data(), w + 2 * wn, wn);
      lane.blas().gemm(false, true, m, f, h, 1, xe, h, w, h, 0, s.h1.data() + s.mid[e], f);           // x w1^T
      lane.blas().gemm(false, true, m, f, h, 1, xe, h, w + wn, h, 0, s.h3.data() + s.mid[e], f);      // x w3^T
      launch::silu_gate(lane.stream(), s.h1.data() + s.mid[e], s.h3.data() + s.mid[e], s.mid[e + 1] - s.mid[e],
                        s.act.data() + s.mid[e]);
      lane.blas().gemm(false, true, m, h, f, 1, s.act.data() + s.mid[e], f, w + 2 * wn, f, 0,           // act w2^T
                     y + static_cast<std::size_t>(s.offsets[e]) * static_cast<std::size_t>(h), h);
    }
    out.resize(x.rows(), h);
    lane.download(y, out.data(), out.size());
  }

  /// d_rows = dL/drows from the gate-weighted d_out (gated_ffn_backward_input's math);
  /// keeps d_out, dh1, dh3 for backward_weight. O(n * hidden * ffn), 3 GEMMs per expert.
  void backward_input(std::span<const Weights> experts, const model::Matrix<float>& d_out, Saved& s,
                      model::Matrix<float>& d_rows) const {
    expect(!s.offsets.empty(), "cuda::Experts saved.offsets.size", 0, ">= 1: run forward first");
    expect(experts.size() + 1 == s.offsets.size(), "cuda::Experts experts.size", experts.size(),
           "== the forward's (" + std::to_string(s.offsets.size() - 1) + ")");
    const auto n = static_cast<std::size_t>(s.offsets.back());
    const int h = spec_.hidden;
    expect(static_cast<std::size_t>(d_out.rows()) == n && d_out.cols() == h, "cuda::Experts d_out.rows", d_out.rows(),
           "== the forward's rows (" + std::to_string(n) + ") with hidden columns");
    for (std::size_t e = 0; e < experts.size(); ++e)
      model::detail::check_gated_ffn_weights(experts.subspan(e, 1), h, s.ffn[e],
                                             "cuda::Experts experts[" + std::to_string(e) + "]");
    s.d_out.resize(n * static_cast<std::size_t>(h));
    s.dh1.resize(s.mid.back());
    s.dh3.resize(s.mid.back());
    Lane lane(*pool_);
    lane.upload(d_out.data(), s.d_out.data(), d_out.size());
    lane.scratch().resize(n * static_cast<std::size_t>(h) + 3 * max_weight(experts));
    float* dx = lane.scratch().data();
    float* w = dx + n * static_cast<std::size_t>(h);
    for (std::size_t e = 0; e < experts.size(); ++e) {
      const int m = static_cast<int>(rows_of(s, e)), f = static_cast<int>(s.ffn[e]);
      if (m == 0) continue;
      const std::size_t r0 = static_cast<std::size_t>(s.offsets[e]) * static_cast<std::size_t>(h);
      const std::size_t wn = static_cast<std::size_t>(f) * static_cast<std::size_t>(h);
      lane.upload(experts[e].w1.data(), w, wn);
      lane.upload(experts[e].w3.data(), w + wn, wn);
      lane.upload(experts[e].w2.data(), w + 2 * wn, wn);
      float* dh1 = s.dh1.data() + s.mid[e];
      float* dh3 = s.dh3.data() + s.mid[e];
      lane.blas().gemm(false, false, m, f, h, 1, s.d_out.data() + r0, h, w + 2 * wn, f, 0, dh1, f);  // g = d_out w2
      launch::silu_gate_backward(lane.stream(), s.h1.data() + s.mid[e], s.h3.data() + s.mid[e],
                                 s.mid[e + 1] - s.mid[e], dh1, dh3);
      lane.blas().gemm(false, false, m, h, f, 1, dh1, f, w, h, 0, dx + r0, h);       // dh1 w1
      lane.blas().gemm(false, false, m, h, f, 1, dh3, f, w + wn, h, 1, dx + r0, h);  // + dh3 w3
    }
    s.has_backward = true;
    d_rows.resize(static_cast<Eigen::Index>(n), h);
    lane.download(dx, d_rows.data(), d_rows.size());
  }

  /// grads[e] += the weight gradients of expert e (gated_ffn_backward_weight's math); an
  /// expert without rows adds nothing. O(n * hidden * ffn), 3 GEMMs per expert.
  void backward_weight(const Saved& s, std::span<Weights> grads) const {
    expect(s.has_backward, "cuda::Experts saved", "without backward_input", "backward_input since the forward");
    expect(grads.size() + 1 == s.offsets.size(), "cuda::Experts grads.size", grads.size(),
           "== experts (" + std::to_string(s.offsets.size() - 1) + ")");
    const int h = spec_.hidden;
    for (std::size_t e = 0; e < grads.size(); ++e)
      model::detail::check_gated_ffn_weights(std::span<const Weights>(grads.data() + e, 1), h, s.ffn[e],
                                             "cuda::Experts grads[" + std::to_string(e) + "]");
    Lane lane(*pool_);
    lane.scratch().resize(3 * max_weight(std::span<const Weights>(grads.data(), grads.size())));
    float* w = lane.scratch().data();
    for (std::size_t e = 0; e < grads.size(); ++e) {
      const int m = static_cast<int>(rows_of(s, e)), f = static_cast<int>(s.ffn[e]);
      if (m == 0) continue;
      const std::size_t r0 = static_cast<std::size_t>(s.offsets[e]) * static_cast<std::size_t>(h);
      const std::size_t wn = static_cast<std::size_t>(f) * static_cast<std::size_t>(h);
      Weights& g = grads[e];
      lane.upload(g.w1.data(), w, wn);
      lane.upload(g.w3.data(), w + wn, wn);
      lane.upload(g.w2.data(), w + 2 * wn, wn);
      lane.blas().gemm(true, false, f, h, m, 1, s.dh1.data() + s.mid[e], f, s.rows.data() + r0, h, 1, w, h);       // dh1^T x
      lane.blas().gemm(true, false, f, h, m, 1, s.dh3.data() + s.mid[e], f, s.rows.data() + r0, h, 1, w + wn, h);  // dh3^T x
      lane.blas().gemm(true, false, h, f, m, 1, s.d_out.data() + r0, h, s.act.data() + s.mid[e], f, 1, w + 2 * wn, f);
      lane.download(w, g.w1.data(), wn);
      lane.download(w + wn, g.w3.data(), wn);
      lane.download(w + 2 * wn, g.w2.data(), wn);
    }
  }

 private:
  static std::int64_t rows_of(const Saved& s, std::size_t e) { return s.offsets[e + 1] - s.offsets[e]; }
  static std::size_t max_weight(std::span<const Weights> ws) {
    std::size_t m = 0;
    for (const auto& w : ws) m = std::max(m, static_cast<std::size_t>(w.w1.size()));
    return m;
  }
  model::ReferenceExperts<float> host_;  // init and parameters: the same tensors and names
  ModelSpec spec_;
  std::shared_ptr<LanePool> pool_;
};

static_assert(runtime::expert_compute<Experts>);

}  // namespace disagmoe::cuda
