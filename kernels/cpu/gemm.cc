#include <algorithm>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"

#if defined(YOCO_HAVE_CBLAS)
#include <cblas.h>
#endif

namespace yoco::cpu {

bool gemm_uses_blas() {
#if defined(YOCO_HAVE_CBLAS)
  return true;
#else
  return false;
#endif
}

void gemm_reference(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb, bool b_trans,
                    float beta, float* c, int ldc) {
#pragma omp parallel for schedule(static) if (static_cast <int64_t>(m) * n * k > (1 << 16))
  for (int i = 0; i < m; ++i) {
    float* crow = c + static_cast<int64_t>(i) * ldc;
    const float* arow = a + static_cast<int64_t>(i) * lda;
    if (b_trans) {
      for (int j = 0; j < n; ++j) {
        const float* brow = b + static_cast<int64_t>(j) * ldb;
        float acc = 0;
        for (int p = 0; p < k; ++p) acc += arow[p] * brow[p];
        crow[j] = alpha * acc + (beta == 0 ? 0.0f : beta * crow[j]);
      }
    } else {
      // Row-times-matrix in i-p-j order so the inner loop is contiguous and vectorises.
      for (int j = 0; j < n; ++j) crow[j] = beta == 0 ? 0.0f : beta * crow[j];
      for (int p = 0; p < k; ++p) {
        const float* brow = b + static_cast<int64_t>(p) * ldb;
        float s = alpha * arow[p];
        for (int j = 0; j < n; ++j) crow[j] += s * brow[j];
      }
    }
  }
}

void gemm(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb, bool b_trans, float beta,
          float* c, int ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) c[static_cast<int64_t>(i) * ldc + j] *= beta;
    return;
  }
  if (b_trans && m <= kSmallM) {
    // A decode step (m = batch rows times Wᵀ): W streams from memory once for all rows (gemv.cc).
    gemm_small_m(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  if (m >= kLibraryMinRows && gemm_dnnl(m, n, k, alpha, a, lda, b, ldb, b_trans, beta, c, ldc)) return;
#if defined(YOCO_HAVE_CBLAS)
  cblas_sgemm(CblasRowMajor, CblasNoTrans, b_trans ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c,
              ldc);
#else
  gemm_reference(m, n, k, alpha, a, lda, b, ldb, b_trans, beta, c, ldc);
#endif
}

}  // namespace yoco::cpu
