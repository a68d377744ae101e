// SPDX-License-Identifier: Apache-2.0
/// @file blas.hpp
/// cuBLAS for the CUDA compute: an owned handle and fp32 products of row-major matrices
/// (the layout of model/tensor.hpp). cuBLAS is column-major; a row-major matrix is its
/// transpose read column-major, so row-major C = op(A) op(B) is column-major
/// C^T = op(B)^T op(A)^T: the same call with A and B swapped (cuBLAS docs, "cublas<t>gemm").
/// Products use CUBLAS_COMPUTE_32F_PEDANTIC (no TF32, no reduced precision), so they
/// differ from the host's only in summation order. Host code; link CUDA::cublas.
#pragma once

#include <disagmoe/backend/cuda/check.hpp>
#include <disagmoe/error.hpp>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

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

/// One cuBLAS handle bound to one stream. Not copyable; movable. A handle serves one
/// thread at a time (cuBLAS docs, "Thread Safety").
class Blas {
 public:
  explicit Blas(cudaStream_t stream) {
    DISAGMOE_CUBLAS_CHECK(cublasCreate(&h_));
    DISAGMOE_CUBLAS_CHECK(cublasSetStream(h_, stream));
  }
  Blas(Blas&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  Blas& operator=(Blas&&) = delete;
  Blas(const Blas&) = delete;
  ~Blas() {
    if (h_ != nullptr) (void)cublasDestroy(h_);
  }

  /// Row-major C[m, n] = alpha op(A) op(B) + beta C, op(A) [m, k], op(B) [k, n]; `ta`: A is
  /// stored [k, m] (lda its columns), else [m, k]; likewise `tb`. Nothing for m or n 0;
  /// k == 0 scales C by beta.
  void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
            float beta, float* c, int ldc) const {
    if (m == 0 || n == 0) return;
    DISAGMOE_CUBLAS_CHECK(cublasGemmEx(h_, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k,
                                       &alpha, b, CUDA_R_32F, ldb, a, CUDA_R_32F, lda, &beta, c, CUDA_R_32F, ldc,
                                       CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT));
  }

 private:
  cublasHandle_t h_ = nullptr;
};

}  // namespace disagmoe::cuda
