// Every CUDA op (kernels/cuda/ops.h) against its CPU twin (kernels/cpu/ops.h), one table
// (docs/architecture.md, rule 4; CONTRIBUTING.md, adding a CUDA op). A row of op_table() names the
// op, its shape, its dtypes, a variant and the tolerance |got − ref| ≤ atol + rtol·|ref| (or bitwise
// equality); the op's runner computes both sides on the same random inputs; the one parameterised
// test CudaOp.MatchesCpu runs each row as a test of its own, named after it. Tolerances, per op:
//   fp32 elementwise (rope, silu_mul, rmsnorm, embed, add): ~1e-5 relative (FMA contraction and
//     expf/rsqrtf differ from the CPU's by a few ulp); embed and add are exact;
//   fp32 reductions (attention, retention): atol 1e-5, rtol 1e-4 (different summation order); the
//     retention state atol 1e-6, rtol 1e-5;
//   bf16 in/out ops: the CPU op run on the bf16-rounded inputs, rtol 1e-2 (one bf16 rounding of
//     the output is ≤ 2^-9 relative);
//   fp32 in, bf16 out (rmsnorm_to_bf16, silu_mul_to_bf16): the fp32 CPU op, then one bf16
//     rounding, which the GPU's few-ulp difference can move by one bf16 ulp: rtol 1e-2;
//   gemm with fp32 out: products of bf16 are exact in fp32, so only the summation order differs
//     (atol 2e-6·k + 1e-6);
//   copies (convert_to_bf16, copy_rows, kv_append_paged): bitwise, every element outside the
//     written ones still the NaN it was poisoned with.
// Adding an op: a runner in runners() and its rows in op_table(). What a table cannot say (bad
// arguments, bitwise independence of the batch, fill_normal's statistics) are the tests after it.
// Label "gpu": every test skips when there is no CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
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

enum class Cmp { kClose, kBits };

struct OpCase {
  std::string op;         // a key of runners(): the kernels/cuda/ops.h function
  std::vector<int> dims;  // the op's shape, as its runner reads it
  std::string dtype;      // "f32", "bf16", "f32-bf16" (fp32 in, bf16 out)
  std::string variant;    // what else this row sets ("" when nothing)
  float atol = 0, rtol = 0;
  Cmp cmp = Cmp::kClose;
  uint32_t seed = 0;  // the first seed of its random inputs
};

// Both sides of one row; `error` when a call failed or a check beside the values did.
struct OpResult {
  std::vector<float> got, ref;
  std::string error;
};

using Runner = std::function<OpResult(const OpCase&)>;

#define RUN_OK(expr)                                                      \
  do {                                                                    \
    const auto _st = (expr);                                              \
    if (!_st.ok()) return OpResult{{}, {}, #expr ": " + _st.to_string()}; \
  } while (0)

size_t sz(int64_t a, int64_t b = 1, int64_t c = 1) { return static_cast<size_t>(a * b * c); }

// ---- gemm.cu: dims {m, n, k}; variant "beta=0", "alpha=0.5 beta=1"; dtype of C ------------------------------
OpResult run_gemm(const OpCase& c) {
  const int m = c.dims[0], n = c.dims[1], k = c.dims[2];
  const auto a16 = to_bf16(random_vec(sz(m, k), c.seed));
  const auto b16 = to_bf16(random_vec(sz(n, k), c.seed + 1));
  const auto c0 = random_vec(sz(m, n), c.seed + 2);
  const auto a = from_bf16(a16), b = from_bf16(b16);
  const bool acc = c.variant == "alpha=0.5 beta=1";
  const float alpha = acc ? 0.5f : 1.0f, beta = acc ? 1.0f : 0.0f;
  OpResult r;
  r.ref = acc ? c0 : std::vector<float>(c0.size());
  cpu::gemm_reference(m, n, k, alpha, a.data(), k, b.data(), k, true, beta, r.ref.data(), n);
  DeviceBuf<uint16_t> da(a16), db(b16);
  if (c.dtype == "bf16") {
    DeviceBuf<uint16_t> dc(sz(m, n));
    RUN_OK(cuda::gemm_bf16(da.get(), db.get(), dc.get(), cuda::DType::kBF16, m, n, k, alpha, beta, nullptr));
    r.got = from_bf16(dc.host());
  } else {
    DeviceBuf<float> dc(c0);
    RUN_OK(cuda::gemm_bf16(da.get(), db.get(), dc.get(), cuda::DType::kF32, m, n, k, alpha, beta, nullptr));
    r.got = dc.host();
  }
  return r;
}

// ---- rmsnorm.cu, engine_ops.cu: dims {rows, dim}; variant "weight" / "no weight" -------------------------
OpResult run_rmsnorm(const OpCase& c) {
  const int rows = c.dims[0], dim = c.dims[1];
  const auto x = random_vec(sz(rows, dim), c.seed, -3.f, 3.f);
  const auto w = random_vec(dim, c.seed + 1, 0.5f, 1.5f);
  const bool with_w = c.variant != "no weight";
  OpResult r;
  r.ref.resize(x.size());
  DeviceBuf<float> dw(w);
  if (c.dtype == "bf16") {  // the CPU op on the bf16-rounded input; in place
    const auto x16 = to_bf16(x);
    const auto xr = from_bf16(x16);
    cpu::rmsnorm(xr.data(), dim, with_w ? w.data() : nullptr, r.ref.data(), dim, rows, dim, 1e-5f);
    DeviceBuf<uint16_t> dx16(x16);
    RUN_OK(cuda::rmsnorm_bf16(dx16.get(), with_w ? dw.get() : nullptr, dx16.get(), rows, dim, 1e-5f, nullptr));
    r.got = from_bf16(dx16.host());
    return r;
  }
  cpu::rmsnorm(x.data(), dim, with_w ? w.data() : nullptr, r.ref.data(), dim, rows, dim, 1e-5f);
  DeviceBuf<float> dx(x);
  if (c.dtype == "f32-bf16") {
    DeviceBuf<uint16_t> dy(std::vector<uint16_t>(x.size(), 0x7fc0));  // NaN
    RUN_OK(cuda::rmsnorm_to_bf16(dx.get(), with_w ? dw.get() : nullptr, dy.get(), rows, dim, 1e-5f, nullptr));
    r.got = from_bf16(dy.host());
  } else {
    DeviceBuf<float> dy(x.size());
    RUN_OK(cuda::rmsnorm(dx.get(), with_w ? dw.get() : nullptr, dy.get(), rows, dim, 1e-5f, nullptr));
    r.got = dy.host();
  }
  return r;
}

// ---- rope.cu: dims {rows, n_heads, head_dim, extra row padding}; variant "theta=…" ----------------------
OpResult run_rope(const OpCase& c) {
  const int rows = c.dims[0], heads = c.dims[1], hd = c.dims[2], ld = heads * hd + c.dims[3];
  const double theta = std::stod(c.variant.substr(c.variant.find('=') + 1));
  const std::vector<int64_t> all_pos = {0, 1, 2, 17, 4095, 100000, 1 << 20};
  std::vector<int64_t> pos(rows);
  for (int i = 0; i < rows; ++i) pos[i] = all_pos[(i * 3 + hd) % all_pos.size()];
  const auto x = random_vec(sz(rows, ld), c.seed);
  std::vector<float> cos_t(sz(rows, hd) / 2), sin_t(cos_t.size());
  cpu::rope_table(pos.data(), rows, hd, theta, cos_t.data(), sin_t.data());
  DeviceBuf<int64_t> dpos(pos);
  OpResult r;
  if (c.dtype == "bf16") {
    const auto x16 = to_bf16(x);
    r.ref = from_bf16(x16);
    cpu::rope_apply(r.ref.data(), ld, rows, heads, hd, cos_t.data(), sin_t.data());
    DeviceBuf<uint16_t> dx16(x16);
    RUN_OK(cuda::rope_interleaved_bf16(dx16.get(), ld, rows, heads, hd, dpos.get(), theta, nullptr));
    r.got = from_bf16(dx16.host());
  } else {
    r.ref = x;  // padding columns must be untouched too
    cpu::rope_apply(r.ref.data(), ld, rows, heads, hd, cos_t.data(), sin_t.data());
    DeviceBuf<float> dx(x);
    RUN_OK(cuda::rope_interleaved(dx.get(), ld, rows, heads, hd, dpos.get(), theta, nullptr));
    r.got = dx.host();
  }
  return r;
}

// ---- activation.cu, engine_ops.cu: dims {rows, hidden}; u = [fc1 | gate] per row (model/weights.h
// w13), silu on the first half; variant "out" or "in place" (over the linear half, as gRet's output
// gate writes over o); f32-bf16: silu_mul_to_bf16 into rows wider than hidden, whose gaps stay NaN.
OpResult run_silu_mul(const OpCase& c) {
  const int rows = c.dims[0], H = c.dims[1];
  const auto u = random_vec(sz(rows, 2 * H), c.seed, -6.f, 6.f);
  OpResult r;
  if (c.dtype == "bf16") {
    const auto u16 = to_bf16(u);
    const auto ur = from_bf16(u16);
    r.ref.resize(sz(rows, H));
    cpu::silu_mul(ur.data(), 2 * H, ur.data() + H, 2 * H, r.ref.data(), H, rows, H);
    DeviceBuf<uint16_t> du16(u16), dout16(r.ref.size());
    RUN_OK(cuda::silu_mul_bf16(du16.get(), 2 * H, du16.get() + H, 2 * H, dout16.get(), H, rows, H, nullptr));
    r.got = from_bf16(dout16.host());
    return r;
  }
  DeviceBuf<float> du(u);
  if (c.variant == "in place") {
    r.ref = u;
    cpu::silu_mul(u.data(), 2 * H, r.ref.data() + H, 2 * H, r.ref.data() + H, 2 * H, rows, H);
    RUN_OK(cuda::silu_mul(du.get(), 2 * H, du.get() + H, 2 * H, du.get() + H, 2 * H, rows, H, nullptr));
    r.got = du.host();
    return r;
  }
  r.ref.resize(sz(rows, H));
  cpu::silu_mul(u.data(), 2 * H, u.data() + H, 2 * H, r.ref.data(), H, rows, H);
  if (c.dtype == "f32-bf16") {
    const int ldo = H + 3;
    DeviceBuf<uint16_t> dout(std::vector<uint16_t>(sz(rows, ldo), 0x7fc0));
    RUN_OK(cuda::silu_mul_to_bf16(du.get(), 2 * H, du.get() + H, 2 * H, dout.get(), ldo, rows, H, nullptr));
    const auto got = from_bf16(dout.host());
    r.got.resize(r.ref.size());
    for (int i = 0; i < rows; ++i) {
      for (int j = 0; j < H; ++j) r.got[sz(i, H) + j] = got[sz(i, ldo) + j];
      for (int j = H; j < ldo; ++j)
        if (!std::isnan(got[sz(i, ldo) + j]))
          r.error = "row " + std::to_string(i) + " col " + std::to_string(j) + ": written outside the output";
    }
    return r;
  }
  DeviceBuf<float> dout(r.ref.size());
  RUN_OK(cuda::silu_mul(du.get(), 2 * H, du.get() + H, 2 * H, dout.get(), H, rows, H, nullptr));
  r.got = dout.host();
  return r;
}

// ---- activation.cu: dims {vocab, dim}; dtype of the table; one multiply: exact -------------------------
OpResult run_embed(const OpCase& c) {
  const int vocab = c.dims[0], dim = c.dims[1];
  const auto table = random_vec(sz(vocab, dim), c.seed);
  const std::vector<int32_t> ids = {0, 300, 5, 5, 17, 299, 1};
  const int n = static_cast<int>(ids.size());
  const float scale = std::sqrt(static_cast<float>(dim));
  OpResult r;
  r.ref.resize(sz(n, dim));
  DeviceBuf<float> dout(r.ref.size());
  DeviceBuf<int32_t> did(ids);
  if (c.dtype == "bf16") {
    const auto t16 = to_bf16(table);
    const auto tr = from_bf16(t16);
    cpu::embed(tr.data(), dim, ids.data(), n, scale, r.ref.data());
    DeviceBuf<uint16_t> dt16(t16);
    RUN_OK(cuda::embed(dt16.get(), cuda::DType::kBF16, dim, did.get(), n, scale, dout.get(), nullptr));
  } else {
    cpu::embed(table.data(), dim, ids.data(), n, scale, r.ref.data());
    DeviceBuf<float> dt(table);
    RUN_OK(cuda::embed(dt.get(), cuda::DType::kF32, dim, did.get(), n, scale, dout.get(), nullptr));
  }
  r.got = dout.host();
  return r;
}

// ---- activation.cu: dims {n} (as int64 in the op); exact ------------------------------------------------
OpResult run_add_inplace(const OpCase& c) {
  const int64_t n = c.dims[0];
  const auto y = random_vec(n, c.seed), x = random_vec(n, c.seed + 1);
  OpResult r;
  r.ref = y;
  cpu::add_inplace(r.ref.data(), x.data(), n);
  DeviceBuf<float> dy(y), dx(x);
  RUN_OK(cuda::add_inplace(dy.get(), dx.get(), n, nullptr));
  r.got = dy.host();
  return r;
}

// ---- attention.cu: dims {q_heads, kv_heads, head_dim, block_size, split_keys, lengths...} ---------------
// A pool whose blocks are handed out in a shuffled order; the CUDA op next to cpu::decode_attention
// over the same blocks. `gpu_lengths`, when given, replaces the lengths (each ≤ the row's) for the
// CUDA run only, over the same pool.
OpResult attention_case(const OpCase& c, const std::vector<int32_t>& gpu_lengths = {}) {
  const int n_q = c.dims[0], n_kv = c.dims[1], hd = c.dims[2], bs = c.dims[3], split = c.dims[4];
  const std::vector<int32_t> lengths(c.dims.begin() + 5, c.dims.end());
  const int B = static_cast<int>(lengths.size());
  const int kv_dim = n_kv * hd, qd = n_q * hd;
  const int ldq = qd + 3;  // strided rows, as q inside a wider projection
  int max_blocks = 1;
  int64_t max_len = 0, total_blocks = 0;
  for (int32_t len : lengths) {
    const int nb = (len + bs - 1) / bs;
    max_blocks = std::max(max_blocks, nb);
    max_len = std::max<int64_t>(max_len, len);
    total_blocks += nb;
  }
  const int n_pool_blocks = static_cast<int>(total_blocks) + 3;  // a few never referenced
  std::vector<int32_t> order(n_pool_blocks);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(c.seed));
  std::vector<int32_t> tables(sz(B, max_blocks), -1);
  for (int b = 0, next = 0; b < B; ++b)
    for (int i = 0; i < (lengths[b] + bs - 1) / bs; ++i) tables[sz(b, max_blocks) + i] = order[next++];

  const auto kp = random_vec(sz(n_pool_blocks, bs, kv_dim), c.seed + 1, -2.f, 2.f);
  const auto vp = random_vec(kp.size(), c.seed + 2);
  const auto q = random_vec(sz(B, ldq), c.seed + 3, -2.f, 2.f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

  OpResult r;
  r.ref.assign(sz(B, qd), 0.f);
  for (int b = 0; b < B; ++b) {
    if (lengths[b] == 0) continue;  // the CUDA op defines zeros; the CPU op needs keys
    std::vector<const float*> kb, vb;
    for (int i = 0; i < (lengths[b] + bs - 1) / bs; ++i) {
      const int64_t blk = tables[sz(b, max_blocks) + i];
      kb.push_back(kp.data() + blk * bs * kv_dim);
      vb.push_back(vp.data() + blk * bs * kv_dim);
    }
    cpu::KvBlocks kv{kb.data(), vb.data(), bs, lengths[b]};
    cpu::decode_attention(q.data() + sz(b, ldq), kv, r.ref.data() + sz(b, qd), n_q, n_kv, hd, scale);
  }

  DeviceBuf<float> dq(q), dk(kp), dv(vp), dout(sz(B, qd));
  if (!gpu_lengths.empty()) max_len = *std::max_element(gpu_lengths.begin(), gpu_lengths.end());
  DeviceBuf<int32_t> dt(tables), dl(gpu_lengths.empty() ? lengths : gpu_lengths);
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
  a.n_q_heads = n_q;
  a.n_kv_heads = n_kv;
  a.head_dim = hd;
  a.block_size = bs;
  a.scale = scale;
  a.split_keys = split;
  RUN_OK(cuda::decode_attention_paged(a, nullptr));
  r.got = dout.host();
  return r;
}

OpResult run_decode_attention(const OpCase& c) { return attention_case(c); }

// ---- retention.cu: dims {batch, heads, head_dim}; three steps; variant "output" (every step's) or
// "state" (docs/design.md §2.3: the state itself is what ships, so it is compared, not only the output).
OpResult run_retention_step(const OpCase& c) {
  const int B = c.dims[0], H = c.dims[1], hd = c.dims[2], D = H * hd, R = 4 * D;  // fused q|k|v|g rows
  const float tau = 16.f, kscale = 1.0f / std::sqrt(static_cast<float>(hd));
  uint32_t seed = c.seed;
  // Per-sequence states in separate allocations, addressed through a pointer array.
  std::vector<std::vector<float>> s_ref(B);
  std::vector<std::unique_ptr<DeviceBuf<float>>> s_dev;
  std::vector<float*> s_ptrs;
  for (int b = 0; b < B; ++b) {
    s_ref[b] = random_vec(sz(H, hd, hd), seed++, -0.5f, 0.5f);
    s_dev.push_back(std::make_unique<DeviceBuf<float>>(s_ref[b]));
    s_ptrs.push_back(s_dev.back()->get());
  }
  DeviceBuf<float*> dptrs(s_ptrs);
  OpResult r;
  for (int step = 0; step < 3; ++step) {
    const auto proj = random_vec(sz(B, R), seed++);
    const auto gt = random_vec(sz(B, H), seed++, -8.f, 8.f);
    std::vector<float> ref(sz(B, D));
    std::vector<float> kscaled = proj;
    for (int b = 0; b < B; ++b) cpu::scale_inplace(kscaled.data() + sz(b, R) + D, kscale, D);
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h) {
        const float a = logsigmoid(gt[sz(b, H) + h]) * (1.0f / tau);
        const size_t row = sz(b, R) + sz(h, hd);
        cpu::retention_recurrent(kscaled.data() + row, R, kscaled.data() + row + D, R, kscaled.data() + row + 2 * D, R,
                                 &a, 1, hd, s_ref[b].data() + sz(h, hd, hd), ref.data() + sz(b, D) + h * hd, D);
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
    RUN_OK(cuda::retention_decode_step(a, nullptr));
    if (c.variant == "output") {
      const auto got = dout.host();
      r.got.insert(r.got.end(), got.begin(), got.end());
      r.ref.insert(r.ref.end(), ref.begin(), ref.end());
    } else {
      for (int b = 0; b < B; ++b) {
        const auto got = s_dev[b]->host();
        r.got.insert(r.got.end(), got.begin(), got.end());
        r.ref.insert(r.ref.end(), s_ref[b].begin(), s_ref[b].end());
      }
    }
  }
  return r;
}

// ---- engine_ops.cu: dims {rows, cols, ldx, ldy}; ties and specials; bitwise (the padding untouched) ----
OpResult run_convert_to_bf16(const OpCase& c) {
  const int rows = c.dims[0], cols = c.dims[1], ldx = c.dims[2], ldy = c.dims[3];
  auto x = random_vec(sz(rows, ldx), c.seed, -100.f, 100.f);
  x[0] = 1.0f + 1.0f / 256;  // halfway between two bf16 values: rounds to even
  x[1] = 1.0f + 3.0f / 256;
  x[2] = -0.0f;
  x[3] = std::numeric_limits<float>::infinity();
  x[4] = 3.4e38f;  // rounds to infinity in bf16
  x[5] = 1e-40f;   // subnormal
  DeviceBuf<float> dx(x);
  DeviceBuf<uint16_t> dy(std::vector<uint16_t>(sz(rows, ldy), 0x7fc1));
  RUN_OK(cuda::convert_to_bf16(dx.get(), ldx, dy.get(), ldy, rows, cols, nullptr));
  std::vector<uint16_t> want(sz(rows, ldy), 0x7fc1);
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) want[sz(i, ldy) + j] = to_bf16(x[sz(i, ldx) + j]);
  return OpResult{from_bf16(dy.host()), from_bf16(want), ""};
}

// ---- engine_ops.cu: dims {src_rows, dst_rows, cols, lds, ldd}; variant "gather+scatter", "gather",
// "scatter"; bitwise, the rows not written still NaN.
OpResult run_copy_rows(const OpCase& c) {
  const int src_rows = c.dims[0], dst_rows = c.dims[1], cols = c.dims[2], lds = c.dims[3], ldd = c.dims[4];
  const auto src = random_vec(sz(src_rows, lds), c.seed);
  const std::vector<int32_t> from = {4, 0, 8, 4};  // a gather may repeat a source row
  const std::vector<int32_t> to = {10, 3, 0, 5};
  const int n = static_cast<int>(from.size());
  DeviceBuf<float> dsrc(src), ddst(std::vector<float>(sz(dst_rows, ldd), kNaN));
  DeviceBuf<int32_t> dfrom(from), dto(to);
  const bool gather = c.variant != "scatter", scatter = c.variant != "gather";
  RUN_OK(cuda::copy_rows(dsrc.get(), lds, gather ? dfrom.get() : nullptr, ddst.get(), ldd,
                         scatter ? dto.get() : nullptr, n, cols, nullptr));
  OpResult r;
  r.ref.assign(sz(dst_rows, ldd), kNaN);
  for (int i = 0; i < n; ++i) {
    const int s = gather ? from[i] : i, d = scatter ? to[i] : i;
    for (int j = 0; j < cols; ++j) r.ref[sz(d, ldd) + j] = src[sz(s, lds) + j];
  }
  r.got = ddst.host();
  return r;
}

// ---- engine_ops.cu: dims {n_blocks, block_size, kv_dim, max_blocks}; two sequences (table 0 = blocks
// {5, 1, 3}, table 1 = {0, 2, 4}); rows prefill-like (table 0, positions 3..6), then decode-like rows
// of table 1, then one past its table (position 12 = slot 3) that must be skipped; K pool then V pool,
// bitwise, every slot not written still NaN.
struct KvAppendCase {
  std::vector<int32_t> tables = {5, 1, 3, 0, 2, 4};
  std::vector<int32_t> row_tables = {0, 0, 0, 0, 1, 1, 1};
  std::vector<int64_t> positions = {3, 4, 5, 6, 0, 11, 12};
};

OpResult run_kv_append(const OpCase& c) {
  const int n_blocks = c.dims[0], bs = c.dims[1], kv_dim = c.dims[2], max_blocks = c.dims[3], ld = 2 * kv_dim + 1;
  const KvAppendCase k;
  const int rows = static_cast<int>(k.positions.size());
  const auto kv = random_vec(sz(rows, ld), c.seed);  // k then v in each row, as the engine's k|v product
  const size_t pool = sz(n_blocks, bs, kv_dim);
  DeviceBuf<float> dkv(kv), dk(std::vector<float>(pool, kNaN)), dv(std::vector<float>(pool, kNaN));
  DeviceBuf<int32_t> dtables(k.tables), drt(k.row_tables);
  DeviceBuf<int64_t> dpos(k.positions);
  cuda::KvAppendArgs a;
  a.k = dkv.get();
  a.ldk = ld;
  a.v = dkv.get() + kv_dim;
  a.ldv = ld;
  a.k_pool = dk.get();
  a.v_pool = dv.get();
  a.block_tables = dtables.get();
  a.max_blocks = max_blocks;
  a.row_tables = drt.get();
  a.positions = dpos.get();
  a.rows = rows;
  a.kv_dim = kv_dim;
  a.block_size = bs;
  a.n_blocks = n_blocks;
  RUN_OK(cuda::kv_append_paged(a, nullptr));
  std::vector<float> want_k(pool, kNaN), want_v(pool, kNaN);
  for (int i = 0; i < rows; ++i) {
    const int64_t p = k.positions[i];
    if (p / bs >= max_blocks) continue;
    const int32_t block = k.tables[sz(k.row_tables[i], max_blocks) + p / bs];
    for (int j = 0; j < kv_dim; ++j) {
      want_k[(sz(block, bs) + p % bs) * kv_dim + j] = kv[sz(i, ld) + j];
      want_v[(sz(block, bs) + p % bs) * kv_dim + j] = kv[sz(i, ld) + kv_dim + j];
    }
  }
  OpResult r;
  r.got = dk.host();
  const auto got_v = dv.host();
  r.got.insert(r.got.end(), got_v.begin(), got_v.end());
  r.ref = want_k;
  r.ref.insert(r.ref.end(), want_v.begin(), want_v.end());
  // row_tables null: every row uses table 0 (row 0, position 3: block 5, slot 3).
  a.row_tables = nullptr;
  a.rows = 1;
  RUN_OK(cuda::kv_append_paged(a, nullptr));
  const auto k2 = dk.host();
  for (int j = 0; j < kv_dim; ++j)
    if (!same_bits(k2[(5 * bs + 3) * kv_dim + j], kv[j])) r.error = "row_tables null: row 0 not in table 0's block";
  return r;
}

const std::map<std::string, Runner>& runners() {
  static const std::map<std::string, Runner> m = {
      {"gemm_bf16", run_gemm},
      {"rmsnorm", run_rmsnorm},
      {"rope_interleaved", run_rope},
      {"silu_mul", run_silu_mul},
      {"embed", run_embed},
      {"add_inplace", run_add_inplace},
      {"decode_attention_paged", run_decode_attention},
      {"retention_decode_step", run_retention_step},
      {"convert_to_bf16", run_convert_to_bf16},
      {"copy_rows", run_copy_rows},
      {"kv_append_paged", run_kv_append},
  };
  return m;
}

// ---- the table ----------------------------------------------------------------------------------------
std::vector<OpCase> op_table() {
  std::vector<OpCase> t;
  auto add = [&t](std::string op, std::vector<int> dims, std::string dtype, std::string variant, float atol, float rtol,
                  uint32_t seed, Cmp cmp = Cmp::kClose) {
    t.push_back({std::move(op), std::move(dims), std::move(dtype), std::move(variant), atol, rtol, cmp, seed});
  };
  uint32_t seed = 1;
  for (const auto& s :
       std::vector<std::vector<int>>{{1, 1, 1}, {1, 7, 3}, {5, 7, 3}, {33, 65, 130}, {3, 1000, 64}, {128, 256, 512}}) {
    // Error bound of an fp32 sum of k exact products: scale by k and the magnitudes (|a|,|b| ≤ 1).
    const float tol = 2e-6f * static_cast<float>(s[2]) + 1e-6f;
    add("gemm_bf16", s, "f32", "beta=0", tol, 1e-5f, seed);
    add("gemm_bf16", s, "f32", "alpha=0.5 beta=1", tol, 1e-5f, seed);
    add("gemm_bf16", s, "bf16", "beta=0", tol + 1e-6f, 1e-2f, seed);  // one bf16 rounding of the fp32 result
    seed += 3;
  }
  const std::vector<std::vector<int>> norm_shapes = {{1, 1}, {3, 7}, {17, 64}, {5, 1000}, {2, 3072}};
  seed = 100;
  for (const auto& s : norm_shapes) {
    for (const char* w : {"weight", "no weight"}) add("rmsnorm", s, "f32", w, 1e-6f, 1e-5f, seed);
    add("rmsnorm", s, "bf16", "weight", 1e-3f, 1e-2f, seed);
    seed += 2;
  }
  seed = 10;
  for (const auto& s : norm_shapes) {
    for (const char* w : {"weight", "no weight"}) add("rmsnorm", s, "f32-bf16", w, 1e-6f, 1e-2f, seed);
    seed += 2;
  }
  seed = 200;
  for (const char* theta : {"theta=10000", "theta=500000"})
    // (rows, n_heads, head_dim, extra row padding): head_dim 2 has a single pair (denominator 1).
    for (const auto& s :
         std::vector<std::vector<int>>{{1, 1, 2, 0}, {3, 2, 6, 5}, {7, 4, 64, 0}, {5, 3, 128, 64}, {2, 1, 256, 0}}) {
      add("rope_interleaved", s, "f32", theta, 1e-6f, 1e-5f, seed);
      add("rope_interleaved", s, "bf16", theta, 1e-3f, 1e-2f, seed);
      ++seed;
    }
  const std::vector<std::vector<int>> act_shapes = {{1, 1}, {3, 5}, {9, 160}, {4, 1537}};
  seed = 300;
  for (const auto& s : act_shapes) {
    add("silu_mul", s, "f32", "out", 1e-6f, 1e-5f, seed);
    add("silu_mul", s, "f32", "in place", 1e-6f, 1e-5f, seed);
    add("silu_mul", s, "bf16", "out", 1e-3f, 1e-2f, seed);
    ++seed;
  }
  seed = 100;
  for (const auto& s : act_shapes) add("silu_mul", s, "f32-bf16", "out", 1e-6f, 1e-2f, seed++);
  for (const char* dt : {"f32", "bf16"}) add("embed", {301, 67}, dt, "", 0.f, 0.f, 400);
  for (const int n : {1, 1023, 3 << 20}) add("add_inplace", {n}, "f32", "", 0.f, 0.f, 500);
  // {q_heads, kv_heads, head_dim, block_size, split_keys, lengths...}
  seed = 600;
  for (const auto& c : std::vector<std::vector<int>>{
           {4, 4, 64, 16, 0, 1, 17, 100, 33},           // GQA ratio 1, lengths off the block size
           {8, 2, 128, 32, 0, 1000, 5, 64, 513, 2049},  // ratio 4, several splits
           {8, 2, 128, 16, 48, 1000, 5, 64, 513},       // split_keys a multiple of nothing
           {6, 2, 40, 7, 0, 3, 50, 7},                  // ratio 3, odd block size, small hd
           {16, 1, 256, 64, 256, 700, 1},               // largest group and head_dim
           {5, 5, 33, 16, 0, 129, 128, 127},            // odd head_dim (not a multiple of 32)
       }) {
    add("decode_attention_paged", c, "f32", "", 1e-5f, 1e-4f, seed);
    seed += 10;
  }
  // Empty sequences: their rows are zeros.
  add("decode_attention_paged", {4, 2, 32, 16, 0, 0, 20, 0}, "f32", "empty sequences", 1e-5f, 1e-4f, 700);
  seed = 900;
  for (const auto& s : std::vector<std::vector<int>>{{1, 1, 8}, {3, 4, 64}, {2, 3, 36}, {5, 2, 128}, {1, 1, 257}}) {
    add("retention_decode_step", s, "f32", "output", 1e-5f, 1e-4f, seed);
    add("retention_decode_step", s, "f32", "state", 1e-6f, 1e-5f, seed);
    seed += static_cast<uint32_t>(s[0]) + 6;  // a state per sequence, then proj and gates for 3 steps
  }
  add("convert_to_bf16", {7, 333, 340, 336}, "f32-bf16", "", 0.f, 0.f, 200, Cmp::kBits);
  for (const char* mode : {"gather+scatter", "gather", "scatter"})
    add("copy_rows", {9, 11, 77, 80, 79}, "f32", mode, 0.f, 0.f, 300, Cmp::kBits);
  add("kv_append_paged", {6, 4, 10, 3}, "f32", "", 0.f, 0.f, 400, Cmp::kBits);
  return t;
}

// "gemm_bf16_5x7x3_f32_alpha_0_5_beta_1": letters, digits and _ only (GoogleTest's names).
std::string case_name(const ::testing::TestParamInfo<OpCase>& info) {
  const OpCase& c = info.param;
  std::string s = c.op + "_";
  for (size_t i = 0; i < c.dims.size(); ++i) s += (i ? "x" : "") + std::to_string(c.dims[i]);
  s += "_" + c.dtype;
  if (!c.variant.empty()) s += "_" + c.variant;
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s + "_" + std::to_string(info.index);
}

::testing::AssertionResult bits_equal(const std::vector<float>& got, const std::vector<float>& ref) {
  if (got.size() != ref.size()) return ::testing::AssertionFailure() << "size " << got.size() << " vs " << ref.size();
  for (size_t i = 0; i < got.size(); ++i)
    if (!same_bits(got[i], ref[i]) && !(std::isnan(got[i]) && std::isnan(ref[i])))
      return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", want " << ref[i];
  return ::testing::AssertionSuccess();
}

class CudaOp : public ::testing::TestWithParam<OpCase> {};

TEST_P(CudaOp, MatchesCpu) {
  SKIP_WITHOUT_GPU();
  const OpCase& c = GetParam();
  const auto runner = runners().find(c.op);
  ASSERT_NE(runner, runners().end()) << "no runner for " << c.op;
  const OpResult r = runner->second(c);
  ASSERT_TRUE(r.error.empty()) << r.error;
  ASSERT_FALSE(r.ref.empty());
  if (c.cmp == Cmp::kBits) EXPECT_TRUE(bits_equal(r.got, r.ref));
  else EXPECT_TRUE(all_close(r.got, r.ref, c.atol, c.rtol));
}

INSTANTIATE_TEST_SUITE_P(Table, CudaOp, ::testing::ValuesIn(op_table()), case_name);

// Every op of the table has a runner, and every runner a row (a host-side check: no device needed).
TEST(CudaOpTable, EveryRowHasARunnerAndEveryRunnerRows) {
  std::map<std::string, int> rows;
  for (const OpCase& c : op_table()) {
    EXPECT_TRUE(runners().count(c.op)) << c.op;
    ++rows[c.op];
  }
  for (const auto& [op, runner] : runners()) EXPECT_GT(rows[op], 0) << op << " has no row";
}

// ---- what a row cannot say -------------------------------------------------------------------------------

TEST(CudaOps, DecodeAttentionPagedIsBitwiseIndependentOfTheBatch) {
  SKIP_WITHOUT_GPU();
  // The same pool and sequence 0, once next to a long sequence (a grid of many splits) and once
  // with the neighbour emptied (one split): sequence 0's output must agree bit for bit.
  OpCase c{"decode_attention_paged", {8, 2, 64, 16, 0, 300, 5000}, "f32", "", 1e-5f, 1e-4f, Cmp::kClose, 800};
  const OpResult with_long = attention_case(c);
  const OpResult alone = attention_case(c, {300, 0});
  ASSERT_TRUE(with_long.error.empty()) << with_long.error;
  ASSERT_TRUE(alone.error.empty()) << alone.error;
  const size_t qd = 8 * 64;
  ASSERT_EQ(with_long.got.size(), 2 * qd);
  EXPECT_EQ(0, std::memcmp(with_long.got.data(), alone.got.data(), qd * sizeof(float)));
  EXPECT_TRUE(all_close(with_long.got, with_long.ref, 1e-5f, 1e-4f));
}

TEST(CudaOps, RejectBadArguments) {
  SKIP_WITHOUT_GPU();
  const auto invalid = cuda::StatusCode::kInvalidArgument;
  EXPECT_EQ(cuda::gemm_bf16(nullptr, nullptr, nullptr, cuda::DType::kF32, 2, 2, 2, 1, 0, nullptr).code(), invalid);
  EXPECT_EQ(cuda::gemm_bf16(nullptr, nullptr, nullptr, cuda::DType::kF32, -1, 2, 2, 1, 0, nullptr).code(), invalid);
  {
    DeviceBuf<float> dx(8);
    DeviceBuf<int64_t> dpos(1);
    EXPECT_EQ(cuda::rope_interleaved(dx.get(), 8, 1, 1, 7, dpos.get(), 1e4, nullptr).code(), invalid);
  }
  cuda::PagedDecodeArgs a;
  a.batch = 1;
  a.n_q_heads = 6;
  a.n_kv_heads = 4;  // not a divisor
  a.head_dim = 64;
  EXPECT_EQ(cuda::decode_attention_paged(a, nullptr).code(), invalid);
  a.n_kv_heads = 2;
  a.head_dim = 512;
  EXPECT_EQ(cuda::decode_attention_paged(a, nullptr).code(), invalid);
  EXPECT_EQ(cuda::rmsnorm_to_bf16(nullptr, nullptr, nullptr, 2, 0, 1e-5f, nullptr).code(), invalid);
  EXPECT_EQ(cuda::rmsnorm_to_bf16(nullptr, nullptr, nullptr, 2, 4, 1e-5f, nullptr).code(), invalid);
  EXPECT_EQ(cuda::silu_mul_to_bf16(nullptr, 1, nullptr, 1, nullptr, 1, 1, 2, nullptr).code(), invalid);
  {
    DeviceBuf<float> dx(sz(7, 340));
    DeviceBuf<uint16_t> dy(sz(7, 336));
    EXPECT_EQ(cuda::convert_to_bf16(dx.get(), 3, dy.get(), 336, 7, 333, nullptr).code(), invalid);
  }
  {
    const int n_blocks = 6, bs = 4, kv_dim = 10, ld = 2 * kv_dim + 1;
    const KvAppendCase k;
    DeviceBuf<float> dkv(sz(7, ld)), dk(sz(n_blocks, bs, kv_dim)), dv(sz(n_blocks, bs, kv_dim));
    DeviceBuf<int32_t> dtables(k.tables);
    DeviceBuf<int64_t> dpos(k.positions);
    cuda::KvAppendArgs good;
    good.k = dkv.get();
    good.ldk = ld;
    good.v = dkv.get() + kv_dim;
    good.ldv = ld;
    good.k_pool = dk.get();
    good.v_pool = dv.get();
    good.block_tables = dtables.get();
    good.max_blocks = 3;
    good.positions = dpos.get();
    good.rows = 1;
    good.kv_dim = kv_dim;
    good.block_size = bs;
    good.n_blocks = n_blocks;
    ASSERT_OK(cuda::kv_append_paged(good, nullptr));
    cuda::KvAppendArgs bad = good;
    bad.block_size = 0;
    EXPECT_EQ(cuda::kv_append_paged(bad, nullptr).code(), invalid);
    bad = good;
    bad.ldk = kv_dim - 1;
    EXPECT_EQ(cuda::kv_append_paged(bad, nullptr).code(), invalid);
    bad = good;
    bad.positions = nullptr;
    EXPECT_EQ(cuda::kv_append_paged(bad, nullptr).code(), invalid);
  }
  EXPECT_EQ(cuda::fill_normal(nullptr, cuda::DType::kF32, 4, 1, 0, 1, nullptr).code(), invalid);
}

// fill_normal has no CPU twin: reproducible, bf16 = the rounding of the fp32 values, moments of
// N(mean, sd²).
TEST(CudaOps, FillNormalIsReproducibleWithTheRightMoments) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 1 << 20;
  const float mean = 0.25f, sd = 2.0f;
  DeviceBuf<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
  DeviceBuf<uint16_t> c(static_cast<size_t>(n));
  ASSERT_OK(cuda::fill_normal(a.get(), cuda::DType::kF32, n, 7, mean, sd, nullptr));
  ASSERT_OK(cuda::fill_normal(b.get(), cuda::DType::kF32, n, 7, mean, sd, nullptr));
  ASSERT_OK(cuda::fill_normal(c.get(), cuda::DType::kBF16, n, 7, mean, sd, nullptr));
  const auto ha = a.host(), hb = b.host();
  const auto hc = c.host();
  double s = 0, s2 = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_TRUE(std::isfinite(ha[i])) << i;
    ASSERT_TRUE(same_bits(ha[i], hb[i])) << i;
    ASSERT_EQ(hc[i], to_bf16(ha[i])) << i;
    s += ha[i];
    s2 += static_cast<double>(ha[i]) * ha[i];
  }
  const double m = s / n, var = s2 / n - m * m;
  EXPECT_NEAR(m, mean, 0.01);  // ~5 standard errors (sd / sqrt(n) = 0.002)
  EXPECT_NEAR(std::sqrt(var), sd, 0.01);
  // Another seed gives other values; a prefix does not depend on n (counter-based).
  DeviceBuf<float> d(1000);
  ASSERT_OK(cuda::fill_normal(d.get(), cuda::DType::kF32, 1000, 7, mean, sd, nullptr));
  const auto hd = d.host();
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(same_bits(hd[i], ha[i])) << i;
  ASSERT_OK(cuda::fill_normal(d.get(), cuda::DType::kF32, 1000, 8, mean, sd, nullptr));
  const auto he = d.host();
  int same = 0;
  for (int i = 0; i < 1000; ++i) same += same_bits(he[i], ha[i]);
  EXPECT_LT(same, 5);
}

}  // namespace
}  // namespace yoco
