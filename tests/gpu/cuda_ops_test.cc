// Every CUDA op against the CPU oracle (kernels/cpu/ops.h) on random inputs (docs/architecture.md, rule 4):
// |got − ref| ≤ atol + rtol·|ref|, per op:
//   fp32 elementwise (rope, silu_mul, rmsnorm, embed, add): ~1e-5 relative (FMA contraction and
//     expf/rsqrtf differ from the CPU's by a few ulp);
//   fp32 reductions (attention, retention): atol 1e-5, rtol 1e-4 (different summation order);
//   bf16 in/out ops: the CPU op run on the bf16-rounded inputs, rtol 1e-2 (one bf16 rounding of
//     the output is ≤ 2^-9 relative);
//   gemm with fp32 out: products of bf16 are exact in fp32, so only the summation order differs.
// Label "gpu": every test skips when there is no CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"
#include "tests/gpu/gpu_test_util.h"

namespace yoco {
namespace {

// --- gemm --------------------------------------------------------------------------------------------
struct GemmShape {
  int m, n, k;
};

TEST(CudaOps, GemmBf16MatchesCpu) {
  SKIP_WITHOUT_GPU();
  const GemmShape shapes[] = {{1, 1, 1}, {1, 7, 3}, {5, 7, 3}, {33, 65, 130}, {3, 1000, 64}, {128, 256, 512}};
  uint32_t seed = 1;
  for (const GemmShape& s : shapes) {
    SCOPED_TRACE("m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k));
    const auto a16 = to_bf16(random_vec(static_cast<size_t>(s.m) * s.k, seed++));
    const auto b16 = to_bf16(random_vec(static_cast<size_t>(s.n) * s.k, seed++));
    const auto c0 = random_vec(static_cast<size_t>(s.m) * s.n, seed++);
    const auto a = from_bf16(a16), b = from_bf16(b16);
    // Error bound of an fp32 sum of k exact products: scale by k and the magnitudes (|a|,|b| ≤ 1).
    const float tol = 2e-6f * static_cast<float>(s.k) + 1e-6f;
    DeviceBuf<uint16_t> da(a16), db(b16);

    // fp32 out, beta = 0 and then beta = 1 (accumulate), alpha ≠ 1.
    std::vector<float> ref(c0.size());
    cpu::gemm_reference(s.m, s.n, s.k, 1.0f, a.data(), s.k, b.data(), s.k, true, 0.0f, ref.data(), s.n);
    DeviceBuf<float> dc(c0);
    ASSERT_OK(cuda::gemm_bf16(da.get(), db.get(), dc.get(), cuda::DType::kF32, s.m, s.n, s.k, 1.0f, 0.0f, nullptr));
    EXPECT_TRUE(all_close(dc.host(), ref, tol, 1e-5f));

    std::vector<float> ref_acc = c0;
    cpu::gemm_reference(s.m, s.n, s.k, 0.5f, a.data(), s.k, b.data(), s.k, true, 1.0f, ref_acc.data(), s.n);
    DeviceBuf<float> dc2(c0);
    ASSERT_OK(cuda::gemm_bf16(da.get(), db.get(), dc2.get(), cuda::DType::kF32, s.m, s.n, s.k, 0.5f, 1.0f, nullptr));
    EXPECT_TRUE(all_close(dc2.host(), ref_acc, tol, 1e-5f));

    // bf16 out: one bf16 rounding of the fp32 result.
    DeviceBuf<uint16_t> dc16(static_cast<size_t>(s.m) * s.n);
    ASSERT_OK(cuda::gemm_bf16(da.get(), db.get(), dc16.get(), cuda::DType::kBF16, s.m, s.n, s.k, 1.0f, 0.0f, nullptr));
    EXPECT_TRUE(all_close(from_bf16(dc16.host()), ref, tol + 1e-6f, 1e-2f));
  }
}

TEST(CudaOps, GemmBf16RejectsBadArguments) {
  SKIP_WITHOUT_GPU();
  EXPECT_EQ(cuda::gemm_bf16(nullptr, nullptr, nullptr, cuda::DType::kF32, 2, 2, 2, 1, 0, nullptr).code(),
            cuda::StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda::gemm_bf16(nullptr, nullptr, nullptr, cuda::DType::kF32, -1, 2, 2, 1, 0, nullptr).code(),
            cuda::StatusCode::kInvalidArgument);
}

// --- rmsnorm -----------------------------------------------------------------------------------------
TEST(CudaOps, RmsnormMatchesCpu) {
  SKIP_WITHOUT_GPU();
  const int shapes[][2] = {{1, 1}, {3, 7}, {17, 64}, {5, 1000}, {2, 3072}};
  uint32_t seed = 100;
  for (const auto& sh : shapes) {
    const int rows = sh[0], dim = sh[1];
    SCOPED_TRACE("rows=" + std::to_string(rows) + " dim=" + std::to_string(dim));
    const auto x = random_vec(static_cast<size_t>(rows) * dim, seed++, -3.f, 3.f);
    const auto w = random_vec(dim, seed++, 0.5f, 1.5f);
    for (const bool with_w : {true, false}) {
      std::vector<float> ref(x.size());
      cpu::rmsnorm(x.data(), dim, with_w ? w.data() : nullptr, ref.data(), dim, rows, dim, 1e-5f);
      DeviceBuf<float> dx(x), dw(w), dy(x.size());
      ASSERT_OK(cuda::rmsnorm(dx.get(), with_w ? dw.get() : nullptr, dy.get(), rows, dim, 1e-5f, nullptr));
      EXPECT_TRUE(all_close(dy.host(), ref, 1e-6f, 1e-5f));
    }
    // bf16: the CPU op on the bf16-rounded input; in place.
    const auto x16 = to_bf16(x);
    std::vector<float> ref(x.size());
    const auto xr = from_bf16(x16);
    cpu::rmsnorm(xr.data(), dim, w.data(), ref.data(), dim, rows, dim, 1e-5f);
    DeviceBuf<uint16_t> dx16(x16);
    DeviceBuf<float> dw(w);
    ASSERT_OK(cuda::rmsnorm_bf16(dx16.get(), dw.get(), dx16.get(), rows, dim, 1e-5f, nullptr));
    EXPECT_TRUE(all_close(from_bf16(dx16.host()), ref, 1e-3f, 1e-2f));
  }
}

// --- rope --------------------------------------------------------------------------------------------
TEST(CudaOps, RopeInterleavedMatchesCpu) {
  SKIP_WITHOUT_GPU();
  // (rows, n_heads, head_dim, extra row padding): head_dim 2 has a single pair (denominator 1).
  const int shapes[][4] = {{1, 1, 2, 0}, {3, 2, 6, 5}, {7, 4, 64, 0}, {5, 3, 128, 64}, {2, 1, 256, 0}};
  const std::vector<int64_t> all_pos = {0, 1, 2, 17, 4095, 100000, 1 << 20};
  uint32_t seed = 200;
  for (const double theta : {10000.0, 500000.0}) {
    for (const auto& sh : shapes) {
      const int rows = sh[0], heads = sh[1], hd = sh[2], ld = heads * hd + sh[3];
      SCOPED_TRACE("rows=" + std::to_string(rows) + " heads=" + std::to_string(heads) + " hd=" + std::to_string(hd));
      std::vector<int64_t> pos(rows);
      for (int r = 0; r < rows; ++r) pos[r] = all_pos[(r * 3 + hd) % all_pos.size()];
      const auto x = random_vec(static_cast<size_t>(rows) * ld, seed++);
      std::vector<float> cos_t(static_cast<size_t>(rows) * hd / 2), sin_t(cos_t.size());
      cpu::rope_table(pos.data(), rows, hd, theta, cos_t.data(), sin_t.data());
      std::vector<float> ref = x;
      cpu::rope_apply(ref.data(), ld, rows, heads, hd, cos_t.data(), sin_t.data());
      DeviceBuf<int64_t> dpos(pos);
      DeviceBuf<float> dx(x);
      ASSERT_OK(cuda::rope_interleaved(dx.get(), ld, rows, heads, hd, dpos.get(), theta, nullptr));
      EXPECT_TRUE(all_close(dx.host(), ref, 1e-6f,
                            1e-5f));  // padding columns must be untouched too

      const auto x16 = to_bf16(x);
      std::vector<float> ref16 = from_bf16(x16);
      cpu::rope_apply(ref16.data(), ld, rows, heads, hd, cos_t.data(), sin_t.data());
      DeviceBuf<uint16_t> dx16(x16);
      ASSERT_OK(cuda::rope_interleaved_bf16(dx16.get(), ld, rows, heads, hd, dpos.get(), theta, nullptr));
      EXPECT_TRUE(all_close(from_bf16(dx16.host()), ref16, 1e-3f, 1e-2f));
    }
  }
  DeviceBuf<float> dx(8);
  DeviceBuf<int64_t> dpos(1);
  EXPECT_EQ(cuda::rope_interleaved(dx.get(), 8, 1, 1, 7, dpos.get(), 1e4, nullptr).code(),
            cuda::StatusCode::kInvalidArgument);
}

// --- activation --------------------------------------------------------------------------------------
TEST(CudaOps, SiluMulFusedLayoutMatchesCpu) {
  SKIP_WITHOUT_GPU();
  const int shapes[][2] = {{1, 1}, {3, 5}, {9, 160}, {4, 1537}};
  uint32_t seed = 300;
  for (const auto& sh : shapes) {
    const int rows = sh[0], H = sh[1];
    SCOPED_TRACE("rows=" + std::to_string(rows) + " hidden=" + std::to_string(H));
    // u = [fc1 | gate] per row (model/weights.h w13): silu on the first half.
    const auto u = random_vec(static_cast<size_t>(rows) * 2 * H, seed++, -6.f, 6.f);
    std::vector<float> ref(static_cast<size_t>(rows) * H);
    cpu::silu_mul(u.data(), 2 * H, u.data() + H, 2 * H, ref.data(), H, rows, H);
    DeviceBuf<float> du(u), dout(ref.size());
    ASSERT_OK(cuda::silu_mul(du.get(), 2 * H, du.get() + H, 2 * H, dout.get(), H, rows, H, nullptr));
    EXPECT_TRUE(all_close(dout.host(), ref, 1e-6f, 1e-5f));

    // In place over the linear half (as gRet's output gate writes over o).
    std::vector<float> ref_inplace = u;
    cpu::silu_mul(u.data(), 2 * H, ref_inplace.data() + H, 2 * H, ref_inplace.data() + H, 2 * H, rows, H);
    ASSERT_OK(cuda::silu_mul(du.get(), 2 * H, du.get() + H, 2 * H, du.get() + H, 2 * H, rows, H, nullptr));
    EXPECT_TRUE(all_close(du.host(), ref_inplace, 1e-6f, 1e-5f));

    const auto u16 = to_bf16(u);
    const auto ur = from_bf16(u16);
    std::vector<float> ref16(static_cast<size_t>(rows) * H);
    cpu::silu_mul(ur.data(), 2 * H, ur.data() + H, 2 * H, ref16.data(), H, rows, H);
    DeviceBuf<uint16_t> du16(u16), dout16(ref16.size());
    ASSERT_OK(cuda::silu_mul_bf16(du16.get(), 2 * H, du16.get() + H, 2 * H, dout16.get(), H, rows, H, nullptr));
    EXPECT_TRUE(all_close(from_bf16(dout16.host()), ref16, 1e-3f, 1e-2f));
  }
}

TEST(CudaOps, EmbedMatchesCpu) {
  SKIP_WITHOUT_GPU();
  const int vocab = 301, dim = 67;
  const auto table = random_vec(static_cast<size_t>(vocab) * dim, 400);
  const std::vector<int32_t> ids = {0, 300, 5, 5, 17, 299, 1};
  const int n = static_cast<int>(ids.size());
  const float scale = std::sqrt(static_cast<float>(dim));
  std::vector<float> ref(static_cast<size_t>(n) * dim);
  cpu::embed(table.data(), dim, ids.data(), n, scale, ref.data());
  DeviceBuf<float> dt(table), dout(ref.size());
  DeviceBuf<int32_t> did(ids);
  ASSERT_OK(cuda::embed(dt.get(), cuda::DType::kF32, dim, did.get(), n, scale, dout.get(), nullptr));
  EXPECT_TRUE(all_close(dout.host(), ref, 0.f, 0.f));  // one multiply: exact

  const auto t16 = to_bf16(table);
  const auto tr = from_bf16(t16);
  cpu::embed(tr.data(), dim, ids.data(), n, scale, ref.data());
  DeviceBuf<uint16_t> dt16(t16);
  ASSERT_OK(cuda::embed(dt16.get(), cuda::DType::kBF16, dim, did.get(), n, scale, dout.get(), nullptr));
  EXPECT_TRUE(all_close(dout.host(), ref, 0.f, 0.f));
}

TEST(CudaOps, AddInplaceMatchesCpu) {
  SKIP_WITHOUT_GPU();
  for (const int64_t n : {int64_t{1}, int64_t{1023}, int64_t{3} << 20}) {
    const auto y = random_vec(n, 500), x = random_vec(n, 501);
    std::vector<float> ref = y;
    cpu::add_inplace(ref.data(), x.data(), n);
    DeviceBuf<float> dy(y), dx(x);
    ASSERT_OK(cuda::add_inplace(dy.get(), dx.get(), n, nullptr));
    EXPECT_TRUE(all_close(dy.host(), ref, 0.f, 0.f));
  }
}

// --- paged decode attention --------------------------------------------------------------------------
struct AttnCase {
  int n_q_heads, n_kv_heads, head_dim, block_size, split_keys;
  std::vector<int32_t> lengths;
};

// Builds a pool whose blocks are handed out in a shuffled order, runs the CUDA op and returns its
// output next to cpu::decode_attention's over the same blocks. gpu_lengths, when given, replaces
// the lengths (each ≤ the case's) for the CUDA run only, over the same pool.
void run_attention_case(const AttnCase& c, uint32_t seed, std::vector<float>* got, std::vector<float>* ref,
                        const std::vector<int32_t>& gpu_lengths = {}) {
  const int B = static_cast<int>(c.lengths.size());
  const int hd = c.head_dim, kv_dim = c.n_kv_heads * hd, qd = c.n_q_heads * hd, bs = c.block_size;
  const int ldq = qd + 3;  // strided rows, as q inside a wider projection
  int max_blocks = 1;
  int64_t max_len = 0, total_blocks = 0;
  for (int32_t len : c.lengths) {
    const int nb = (len + bs - 1) / bs;
    max_blocks = std::max(max_blocks, nb);
    max_len = std::max<int64_t>(max_len, len);
    total_blocks += nb;
  }
  const int n_pool_blocks = static_cast<int>(total_blocks) + 3;  // a few never referenced
  std::vector<int32_t> order(n_pool_blocks);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(seed));
  std::vector<int32_t> tables(static_cast<size_t>(B) * max_blocks, -1);
  for (int b = 0, next = 0; b < B; ++b)
    for (int i = 0; i < (c.lengths[b] + bs - 1) / bs; ++i)
      tables[static_cast<size_t>(b) * max_blocks + i] = order[next++];

  const auto kp = random_vec(static_cast<size_t>(n_pool_blocks) * bs * kv_dim, seed + 1, -2.f, 2.f);
  const auto vp = random_vec(kp.size(), seed + 2);
  const auto q = random_vec(static_cast<size_t>(B) * ldq, seed + 3, -2.f, 2.f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

  ref->assign(static_cast<size_t>(B) * qd, 0.f);
  for (int b = 0; b < B; ++b) {
    if (c.lengths[b] == 0) continue;  // the CUDA op defines zeros; the CPU op needs keys
    std::vector<const float*> kb, vb;
    for (int i = 0; i < (c.lengths[b] + bs - 1) / bs; ++i) {
      const int64_t blk = tables[static_cast<size_t>(b) * max_blocks + i];
      kb.push_back(kp.data() + blk * bs * kv_dim);
      vb.push_back(vp.data() + blk * bs * kv_dim);
    }
    cpu::KvBlocks kv{kb.data(), vb.data(), bs, c.lengths[b]};
    cpu::decode_attention(q.data() + static_cast<size_t>(b) * ldq, kv, ref->data() + static_cast<size_t>(b) * qd,
                          c.n_q_heads, c.n_kv_heads, hd, scale);
  }

  DeviceBuf<float> dq(q), dk(kp), dv(vp), dout(static_cast<size_t>(B) * qd);
  if (!gpu_lengths.empty()) max_len = *std::max_element(gpu_lengths.begin(), gpu_lengths.end());
  DeviceBuf<int32_t> dt(tables), dl(gpu_lengths.empty() ? c.lengths : gpu_lengths);
  cuda::PagedDecodeArgs a;
  a.q = dq.get();
  a.ldq = ldq;
  a.out = dout.get();
  a.ldo = qd;
  a.k_pool = dk.get();
  a.v_pool = dv.get();
  a.block_tables = dt.get();
  a.max_blocks = max_blocks;
  a.lengths = dl.get();
  a.max_length = max_len;
  a.batch = B;
  a.n_q_heads = c.n_q_heads;
  a.n_kv_heads = c.n_kv_heads;
  a.head_dim = hd;
  a.block_size = bs;
  a.scale = scale;
  a.split_keys = c.split_keys;
  const cuda::Status st = cuda::decode_attention_paged(a, nullptr);
  ASSERT_TRUE(st.ok()) << st.to_string();
  *got = dout.host();
}

TEST(CudaOps, DecodeAttentionPagedMatchesCpu) {
  SKIP_WITHOUT_GPU();
  const AttnCase cases[] = {
      {4, 4, 64, 16, 0, {1, 17, 100, 33}},           // GQA ratio 1, lengths off the block size
      {8, 2, 128, 32, 0, {1000, 5, 64, 513, 2049}},  // ratio 4, several splits
      {8, 2, 128, 16, 48, {1000, 5, 64, 513}},       // split_keys a multiple of nothing
      {6, 2, 40, 7, 0, {3, 50, 7}},                  // ratio 3, odd block size, small hd
      {16, 1, 256, 64, 256, {700, 1}},               // largest group and head_dim
      {5, 5, 33, 16, 0, {129, 128, 127}},            // odd head_dim (not a multiple of 32)
  };
  uint32_t seed = 600;
  for (const AttnCase& c : cases) {
    SCOPED_TRACE("q_heads=" + std::to_string(c.n_q_heads) + " kv_heads=" + std::to_string(c.n_kv_heads) +
                 " hd=" + std::to_string(c.head_dim) + " block=" + std::to_string(c.block_size) +
                 " split=" + std::to_string(c.split_keys));
    std::vector<float> got, ref;
    run_attention_case(c, seed, &got, &ref);
    seed += 10;
    EXPECT_TRUE(all_close(got, ref, 1e-5f, 1e-4f));
  }
}

TEST(CudaOps, DecodeAttentionPagedEmptySequenceGivesZeros) {
  SKIP_WITHOUT_GPU();
  std::vector<float> got, ref;
  run_attention_case({4, 2, 32, 16, 0, {0, 20, 0}}, 700, &got, &ref);
  EXPECT_TRUE(all_close(got, ref, 1e-5f,
                        1e-4f));  // ref rows of the empty sequences are zeros
}

TEST(CudaOps, DecodeAttentionPagedIsBitwiseIndependentOfTheBatch) {
  SKIP_WITHOUT_GPU();
  // The same pool and sequence 0, once next to a long sequence (a grid of many splits) and once
  // with the neighbour emptied (one split): sequence 0's output must agree bit for bit.
  const AttnCase c{8, 2, 64, 16, 0, {300, 5000}};
  std::vector<float> with_long, alone, ref, ref2;
  run_attention_case(c, 800, &with_long, &ref);
  run_attention_case(c, 800, &alone, &ref2, {300, 0});
  const size_t qd = 8 * 64;
  ASSERT_EQ(with_long.size(), 2 * qd);
  EXPECT_EQ(0, std::memcmp(with_long.data(), alone.data(), qd * sizeof(float)));
  EXPECT_TRUE(all_close(with_long, ref, 1e-5f, 1e-4f));
}

TEST(CudaOps, DecodeAttentionPagedRejectsBadArguments) {
  SKIP_WITHOUT_GPU();
  cuda::PagedDecodeArgs a;
  a.batch = 1;
  a.n_q_heads = 6;
  a.n_kv_heads = 4;  // not a divisor
  a.head_dim = 64;
  EXPECT_EQ(cuda::decode_attention_paged(a, nullptr).code(), cuda::StatusCode::kInvalidArgument);
  a.n_kv_heads = 2;
  a.head_dim = 512;
  EXPECT_EQ(cuda::decode_attention_paged(a, nullptr).code(), cuda::StatusCode::kInvalidArgument);
}

// --- retention decode step ---------------------------------------------------------------------------
TEST(CudaOps, RetentionDecodeStepMatchesCpu) {
  SKIP_WITHOUT_GPU();
  const int shapes[][3] = {{1, 1, 8}, {3, 4, 64}, {2, 3, 36}, {5, 2, 128}, {1, 1, 257}};  // batch, heads, hd
  uint32_t seed = 900;
  const float tau = 16.f;
  for (const auto& sh : shapes) {
    const int B = sh[0], H = sh[1], hd = sh[2], D = H * hd,
              R = 4 * D;  // fused q|k|v|g rows
    SCOPED_TRACE("batch=" + std::to_string(B) + " heads=" + std::to_string(H) + " hd=" + std::to_string(hd));
    const float kscale = 1.0f / std::sqrt(static_cast<float>(hd));
    // Per-sequence states in separate allocations, addressed through a pointer array.
    std::vector<std::vector<float>> s_ref(B);
    std::vector<std::unique_ptr<DeviceBuf<float>>> s_dev;
    std::vector<float*> s_ptrs;
    for (int b = 0; b < B; ++b) {
      s_ref[b] = random_vec(static_cast<size_t>(H) * hd * hd, seed++, -0.5f, 0.5f);
      s_dev.push_back(std::make_unique<DeviceBuf<float>>(s_ref[b]));
      s_ptrs.push_back(s_dev.back()->get());
    }
    DeviceBuf<float*> dptrs(s_ptrs);
    for (int step = 0; step < 3; ++step) {
      const auto proj = random_vec(static_cast<size_t>(B) * R, seed++);
      const auto gt = random_vec(static_cast<size_t>(B) * H, seed++, -8.f, 8.f);
      std::vector<float> ref(static_cast<size_t>(B) * D);
      std::vector<float> kscaled = proj;
      for (int b = 0; b < B; ++b) cpu::scale_inplace(kscaled.data() + static_cast<size_t>(b) * R + D, kscale, D);
      for (int b = 0; b < B; ++b)
        for (int h = 0; h < H; ++h) {
          const float a = logsigmoid(gt[static_cast<size_t>(b) * H + h]) * (1.0f / tau);
          const size_t row = static_cast<size_t>(b) * R + static_cast<size_t>(h) * hd;
          cpu::retention_recurrent(kscaled.data() + row, R, kscaled.data() + row + D, R, kscaled.data() + row + 2 * D,
                                   R, &a, 1, hd, s_ref[b].data() + static_cast<size_t>(h) * hd * hd,
                                   ref.data() + static_cast<size_t>(b) * D + h * hd, D);
        }
      DeviceBuf<float> dproj(proj), dgt(gt), dout(ref.size());
      cuda::RetentionStepArgs a;
      a.q = dproj.get();
      a.ldq = R;
      a.k = dproj.get() + D;
      a.ldk = R;
      a.v = dproj.get() + 2 * D;
      a.ldv = R;
      a.gt = dgt.get();
      a.ldg = H;
      a.states = dptrs.get();
      a.out = dout.get();
      a.ldo = D;
      a.batch = B;
      a.n_heads = H;
      a.head_dim = hd;
      a.k_scale = kscale;
      a.gate_logit_normalizer = tau;
      ASSERT_OK(cuda::retention_decode_step(a, nullptr));
      EXPECT_TRUE(all_close(dout.host(), ref, 1e-5f, 1e-4f)) << "step " << step;
      // docs/design.md §2.3: the state itself is what ships; test it, not only the output.
      for (int b = 0; b < B; ++b) EXPECT_TRUE(all_close(s_dev[b]->host(), s_ref[b], 1e-6f, 1e-5f)) << "step " << step;
    }
  }
}

}  // namespace
}  // namespace yoco
