// The small products of attention and retention tiles (bench/README.md, "attention off OpenBLAS"):
// they run inside the callers' own parallel regions, where oneDNN is not used, and OpenBLAS would
// follow OPENBLAS_CORETYPE and pack both operands for a 64×128 product. A register-blocked
// kernel, compiled per ISA and chosen on first use.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/vec.h"

namespace yoco::cpu {
namespace {

using vec::kLanes;

// C[MR rows, NV·16 columns] = alpha · A[MR, k] · B[k, NV·16] + beta · C: broadcasts of A's
// elements times rows of B, all MR·NV accumulators in registers.
template <int MR, int NV, typename V>
[[gnu::always_inline]] inline void tile(int k, float alpha, const float* a, int lda, int acs, const float* b, int ldb,
                                        float beta, float* c, int ldc) {
  V acc[MR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = V{};
  for (int p = 0; p < k; ++p) {
    V bv[NV];
    const float* bp = b + static_cast<int64_t>(p) * ldb;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = vec::load<V>(bp + v * kLanes);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const V ai = vec::splat<V>(a[static_cast<int64_t>(i) * lda + static_cast<int64_t>(p) * acs]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] += ai * bv[v];
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      float* cp = c + static_cast<int64_t>(i) * ldc + v * kLanes;
      vec::store(cp, beta == 0 ? alpha * acc[i][v] : alpha * acc[i][v] + beta * vec::load<V>(cp));
    }
}

// Rows [0, m) of one column panel of NV vectors: MR rows at a time, then the remaining rows.
template <int MR, int NV, typename V>
[[gnu::always_inline]] inline void panel(int m, int k, float alpha, const float* a, int lda, int acs, const float* b,
                                         int ldb, float beta, float* c, int ldc) {
  int i = 0;
  for (; i + MR <= m; i += MR)
    tile<MR, NV, V>(k, alpha, a + static_cast<int64_t>(i) * lda, lda, acs, b, ldb, beta,
                    c + static_cast<int64_t>(i) * ldc, ldc);
  if (i == m) return;
  const float* ai = a + static_cast<int64_t>(i) * lda;
  float* ci = c + static_cast<int64_t>(i) * ldc;
  // MR <= 6: the leftover is 1..5 rows.
  switch (m - i) {
    case 5:
      if constexpr (MR > 5) tile<5, NV, V>(k, alpha, ai, lda, acs, b, ldb, beta, ci, ldc);
      break;
    case 4:
      if constexpr (MR > 4) tile<4, NV, V>(k, alpha, ai, lda, acs, b, ldb, beta, ci, ldc);
      break;
    case 3:
      if constexpr (MR > 3) tile<3, NV, V>(k, alpha, ai, lda, acs, b, ldb, beta, ci, ldc);
      break;
    case 2:
      if constexpr (MR > 2) tile<2, NV, V>(k, alpha, ai, lda, acs, b, ldb, beta, ci, ldc);
      break;
    default:
      tile<1, NV, V>(k, alpha, ai, lda, acs, b, ldb, beta, ci, ldc);
      break;
  }
}

// The last n % 16 columns, one dot product each (no vector fits).
inline void column_tail(int m, int j0, int n, int k, float alpha, const float* a, int lda, int acs, const float* b,
                        int ldb, float beta, float* c, int ldc) {
  for (int i = 0; i < m; ++i) {
    const float* ai = a + static_cast<int64_t>(i) * lda;
    float* ci = c + static_cast<int64_t>(i) * ldc;
    for (int j = j0; j < n; ++j) {
      float s = 0;
      for (int p = 0; p < k; ++p) s += ai[static_cast<int64_t>(p) * acs] * b[static_cast<int64_t>(p) * ldb + j];
      ci[j] = alpha * s + (beta == 0 ? 0.0f : beta * ci[j]);
    }
  }
}

// C = alpha · A · B + beta · C with B [k, n] row-major. Column panels outermost, so one panel of B
// (k × NVMAX·16 floats) stays in L1 while every row block of A passes over it.
template <int MR, int NVMAX, typename V>
[[gnu::always_inline]] inline void nn_body(int m, int n, int k, float alpha, const float* a, int lda, int acs,
                                           const float* b, int ldb, float beta, float* c, int ldc) {
  int j = 0;
  for (; j + NVMAX * kLanes <= n; j += NVMAX * kLanes)
    panel<MR, NVMAX, V>(m, k, alpha, a, lda, acs, b + j, ldb, beta, c + j, ldc);
  const int rest = (n - j) / kLanes;  // < NVMAX
  if constexpr (NVMAX > 3)
    if (rest == 3) panel<MR, 3, V>(m, k, alpha, a, lda, acs, b + j, ldb, beta, c + j, ldc);
  if constexpr (NVMAX > 2)
    if (rest == 2) panel<MR, 2, V>(m, k, alpha, a, lda, acs, b + j, ldb, beta, c + j, ldc);
  if constexpr (NVMAX > 1)
    if (rest == 1) panel<MR, 1, V>(m, k, alpha, a, lda, acs, b + j, ldb, beta, c + j, ldc);
  j += rest * kLanes;
  if (j < n) column_tail(m, j, n, k, alpha, a, lda, acs, b, ldb, beta, c, ldc);
}

using NnFn = void (*)(int, int, int, float, const float*, int, int, const float*, int, float, float*, int);

// Register budgets: AVX-512 has 32 vector registers (24 accumulators of 16 floats), AVX2 16
// (6×1 vectors of 16 = 12 ymm accumulators), SSE 16 xmm (2×1 = 8 accumulators).
void nn_default(int m, int n, int k, float alpha, const float* a, int lda, int acs, const float* b, int ldb, float beta,
                float* c, int ldc) {
  nn_body<2, 1, vec::F16Base>(m, n, k, alpha, a, lda, acs, b, ldb, beta, c, ldc);
}
__attribute__((target("avx2,fma"))) void nn_avx2(int m, int n, int k, float alpha, const float* a, int lda, int acs,
                                                 const float* b, int ldb, float beta, float* c, int ldc) {
  nn_body<6, 1, vec::F16Avx2>(m, n, k, alpha, a, lda, acs, b, ldb, beta, c, ldc);
}
__attribute__((target("avx512f"))) void nn_avx512(int m, int n, int k, float alpha, const float* a, int lda, int acs,
                                                  const float* b, int ldb, float beta, float* c, int ldc) {
  nn_body<6, 4, vec::F16Avx512>(m, n, k, alpha, a, lda, acs, b, ldb, beta, c, ldc);
}

// The variant for the running CPU (vec::isa()).
void nn(int m, int n, int k, float alpha, const float* a, int lda, int acs, const float* b, int ldb, float beta,
        float* c, int ldc) {
  static const NnFn fn = vec::pick<NnFn>(&nn_default, &nn_avx2, &nn_avx512);
  fn(m, n, k, alpha, a, lda, acs, b, ldb, beta, c, ldc);
}

// C = beta · C for an empty product (k <= 0).
void scale_only(int m, int n, float beta, float* c, int ldc) {
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      float& out = c[static_cast<int64_t>(i) * ldc + j];
      out = beta == 0 ? 0.0f : beta * out;
    }
}

}  // namespace

void gemm_tile(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb, bool b_trans,
               float beta, float* c, int ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) return scale_only(m, n, beta, c, ldc);
  if (!b_trans) return nn(m, n, k, alpha, a, lda, 1, b, ldb, beta, c, ldc);
  // B is [n, k]: lay out Bᵀ once (k·n copies against m·n·k multiply-adds), eight rows of B at a
  // time so every store is to a run of 8 adjacent floats.
  thread_local std::vector<float> bt;
  bt.resize(static_cast<size_t>(k) * n);
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    const float* bj = b + static_cast<int64_t>(j) * ldb;
    for (int p = 0; p < k; ++p)
      for (int r = 0; r < 8; ++r) bt[static_cast<size_t>(p) * n + j + r] = bj[static_cast<int64_t>(r) * ldb + p];
  }
  for (; j < n; ++j)
    for (int p = 0; p < k; ++p) bt[static_cast<size_t>(p) * n + j] = b[static_cast<int64_t>(j) * ldb + p];
  nn(m, n, k, alpha, a, lda, 1, bt.data(), n, beta, c, ldc);
}

void gemm_tile_at(int m, int n, int k, float alpha, const float* at, int ldat, const float* b, int ldb, float beta,
                  float* c, int ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) return scale_only(m, n, beta, c, ldc);
  nn(m, n, k, alpha, at, 1, ldat, b, ldb, beta, c, ldc);
}

}  // namespace yoco::cpu
