// The small-m product (kernels/cpu/gemv.cc: decode steps, m = batch rows times Wᵀ) against the
// plain triple loop, over shapes that hit every tile and tail, strided operands, alpha/beta, and
// the threaded split.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "tests/unit/test_util.h"

namespace yoco {
namespace {

using test::randn;

// Largest |a - b| relative to the size of the dot products (sqrt(k) for unit normals).
double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b, int k) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m / std::sqrt(static_cast<double>(std::max(k, 1)));
}

void check(int m, int n, int k, int pad, float alpha, float beta, uint32_t seed) {
  const int lda = k + pad, ldb = k + 2 * pad, ldc = n + pad;
  auto a = randn(static_cast<size_t>(m) * lda, seed), b = randn(static_cast<size_t>(n) * ldb, seed + 1);
  auto c1 = randn(static_cast<size_t>(m) * ldc, seed + 2), c2 = c1;
  cpu::gemm(m, n, k, alpha, a.data(), lda, b.data(), ldb, true, beta, c1.data(), ldc);
  cpu::gemm_reference(m, n, k, alpha, a.data(), lda, b.data(), ldb, true, beta, c2.data(), ldc);
  EXPECT_LT(max_rel_diff(c1, c2, k), 1e-5) << "m " << m << " n " << n << " k " << k << " pad " << pad;
}

TEST(GemmSmallM, MatchesReferenceOverTilesAndTails) {
  uint32_t seed = 1;
  for (int m = 1; m <= cpu::kSmallM + 1; ++m)
    for (int n : {1, 3, 4, 5, 9, 37})
      for (int k : {1, 7, 16, 17, 33, 100}) check(m, n, k, m % 3, 1.0f, 0.0f, seed++);
}

TEST(GemmSmallM, AlphaBetaAndStrides) {
  for (int m : {1, 2, 5, 16})
    for (auto [alpha, beta] : {std::pair{0.5f, 0.25f}, {1.0f, 1.0f}, {-2.0f, 0.0f}})
      check(m, 23, 70, 5, alpha, beta, 7);
}

TEST(GemmSmallM, ThreadedSplitMatchesReference) {
  // n · k · 4 bytes above kSmallMThreadBytes: the rows of W are split between the threads.
  const int k = 1024, n = static_cast<int>(cpu::kSmallMThreadBytes / (4 * k)) + 37;
  cpu::set_num_threads(2);
  for (int m : {1, 2, 3, 8, 16}) check(m, n, k, 0, 1.0f, 0.0f, 11);
  cpu::set_num_threads(0);
}

TEST(GemmSmallM, RowResultDoesNotDependOnBatch) {
  // A sequence's logits are the same bits whether it decodes alone or in a batch.
  const int n = 41, k = 131, m = 11;
  auto a = randn(static_cast<size_t>(m) * k, 3), b = randn(static_cast<size_t>(n) * k, 4);
  std::vector<float> all(static_cast<size_t>(m) * n), one(n);
  cpu::gemm(m, n, k, 1.0f, a.data(), k, b.data(), k, true, 0.0f, all.data(), n);
  for (int i = 0; i < m; ++i) {
    cpu::gemm(1, n, k, 1.0f, a.data() + static_cast<size_t>(i) * k, k, b.data(), k, true, 0.0f, one.data(), n);
    for (int j = 0; j < n; ++j) EXPECT_EQ(one[j], all[static_cast<size_t>(i) * n + j]) << "row " << i << " col " << j;
  }
}

// Batches on either side of the one-row reading (m <= 3, gemv.cc) and the 4-row tiles give every
// row the same bits, at every thread split.
TEST(GemmSmallM, OneRowAndTiledBatchesAgreeBitwise) {
  const int n = 37, k = 203;
  auto a = randn(static_cast<size_t>(16) * k, 5), b = randn(static_cast<size_t>(n) * k, 6);
  std::vector<float> want(n), got(static_cast<size_t>(16) * n);
  for (int m : {2, 3, 4, 5, 7, 16}) {
    cpu::gemm(m, n, k, 1.0f, a.data(), k, b.data(), k, true, 0.0f, got.data(), n);
    for (int i = 0; i < m; ++i) {
      cpu::gemm(1, n, k, 1.0f, a.data() + static_cast<size_t>(i) * k, k, b.data(), k, true, 0.0f, want.data(), n);
      for (int j = 0; j < n; ++j)
        ASSERT_EQ(want[j], got[static_cast<size_t>(i) * n + j]) << "m " << m << " row " << i << " col " << j;
    }
  }
}

// The bf16-weight variant widens each weight exactly, so it must give the fp32 kernel's bits on the
// widened matrix: same tiles, tails, accumulation and threaded split, whatever the batch.
TEST(GemmSmallM, Bf16WeightsGiveTheFp32KernelsBitsOnTheWidenedMatrix) {
  uint32_t seed = 100;
  for (int threads : {1, 2}) {
    cpu::set_num_threads(threads);
    for (int m : {1, 2, 3, 4, 5, 7})
      for (auto [n, k] : {std::pair{37, 100}, {5, 16}, {9, 1}, {1100, 1024}}) {
        auto x = randn(static_cast<size_t>(m) * k, seed), wf = randn(static_cast<size_t>(n) * k, seed + 1);
        std::vector<cpu::bf16> w(wf.size());
        cpu::to_bf16(wf.data(), w.data(), static_cast<int64_t>(w.size()));
        cpu::from_bf16(w.data(), wf.data(), static_cast<int64_t>(w.size()));
        for (bool acc : {false, true}) {
          auto y1 = randn(static_cast<size_t>(m) * n, seed + 2), y2 = y1;
          cpu::gemm_small_m_bf16(m, n, k, x.data(), w.data(), y1.data(), acc);
          cpu::gemm_small_m(m, n, k, 1.0f, x.data(), k, wf.data(), k, acc ? 1.0f : 0.0f, y2.data(), n);
          for (size_t i = 0; i < y1.size(); ++i)
            ASSERT_EQ(y1[i], y2[i]) << "m " << m << " n " << n << " k " << k << " acc " << acc << " at " << i;
        }
        ++seed;
      }
  }
  cpu::set_num_threads(0);
}

}  // namespace
}  // namespace yoco
