// SPDX-License-Identifier: Apache-2.0
/// @file blas.hpp
/// cuBLAS for the CUDA compute: an owned handle and products of row-major fp32 matrices
/// (the layout of model/tensor.hpp), single or strided-batched. cuBLAS is column-major; a
/// row-major matrix is its transpose read column-major, so row-major C = op(A) op(B) is
/// column-major C^T = op(B)^T op(A)^T: the same call with A and B swapped (cuBLAS docs,
/// "cublas<t>gemm", "cublasGemmStridedBatchedEx").
///
/// Two precisions, chosen per handle:
///  - kFp32: fp32 operands, CUBLAS_COMPUTE_32F_PEDANTIC (no TF32, no reduced precision),
///    so products differ from the host's only in summation order;
///  - kBf16: the operands are rounded to bf16 (nearest even) into scratch the handle owns,
///    multiplied with fp32 accumulation (CUBLAS_COMPUTE_32F) into fp32 results: the mixed
///    precision of Micikevicius et al., "Mixed Precision Training" (ICLR 2018), in bf16
///    (Kalamkar et al. 2019) as PyTorch's autocast runs matmuls, with the fp32 tensors
///    (master weights, activations) left untouched.
/// Host code; link CUDA::cublas and instantiate the kernels once (instantiate.cuh).
#pragma once

#include <disagmoe/backend/cuda/check.hpp>
#include <disagmoe/backend/cuda/compute_launch.hpp>
#include <disagmoe/backend/cuda/memory.hpp>
#include <disagmoe/error.hpp>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <utility>

namespace disagmoe::cuda {

/// Throws CudaError naming the call, file:line and cuBLAS's status.
inline void check_blas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw CudaError(std::string(file) + ":" + std::to_string(line) + ": " + call + " = " +
                  cublasGetStatusName(status) + ": expected CUBLAS_STATUS_SUCCESS (" + cublasGetStatusString(status) +
                  ")");
}
#define DISAGMOE_CUBLAS_CHECK(call) ::disagmoe::cuda::check_blas((call), #call, __FILE__, __LINE__)

/// What a GEMM's operands are multiplied in (see the file comment).
enum class Precision : unsigned char { kFp32, kBf16 };

/// "fp32" or "bf16".
inline const char* to_string(Precision p) { return p == Precision::kFp32 ? "fp32" : "bf16"; }

/// One cuBLAS handle bound to one stream, with its bf16 operand scratch. Not copyable;
/// movable. A handle serves one thread at a time (cuBLAS docs, "Thread Safety").
class Blas {
 public:
  explicit Blas(cudaStream_t stream, Precision precision = Precision::kFp32) : stream_(stream), precision_(precision) {
    DISAGMOE_CUBLAS_CHECK(cublasCreate(&h_));
    DISAGMOE_CUBLAS_CHECK(cublasSetStream(h_, stream));
  }
  Blas(Blas&& o) noexcept
      : h_(std::exchange(o.h_, nullptr)), stream_(o.stream_), precision_(o.precision_), a16_(std::move(o.a16_)),
        b16_(std::move(o.b16_)) {}
  Blas& operator=(Blas&&) = delete;
  Blas(const Blas&) = delete;
  ~Blas() {
    if (h_ != nullptr) (void)cublasDestroy(h_);
  }

  [[nodiscard]] Precision precision() const { return precision_; }

  /// Row-major C[m, n] = alpha op(A) op(B) + beta C, op(A) [m, k], op(B) [k, n]; `ta`: A is
  /// stored [k, m] (lda its columns), else [m, k]; likewise `tb`. Nothing for m or n 0;
  /// k == 0 scales C by beta. Enqueued on the handle's stream.
  void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
            float beta, float* c, int ldc) {
    gemm_batched(ta, tb, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0, 1);
  }

  /// `batch` products as `gemm`, the i-th on A + i stride_a, B + i stride_b, C + i stride_c
  /// (elements; strides may make operands overlap, e.g. heads sharing a key head).
  void gemm_batched(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, long stride_a,
                    const float* b, int ldb, long stride_b, float beta, float* c, int ldc, long stride_c, int batch) {
    if (m == 0 || n == 0 || batch == 0) return;
    const cublasOperation_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (precision_ == Precision::kFp32) {
      DISAGMOE_CUBLAS_CHECK(cublasGemmStridedBatchedEx(h_, op_b, op_a, n, m, k, &alpha, b, CUDA_R_32F, ldb, stride_b,
                                                       a, CUDA_R_32F, lda, stride_a, &beta, c, CUDA_R_32F, ldc,
                                                       stride_c, batch, CUBLAS_COMPUTE_32F_PEDANTIC,
                                                       CUBLAS_GEMM_DEFAULT));
      return;
    }
    const __nv_bfloat16* a16 = to_bf16(a16_, a, extent(ta ? k : m, ta ? m : k, lda, stride_a, batch));
    const __nv_bfloat16* b16 = to_bf16(b16_, b, extent(tb ? n : k, tb ? k : n, ldb, stride_b, batch));
    DISAGMOE_CUBLAS_CHECK(cublasGemmStridedBatchedEx(h_, op_b, op_a, n, m, k, &alpha, b16, CUDA_R_16BF, ldb, stride_b,
                                                     a16, CUDA_R_16BF, lda, stride_a, &beta, c, CUDA_R_32F, ldc,
                                                     stride_c, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }

 private:
  /// Elements from the first to the last one `batch` row-major [rows, cols] operands
  /// with leading dimension ld, stride apart, reach (0 when there are none).
  static std::size_t extent(int rows, int cols, int ld, long stride, int batch) {
    if (rows == 0 || cols == 0) return 0;
    return static_cast<std::size_t>(batch - 1) * static_cast<std::size_t>(stride) +
           static_cast<std::size_t>(rows - 1) * static_cast<std::size_t>(ld) + static_cast<std::size_t>(cols);
  }
  /// x[0, n) rounded to bf16 into `scratch` (grown off the steady state), on the stream.
  const __nv_bfloat16* to_bf16(DeviceBuffer<__nv_bfloat16>& scratch, const float* x, std::size_t n) {
    scratch.resize(n);
    launch::round_to_bf16(stream_, x, n, scratch.data());
    return scratch.data();
  }

  cublasHandle_t h_ = nullptr;
  cudaStream_t stream_ = nullptr;
  Precision precision_ = Precision::kFp32;
  DeviceBuffer<__nv_bfloat16> a16_, b16_;
};

}  // namespace disagmoe::cuda
