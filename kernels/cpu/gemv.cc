#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"

// The vector helpers below are always inlined, so the ABI of passing a 64-byte vector without
// AVX-512 (GCC's -Wpsabi note in builds without -march=native) never applies.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace yoco::cpu {
namespace {

// 16 floats: one AVX-512 register, two AVX2 registers or four SSE ones, as the variant compiled for
// the running CPU decides (chosen on first use, below; docs/design.md §2.5, precision).
typedef float v16 __attribute__((vector_size(64)));
typedef float v8 __attribute__((vector_size(32)));
typedef float v4 __attribute__((vector_size(16)));
typedef float v2 __attribute__((vector_size(8)));
typedef uint16_t h16 __attribute__((vector_size(32)));
typedef uint32_t u16x __attribute__((vector_size(64)));
constexpr int kLanes = 16;
constexpr int kRowTile = 4;  // rows of W per tile: each is read from memory once for all m rows of x
// bf16 rows are half as long: at m <= 2, tiles of twice as many rows keep as many bytes in flight
// (measured, 2 threads: 25.5 -> 28.3 GB/s at m = 1; at m >= 3 the taller tile is slower).
constexpr int kBf16RowTile = 8;

// Unaligned loads that may alias the data (the idiom of the compilers' own _mm512_loadu_ps).
typedef float v16_unaligned __attribute__((vector_size(64), aligned(4), may_alias));
typedef uint16_t h16_unaligned __attribute__((vector_size(32), aligned(2), may_alias));
[[gnu::always_inline]] inline v16 load(const float* p) { return *reinterpret_cast<const v16_unaligned*>(p); }
// 16 bf16 weights widened to fp32: exact (a bf16 is the upper half of an fp32).
[[gnu::always_inline]] inline v16 load(const bf16* p) {
  const u16x wide = __builtin_convertvector(*reinterpret_cast<const h16_unaligned*>(p), u16x) << 16;
  return __builtin_bit_cast(v16, wide);
}
[[gnu::always_inline]] inline float widen(float f) { return f; }
[[gnu::always_inline]] inline float widen(bf16 h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}

// Pairwise lane sum in a fixed order (lane i + lane i+8, then i+4, i+2, i+1), so a result never
// depends on how many rows were computed together. Halving by shuffles keeps it a few vector
// additions: a scalar version cost a few percent of a decode step per extra row of x.
[[gnu::always_inline]] inline float hsum(const v16& v) {
  const v8 a = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
               __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
  const v4 b = __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7);
  const v2 c = __builtin_shufflevector(b, b, 0, 1) + __builtin_shufflevector(b, b, 2, 3);
  return c[0] + c[1];
}

// C[M rows starting at a, R rows of W starting at w]: every output is the same sequence of
// operations (16-lane partial sums over k, pairwise lane sum, then the scalar tail) whatever R and M.
template <int R, int M, typename W>
[[gnu::always_inline]] inline void tile(int k, float alpha, const float* a, int lda, const W* w, int ldb, float beta,
                                        float* c, int ldc) {
  // Fully unrolled, so the R·M accumulators and M inputs live in registers.
  v16 acc[R][M];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int i = 0; i < M; ++i) acc[r][i] = v16{};
  const int kv = k - k % kLanes;
  for (int p = 0; p < kv; p += kLanes) {
    v16 x[M];
#pragma GCC unroll 4
    for (int i = 0; i < M; ++i) x[i] = load(a + static_cast<int64_t>(i) * lda + p);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      // The same columns of the next tile's rows: the hardware prefetcher alone leaves a few
      // percent of the bandwidth unused, more as m grows (bench/README.md, decode at memory speed).
      // A prefetch never faults, also past the end of W.
      __builtin_prefetch(w + static_cast<int64_t>(r + R) * ldb + p, 0, 3);
      const v16 wr = load(w + static_cast<int64_t>(r) * ldb + p);
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
template <int R, typename W>
[[gnu::always_inline]] inline void row_tile(int m, int k, float alpha, const float* a, int lda, const W* w, int ldb,
                                            float beta, float* c, int ldc) {
  constexpr int G = R >= 8 ? 2 : 4;
  int i = 0;
  for (; i + G <= m; i += G)
    tile<R, G, W>(k, alpha, a + static_cast<int64_t>(i) * lda, lda, w, ldb, beta, c + static_cast<int64_t>(i) * ldc,
                  ldc);
  const float* ai = a + static_cast<int64_t>(i) * lda;
  float* ci = c + static_cast<int64_t>(i) * ldc;
  switch (m - i) {
    case 3:
      if constexpr (G > 3) tile<R, 3, W>(k, alpha, ai, lda, w, ldb, beta, ci, ldc);
      break;
    case 2:
      if constexpr (G > 2) tile<R, 2, W>(k, alpha, ai, lda, w, ldb, beta, ci, ldc);
      break;
    case 1:
      tile<R, 1, W>(k, alpha, ai, lda, w, ldb, beta, ci, ldc);
      break;
    default:
      break;
  }
}

// Rows [j0, j1) of W in tiles of R rows. Everything here is inlined into each ISA variant below,
// so each is compiled for its ISA.
template <int R, typename W>
[[gnu::always_inline]] inline void row_tiles(int m, int k, float alpha, const float* a, int lda, const W* b, int ldb,
                                             float beta, float* c, int ldc, int j0, int j1) {
  int j = j0;
  for (; j + R <= j1; j += R)
    row_tile<R, W>(m, k, alpha, a, lda, b + static_cast<int64_t>(j) * ldb, ldb, beta, c + j, ldc);
  for (; j < j1; ++j) row_tile<1, W>(m, k, alpha, a, lda, b + static_cast<int64_t>(j) * ldb, ldb, beta, c + j, ldc);
}

template <typename W>
[[gnu::always_inline]] inline void rows_body(int m, int k, float alpha, const float* a, int lda, const W* b, int ldb,
                                             float beta, float* c, int ldc, int j0, int j1) {
  if (sizeof(W) == 2 && m <= 2) row_tiles<kBf16RowTile, W>(m, k, alpha, a, lda, b, ldb, beta, c, ldc, j0, j1);
  else row_tiles<kRowTile, W>(m, k, alpha, a, lda, b, ldb, beta, c, ldc, j0, j1);
}

template <typename W>
using RowsFn = void (*)(int, int, float, const float*, int, const W*, int, float, float*, int, int, int);

template <typename W>
void rows_default(int m, int k, float alpha, const float* a, int lda, const W* b, int ldb, float beta, float* c,
                  int ldc, int j0, int j1) {
  rows_body(m, k, alpha, a, lda, b, ldb, beta, c, ldc, j0, j1);
}
template <typename W>
__attribute__((target("avx2"))) void rows_avx2(int m, int k, float alpha, const float* a, int lda, const W* b, int ldb,
                                               float beta, float* c, int ldc, int j0, int j1) {
  rows_body(m, k, alpha, a, lda, b, ldb, beta, c, ldc, j0, j1);
}
template <typename W>
__attribute__((target("avx512f"))) void rows_avx512(int m, int k, float alpha, const float* a, int lda, const W* b,
                                                    int ldb, float beta, float* c, int ldc, int j0, int j1) {
  rows_body(m, k, alpha, a, lda, b, ldb, beta, c, ldc, j0, j1);
}

// The variant for the running CPU, chosen on first use. Not GCC's target_clones: its ifunc
// resolver runs while the dynamic loader relocates, before a sanitizer's runtime is up, and
// crashes a TSan build at start.
template <typename W>
void rows(int m, int k, float alpha, const float* a, int lda, const W* b, int ldb, float beta, float* c, int ldc,
          int j0, int j1) {
  static const RowsFn<W> fn = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return &rows_avx512<W>;
    if (__builtin_cpu_supports("avx2")) return &rows_avx2<W>;
    return &rows_default<W>;
  }();
  fn(m, k, alpha, a, lda, b, ldb, beta, c, ldc, j0, j1);
}

// Threads join only for matrices big enough to pay for waking them: a one-sequence step is
// dozens of small products (bench/README.md, decode at memory speed).
template <typename W>
void small_m(int m, int n, int k, float alpha, const float* a, int lda, const W* b, int ldb, float beta, float* c,
             int ldc) {
  const int64_t weight_bytes = static_cast<int64_t>(n) * k * static_cast<int64_t>(sizeof(W));
  const int threads = weight_bytes >= kSmallMThreadBytes && !omp_in_parallel() ? num_threads() : 1;
  constexpr int kRows = kBf16RowTile;  // whole tiles of either height per thread
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
