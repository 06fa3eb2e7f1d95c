// causal_attention_prefill (the Transformer baseline's prefill attention) against the CPU oracle
// cpu::attention with window 0 (causal), on random inputs (docs/architecture.md, rule 4): |got − ref| ≤ atol +
// rtol·|ref| with the tensor-core tolerance of cuda_prefill_test (the CPU runs on the same
// bf16-rounded q, k, v; the GPU also rounds the softmax weights, ≤ 2^-9 relative each, so rtol
// 2e-2 with an atol of 2e-2 of the reference's RMS).
// The pool is as the engine lays it out for the Transformer: a row per token holding two layers'
// K (or V) side by side plus padding, the tested layer at a column offset; the block table is a
// shuffled, non-contiguous set of blocks; every pool value the kernel must not read (the other
// layer, the padding, unused rows and blocks) is NaN, and so is the output before the call.
// Label "gpu": every test skips when there is no CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"
#include "tests/gpu/gpu_test_util.h"

namespace yoco {
namespace {

struct Case {
  int n_q_heads, n_kv_heads, head_dim, block_size;
  int64_t pos0;            // keys 0 .. pos0 − 1 precede the queries (a resumed sequence)
  std::vector<int> calls;  // query rows per call, consumed in order from pos0
  int pad = 4;             // extra floats per pool row (odd: pool_ld not a multiple of 4)
};

std::string describe(const Case& c) {
  std::string calls;
  for (int n : c.calls) {
    if (!calls.empty()) calls += ',';
    calls += std::to_string(n);
  }
  return "q_heads=" + std::to_string(c.n_q_heads) + " kv_heads=" + std::to_string(c.n_kv_heads) +
         " hd=" + std::to_string(c.head_dim) + " block=" + std::to_string(c.block_size) +
         " pos0=" + std::to_string(c.pos0) + " calls=" + calls + " pad=" + std::to_string(c.pad);
}

struct Inputs {
  int n = 0, qd = 0, kvd = 0;
  int64_t total = 0;        // keys: pos0 + n
  std::vector<float> q;     // [n, qd]
  std::vector<float> k, v;  // [total, kvd]
};

Inputs make_inputs(const Case& c, uint32_t seed) {
  Inputs in;
  in.n = std::accumulate(c.calls.begin(), c.calls.end(), 0);
  in.qd = c.n_q_heads * c.head_dim;
  in.kvd = c.n_kv_heads * c.head_dim;
  in.total = c.pos0 + in.n;
  // q scaled up so the softmax is far from uniform.
  in.q = random_vec(static_cast<size_t>(in.n) * in.qd, seed, -3.f, 3.f);
  in.q = bf16_round(std::move(in.q));
  in.k = bf16_round(random_vec(static_cast<size_t>(in.total) * in.kvd, seed + 1, -1.f, 1.f));
  in.v = bf16_round(random_vec(static_cast<size_t>(in.total) * in.kvd, seed + 2, -1.f, 1.f));
  return in;
}

std::vector<float> cpu_causal(const Case& c, const Inputs& in) {
  std::vector<float> out(static_cast<size_t>(in.n) * in.qd);
  cpu::AttentionArgs a{.q = in.q.data(),
                       .ldq = in.qd,
                       .k = in.k.data(),
                       .ldk = in.kvd,
                       .v = in.v.data(),
                       .ldv = in.kvd,
                       .out = out.data(),
                       .ldo = in.qd,
                       .n_q = in.n,
                       .n_k = static_cast<int>(in.total),
                       .n_q_heads = c.n_q_heads,
                       .n_kv_heads = c.n_kv_heads,
                       .head_dim = c.head_dim,
                       .q_pos0 = c.pos0,
                       .k_pos0 = 0,
                       .window = 0,
                       .scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim))};
  cpu::attention(a);
  return out;
}

// The two-layer pool: row width ld = 2·kvd + pad, the tested layer's columns at kvd (the second
// layer), everything else NaN. Blocks are handed out shuffled, with spare blocks left unused.
struct Pool {
  int64_t ld = 0, col = 0;
  int max_blocks = 0;
  std::vector<int32_t> table;
  std::vector<float> k, v;
};

Pool make_pool(const Case& c, const Inputs& in, uint32_t seed) {
  Pool p;
  p.ld = 2 * static_cast<int64_t>(in.kvd) + c.pad;
  p.col = in.kvd;
  const int used = static_cast<int>((in.total + c.block_size - 1) / c.block_size);
  p.max_blocks = used + 1;  // one table entry past the end (never read)
  const int n_blocks = 2 * used + 3;
  std::vector<int32_t> ids(n_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937 rng(seed);
  std::shuffle(ids.begin(), ids.end(), rng);
  p.table.assign(ids.begin(), ids.begin() + p.max_blocks);
  p.k.assign(static_cast<size_t>(n_blocks) * c.block_size * p.ld, kNaN);
  p.v = p.k;
  for (int64_t t = 0; t < in.total; ++t) {
    const int64_t row = static_cast<int64_t>(p.table[t / c.block_size]) * c.block_size + t % c.block_size;
    std::copy_n(in.k.begin() + t * in.kvd, in.kvd, p.k.begin() + row * p.ld + p.col);
    std::copy_n(in.v.begin() + t * in.kvd, in.kvd, p.v.begin() + row * p.ld + p.col);
  }
  return p;
}

// Runs the calls in order (each at its own pos0) into a NaN-poisoned [n, qd + 3] output and
// returns the [n, qd] part.
std::vector<float> gpu_causal(const Case& c, const Inputs& in, const Pool& p) {
  const int ldo = in.qd + 3;
  DeviceBuf<float> dq(in.q), dk(p.k), dv(p.v), dout(std::vector<float>(static_cast<size_t>(in.n) * ldo, kNaN));
  DeviceBuf<int32_t> dt(p.table);
  int t0 = 0;
  for (int n : c.calls) {
    cuda::CausalPrefillArgs a;
    a.q = dq.get() + static_cast<size_t>(t0) * in.qd;
    a.ldq = in.qd;
    a.out = dout.get() + static_cast<size_t>(t0) * ldo;
    a.ldo = ldo;
    a.k_pool = dk.get() + p.col;
    a.v_pool = dv.get() + p.col;
    a.pool_ld = p.ld;
    a.block_table = dt.get();
    a.max_blocks = p.max_blocks;
    a.block_size = c.block_size;
    a.n = n;
    a.n_q_heads = c.n_q_heads;
    a.n_kv_heads = c.n_kv_heads;
    a.head_dim = c.head_dim;
    a.pos0 = c.pos0 + t0;
    a.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    const cuda::Status st = cuda::causal_attention_prefill(a, nullptr);
    EXPECT_TRUE(st.ok()) << st.to_string();
    t0 += n;
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto raw = dout.host();
  std::vector<float> out(static_cast<size_t>(in.n) * in.qd);
  for (int r = 0; r < in.n; ++r)
    std::copy_n(raw.begin() + static_cast<size_t>(r) * ldo, in.qd, out.begin() + static_cast<size_t>(r) * in.qd);
  return out;
}

TEST(CudaCausalAttention, MatchesCpu) {
  SKIP_WITHOUT_GPU();
  const Case cases[] = {
      {4, 4, 64, 32, 0, {77}},           // GQA 1, from position 0 (the whole triangle)
      {8, 2, 128, 64, 300, {129}},       // GQA 4, resumed, odd n over two query tiles
      {16, 2, 64, 32, 1000, {33}},       // GQA 8, one partial query tile, long prefix
      {8, 1, 256, 64, 130, {65}},        // head_dim 256 (the 64-row block), GQA 8
      {4, 1, 256, 32, 0, {150}},         // head_dim 256 from 0, GQA 4
      {4, 1, 128, 32, 5, {1}},           // a single query
      {8, 8, 128, 32, 2500, {3, 200}},   // long context, two calls (the second resumes the first)
      {4, 2, 64, 64, 17, {64, 1, 127}},  // calls of every kind, block 64, unaligned pos0
      {4, 2, 64, 32, 40, {99}, 3},       // pool_ld not a multiple of 4: the plain-load path
      {2, 2, 40, 32, 70, {51}},          // head_dim 40 (padded to 64 inside)
      {6, 2, 32, 32, 9, {45}},           // head_dim 32, GQA 3
  };
  uint32_t seed = 7000;
  for (const Case& c : cases) {
    SCOPED_TRACE(describe(c));
    const Inputs in = make_inputs(c, seed);
    const Pool p = make_pool(c, in, seed + 3);
    seed += 10;
    const auto ref = cpu_causal(c, in);
    const auto got = gpu_causal(c, in, p);
    EXPECT_TRUE(bf16_close(got, ref));
  }
}

TEST(CudaCausalAttention, ChunkedEqualsOneShot) {
  SKIP_WITHOUT_GPU();
  Case whole{8, 2, 128, 32, 0, {333}};
  Case split = whole;
  split.calls = {100, 1, 128, 104};
  const Inputs in = make_inputs(whole, 7500);
  const Pool p = make_pool(whole, in, 7503);
  EXPECT_TRUE(bf16_close(gpu_causal(split, in, p), gpu_causal(whole, in, p)));
}

// decode_attention_paged reads the same wide-row pool (pool_ld + the layer's column offset): one
// query at the last position equals the CPU's causal attention for it (fp32 throughout).
TEST(CudaCausalAttention, PagedDecodeReadsOneLayerOfAWideRow) {
  SKIP_WITHOUT_GPU();
  for (const Case& c : {Case{8, 2, 128, 32, 700, {1}}, Case{4, 4, 64, 64, 64, {1}, 3}}) {
    SCOPED_TRACE(describe(c));
    const Inputs in = make_inputs(c, 7800);
    const Pool p = make_pool(c, in, 7803);
    const auto ref = cpu_causal(c, in);
    DeviceBuf<float> dq(in.q), dk(p.k), dv(p.v), dout(std::vector<float>(in.qd, kNaN));
    DeviceBuf<int32_t> dt(p.table), dlen(std::vector<int32_t>{static_cast<int32_t>(in.total)});
    cuda::PagedDecodeArgs a;
    a.q = dq.get();
    a.ldq = in.qd;
    a.out = dout.get();
    a.ldo = in.qd;
    a.k_pool = dk.get() + p.col;
    a.v_pool = dv.get() + p.col;
    a.pool_ld = p.ld;
    a.block_tables = dt.get();
    a.max_blocks = p.max_blocks;
    a.lengths = dlen.get();
    a.max_length = in.total;
    a.batch = 1;
    a.n_q_heads = c.n_q_heads;
    a.n_kv_heads = c.n_kv_heads;
    a.head_dim = c.head_dim;
    a.block_size = c.block_size;
    a.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    ASSERT_OK(cuda::decode_attention_paged(a, nullptr));
    EXPECT_TRUE(all_close(dout.host(), ref, 1e-5f, 1e-4f));
  }
}

TEST(CudaCausalAttention, RejectsBadArguments) {
  SKIP_WITHOUT_GPU();
  DeviceBuf<float> buf(1024);
  DeviceBuf<int32_t> table(std::vector<int32_t>{0, 1});
  cuda::CausalPrefillArgs a;
  a.q = buf.get();
  a.ldq = 64;
  a.out = buf.get();
  a.ldo = 64;
  a.k_pool = buf.get();
  a.v_pool = buf.get();
  a.block_table = table.get();
  a.max_blocks = 2;
  a.block_size = 32;
  a.n = 4;
  a.n_q_heads = 2;
  a.n_kv_heads = 1;
  a.head_dim = 32;
  a.scale = 0.1f;
  cuda::CausalPrefillArgs b = a;
  b.n_q_heads = 3;  // not a multiple of n_kv_heads
  EXPECT_EQ(cuda::causal_attention_prefill(b, nullptr).code(), cuda::StatusCode::kInvalidArgument);
  b = a;
  b.head_dim = 300;
  EXPECT_EQ(cuda::causal_attention_prefill(b, nullptr).code(), cuda::StatusCode::kInvalidArgument);
  b = a;
  b.pos0 = 61;  // 61 + 4 > 2 blocks of 32
  EXPECT_EQ(cuda::causal_attention_prefill(b, nullptr).code(), cuda::StatusCode::kInvalidArgument);
  b = a;
  b.pool_ld = 16;  // narrower than a row of K
  EXPECT_EQ(cuda::causal_attention_prefill(b, nullptr).code(), cuda::StatusCode::kInvalidArgument);
  b = a;
  b.block_table = nullptr;
  EXPECT_EQ(cuda::causal_attention_prefill(b, nullptr).code(), cuda::StatusCode::kInvalidArgument);
  b = a;
  b.n = 0;  // nothing to do
  EXPECT_TRUE(cuda::causal_attention_prefill(b, nullptr).ok());
}

}  // namespace
}  // namespace yoco
