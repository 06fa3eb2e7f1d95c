// CPU kernels against their plain versions: BLAS vs triple loop, tiled attention vs textbook,
// and the three forms of gated retention (docs/design.md §2.3, seed 001 appendix F).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "handoff/kv_rows.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/vec.h"
#include "tests/unit/test_util.h"

namespace yoco {
namespace {

using test::randn;

TEST(Gemm, BlasMatchesReference) {
  for (auto [m, n, k] : {std::tuple{1, 37, 64}, {7, 5, 3}, {64, 96, 128}, {130, 70, 33}}) {
    for (bool trans : {false, true}) {
      auto a = randn(static_cast<size_t>(m) * k, 1), b = randn(static_cast<size_t>(n) * k, 2);
      auto c1 = randn(static_cast<size_t>(m) * n, 3), c2 = c1;
      cpu::gemm(m, n, k, 0.5f, a.data(), k, b.data(), trans ? k : n, trans, 0.25f, c1.data(), n);
      cpu::gemm_reference(m, n, k, 0.5f, a.data(), k, b.data(), trans ? k : n, trans, 0.25f, c2.data(), n);
      EXPECT_LT(test::max_abs_diff(c1.data(), c2.data(), c1.size()), 1e-4) << m << "x" << n << "x" << k;
    }
  }
}

TEST(Gemm, TileMatchesReference) {
  // The per-thread kernel of attention and retention tiles: every register block (6 rows × 4
  // vectors), each row and column leftover, strided operands, alpha and beta.
  for (auto [m, n, k] : {std::tuple{1, 1, 1},
                         {6, 64, 128},
                         {64, 128, 64},
                         {5, 47, 9},
                         {13, 81, 130},
                         {128, 33, 17},
                         {7, 16, 1},
                         {64, 200, 3}}) {
    for (bool trans : {false, true}) {
      const int lda = k + 3, ldb = (trans ? k : n) + 5, ldc = n + 2;
      auto a = randn(static_cast<size_t>(m) * lda, 1), b = randn(static_cast<size_t>(trans ? n : k) * ldb, 2);
      for (float beta : {0.0f, 1.0f, 0.25f}) {
        auto c1 = randn(static_cast<size_t>(m) * ldc, 3), c2 = c1;
        cpu::gemm_tile(m, n, k, 0.5f, a.data(), lda, b.data(), ldb, trans, beta, c1.data(), ldc);
        cpu::gemm_reference(m, n, k, 0.5f, a.data(), lda, b.data(), ldb, trans, beta, c2.data(), ldc);
        EXPECT_LT(test::max_abs_diff(c1.data(), c2.data(), c1.size()), 1e-4)
            << m << "x" << n << "x" << k << " trans=" << trans << " beta=" << beta;
      }
    }
    // A given transposed: at[p, i] = a[i, p].
    const int ldat = m + 4;
    auto a = randn(static_cast<size_t>(m) * k, 4), b = randn(static_cast<size_t>(k) * n, 5);
    std::vector<float> at(static_cast<size_t>(k) * ldat);
    for (int i = 0; i < m; ++i)
      for (int p = 0; p < k; ++p) at[static_cast<size_t>(p) * ldat + i] = a[static_cast<size_t>(i) * k + p];
    auto c1 = randn(static_cast<size_t>(m) * n, 6), c2 = c1;
    cpu::gemm_tile_at(m, n, k, 2.0f, at.data(), ldat, b.data(), n, 1.0f, c1.data(), n);
    cpu::gemm_reference(m, n, k, 2.0f, a.data(), k, b.data(), n, false, 1.0f, c2.data(), n);
    EXPECT_LT(test::max_abs_diff(c1.data(), c2.data(), c1.size()), 2e-4) << m << "x" << n << "x" << k << " at";
  }
}

TEST(Gemm, TileWithNoProductScalesC) {
  std::vector<float> c = {1, 2, 3, 4};
  cpu::gemm_tile(2, 2, 0, 1.0f, nullptr, 1, nullptr, 1, true, 0.5f, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{0.5f, 1, 1.5f, 2}));
  cpu::gemm_tile_at(2, 2, 0, 1.0f, nullptr, 1, nullptr, 1, 0.0f, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{0, 0, 0, 0}));
}

struct RetInputs {
  std::vector<float> q, k, v, a, s0;
};

RetInputs retention_inputs(int n, int hd, uint32_t seed) {
  RetInputs r;
  r.q = randn(static_cast<size_t>(n) * hd, seed);
  r.k = randn(static_cast<size_t>(n) * hd, seed + 1, 1.0f / std::sqrt(static_cast<float>(hd)));
  r.v = randn(static_cast<size_t>(n) * hd, seed + 2);
  auto g = randn(n, seed + 3, 2.0f);
  r.a.resize(n);
  for (int i = 0; i < n; ++i) r.a[i] = (std::min(g[i], 0.0f) - std::log1p(std::exp(-std::fabs(g[i])))) / 16.0f;
  r.s0 = randn(static_cast<size_t>(hd) * hd, seed + 4, 0.3f);
  return r;
}

TEST(Retention, ParallelRecurrentChunkwiseAgree) {
  const int hd = 16;
  for (int n : {1, 5, 63, 100, 257, 300}) {
    const RetInputs in = retention_inputs(n, hd, 7 + n);
    std::vector<float> o_par(static_cast<size_t>(n) * hd), s_par(static_cast<size_t>(hd) * hd);
    cpu::retention_parallel(in.q.data(), hd, in.k.data(), hd, in.v.data(), hd, in.a.data(), n, hd, in.s0.data(),
                            o_par.data(), hd, s_par.data());
    std::vector<float> o_rec(o_par.size()), s_rec = in.s0;
    cpu::retention_recurrent(in.q.data(), hd, in.k.data(), hd, in.v.data(), hd, in.a.data(), n, hd, s_rec.data(),
                             o_rec.data(), hd);
    EXPECT_LT(test::max_abs_diff(o_par.data(), o_rec.data(), o_par.size()), 2e-4) << "n=" << n;
    EXPECT_LT(test::max_abs_diff(s_par.data(), s_rec.data(), s_par.size()), 2e-4) << "n=" << n;
    for (int chunk : {1, 7, 64, 256}) {
      std::vector<float> o_ch(o_par.size()), s_ch = in.s0;
      cpu::retention_chunkwise(in.q.data(), hd, in.k.data(), hd, in.v.data(), hd, in.a.data(), n, hd, chunk,
                               s_ch.data(), o_ch.data(), hd);
      EXPECT_LT(test::max_abs_diff(o_par.data(), o_ch.data(), o_par.size()), 2e-4) << "n=" << n << " C=" << chunk;
      EXPECT_LT(test::max_abs_diff(s_par.data(), s_ch.data(), s_par.size()), 2e-4) << "n=" << n << " C=" << chunk;
    }
  }
}

TEST(Retention, ChunkwiseResumesAcrossCalls) {
  // Two calls carrying the state = one call: what chunked prefill relies on.
  const int hd = 8, n = 45, split = 19;
  const RetInputs in = retention_inputs(n, hd, 99);
  std::vector<float> o_one(static_cast<size_t>(n) * hd), s_one(static_cast<size_t>(hd) * hd, 0.0f);
  cpu::retention_chunkwise(in.q.data(), hd, in.k.data(), hd, in.v.data(), hd, in.a.data(), n, hd, 7, s_one.data(),
                           o_one.data(), hd);
  std::vector<float> o_two(o_one.size()), s_two(s_one.size(), 0.0f);
  cpu::retention_chunkwise(in.q.data(), hd, in.k.data(), hd, in.v.data(), hd, in.a.data(), split, hd, 7, s_two.data(),
                           o_two.data(), hd);
  const size_t off = static_cast<size_t>(split) * hd;
  cpu::retention_chunkwise(in.q.data() + off, hd, in.k.data() + off, hd, in.v.data() + off, hd, in.a.data() + split,
                           n - split, hd, 7, s_two.data(), o_two.data() + off, hd);
  EXPECT_LT(test::max_abs_diff(o_one.data(), o_two.data(), o_one.size()), 1e-5);
  EXPECT_LT(test::max_abs_diff(s_one.data(), s_two.data(), s_one.size()), 1e-5);
}

TEST(Attention, TiledMatchesReference) {
  struct Case {
    int n_q, n_k, hq, hkv, hd, window;
    int64_t q_pos0, k_pos0;
  };
  // Windows, GQA, odd head sizes and counts, partial query blocks and key tiles, keys that start
  // before the queries (a sliding-window ring), the engines' head sizes 64 and 128.
  for (const Case& c :
       {Case{1, 1, 2, 2, 8, 0, 0, 0}, Case{70, 70, 4, 2, 16, 0, 0, 0}, Case{200, 300, 6, 2, 8, 0, 100, 0},
        Case{130, 140, 4, 4, 8, 16, 10, 0}, Case{64, 71, 3, 1, 8, 8, 7, 0}, Case{33, 300, 2, 1, 12, 500, 267, 0},
        Case{300, 700, 2, 2, 128, 512, 400, 0}, Case{257, 257, 4, 1, 64, 0, 0, 0}, Case{129, 190, 3, 3, 20, 37, 61, 0},
        Case{65, 600, 2, 1, 33, 129, 1000, 465}, Case{5, 3, 2, 1, 7, 2, 0, 0}}) {
    const int ldq = c.hq * c.hd, ldk = c.hkv * c.hd;
    auto q = randn(static_cast<size_t>(c.n_q) * ldq, 1), k = randn(static_cast<size_t>(c.n_k) * ldk, 2),
         v = randn(static_cast<size_t>(c.n_k) * ldk, 3);
    std::vector<float> o1(static_cast<size_t>(c.n_q) * ldq), o2(o1.size());
    cpu::AttentionArgs a{q.data(),
                         ldq,
                         k.data(),
                         ldk,
                         v.data(),
                         ldk,
                         o1.data(),
                         ldq,
                         c.n_q,
                         c.n_k,
                         c.hq,
                         c.hkv,
                         c.hd,
                         c.q_pos0,
                         c.k_pos0,
                         c.window,
                         1.0f / std::sqrt(static_cast<float>(c.hd))};
    cpu::attention(a);
    a.out = o2.data();
    cpu::attention_reference(a);
    EXPECT_LT(test::max_abs_diff(o1.data(), o2.data(), o1.size()), 1e-5) << c.n_q << " " << c.n_k << " w=" << c.window;
  }
}

TEST(Attention, DecodeOverBlocksMatchesReference) {
  const int hq = 6, hkv = 2, hd = 16, kv_dim = hkv * hd;
  for (int n : {1, 15, 16, 17, 100}) {
    for (int bs : {1, 4, 16, 128}) {
      auto q = randn(hq * hd, n), k = randn(static_cast<size_t>(n) * kv_dim, n + 1), v = randn(k.size(), n + 2);
      std::vector<const float*> kb, vb;
      std::vector<std::vector<float>> kcopy, vcopy;  // separate allocations, as a paged pool has
      for (int b0 = 0; b0 < n; b0 += bs) {
        const int rows = std::min(bs, n - b0);
        kcopy.emplace_back(k.begin() + static_cast<size_t>(b0) * kv_dim,
                           k.begin() + static_cast<size_t>(b0 + rows) * kv_dim);
        vcopy.emplace_back(v.begin() + static_cast<size_t>(b0) * kv_dim,
                           v.begin() + static_cast<size_t>(b0 + rows) * kv_dim);
        kcopy.back().resize(static_cast<size_t>(bs) * kv_dim);
        vcopy.back().resize(static_cast<size_t>(bs) * kv_dim);
      }
      for (size_t i = 0; i < kcopy.size(); ++i) {
        kb.push_back(kcopy[i].data());
        vb.push_back(vcopy[i].data());
      }
      std::vector<float> o1(hq * hd), o2(hq * hd);
      cpu::KvBlocks blocks{kb.data(), vb.data(), bs, n};
      const float scale = 0.25f;
      cpu::decode_attention(q.data(), blocks, o1.data(), hq, hkv, hd, scale);
      cpu::AttentionArgs a{q.data(), hq * hd, k.data(), kv_dim, v.data(), kv_dim, o2.data(), hq * hd, 1,
                           n,        hq,      hkv,      hd,     n - 1,    0,      0,         scale};
      cpu::attention_reference(a);
      EXPECT_LT(test::max_abs_diff(o1.data(), o2.data(), o1.size()), 1e-5) << "n=" << n << " bs=" << bs;
    }
  }
}

// The fused decode kernel (head_dim a multiple of 16): the models' shapes, every group size up to
// eight (sub-groups of four, the two-set sums of groups of one and two), against the textbook
// version; and bitwise the same result whatever the blocks (a paged pool, one run, a ring's two
// halves) and however many threads join (keys are cut into parts by absolute index).
TEST(Attention, FusedDecodeIsExactAndLayoutAndThreadIndependent) {
  struct Shape {
    int hq, hkv, hd;
  };
  for (const Shape sh : {Shape{16, 4, 64}, Shape{8, 8, 64}, Shape{6, 3, 32}, Shape{12, 4, 128}, Shape{8, 1, 16},
                         Shape{10, 2, 48}, Shape{14, 2, 64}, Shape{16, 2, 16}}) {
    const int kv_dim = sh.hkv * sh.hd;
    for (int n : {1, 2, 31, 33, 255, 256, 257, 700, 2100}) {
      auto q = randn(static_cast<size_t>(sh.hq) * sh.hd, n), k = randn(static_cast<size_t>(n) * kv_dim, n + 1),
           v = randn(k.size(), n + 2);
      const float scale = 1.0f / std::sqrt(static_cast<float>(sh.hd));
      std::vector<float> ref(static_cast<size_t>(sh.hq) * sh.hd);
      cpu::AttentionArgs a{q.data(), sh.hq * sh.hd, k.data(), kv_dim, v.data(), kv_dim, ref.data(), sh.hq * sh.hd, 1,
                           n,        sh.hq,         sh.hkv,   sh.hd,  n - 1,    0,      0,          scale};
      cpu::attention_reference(a);
      // One run, on one thread.
      std::vector<float> one(ref.size());
      const float* k1[1] = {k.data()};
      const float* v1[1] = {v.data()};
      cpu::set_num_threads(1);
      cpu::decode_attention(q.data(), cpu::KvBlocks{k1, v1, n, n}, one.data(), sh.hq, sh.hkv, sh.hd, scale);
      EXPECT_LT(test::max_abs_diff(one.data(), ref.data(), ref.size()), 2e-5)
          << sh.hq << "/" << sh.hkv << "x" << sh.hd << " n=" << n;
      // Blocks of 32 rows (the pool's), of 7, and a ring's two uneven halves, on two threads.
      cpu::set_num_threads(2);
      for (int bs : {32, 7, 0}) {
        std::vector<const float*> kb, vb;
        std::vector<int> rows;
        if (bs == 0) {
          const int first = n / 3 + 1;
          kb = {k.data(), k.data() + static_cast<size_t>(first) * kv_dim};
          vb = {v.data(), v.data() + static_cast<size_t>(first) * kv_dim};
          rows = {first, n - first};
        } else {
          for (int b0 = 0; b0 < n; b0 += bs) {
            kb.push_back(k.data() + static_cast<size_t>(b0) * kv_dim);
            vb.push_back(v.data() + static_cast<size_t>(b0) * kv_dim);
          }
        }
        std::vector<float> o(ref.size());
        cpu::KvBlocks blocks{kb.data(), vb.data(), bs, n, bs == 0 ? rows.data() : nullptr};
        cpu::decode_attention(q.data(), blocks, o.data(), sh.hq, sh.hkv, sh.hd, scale);
        for (size_t i = 0; i < o.size(); ++i)
          ASSERT_EQ(o[i], one[i]) << sh.hq << "/" << sh.hkv << "x" << sh.hd << " n=" << n << " blocks=" << bs << " at "
                                  << i;
      }
      cpu::set_num_threads(0);
    }
  }
}

TEST(Attention, Bf16DecodeIsTheFp32KernelOnWidenedRows) {
  // 16-bit K/V (model/state.h): bf16 blocks give bit for bit what the fp32 kernel gives on the
  // widened rows, in 32-row blocks (the pool's) on one and two threads, for the fused head sizes
  // and for one the general path takes (hd 12).
  struct Shape {
    int hq, hkv, hd;
  };
  for (const Shape sh : {Shape{16, 4, 64}, Shape{8, 8, 64}, Shape{12, 4, 128}, Shape{10, 2, 48}, Shape{4, 2, 12}}) {
    const int kv_dim = sh.hkv * sh.hd;
    for (int n : {1, 31, 33, 257, 2100}) {
      auto q = randn(static_cast<size_t>(sh.hq) * sh.hd, n), k = randn(static_cast<size_t>(n) * kv_dim, n + 1),
           v = randn(k.size(), n + 2);
      std::vector<uint16_t> k16(k.size()), v16(v.size());
      for (size_t i = 0; i < k.size(); ++i) {
        k16[i] = f32_to_bf16(k[i]);
        v16[i] = f32_to_bf16(v[i]);
        k[i] = bf16_to_f32(k16[i]);  // the widened rows
        v[i] = bf16_to_f32(v16[i]);
      }
      const float scale = 1.0f / std::sqrt(static_cast<float>(sh.hd));
      std::vector<const float*> kb, vb;
      std::vector<const uint16_t*> kb16, vb16;
      for (int b0 = 0; b0 < n; b0 += 32) {
        kb.push_back(k.data() + static_cast<size_t>(b0) * kv_dim);
        vb.push_back(v.data() + static_cast<size_t>(b0) * kv_dim);
        kb16.push_back(k16.data() + static_cast<size_t>(b0) * kv_dim);
        vb16.push_back(v16.data() + static_cast<size_t>(b0) * kv_dim);
      }
      for (int threads : {1, 2}) {
        cpu::set_num_threads(threads);
        std::vector<float> want(static_cast<size_t>(sh.hq) * sh.hd), got(want.size(), -1.0f);
        cpu::decode_attention(q.data(), cpu::KvBlocks{kb.data(), vb.data(), 32, n}, want.data(), sh.hq, sh.hkv, sh.hd,
                              scale);
        cpu::KvBlocks b16{nullptr, nullptr, 32, n, nullptr, kb16.data(), vb16.data()};
        cpu::decode_attention(q.data(), b16, got.data(), sh.hq, sh.hkv, sh.hd, scale);
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_EQ(got[i], want[i]) << sh.hq << "/" << sh.hkv << "x" << sh.hd << " n=" << n << " threads=" << threads
                                     << " at " << i;
      }
      cpu::set_num_threads(0);
    }
  }
}

TEST(Vec, ExpIsCloseToLibm) {
  // The softmax's and the decays' exp: relative error within a few ulp, exactly 0 far below and at −inf.
  double worst = 0;
  for (float x = -87.0f; x <= 10.0f; x += 0.0137f) {
    float in[cpu::vec::kLanes], out[cpu::vec::kLanes];
    for (int i = 0; i < cpu::vec::kLanes; ++i) in[i] = x + static_cast<float>(i) * 1e-3f;
    cpu::vec::store(out, cpu::vec::exp(cpu::vec::load(in)));
    for (int i = 0; i < cpu::vec::kLanes; ++i)
      worst = std::max(worst, std::fabs(out[i] / std::exp(static_cast<double>(in[i])) - 1.0));
  }
  EXPECT_LT(worst, 5e-7);
  float in[cpu::vec::kLanes] = {-std::numeric_limits<float>::infinity(), -100.0f, -88.0f, 0.0f}, out[cpu::vec::kLanes];
  cpu::vec::store(out, cpu::vec::exp(cpu::vec::load(in)));
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_EQ(out[2], 0.0f);
  EXPECT_EQ(out[3], 1.0f);
}

// One kernel body, three vector types (vec.h): the AVX-512 variant's native 16-lane vector and the
// AVX2 and base variants' 2 × 8 and 4 × 4 lanes. Compiled here for one target, all three must give
// the same lanes bit for bit: a part taken in the wrong order or a reduction paired differently
// shows as a changed value.
template <typename V>
std::vector<float> vec_ops(const std::vector<float>& in, const std::vector<uint16_t>& in16) {
  namespace vec = cpu::vec;
  std::vector<float> out;
  for (size_t o = 0; o + 3 * vec::kLanes <= in.size(); o += vec::kLanes) {
    const V a = vec::load<V>(in.data() + o), b = vec::load<V>(in.data() + o + vec::kLanes);
    const V c = vec::load<V>(in16.data() + o);
    const int lo = static_cast<int>(o % 13), hi = lo + static_cast<int>(o % 7);
    const auto idx = vec::iota<vec::int_t<V>>() + 3;
    const V sel = vec::select((idx >= vec::splat<vec::int_t<V>>(lo)) & (idx < vec::splat<vec::int_t<V>>(hi)), a,
                              vec::splat<V>(-1.5f));
    const V r[] = {a * b + c, vec::exp(-(a * a)), vec::max(a, b), sel, 2.0f * a - b / vec::splat<V>(3.0f), c};
    for (const V& v : r) {
      float lanes[vec::kLanes];
      vec::store(lanes, v);
      out.insert(out.end(), lanes, lanes + vec::kLanes);
      out.push_back(vec::hsum(v));
      out.push_back(vec::hmax(v));
    }
  }
  return out;
}

TEST(Vec, EveryVariantsTypeComputesTheSameLanes) {
  auto in = randn(16 * 40, 21, 3.0f);
  in[5] = -std::numeric_limits<float>::infinity();
  in[40] = -0.0f;
  std::vector<uint16_t> in16(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &in[(i * 7) % in.size()], 4);
    in16[i] = static_cast<uint16_t>(u >> 16);
  }
  const auto native = vec_ops<cpu::vec::F16Avx512>(in, in16);
  const auto two = vec_ops<cpu::vec::F16Avx2>(in, in16), four = vec_ops<cpu::vec::F16Base>(in, in16);
  ASSERT_EQ(two.size(), native.size());
  ASSERT_EQ(four.size(), native.size());
  for (size_t i = 0; i < native.size(); ++i) {
    ASSERT_EQ(std::memcmp(&two[i], &native[i], 4), 0)
        << "2 x 8 lanes, value " << i << ": " << two[i] << " vs " << native[i];
    ASSERT_EQ(std::memcmp(&four[i], &native[i], 4), 0)
        << "4 x 4 lanes, value " << i << ": " << four[i] << " vs " << native[i];
  }
}

TEST(Activation, SiluMulMatchesDouble) {
  // Vector body and scalar tail (37 columns), strided rows, large |x| on both sides.
  const int rows = 5, cols = 37, lda = 41, ldb = 39, ldo = 40;
  auto a = randn(static_cast<size_t>(rows) * lda, 11, 4.0f), b = randn(static_cast<size_t>(rows) * ldb, 12);
  a[3] = -120.0f;
  a[4] = 95.0f;
  a[lda + 20] = -0.0f;
  std::vector<float> o(static_cast<size_t>(rows) * ldo, 7.0f);
  cpu::silu_mul(a.data(), lda, b.data(), ldb, o.data(), ldo, rows, cols);
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < cols; ++i) {
      const double x = a[static_cast<size_t>(r) * lda + i];
      const double want = x / (1.0 + std::exp(-x)) * b[static_cast<size_t>(r) * ldb + i];
      EXPECT_NEAR(o[static_cast<size_t>(r) * ldo + i], want, 1e-6 * std::max(1.0, std::fabs(want))) << r << "," << i;
    }
  EXPECT_EQ(o[cols], 7.0f);  // past the row: untouched
}

TEST(Rope, LongPositionsStayAccurate) {
  // Angles are formed in double: position 10^6 still rotates by the exact angle.
  const int64_t pos[2] = {0, 1000000};
  float c[2 * 4], s[2 * 4];
  cpu::rope_table(pos, 2, 8, 10000.0, c, s);
  EXPECT_FLOAT_EQ(c[0], 1.0f);
  EXPECT_NEAR(c[4], std::cos(1e6), 1e-6);
  EXPECT_NEAR(s[4 + 3], std::sin(1e6 * std::pow(10000.0, -1.0)), 1e-6);  // j = d/2−1 → theta^−1
}

}  // namespace
}  // namespace yoco
