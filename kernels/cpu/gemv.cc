#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/vec.h"

namespace yoco::cpu {
namespace {

using vec::hsum;
using vec::kLanes;

constexpr int kRowTile = 4;  // rows of W per tile: each is read from memory once for all m rows of x
// At m <= 3 rows of W go one at a time, fp32 and bf16 alike: each thread then reads W as one
// sequential stream, where several rows side by side are several streams, which this memory
// serves more slowly (measured, interleaved runs, 2 threads, mid-gret's Transformer at B = 1 on
// the AVX2 path: fp32 29.8 -> 24 ms a step, bf16 18.3 -> 15.0; at m = 3 kjv-yoco's step 3.0 ->
// 2.1 ms; bench/README.md, "Weight streaming"). The m rows of x stay in L1, so re-reading them per
// row of W costs nothing; from m = 4 the loads of x per row of W cost more than the streams save.
// (bf16 had tiles of 8 rows here, fp32 of 4.)
constexpr int kSmallMRowTile = 1;
constexpr int kSmallMOneRow = 3;  // the largest m read one row at a time
// A split product gives each thread whole runs of this many rows.
constexpr int kThreadRows = 8;

using vec::widen;
[[gnu::always_inline]] inline float widen(float f) { return f; }

// Whether a tile prefetches the same columns of the next tile's rows. One fp32 row at a time on
// AVX2 reads faster without (an AVX2-only EPYC, family 25: 13.5 -> 16.5 GB/s, medians of five
// interleaved membw decode_gemm runs at B = 1, bench/README.md "On an AVX2-only CPU"), as its
// membw read patterns are slower with a prefetch 4 KiB ahead; bf16 rows (half as far apart) and
// the AVX-512 variant keep it, as measured where they were tuned.
template <int R, typename V, typename W>
constexpr bool kPrefetchNextRows = R > 1 || !std::is_same_v<W, float> || std::is_same_v<V, vec::F16Avx512>;

// C[M rows starting at a, R rows of W starting at w]: every output is the same sequence of
// operations (16-lane partial sums over k, pairwise lane sum, then the scalar tail) whatever R and M.
template <int R, int M, typename V, typename W>
[[gnu::always_inline]] inline void tile(int k, float alpha, const float* a, int lda, const W* w, int ldb, float beta,
                                        float* c, int ldc) {
  // Fully unrolled, so the R·M accumulators and M inputs live in registers.
  V acc[R][M];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int i = 0; i < M; ++i) acc[r][i] = V{};
  const int kv = k - k % kLanes;
  for (int p = 0; p < kv; p += kLanes) {
    V x[M];
#pragma GCC unroll 4
    for (int i = 0; i < M; ++i) x[i] = vec::load<V>(a + static_cast<int64_t>(i) * lda + p);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      // The same columns of the next tile's rows: the hardware prefetcher alone leaves a few
      // percent of the bandwidth unused, more as m grows (bench/README.md, decode at memory speed).
      // A prefetch never faults, also past the end of W.
      if constexpr (kPrefetchNextRows<R, V, W>) __builtin_prefetch(w + static_cast<int64_t>(r + R) * ldb + p, 0, 3);
      const V wr = vec::load<V>(w + static_cast<int64_t>(r) * ldb + p);
#pragma GCC unroll 4
      for (int i = 0; i < M; ++i) acc[r][i] += wr * x[i];
    }
  }
  for (int r = 0; r < R; ++r) {
    const W* wr = w + static_cast<int64_t>(r) * ldb;
    for (int i = 0; i < M; ++i) {
      const float* xi = a + static_cast<int64_t>(i) * lda;
      float s = hsum(acc[r][i]);
      // An explicit fma: left to contraction, the tail's rounding differed between the fp32 and
      // the bf16 instantiations.
      for (int p = kv; p < k; ++p) s = __builtin_fmaf(widen(wr[p]), xi[p], s);
      float& out = c[static_cast<int64_t>(i) * ldc + r];
      out = alpha * s + (beta == 0 ? 0.0f : beta * out);
    }
  }
}

// All m rows of x against R rows of W, x rows G at a time (at most 16 accumulators; a later
// group reads the tile from cache).
template <int R, typename V, typename W>
[[gnu::always_inline]] inline void row_tile(int m, int k, float alpha, const float* a, int lda, const W* w, int ldb,
                                            float beta, float* c, int ldc) {
  constexpr int G = R >= 8 ? 2 : 4;
  int i = 0;
  for (; i + G <= m; i += G)
    tile<R, G, V, W>(k, alpha, a + static_cast<int64_t>(i) * lda, lda, w, ldb, beta, c + static_cast<int64_t>(i) * ldc,
                     ldc);
  const float* ai = a + static_cast<int64_t>(i) * lda;
  float* ci = c + static_cast<int64_t>(i) * ldc;
  switch (m - i) {
    case 3:
      if constexpr (G > 3) tile<R, 3, V, W>(k, alpha, ai, lda, w, ldb, beta, ci, ldc);
      break;
    case 2:
      if constexpr (G > 2) tile<R, 2, V, W>(k, alpha, ai, lda, w, ldb, beta, ci, ldc);
      break;
    case 1:
      tile<R, 1, V, W>(k, alpha, ai, lda, w, ldb, beta, ci, ldc);
      break;
    default:
      break;
  }
}

// Rows [j0, j1) of W in tiles of R rows. Everything here is inlined into each ISA variant below,
// so each is compiled for its ISA.
template <int R, typename V, typename W>
[[gnu::always_inline]] inline void row_tiles(int m, int k, float alpha, const float* a, int lda, const W* b, int ldb,
                                             float beta, float* c, int ldc, int j0, int j1) {
  int j = j0;
  for (; j + R <= j1; j += R)
    row_tile<R, V, W>(m, k, alpha, a, lda, b + static_cast<int64_t>(j) * ldb, ldb, beta, c + j, ldc);
  for (; j < j1; ++j) row_tile<1, V, W>(m, k, alpha, a, lda, b + static_cast<int64_t>(j) * ldb, ldb, beta, c + j, ldc);
}

// One function per ISA and tile height R, so each tile's code is compiled on its own (in one
// function with both heights, the R = 4 tiles measured ~25% slower at m = 8).
template <int R, typename W>
void rows_base(int m, int k, float alpha, const float* a, int lda, const W* b, int ldb, float beta, float* c, int ldc,
               int j0, int j1) {
  row_tiles<R, vec::F16Base, W>(m, k, alpha, a, lda, b, ldb, beta, c, ldc, j0, j1);
}
template <int R, typename W>
__attribute__((target("avx2,fma"))) void rows_avx2(int m, int k, float alpha, const float* a, int lda, const W* b,
                                                   int ldb, float beta, float* c, int ldc, int j0, int j1) {
  row_tiles<R, vec::F16Avx2, W>(m, k, alpha, a, lda, b, ldb, beta, c, ldc, j0, j1);
}
template <int R, typename W>
__attribute__((target("avx512f"))) void rows_avx512(int m, int k, float alpha, const float* a, int lda, const W* b,
                                                    int ldb, float beta, float* c, int ldc, int j0, int j1) {
  row_tiles<R, vec::F16Avx512, W>(m, k, alpha, a, lda, b, ldb, beta, c, ldc, j0, j1);
}

// The variant for the running CPU (vec::isa(), chosen on first use) and for m.
template <typename W>
void rows(int m, int k, float alpha, const float* a, int lda, const W* b, int ldb, float beta, float* c, int ldc,
          int j0, int j1) {
  static const auto one =
      vec::pick(&rows_base<kSmallMRowTile, W>, &rows_avx2<kSmallMRowTile, W>, &rows_avx512<kSmallMRowTile, W>);
  static const auto tiled = vec::pick(&rows_base<kRowTile, W>, &rows_avx2<kRowTile, W>, &rows_avx512<kRowTile, W>);
  (m <= kSmallMOneRow ? one : tiled)(m, k, alpha, a, lda, b, ldb, beta, c, ldc, j0, j1);
}

// Threads join only for matrices big enough to pay for waking them: a one-sequence step is
// dozens of small products (bench/README.md, decode at memory speed).
template <typename W>
void small_m(int m, int n, int k, float alpha, const float* a, int lda, const W* b, int ldb, float beta, float* c,
             int ldc) {
  const int64_t weight_bytes = static_cast<int64_t>(n) * k * static_cast<int64_t>(sizeof(W));
  const int threads = weight_bytes >= kSmallMThreadBytes && !omp_in_parallel() ? num_threads() : 1;
  constexpr int kRows = kThreadRows;
  const int tiles = (n + kRows - 1) / kRows;
  if (threads <= 1 || tiles < 2) {
    rows(m, k, alpha, a, lda, b, ldb, beta, c, ldc, 0, n);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    // Contiguous runs of whole tiles per thread: each streams its own part of W once.
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int j0 = std::min(n, static_cast<int>(static_cast<int64_t>(tiles) * t / nt) * kRows);
    const int j1 = std::min(n, static_cast<int>(static_cast<int64_t>(tiles) * (t + 1) / nt) * kRows);
    if (j0 < j1) rows(m, k, alpha, a, lda, b, ldb, beta, c, ldc, j0, j1);
  }
}

}  // namespace

void gemm_small_m(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb, float beta,
                  float* c, int ldc) {
  small_m(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm_small_m_bf16(int m, int n, int k, const float* x, const bf16* w, float* y, bool accumulate) {
  small_m(m, n, k, 1.0f, x, k, w, k, accumulate ? 1.0f : 0.0f, y, n);
}

}  // namespace yoco::cpu
