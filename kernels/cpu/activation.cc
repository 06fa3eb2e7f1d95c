#include <algorithm>
#include <cmath>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/vec.h"

namespace yoco::cpu {

namespace {

// Rows [r0, r1) of silu_mul, the exp vectorised (vec.h): per element x / (1 + e^−x) · b.
template <typename V>
[[gnu::always_inline]] inline void silu_mul_body(const float* a, int lda, const float* b, int ldb, float* out, int ldo,
                                                 int r0, int r1, int cols) {
  for (int r = r0; r < r1; ++r) {
    const float* ar = a + static_cast<int64_t>(r) * lda;
    const float* br = b + static_cast<int64_t>(r) * ldb;
    float* o = out + static_cast<int64_t>(r) * ldo;
    int i = 0;
    for (; i + vec::kLanes <= cols; i += vec::kLanes) {
      const V x = vec::load<V>(ar + i);
      vec::store(o + i, x / (vec::splat<V>(1.0f) + vec::exp(-x)) * vec::load<V>(br + i));
    }
    for (; i < cols; ++i) {
      const float x = ar[i];
      o[i] = x / (1.0f + std::exp(-x)) * br[i];
    }
  }
}

using SiluMulFn = void (*)(const float*, int, const float*, int, float*, int, int, int, int);
void silu_mul_default(const float* a, int lda, const float* b, int ldb, float* out, int ldo, int r0, int r1, int cols) {
  silu_mul_body<vec::F16Base>(a, lda, b, ldb, out, ldo, r0, r1, cols);
}
__attribute__((target("avx2,fma"))) void silu_mul_avx2(const float* a, int lda, const float* b, int ldb, float* out,
                                                       int ldo, int r0, int r1, int cols) {
  silu_mul_body<vec::F16Avx2>(a, lda, b, ldb, out, ldo, r0, r1, cols);
}
__attribute__((target("avx512f"))) void silu_mul_avx512(const float* a, int lda, const float* b, int ldb, float* out,
                                                        int ldo, int r0, int r1, int cols) {
  silu_mul_body<vec::F16Avx512>(a, lda, b, ldb, out, ldo, r0, r1, cols);
}

// The variant for the running CPU (vec::isa()).
SiluMulFn silu_mul_rows() {
  static const SiluMulFn fn = vec::pick<SiluMulFn>(&silu_mul_default, &silu_mul_avx2, &silu_mul_avx512);
  return fn;
}

}  // namespace

void silu_mul(const float* a, int lda, const float* b, int ldb, float* out, int ldo, int rows, int cols) {
  const SiluMulFn fn = silu_mul_rows();
#pragma omp parallel for schedule(static) if (static_cast <int64_t>(rows) * cols > (1 << 15))
  for (int r = 0; r < rows; ++r) fn(a, lda, b, ldb, out, ldo, r, r + 1, cols);
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
