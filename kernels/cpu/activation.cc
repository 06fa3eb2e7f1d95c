#include <algorithm>
#include <cmath>

#include "kernels/cpu/ops.h"

namespace yoco::cpu {

void silu_mul(const float* a, int lda, const float* b, int ldb, float* out, int ldo, int rows, int cols) {
#pragma omp parallel for schedule(static) if (static_cast <int64_t>(rows) * cols > (1 << 15))
  for (int r = 0; r < rows; ++r) {
    const float* ar = a + static_cast<int64_t>(r) * lda;
    const float* br = b + static_cast<int64_t>(r) * ldb;
    float* o = out + static_cast<int64_t>(r) * ldo;
    for (int i = 0; i < cols; ++i) {
      const float x = ar[i];
      o[i] = x / (1.0f + std::exp(-x)) * br[i];
    }
  }
}

void embed(const float* table, int dim, const int32_t* ids, int n, float scale, float* out) {
  for (int i = 0; i < n; ++i) {
    const float* src = table + static_cast<int64_t>(ids[i]) * dim;
    float* dst = out + static_cast<int64_t>(i) * dim;
    for (int d = 0; d < dim; ++d) dst[d] = src[d] * scale;
  }
}

void add_inplace(float* y, const float* x, int64_t n) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void scale_inplace(float* y, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= s;
}

void log_softmax(float* x, int n) {
  float mx = x[0];
  for (int i = 1; i < n; ++i) mx = std::max(mx, x[i]);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i] - mx));
  const float lse = mx + static_cast<float>(std::log(sum));
  for (int i = 0; i < n; ++i) x[i] -= lse;
}

}  // namespace yoco::cpu
