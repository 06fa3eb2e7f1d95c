// The prefill-side CUDA ops and the device sampler against the CPU oracle on random inputs
// (docs/architecture.md, rule 4): |got − ref| ≤ atol + rtol·|ref|, per op:
//   retention_prefill, swa_prefill (bf16 tensor cores): the CPU op runs on the same bf16-rounded
//     q, k, v; the GPU also rounds k·k_scale, the masked decay or softmax weights and (retention)
//     the bf16 copy of the state for the cross term, each ≤ 2^-9 relative, so rtol 2e-2 with an
//     atol of 2e-2 of the reference's RMS (the sums cancel: an element can be far below the RMS);
//   swa_decode (fp32 on CUDA cores): atol 1e-5, rtol 1e-4, the other fp32 reductions' bound;
//   sampling: greedy identical to std::max_element; stochastic tokens identical to
//     model/sampler.cc's Sampler (the same xoshiro256** draw), always inside the allowed
//     top-k/top-p/min-p set, reproducible, and with the right frequencies.
// Label "gpu": every test skips when there is no CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"
#include "model/sampler.h"
#include "tests/gpu/gpu_test_util.h"

namespace yoco {
namespace {

std::string join(const std::vector<int>& v) {
  std::string s;
  for (int x : v) {
    if (!s.empty()) s += ',';
    s += std::to_string(x);
  }
  return s;
}

// --- retention prefill -------------------------------------------------------------------------------
struct RetCase {
  int n_heads, head_dim, chunk;
  std::vector<int> calls;  // tokens per call, consumed in order (resumed from the state)
  bool random_state;       // start from a non-zero state (a resumed or restored sequence)
};

struct RetRun {
  std::vector<float> out, state;
};

// Inputs as the model lays them out: fused q|k|v|g rows of width R (padded, so strides matter),
// gate logits [n, H]. The k scaling and the log-decays are done the model's way for the CPU.
struct RetInputs {
  int n, H, hd, D, R;
  std::vector<float> proj, gt, s0;
};

RetInputs make_ret_inputs(const RetCase& c, uint32_t seed) {
  RetInputs in;
  in.n = std::accumulate(c.calls.begin(), c.calls.end(), 0);
  in.H = c.n_heads;
  in.hd = c.head_dim;
  in.D = in.H * in.hd;
  in.R = 4 * in.D + 3;
  in.proj = bf16_round(random_vec(static_cast<size_t>(in.n) * in.R, seed, -1.f, 1.f));
  in.gt = random_vec(static_cast<size_t>(in.n) * in.H, seed + 1, -6.f, 4.f);
  in.s0.assign(static_cast<size_t>(in.H) * in.hd * in.hd, 0.f);
  if (c.random_state) in.s0 = random_vec(in.s0.size(), seed + 2, -0.5f, 0.5f);
  return in;
}

// cpu::retention_chunkwise call by call, as model/cpu_backend.cc's retention op runs it.
RetRun cpu_retention(const RetCase& c, const RetInputs& in, float tau) {
  const int H = in.H, hd = in.hd, D = in.D, R = in.R;
  std::vector<float> proj = in.proj;
  const float kscale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (int t = 0; t < in.n; ++t) cpu::scale_inplace(proj.data() + static_cast<size_t>(t) * R + D, kscale, D);
  RetRun r{std::vector<float>(static_cast<size_t>(in.n) * D), in.s0};
  int t0 = 0;
  for (int n : c.calls) {
    std::vector<float> a(static_cast<size_t>(n) * H);
    for (int t = 0; t < n; ++t)
      for (int h = 0; h < H; ++h)
        a[static_cast<size_t>(h) * n + t] = logsigmoid(in.gt[static_cast<size_t>(t0 + t) * H + h]) * (1.0f / tau);
    const float* base = proj.data() + static_cast<size_t>(t0) * R;
    for (int h = 0; h < H; ++h)
      cpu::retention_chunkwise(base + h * hd, R, base + D + h * hd, R, base + 2 * D + h * hd, R,
                               a.data() + static_cast<size_t>(h) * n, n, hd, c.chunk,
                               r.state.data() + static_cast<size_t>(h) * hd * hd,
                               r.out.data() + static_cast<size_t>(t0) * D + h * hd, D);
    t0 += n;
  }
  return r;
}

void gpu_retention(const std::vector<int>& calls, int chunk, const RetInputs& in, float tau, RetRun* r) {
  DeviceBuf<float> dproj(in.proj), dgt(in.gt), ds(in.s0), dout(static_cast<size_t>(in.n) * in.D);
  int t0 = 0;
  for (int n : calls) {
    cuda::RetentionPrefillArgs a;
    a.q = dproj.get() + static_cast<size_t>(t0) * in.R;
    a.ldq = in.R;
    a.k = a.q + in.D;
    a.ldk = in.R;
    a.v = a.q + 2 * in.D;
    a.ldv = in.R;
    a.gt = dgt.get() + static_cast<size_t>(t0) * in.H;
    a.ldg = in.H;
    a.state = ds.get();
    a.out = dout.get() + static_cast<size_t>(t0) * in.D;
    a.ldo = in.D;
    a.n = n;
    a.n_heads = in.H;
    a.head_dim = in.hd;
    a.chunk = chunk;
    a.k_scale = 1.0f / std::sqrt(static_cast<float>(in.hd));
    a.gate_logit_normalizer = tau;
    ASSERT_OK(cuda::retention_prefill(a, nullptr));
    t0 += n;
  }
  ASSERT_CUDA(cudaDeviceSynchronize());
  r->out = dout.host();
  r->state = ds.host();
}

TEST(CudaPrefill, RetentionPrefillMatchesCpu) {
  SKIP_WITHOUT_GPU();
  const RetCase cases[] = {
      {2, 64, 64, {1}, false},         // a single token
      {3, 64, 64, {200}, false},       // n not a multiple of the chunk
      {2, 128, 64, {64, 64}, true},    // whole chunks, resumed, non-zero start
      {1, 256, 32, {100, 37}, true},   // head_dim 256, chunk 32
      {2, 36, 64, {70}, false},        // head_dim padded to 64 inside
      {1, 8, 32, {5, 40}, false},      // tiny head_dim
      {1, 200, 64, {90, 1, 3}, true},  // head_dim padded to 256, one-token calls
      {4, 128, 64, {300}, true},       // several heads, several chunks
      {2, 64, 64, {1000}, false},      // long: the state carries many chunks
  };
  uint32_t seed = 1000;
  for (const RetCase& c : cases) {
    SCOPED_TRACE("heads=" + std::to_string(c.n_heads) + " hd=" + std::to_string(c.head_dim) +
                 " chunk=" + std::to_string(c.chunk) + " calls=" + join(c.calls));
    const RetInputs in = make_ret_inputs(c, seed);
    seed += 10;
    const RetRun ref = cpu_retention(c, in, 16.f);
    RetRun got;
    gpu_retention(c.calls, c.chunk, in, 16.f, &got);
    EXPECT_TRUE(bf16_close(got.out, ref.out));
    // docs/design.md §2.3: the state itself is what ships; test it, not only the output.
    EXPECT_TRUE(bf16_close(got.state, ref.state));
  }
}

TEST(CudaPrefill, RetentionPrefillResumedEqualsOneShot) {
  SKIP_WITHOUT_GPU();
  const RetCase c{2, 128, 64, {37, 91, 1, 64}, true};
  const RetInputs in = make_ret_inputs(c, 1500);
  RetRun split, whole;
  gpu_retention(c.calls, 64, in, 16.f, &split);
  gpu_retention({in.n}, 64, in, 16.f, &whole);
  EXPECT_TRUE(bf16_close(split.out, whole.out));
  EXPECT_TRUE(bf16_close(split.state, whole.state));
  // chunk 0 means 64: bitwise the same run.
  RetRun dflt;
  gpu_retention({in.n}, 0, in, 16.f, &dflt);
  EXPECT_EQ(dflt.out, whole.out);
  EXPECT_EQ(dflt.state, whole.state);
}

TEST(CudaPrefill, RetentionPrefillRejectsBadArguments) {
  SKIP_WITHOUT_GPU();
  cuda::RetentionPrefillArgs a;
  a.n = 4;
  a.n_heads = 1;
  a.head_dim = 512;  // over the limit
  EXPECT_EQ(cuda::retention_prefill(a, nullptr).code(), cuda::StatusCode::kInvalidArgument);
  a.head_dim = 64;
  a.chunk = 48;
  EXPECT_EQ(cuda::retention_prefill(a, nullptr).code(), cuda::StatusCode::kInvalidArgument);
  a.chunk = 64;  // strides and pointers still missing
  EXPECT_EQ(cuda::retention_prefill(a, nullptr).code(), cuda::StatusCode::kInvalidArgument);
}

// --- sliding-window attention ------------------------------------------------------------------------
// The CPU model's SWA state: a ring of W rows, row of position p in slot p % W (model/state.h).
struct HostRing {
  int W, kv_dim;
  int64_t next = 0;  // positions 0..next−1 have gone through
  std::vector<float> k, v;
  HostRing(int w, int d)
      : W(w), kv_dim(d), k(static_cast<size_t>(w) * d, std::nanf("")), v(static_cast<size_t>(w) * d, std::nanf("")) {}
  int count() const { return static_cast<int>(std::min<int64_t>(next, W)); }
  const float* k_of(int64_t p) const { return k.data() + static_cast<size_t>(p % W) * kv_dim; }
  const float* v_of(int64_t p) const { return v.data() + static_cast<size_t>(p % W) * kv_dim; }
  void push(const float* kr, const float* vr) {
    std::copy(kr, kr + kv_dim, k.begin() + static_cast<size_t>(next % W) * kv_dim);
    std::copy(vr, vr + kv_dim, v.begin() + static_cast<size_t>(next % W) * kv_dim);
    ++next;
  }
};

struct SwaCase {
  int n_q_heads, n_kv_heads, head_dim, window;
  std::vector<int> calls;
};

// Fused q|k|v rows [n, R] (padded), q scaled up so the softmax is far from uniform.
struct SwaInputs {
  int n, qd, kvd, R;
  std::vector<float> proj;
};

SwaInputs make_swa_inputs(const SwaCase& c, int n, uint32_t seed) {
  SwaInputs in;
  in.n = n;
  in.qd = c.n_q_heads * c.head_dim;
  in.kvd = c.n_kv_heads * c.head_dim;
  in.R = in.qd + 2 * in.kvd + 2;
  in.proj = random_vec(static_cast<size_t>(n) * in.R, seed, -1.f, 1.f);
  for (int t = 0; t < n; ++t)
    for (int i = 0; i < in.qd; ++i) in.proj[static_cast<size_t>(t) * in.R + i] *= 3.f;
  in.proj = bf16_round(std::move(in.proj));
  return in;
}

// model/cpu_backend.cc's window_attention for SWA: the ring's rows (age order) then the call's rows, one
// cpu::attention, then every row through the ring.
std::vector<float> cpu_swa_prefill(const SwaCase& c, const SwaInputs& in, const std::vector<int>& calls,
                                   HostRing& ring) {
  std::vector<float> out(static_cast<size_t>(in.n) * in.qd);
  int t0 = 0;
  for (int n : calls) {
    const int64_t pos0 = ring.next;
    const int cnt = ring.count(), total = cnt + n;
    std::vector<float> k_all(static_cast<size_t>(total) * in.kvd), v_all(k_all.size());
    for (int i = 0; i < cnt; ++i) {
      std::copy_n(ring.k_of(pos0 - cnt + i), in.kvd, k_all.begin() + static_cast<size_t>(i) * in.kvd);
      std::copy_n(ring.v_of(pos0 - cnt + i), in.kvd, v_all.begin() + static_cast<size_t>(i) * in.kvd);
    }
    const float* rows = in.proj.data() + static_cast<size_t>(t0) * in.R;
    for (int t = 0; t < n; ++t) {
      std::copy_n(rows + static_cast<size_t>(t) * in.R + in.qd, in.kvd,
                  k_all.begin() + static_cast<size_t>(cnt + t) * in.kvd);
      std::copy_n(rows + static_cast<size_t>(t) * in.R + in.qd + in.kvd, in.kvd,
                  v_all.begin() + static_cast<size_t>(cnt + t) * in.kvd);
    }
    cpu::AttentionArgs a{.q = rows,
                         .ldq = in.R,
                         .k = k_all.data(),
                         .ldk = in.kvd,
                         .v = v_all.data(),
                         .ldv = in.kvd,
                         .out = out.data() + static_cast<size_t>(t0) * in.qd,
                         .ldo = in.qd,
                         .n_q = n,
                         .n_k = total,
                         .n_q_heads = c.n_q_heads,
                         .n_kv_heads = c.n_kv_heads,
                         .head_dim = c.head_dim,
                         .q_pos0 = pos0,
                         .k_pos0 = pos0 - cnt,
                         .window = c.window,
                         .scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim))};
    cpu::attention(a);
    for (int t = 0; t < n; ++t)
      ring.push(&k_all[static_cast<size_t>(cnt + t) * in.kvd], &v_all[static_cast<size_t>(cnt + t) * in.kvd]);
    t0 += n;
  }
  return out;
}

// The device ring starts as NaN: a read of a row that is not in the window poisons the output.
struct DeviceRing {
  DeviceBuf<float> k, v;
  DeviceRing(int W, int kv_dim)
      : k(std::vector<float>(static_cast<size_t>(W) * kv_dim, std::nanf(""))),
        v(std::vector<float>(static_cast<size_t>(W) * kv_dim, std::nanf(""))) {}
};

void gpu_swa_prefill(const SwaCase& c, const SwaInputs& in, const std::vector<int>& calls, int64_t pos_start,
                     const float* dproj, DeviceRing& ring, float* dout) {
  int t0 = 0;
  int64_t pos0 = pos_start;
  for (int n : calls) {
    cuda::SwaPrefillArgs a;
    a.q = dproj + static_cast<size_t>(t0) * in.R;
    a.ldq = in.R;
    a.k = a.q + in.qd;
    a.ldk = in.R;
    a.v = a.q + in.qd + in.kvd;
    a.ldv = in.R;
    a.k_ring = ring.k.get();
    a.v_ring = ring.v.get();
    a.out = dout + static_cast<size_t>(t0) * in.qd;
    a.ldo = in.qd;
    a.n = n;
    a.n_q_heads = c.n_q_heads;
    a.n_kv_heads = c.n_kv_heads;
    a.head_dim = c.head_dim;
    a.window = c.window;
    a.pos0 = pos0;
    a.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    ASSERT_OK(cuda::swa_prefill(a, nullptr));
    t0 += n;
    pos0 += n;
  }
  ASSERT_CUDA(cudaDeviceSynchronize());
}

// The rows of positions still in the window must be bitwise the CPU ring's (fp32 copies).
void expect_same_window(const HostRing& ref, const DeviceRing& ring) {
  const auto k = ring.k.host(), v = ring.v.host();
  for (int64_t p = std::max<int64_t>(0, ref.next - ref.W); p < ref.next; ++p) {
    const size_t off = static_cast<size_t>(p % ref.W) * ref.kv_dim;
    EXPECT_TRUE(std::equal(k.begin() + off, k.begin() + off + ref.kv_dim, ref.k.begin() + off)) << "k row of " << p;
    EXPECT_TRUE(std::equal(v.begin() + off, v.begin() + off + ref.kv_dim, ref.v.begin() + off)) << "v row of " << p;
  }
}

TEST(CudaPrefill, SwaPrefillMatchesCpu) {
  SKIP_WITHOUT_GPU();
  const SwaCase cases[] = {
      {2, 2, 64, 16, {5}},                 // n < window
      {2, 2, 64, 16, {100}},               // n > window
      {8, 2, 128, 100, {37, 1, 150, 64}},  // GQA 4, resumed calls of every kind
      {16, 1, 64, 64, {64, 64, 1}},        // GQA 16, calls aligned to the query tile
      {4, 1, 256, 200, {300}},             // head_dim 256
      {2, 2, 256, 50, {3, 60}},
      {3, 3, 40, 1000, {500, 700}},  // odd head_dim; first call inside the window
      {2, 1, 32, 1, {10}},           // window 1: each query sees only itself
      {4, 4, 128, 4096, {1500}},     // a long window, n < window
  };
  uint32_t seed = 2000;
  for (const SwaCase& c : cases) {
    SCOPED_TRACE("q_heads=" + std::to_string(c.n_q_heads) + " kv_heads=" + std::to_string(c.n_kv_heads) + " hd=" +
                 std::to_string(c.head_dim) + " window=" + std::to_string(c.window) + " calls=" + join(c.calls));
    const int n = std::accumulate(c.calls.begin(), c.calls.end(), 0);
    const SwaInputs in = make_swa_inputs(c, n, seed);
    seed += 10;
    HostRing host_ring(c.window, in.kvd);
    const auto ref = cpu_swa_prefill(c, in, c.calls, host_ring);
    DeviceBuf<float> dproj(in.proj), dout(ref.size());
    DeviceRing ring(c.window, in.kvd);
    gpu_swa_prefill(c, in, c.calls, 0, dproj.get(), ring, dout.get());
    const auto got = dout.host();
    EXPECT_TRUE(bf16_close(got, ref));
    expect_same_window(host_ring, ring);
  }
}

TEST(CudaPrefill, SwaPrefillResumedEqualsOneShot) {
  SKIP_WITHOUT_GPU();
  const SwaCase c{8, 2, 64, 100, {37, 1, 150}};
  const int n = 188;
  const SwaInputs in = make_swa_inputs(c, n, 2500);
  DeviceBuf<float> dproj(in.proj), split(static_cast<size_t>(n) * in.qd), whole(static_cast<size_t>(n) * in.qd);
  DeviceRing r1(c.window, in.kvd), r2(c.window, in.kvd);
  gpu_swa_prefill(c, in, c.calls, 0, dproj.get(), r1, split.get());
  gpu_swa_prefill(c, in, {n}, 0, dproj.get(), r2, whole.get());
  EXPECT_TRUE(bf16_close(split.host(), whole.host()));
  EXPECT_EQ(r1.k.host(), r2.k.host());  // both hold positions 88..187, each in slot p % W
  EXPECT_EQ(r1.v.host(), r2.v.host());
}

// Decode: sequence b's window is positions max(0, pos − W + 1) .. pos, the last one this step's row.
struct DecodeCase {
  int n_q_heads, n_kv_heads, head_dim, window;
  std::vector<int64_t> positions;
};

TEST(CudaPrefill, SwaDecodeMatchesCpu) {
  SKIP_WITHOUT_GPU();
  const DecodeCase cases[] = {
      {4, 4, 64, 16, {0, 1, 15, 16, 53}},
      {8, 2, 128, 100, {99, 100, 101, 7}},
      {16, 1, 256, 33, {500, 32}},
      {6, 2, 40, 7, {3, 50, 7}},
      {2, 2, 8, 1, {0, 9}},          // window 1: only the step's own row
      {4, 2, 64, 300, {299, 1000}},  // windows longer than one tile of keys
  };
  uint32_t seed = 3000;
  for (const DecodeCase& c : cases) {
    SCOPED_TRACE("q_heads=" + std::to_string(c.n_q_heads) + " kv_heads=" + std::to_string(c.n_kv_heads) +
                 " hd=" + std::to_string(c.head_dim) + " window=" + std::to_string(c.window));
    const int B = static_cast<int>(c.positions.size()), hd = c.head_dim, W = c.window;
    const int qd = c.n_q_heads * hd, kvd = c.n_kv_heads * hd;
    const int ldq = qd + 5, ldkv = kvd + 3;
    const auto q = random_vec(static_cast<size_t>(B) * ldq, seed++, -2.f, 2.f);
    const auto k = random_vec(static_cast<size_t>(B) * ldkv, seed++, -2.f, 2.f);
    const auto v = random_vec(static_cast<size_t>(B) * ldkv, seed++);
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    std::vector<float> ref(static_cast<size_t>(B) * qd);
    std::vector<std::vector<float>> ring_k(B), ring_v(B);
    std::vector<std::unique_ptr<DeviceBuf<float>>> dk_rings, dv_rings;
    std::vector<float*> kp, vp;
    for (int b = 0; b < B; ++b) {
      const int64_t pos = c.positions[b];
      // Rows outside the window stay NaN: reading one would poison the output.
      ring_k[b].assign(static_cast<size_t>(W) * kvd, std::nanf(""));
      ring_v[b] = ring_k[b];
      const int64_t lo = std::max<int64_t>(0, pos - W + 1);
      const auto hk = random_vec(static_cast<size_t>(W) * kvd, seed++, -2.f, 2.f);
      const auto hv = random_vec(static_cast<size_t>(W) * kvd, seed++);
      for (int64_t p = lo; p < pos; ++p) {
        const size_t off = static_cast<size_t>(p % W) * kvd;
        std::copy_n(hk.begin() + off, kvd, ring_k[b].begin() + off);
        std::copy_n(hv.begin() + off, kvd, ring_v[b].begin() + off);
      }
      // CPU: the window in age order, the step's row last (model/cpu_backend.cc's ring_push then decode_attention).
      const int cnt = static_cast<int>(pos - lo + 1);
      std::vector<float> kw(static_cast<size_t>(cnt) * kvd), vw(kw.size());
      for (int i = 0; i + 1 < cnt; ++i) {
        std::copy_n(ring_k[b].begin() + static_cast<size_t>((lo + i) % W) * kvd, kvd,
                    kw.begin() + static_cast<size_t>(i) * kvd);
        std::copy_n(ring_v[b].begin() + static_cast<size_t>((lo + i) % W) * kvd, kvd,
                    vw.begin() + static_cast<size_t>(i) * kvd);
      }
      std::copy_n(k.begin() + static_cast<size_t>(b) * ldkv, kvd, kw.begin() + static_cast<size_t>(cnt - 1) * kvd);
      std::copy_n(v.begin() + static_cast<size_t>(b) * ldkv, kvd, vw.begin() + static_cast<size_t>(cnt - 1) * kvd);
      const float* kb[1] = {kw.data()};
      const float* vb[1] = {vw.data()};
      cpu::KvBlocks kv{kb, vb, cnt, cnt};
      cpu::decode_attention(q.data() + static_cast<size_t>(b) * ldq, kv, ref.data() + static_cast<size_t>(b) * qd,
                            c.n_q_heads, c.n_kv_heads, hd, scale);
      dk_rings.push_back(std::make_unique<DeviceBuf<float>>(ring_k[b]));
      dv_rings.push_back(std::make_unique<DeviceBuf<float>>(ring_v[b]));
      kp.push_back(dk_rings.back()->get());
      vp.push_back(dv_rings.back()->get());
    }
    DeviceBuf<float> dq(q), dk(k), dv(v), dout(static_cast<size_t>(B) * qd);
    DeviceBuf<float*> dkp(kp), dvp(vp);
    DeviceBuf<int64_t> dpos(c.positions);
    cuda::SwaDecodeArgs a;
    a.q = dq.get();
    a.ldq = ldq;
    a.k = dk.get();
    a.ldk = ldkv;
    a.v = dv.get();
    a.ldv = ldkv;
    a.k_rings = dkp.get();
    a.v_rings = dvp.get();
    a.positions = dpos.get();
    a.out = dout.get();
    a.ldo = qd;
    a.batch = B;
    a.n_q_heads = c.n_q_heads;
    a.n_kv_heads = c.n_kv_heads;
    a.head_dim = hd;
    a.window = W;
    a.scale = scale;
    ASSERT_OK(cuda::swa_decode(a, nullptr));
    EXPECT_TRUE(all_close(dout.host(), ref, 1e-5f, 1e-4f));
    // The step's row went into ring row pos % W; every other row is untouched.
    for (int b = 0; b < B; ++b) {
      const int64_t pos = c.positions[b];
      std::vector<float> want_k = ring_k[b], want_v = ring_v[b];
      std::copy_n(k.begin() + static_cast<size_t>(b) * ldkv, kvd, want_k.begin() + static_cast<size_t>(pos % W) * kvd);
      std::copy_n(v.begin() + static_cast<size_t>(b) * ldkv, kvd, want_v.begin() + static_cast<size_t>(pos % W) * kvd);
      const auto got_k = dk_rings[b]->host(), got_v = dv_rings[b]->host();
      for (size_t i = 0; i < want_k.size(); ++i) {
        const bool same_k = got_k[i] == want_k[i] || (std::isnan(got_k[i]) && std::isnan(want_k[i]));
        const bool same_v = got_v[i] == want_v[i] || (std::isnan(got_v[i]) && std::isnan(want_v[i]));
        ASSERT_TRUE(same_k && same_v) << "sequence " << b << " ring element " << i;
      }
    }
  }
}

// Prefill writes the ring that decode reads: prefill + steps follows the CPU model's path.
TEST(CudaPrefill, SwaPrefillThenDecodeFollowsTheCpuModel) {
  SKIP_WITHOUT_GPU();
  const SwaCase c{4, 2, 64, 40, {70}};
  const int n_prefill = 70, n_steps = 45, n = n_prefill + n_steps;
  const SwaInputs in = make_swa_inputs(c, n, 4000);
  HostRing host_ring(c.window, in.kvd);
  const auto ref = cpu_swa_prefill(c, in, std::vector<int>(n, 1), host_ring);  // token by token
  DeviceBuf<float> dproj(in.proj), dout(ref.size());
  DeviceRing ring(c.window, in.kvd);
  gpu_swa_prefill(c, in, {n_prefill}, 0, dproj.get(), ring, dout.get());
  float* kr = ring.k.get();
  float* vr = ring.v.get();
  DeviceBuf<float*> dkp(std::vector<float*>{kr}), dvp(std::vector<float*>{vr});
  for (int t = n_prefill; t < n; ++t) {
    DeviceBuf<int64_t> dpos(std::vector<int64_t>{t});
    cuda::SwaDecodeArgs a;
    a.q = dproj.get() + static_cast<size_t>(t) * in.R;
    a.ldq = in.R;
    a.k = a.q + in.qd;
    a.ldk = in.R;
    a.v = a.q + in.qd + in.kvd;
    a.ldv = in.R;
    a.k_rings = dkp.get();
    a.v_rings = dvp.get();
    a.positions = dpos.get();
    a.out = dout.get() + static_cast<size_t>(t) * in.qd;
    a.ldo = in.qd;
    a.batch = 1;
    a.n_q_heads = c.n_q_heads;
    a.n_kv_heads = c.n_kv_heads;
    a.head_dim = c.head_dim;
    a.window = c.window;
    a.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    ASSERT_OK(cuda::swa_decode(a, nullptr));
    ASSERT_CUDA(cudaDeviceSynchronize());
  }
  const auto got = dout.host();
  const size_t split = static_cast<size_t>(n_prefill) * in.qd;
  EXPECT_TRUE(bf16_close(std::vector<float>(got.begin(), got.begin() + split),
                         std::vector<float>(ref.begin(), ref.begin() + split)));
  EXPECT_TRUE(all_close(std::vector<float>(got.begin() + split, got.end()),
                        std::vector<float>(ref.begin() + split, ref.end()), 1e-5f, 1e-4f));
  expect_same_window(host_ring, ring);
}

TEST(CudaPrefill, SwaRejectsBadArguments) {
  SKIP_WITHOUT_GPU();
  cuda::SwaPrefillArgs p;
  p.n = 3;
  p.n_q_heads = 6;
  p.n_kv_heads = 4;  // not a divisor
  p.head_dim = 64;
  p.window = 8;
  EXPECT_EQ(cuda::swa_prefill(p, nullptr).code(), cuda::StatusCode::kInvalidArgument);
  p.n_kv_heads = 2;
  p.window = 0;
  EXPECT_EQ(cuda::swa_prefill(p, nullptr).code(), cuda::StatusCode::kInvalidArgument);
  cuda::SwaDecodeArgs d;
  d.batch = 1;
  d.n_q_heads = 32;
  d.n_kv_heads = 1;  // group 32 > 16
  d.head_dim = 64;
  d.window = 8;
  EXPECT_EQ(cuda::swa_decode(d, nullptr).code(), cuda::StatusCode::kInvalidArgument);
}

// --- sampling ----------------------------------------------------------------------------------------
// Random logits with ties and masked (−inf) entries, as penalties and grammars produce.
std::vector<float> random_logits(int batch, int vocab, uint32_t seed, float spread) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, spread);
  std::vector<float> x(static_cast<size_t>(batch) * vocab);
  for (auto& v : x) v = d(rng);
  for (int b = 0; b < batch; ++b) {
    float* r = x.data() + static_cast<size_t>(b) * vocab;
    for (int i = 0; i + 7 < vocab; i += 97) r[i + 7] = r[i];  // exact ties
    for (int i = 3; i < vocab; i += 131) r[i] = -std::numeric_limits<float>::infinity();
  }
  return x;
}

// The tokens model/sampler.cc may return for these logits and parameters: the kept prefix.
std::vector<int32_t> allowed_tokens(const float* logits, int vocab, const cuda::SamplingRow& p) {
  std::vector<int32_t> idx(vocab);
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(),
            [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  if (p.temperature == 0.f) return {idx[0]};
  int n = (p.top_k > 0 && p.top_k < vocab) ? p.top_k : vocab;
  std::vector<double> prob(n);
  double sum = 0;
  for (int i = 0; i < n; ++i)
    sum += prob[i] = std::exp((logits[idx[i]] - static_cast<double>(logits[idx[0]])) / p.temperature);
  for (auto& x : prob) x /= sum;
  if (p.top_p < 1.f) {
    double cum = 0;
    for (int i = 0; i < n; ++i)
      if ((cum += prob[i]) >= p.top_p) {
        n = i + 1;
        break;
      }
  }
  if (p.min_p > 0.f) {
    int keep = 1;
    while (keep < n && prob[keep] >= p.min_p * prob[0]) ++keep;
    n = keep;
  }
  return std::vector<int32_t>(idx.begin(), idx.begin() + n);
}

TEST(CudaSampling, GreedyIsArgmaxWithLowestIndexOnTies) {
  SKIP_WITHOUT_GPU();
  for (const int vocab : {1, 7, 1000, 50257}) {
    SCOPED_TRACE("vocab=" + std::to_string(vocab));
    const int B = 5;
    auto logits = random_logits(B, vocab, 5000 + vocab, 3.f);
    for (int b = 0; b < B && vocab > 2; ++b) {  // the maximum twice: the lower index wins
      float* r = logits.data() + static_cast<size_t>(b) * vocab;
      const float mx = *std::max_element(r, r + vocab) + 1.f;
      r[vocab - 1] = mx;
      r[(b * 7) % (vocab - 1)] = mx;
    }
    std::vector<int32_t> want(B);
    for (int b = 0; b < B; ++b) {
      const float* r = logits.data() + static_cast<size_t>(b) * vocab;
      want[b] = static_cast<int32_t>(std::max_element(r, r + vocab) - r);
    }
    DeviceBuf<float> dl(logits);
    DeviceBuf<int32_t> dt(B);
    ASSERT_OK(cuda::sample_greedy(dl.get(), vocab, B, vocab, dt.get(), nullptr));
    EXPECT_EQ(dt.host(), want);
    // The same through sample_tokens with temperature 0 (no draw: the states stay).
    std::vector<cuda::SamplingRow> params(B);
    for (auto& p : params) p.temperature = 0.f;
    DeviceBuf<cuda::SamplingRow> dp(params);
    const std::vector<uint64_t> states(static_cast<size_t>(B) * 4, 42);
    DeviceBuf<uint64_t> ds(states);
    DeviceBuf<int32_t> dt2(B);
    cuda::SampleArgs a;
    a.logits = dl.get();
    a.ld = vocab;
    a.batch = B;
    a.vocab = vocab;
    a.params = dp.get();
    a.rng_states = ds.get();
    a.tokens = dt2.get();
    ASSERT_OK(cuda::sample_tokens(a, nullptr));
    EXPECT_EQ(dt2.host(), want);
    EXPECT_EQ(ds.host(), states);
  }
}

struct RowConfig {
  cuda::SamplingRow p;
  uint64_t seed;
};

const RowConfig kRows[] = {
    {{1.0f, 0, 1.0f, 0.0f}, 1},      // plain temperature sampling over the whole vocabulary
    {{0.7f, 50, 1.0f, 0.0f}, 2},     // top-k
    {{1.3f, 0, 0.9f, 0.0f}, 3},      // top-p
    {{1.0f, 0, 1.0f, 0.05f}, 4},     // min-p
    {{0.8f, 40, 0.95f, 0.02f}, 5},   // all three
    {{2.0f, 1, 1.0f, 0.0f}, 6},      // top-k 1: the argmax
    {{1.0f, 0, 1e-4f, 0.0f}, 7},     // a tiny top-p: the argmax
    {{0.5f, 5000, 0.5f, 0.1f}, 8},   // top_k = vocab (off)
    {{1.0f, 10000, 1.0f, 0.0f}, 9},  // top_k > vocab (off)
    {{1e-3f, 0, 1.0f, 0.0f}, 10},    // nearly greedy
    {{0.0f, 0, 0.9f, 0.1f}, 11},     // greedy among stochastic rows
    {{1.5f, 0, 0.999f, 0.0f}, 12},   // top-p that walks far down the list
    {{3.0f, 200, 0.8f, 0.001f}, 13},
};

TEST(CudaSampling, MatchesCpuSamplerAndStaysInTheAllowedSet) {
  SKIP_WITHOUT_GPU();
  const int vocab = 5000, B = static_cast<int>(std::size(kRows)), steps = 4;
  std::vector<cuda::SamplingRow> params;
  std::vector<uint64_t> seeds;
  std::vector<Sampler> cpu;
  for (const RowConfig& r : kRows) {
    params.push_back(r.p);
    seeds.push_back(r.seed);
    SamplingParams sp;
    sp.temperature = r.p.temperature;
    sp.top_k = r.p.top_k;
    sp.top_p = r.p.top_p;
    sp.min_p = r.p.min_p;
    sp.seed = r.seed;
    ASSERT_OK(sp.validate());
    cpu.emplace_back(sp, vocab, std::span<const int32_t>());
  }
  DeviceBuf<cuda::SamplingRow> dp(params);
  DeviceBuf<uint64_t> dseeds(seeds), ds(static_cast<size_t>(B) * 4);
  ASSERT_OK(cuda::sampling_rng_init(dseeds.get(), nullptr, ds.get(), B, nullptr));
  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    // Spread 3 makes the distributions peaked enough for top-p to cut, flat enough to draw far.
    const auto logits = random_logits(B, vocab, 6000 + step, step % 2 ? 1.f : 3.f);
    const int64_t ld = vocab + 3;  // strided rows
    std::vector<float> strided(static_cast<size_t>(B) * ld, 0.f);
    for (int b = 0; b < B; ++b)
      std::copy_n(logits.begin() + static_cast<size_t>(b) * vocab, vocab,
                  strided.begin() + static_cast<size_t>(b) * ld);
    DeviceBuf<float> dl(strided);
    DeviceBuf<int32_t> dt(B);
    const auto states_before = ds.host();
    cuda::SampleArgs a;
    a.logits = dl.get();
    a.ld = ld;
    a.batch = B;
    a.vocab = vocab;
    a.params = dp.get();
    a.rng_states = ds.get();
    a.tokens = dt.get();
    ASSERT_OK(cuda::sample_tokens(a, nullptr));
    const auto got = dt.host();
    for (int b = 0; b < B; ++b) {
      std::vector<float> row(logits.begin() + static_cast<size_t>(b) * vocab,
                             logits.begin() + static_cast<size_t>(b + 1) * vocab);
      const auto allowed = allowed_tokens(row.data(), vocab, params[b]);
      EXPECT_NE(std::find(allowed.begin(), allowed.end(), got[b]), allowed.end())
          << "row " << b << ": token " << got[b] << " is outside the " << allowed.size() << " allowed";
      EXPECT_EQ(got[b], cpu[b].sample(row.data())) << "row " << b;
    }
    // Reproducible: the same states and logits give the same tokens and the same new states.
    const auto states_after = ds.host();
    DeviceBuf<uint64_t> ds2(states_before);
    DeviceBuf<int32_t> dt2(B);
    a.rng_states = ds2.get();
    a.tokens = dt2.get();
    ASSERT_OK(cuda::sample_tokens(a, nullptr));
    EXPECT_EQ(dt2.host(), got);
    EXPECT_EQ(ds2.host(), states_after);
  }
}

TEST(CudaSampling, RngInitSkipsDrawsLikeReplay) {
  SKIP_WITHOUT_GPU();
  const int vocab = 300;
  const std::vector<uint64_t> seeds = {7, 7, 7, 123456789};
  const std::vector<int64_t> draws = {0, 1, 5, 3};
  const int B = static_cast<int>(seeds.size());
  const auto logits = random_logits(B, vocab, 7000, 1.f);
  std::vector<cuda::SamplingRow> params(B);
  std::vector<int32_t> want(B);
  for (int b = 0; b < B; ++b) {
    SamplingParams sp;
    sp.seed = seeds[b];
    Sampler s(sp, vocab, {});
    s.replay(std::vector<int32_t>(static_cast<size_t>(draws[b]), 0));
    std::vector<float> row(logits.begin() + static_cast<size_t>(b) * vocab,
                           logits.begin() + static_cast<size_t>(b + 1) * vocab);
    want[b] = s.sample(row.data());
  }
  DeviceBuf<uint64_t> dseeds(seeds), ds(static_cast<size_t>(B) * 4);
  DeviceBuf<int64_t> ddraws(draws);
  ASSERT_OK(cuda::sampling_rng_init(dseeds.get(), ddraws.get(), ds.get(), B, nullptr));
  DeviceBuf<float> dl(logits);
  DeviceBuf<cuda::SamplingRow> dp(params);
  DeviceBuf<int32_t> dt(B);
  cuda::SampleArgs a;
  a.logits = dl.get();
  a.ld = vocab;
  a.batch = B;
  a.vocab = vocab;
  a.params = dp.get();
  a.rng_states = ds.get();
  a.tokens = dt.get();
  ASSERT_OK(cuda::sample_tokens(a, nullptr));
  EXPECT_EQ(dt.host(), want);
}

// Frequencies over many rows (one seed each) match the kept distribution.
TEST(CudaSampling, FrequenciesMatchTheDistribution) {
  SKIP_WITHOUT_GPU();
  const int vocab = 4, B = 4096, steps = 5;
  const double p[vocab] = {0.1, 0.2, 0.3, 0.4};
  std::vector<float> logits(static_cast<size_t>(B) * vocab);
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < vocab; ++i) logits[static_cast<size_t>(b) * vocab + i] = static_cast<float>(std::log(p[i]));
  for (const float top_p : {1.0f, 0.6f}) {
    SCOPED_TRACE("top_p=" + std::to_string(top_p));
    // top_p 0.6 keeps tokens 3 and 2 (0.4 + 0.3 ≥ 0.6), renormalized.
    const double want[vocab] = {top_p < 1 ? 0.0 : 0.1, top_p < 1 ? 0.0 : 0.2, top_p < 1 ? 0.3 / 0.7 : 0.3,
                                top_p < 1 ? 0.4 / 0.7 : 0.4};
    std::vector<cuda::SamplingRow> params(B);
    for (auto& r : params) r.top_p = top_p;
    std::vector<uint64_t> seeds(B);
    std::iota(seeds.begin(), seeds.end(), uint64_t{1000});
    DeviceBuf<float> dl(logits);
    DeviceBuf<cuda::SamplingRow> dp(params);
    DeviceBuf<uint64_t> dseeds(seeds), ds(static_cast<size_t>(B) * 4);
    ASSERT_OK(cuda::sampling_rng_init(dseeds.get(), nullptr, ds.get(), B, nullptr));
    DeviceBuf<int32_t> dt(B);
    std::vector<int> count(vocab, 0);
    for (int step = 0; step < steps; ++step) {
      cuda::SampleArgs a;
      a.logits = dl.get();
      a.ld = vocab;
      a.batch = B;
      a.vocab = vocab;
      a.params = dp.get();
      a.rng_states = ds.get();
      a.tokens = dt.get();
      ASSERT_OK(cuda::sample_tokens(a, nullptr));
      for (int32_t t : dt.host()) {
        ASSERT_GE(t, 0);
        ASSERT_LT(t, vocab);
        ++count[t];
      }
    }
    const double n = static_cast<double>(B) * steps;
    for (int i = 0; i < vocab; ++i) {
      const double sigma = std::sqrt(n * want[i] * (1 - want[i]));
      EXPECT_LE(std::fabs(count[i] - n * want[i]), 5 * sigma + 1e-9)
          << "token " << i << ": " << count[i] << " of " << n;
    }
  }
}

TEST(CudaSampling, RejectsBadArguments) {
  SKIP_WITHOUT_GPU();
  cuda::SampleArgs a;
  a.batch = 2;
  a.vocab = 10;
  a.ld = 5;  // < vocab
  EXPECT_EQ(cuda::sample_tokens(a, nullptr).code(), cuda::StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda::sample_greedy(nullptr, 10, 2, 10, nullptr, nullptr).code(), cuda::StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda::sampling_rng_init(nullptr, nullptr, nullptr, 3, nullptr).code(), cuda::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace yoco
