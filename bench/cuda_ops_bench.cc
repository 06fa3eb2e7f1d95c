// The CUDA ops on the device against the device's own measured ceilings (bench/README.md, the
// GPU section; bench/gpu/device_check.sh runs it on a lent GPU):
//
//   build/bench/cuda_ops_bench [--preset yoco-3b]
//                              [--sections copy,gemm,decode,retention,swa,causal,sample]
//                              [--max-gib 40] [--reps 20]
//
// copy:      device-to-device cudaMemcpyAsync of 2 GiB; bandwidth counts bytes read + written.
// gemm:      gemm_bf16 (cuBLASLt, fp32 accumulate) at 8192³ and at the preset's prefill shapes
//            (4096 tokens × the fused projections), TFLOP/s = 2·m·n·k / t.
// decode:    decode_attention_paged over the preset's cross-decoder heads, batch 1..64 ×
//            context 4K..128K (pairs over --max-gib of K+V skipped); achieved bandwidth = K+V
//            bytes read / t, against the copy figure (issue 6 goal: ≥ 85%).
// retention: retention_prefill, the preset's self heads, n = 4K..256K; FLOPs counted per head
//            per token as the chunkwise form does them: 4·C·hd (q·kᵀ and P·v inside the chunk)
//            + 4·hd² (q·S and kᵀ·v against the state), C = 64.
// swa:       swa_prefill with window 512 over the preset's self heads (n_kv = n_q), n = 4K..64K;
//            FLOPs 4·hd per (query, key) pair inside the window.
// causal:    causal_attention_prefill (the Transformer baseline's prefill attention) over the
//            preset's attention heads (n_attn_heads / n_attn_kv_heads, hd_c), paged fp32 pool of
//            block 64: one call of n = 4K..256K queries from position 0, and the last 4K-query
//            chunk at context 4K..256K (pos0 = ctx − 4K, what chunked prefill runs at that depth);
//            FLOPs = 4·hd·heads·Σ keys seen (causal: query at p sees p + 1 keys), i.e.
//            4·n·ctx_avg·hd·heads.
// sample:    sample_greedy and sample_tokens (top-p 0.9, T 0.8) at batch 1..64 × the vocabulary.
// moe:       (only when asked, with an MoE preset, e.g. --preset yoco-u-moe --sections copy,moe) one
//            layer's routed experts (moe_permute, the two moe_grouped_gemm launches, the SwiGLU and
//            moe_combine) at decode batch 1..32 and prefill chunks of 512..4096 tokens with random
//            routing: bytes = the weights of the distinct experts chosen (read once) against the
//            copy figure; TFLOP/s = 2 · rows · k · 3 · expert_hidden · dim / t.
// retention and swa also print one JSON line per shape ({"op":..., "impl":"yoco", "n":..., "ms":...,
// "tflops":...}) that bench/gpu/compare_fla.py joins with bench/gpu/fla_compare.py's lines.
// Every input is random (never zeros); every op's status and the stream are checked; times are
// CUDA-event medians over --reps runs after 3 warm-ups.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "handoff/kv_rows.h"
#include "kernels/cuda/ops.h"
#include "model/random_model.h"

using namespace yoco;

namespace {

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "cuda_ops_bench: %s\n", what.c_str());
  std::exit(1);
}
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) die(std::string(what) + ": " + cudaGetErrorString(e));
}
void check(const cuda::Status& st, const char* what) {
  if (!st.ok()) die(std::string(what) + ": " + st.to_string());
}

// Device memory filled with uniform random values in [lo, hi) (a seeded host generator, copied
// over in pieces so no big host buffer is needed).
struct Buf {
  void* p = nullptr;
  size_t bytes = 0;
  explicit Buf(size_t b) : bytes(b) { check(cudaMalloc(&p, std::max<size_t>(b, 16)), "cudaMalloc"); }
  ~Buf() { cudaFree(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  float* f() const { return static_cast<float*>(p); }
  uint16_t* h() const { return static_cast<uint16_t*>(p); }
};

uint64_t g_seed = 0x9e3779b97f4a7c15ull;
uint32_t next_u32() {
  g_seed ^= g_seed << 13;
  g_seed ^= g_seed >> 7;
  g_seed ^= g_seed << 17;
  return static_cast<uint32_t>(g_seed >> 11);
}
void fill_f32(const Buf& b, float lo, float hi) {
  const size_t n = b.bytes / 4, piece = size_t{1} << 22;
  std::vector<float> h(std::min(n, piece));
  for (size_t off = 0; off < n; off += piece) {
    const size_t m = std::min(piece, n - off);
    for (size_t i = 0; i < m; ++i) h[i] = lo + (hi - lo) * static_cast<float>(next_u32() >> 8) / 16777216.0f;
    check(cudaMemcpy(b.f() + off, h.data(), m * 4, cudaMemcpyHostToDevice), "fill");
  }
}
void fill_bf16(const Buf& b, float lo, float hi) {
  const size_t n = b.bytes / 2, piece = size_t{1} << 22;
  std::vector<uint16_t> h(std::min(n, piece));
  for (size_t off = 0; off < n; off += piece) {
    const size_t m = std::min(piece, n - off);
    for (size_t i = 0; i < m; ++i) {
      const float f = lo + (hi - lo) * static_cast<float>(next_u32() >> 8) / 16777216.0f;
      h[i] = f32_to_bf16(f);
    }
    check(cudaMemcpy(b.h() + off, h.data(), m * 2, cudaMemcpyHostToDevice), "fill");
  }
}

cudaStream_t g_stream;

// Median milliseconds of `reps` runs of fn (each bracketed by events) after 3 warm-ups.
double time_ms(int reps, const std::function<void()>& fn) {
  for (int i = 0; i < 3; ++i) fn();
  check(cudaStreamSynchronize(g_stream), "warm-up");
  std::vector<cudaEvent_t> ev(2 * reps);
  for (auto& e : ev) check(cudaEventCreate(&e), "cudaEventCreate");
  for (int i = 0; i < reps; ++i) {
    check(cudaEventRecord(ev[2 * i], g_stream), "record");
    fn();
    check(cudaEventRecord(ev[2 * i + 1], g_stream), "record");
  }
  check(cudaStreamSynchronize(g_stream), "run");
  check(cudaGetLastError(), "launch");
  std::vector<double> t(reps);
  for (int i = 0; i < reps; ++i) {
    float ms = 0;
    check(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]), "elapsed");
    t[i] = ms;
  }
  for (auto& e : ev) cudaEventDestroy(e);
  std::sort(t.begin(), t.end());
  return t[reps / 2];
}

std::string human(int64_t n) {
  if (n % 1024 == 0 && n >= 1024) return std::to_string(n / 1024) + "K";
  return std::to_string(n);
}

}  // namespace

int main(int argc, char** argv) {
  std::string preset = "yoco-3b", sections = "copy,gemm,decode,retention,swa,causal,sample";
  double max_gib = 40;
  int reps = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--preset") preset = v;
    else if (a == "--sections") sections = v;
    else if (a == "--max-gib") max_gib = std::atof(v.c_str());
    else if (a == "--reps") reps = std::max(1, std::atoi(v.c_str()));
    else die("unknown flag " + a);
  }
  std::set<std::string> want;
  {
    std::stringstream ss(sections);
    for (std::string s; std::getline(ss, s, ',');) want.insert(s);
  }
  if (cuda::device_count() == 0) die("no CUDA device");
  auto cfg_r = find_preset(preset);
  if (!cfg_r.ok()) die(cfg_r.status().to_string());
  const ModelConfig c = *cfg_r;
  cudaDeviceProp prop;
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  check(cudaStreamCreate(&g_stream), "cudaStreamCreate");
  std::printf("device: %s, %d SMs, %.0f GiB; preset %s (dim %d, self heads %d, attn heads %d/%d kv, vocab %d)\n",
              prop.name, prop.multiProcessorCount, prop.totalGlobalMem / 1073741824.0, preset.c_str(), c.dim,
              c.n_self_heads, c.n_attn_heads, c.n_attn_kv_heads, c.vocab_size);
  double copy_gbs = 0;

  if (want.count("copy")) {
    const size_t bytes = size_t{2} << 30;
    Buf a(bytes), b(bytes);
    fill_f32(a, -1, 1);
    const double ms =
        time_ms(reps, [&] { check(cudaMemcpyAsync(b.p, a.p, bytes, cudaMemcpyDeviceToDevice, g_stream), "copy"); });
    copy_gbs = 2.0 * bytes / (ms * 1e-3) / 1e9;
    std::printf("copy  2 GiB d2d: %.3f ms, %.0f GB/s (read + write)\n", ms, copy_gbs);
  }

  if (want.count("gemm")) {
    struct Shape {
      const char* name;
      int m, n, k;
    };
    const int T = 4096;
    const std::vector<Shape> shapes = {{"square 8192", 8192, 8192, 8192},
                                       {"self q|k|v|g", T, c.self_qkv_rows(), c.dim},
                                       {"ffn fc1|gate", T, 2 * c.hidden_dim, c.dim},
                                       {"ffn fc2", T, c.dim, c.hidden_dim},
                                       {"out_proj", T, c.dim, c.dim}};
    for (const auto& s : shapes) {
      Buf a(size_t{2} * s.m * s.k), b(size_t{2} * s.n * s.k), out(size_t{4} * s.m * s.n);
      fill_bf16(a, -1, 1);
      fill_bf16(b, -0.05f, 0.05f);
      const double ms = time_ms(reps, [&] {
        check(cuda::gemm_bf16(a.h(), b.h(), out.p, cuda::DType::kF32, s.m, s.n, s.k, 1.f, 0.f, g_stream), "gemm_bf16");
      });
      std::printf("gemm  %-13s m=%d n=%d k=%d: %.3f ms, %.0f TFLOP/s\n", s.name, s.m, s.n, s.k, ms,
                  2.0 * s.m * s.n * s.k / (ms * 1e-3) / 1e12);
    }
  }

  if (want.count("decode")) {
    const int hd = c.cross_head_dim(), kvd = c.kv_dim(), block = 256;
    std::printf("decode attention (fp32 pool, block %d, kv_dim %d, GQA %d):\n", block, kvd,
                c.n_attn_heads / c.n_attn_kv_heads);
    std::printf("  %5s %7s %10s %10s %9s\n", "batch", "context", "ms", "GB/s", "of copy");
    for (int batch : {1, 8, 32, 64}) {
      for (int64_t ctx : {4096, 16384, 65536, 131072}) {
        const double kv_bytes = 2.0 * batch * ctx * kvd * 4;
        if (kv_bytes > max_gib * 1073741824.0) continue;
        const int blocks_per = static_cast<int>((ctx + block - 1) / block);
        const int64_t n_blocks = static_cast<int64_t>(batch) * blocks_per;
        Buf k(static_cast<size_t>(n_blocks) * block * kvd * 4), v(static_cast<size_t>(n_blocks) * block * kvd * 4);
        Buf q(size_t{4} * batch * c.dim), out(size_t{4} * batch * c.dim);
        fill_f32(k, -1, 1);
        fill_f32(v, -1, 1);
        fill_f32(q, -1, 1);
        std::vector<int32_t> table(static_cast<size_t>(n_blocks)), lens(batch, static_cast<int32_t>(ctx));
        for (int64_t i = 0; i < n_blocks; ++i) table[i] = static_cast<int32_t>(i);
        Buf dt(table.size() * 4), dl(lens.size() * 4);
        check(cudaMemcpy(dt.p, table.data(), table.size() * 4, cudaMemcpyHostToDevice), "table");
        check(cudaMemcpy(dl.p, lens.data(), lens.size() * 4, cudaMemcpyHostToDevice), "lengths");
        cuda::PagedDecodeArgs a;
        a.q = q.f();
        a.ldq = c.dim;
        a.out = out.f();
        a.ldo = c.dim;
        a.k_pool = k.f();
        a.v_pool = v.f();
        a.block_tables = static_cast<const int32_t*>(dt.p);
        a.max_blocks = blocks_per;
        a.lengths = static_cast<const int32_t*>(dl.p);
        a.max_length = ctx;
        a.batch = batch;
        a.n_q_heads = c.n_attn_heads;
        a.n_kv_heads = c.n_attn_kv_heads;
        a.head_dim = hd;
        a.block_size = block;
        a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
        const double ms =
            time_ms(reps, [&] { check(cuda::decode_attention_paged(a, g_stream), "decode_attention_paged"); });
        const double gbs = kv_bytes / (ms * 1e-3) / 1e9;
        std::printf("  %5d %7s %10.3f %10.0f %8.0f%%\n", batch, human(ctx).c_str(), ms, gbs,
                    copy_gbs > 0 ? 100.0 * gbs / copy_gbs : 0.0);
      }
    }
  }

  if (want.count("retention") && !c.is_swa()) {
    const int H = c.n_self_heads, hd = c.self_head_dim(), C = 64, W = H * hd;
    std::printf("retention prefill (heads %d, hd %d, chunk %d), FLOPs/token = heads·(4·C·hd + 4·hd²):\n", H, hd, C);
    for (int64_t n : {4096, 16384, 65536, 262144}) {
      const double bytes = 4.0 * n * W * 4;
      if (bytes > max_gib * 1073741824.0) continue;
      Buf q(size_t{4} * n * W), k(size_t{4} * n * W), v(size_t{4} * n * W), out(size_t{4} * n * W),
          gt(size_t{4} * n * H), state(size_t{4} * H * hd * hd);
      fill_f32(q, -1, 1);
      fill_f32(k, -1, 1);
      fill_f32(v, -1, 1);
      fill_f32(gt, -2, 6);
      fill_f32(state, -0.1f, 0.1f);
      cuda::RetentionPrefillArgs a;
      a.q = q.f();
      a.ldq = W;
      a.k = k.f();
      a.ldk = W;
      a.v = v.f();
      a.ldv = W;
      a.gt = gt.f();
      a.ldg = H;
      a.state = state.f();
      a.out = out.f();
      a.ldo = W;
      a.n = static_cast<int>(n);
      a.n_heads = H;
      a.head_dim = hd;
      a.chunk = C;
      a.k_scale = 1.0f / std::sqrt(static_cast<float>(hd));
      a.gate_logit_normalizer = static_cast<float>(c.gate_logit_normalizer);
      const double ms =
          time_ms(std::min(reps, 10), [&] { check(cuda::retention_prefill(a, g_stream), "retention_prefill"); });
      const double flops = static_cast<double>(n) * H * (4.0 * C * hd + 4.0 * hd * hd);
      std::printf("  n=%-6s %10.3f ms %8.1f TFLOP/s %10.1f Mtok/s\n", human(n).c_str(), ms, flops / (ms * 1e-3) / 1e12,
                  n / (ms * 1e-3) / 1e6);
      std::printf(
          "{\"op\":\"retention_prefill\",\"impl\":\"yoco\",\"dtype\":\"f32 io, bf16 mma\",\"batch\":1,"
          "\"n\":%lld,\"heads\":%d,\"head_dim\":%d,\"chunk\":%d,\"ms\":%.4f,\"tflops\":%.3f}\n",
          static_cast<long long>(n), H, hd, C, ms, flops / (ms * 1e-3) / 1e12);
    }
  }

  if (want.count("swa")) {
    const int H = c.n_self_heads, hd = c.self_head_dim(), W = H * hd, window = c.is_swa() ? c.sliding_window : 512;
    std::printf("swa prefill (heads %d, hd %d, window %d), FLOPs = 4·hd·heads·Σ keys seen:\n", H, hd, window);
    for (int64_t n : {4096, 16384, 65536}) {
      Buf q(size_t{4} * n * W), k(size_t{4} * n * W), v(size_t{4} * n * W), out(size_t{4} * n * W),
          kr(size_t{4} * window * W), vr(size_t{4} * window * W);
      fill_f32(q, -1, 1);
      fill_f32(k, -1, 1);
      fill_f32(v, -1, 1);
      cuda::SwaPrefillArgs a;
      a.q = q.f();
      a.ldq = W;
      a.k = k.f();
      a.ldk = W;
      a.v = v.f();
      a.ldv = W;
      a.k_ring = kr.f();
      a.v_ring = vr.f();
      a.out = out.f();
      a.ldo = W;
      a.n = static_cast<int>(n);
      a.n_q_heads = H;
      a.n_kv_heads = H;
      a.head_dim = hd;
      a.window = window;
      a.pos0 = 0;
      a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
      const double ms = time_ms(std::min(reps, 10), [&] { check(cuda::swa_prefill(a, g_stream), "swa_prefill"); });
      double pairs = 0;
      for (int64_t i = 0; i < n; ++i) pairs += static_cast<double>(std::min<int64_t>(i + 1, window));
      std::printf("  n=%-6s %10.3f ms %8.1f TFLOP/s\n", human(n).c_str(), ms,
                  4.0 * hd * H * pairs / (ms * 1e-3) / 1e12);
      std::printf(
          "{\"op\":\"swa_prefill\",\"impl\":\"yoco\",\"dtype\":\"f32 io, bf16 mma\",\"batch\":1,\"n\":%lld,"
          "\"heads\":%d,\"kv_heads\":%d,\"head_dim\":%d,\"window\":%d,\"ms\":%.4f,\"tflops\":%.3f}\n",
          static_cast<long long>(n), H, H, hd, window, ms, 4.0 * hd * H * pairs / (ms * 1e-3) / 1e12);
    }
  }

  if (want.count("causal")) {
    const int Hq = c.n_attn_heads, Hkv = c.n_attn_kv_heads, hd = c.cross_head_dim(), qd = Hq * hd, kvd = Hkv * hd;
    const int block = 64;
    std::printf("causal prefill attention (heads %d/%d kv, hd %d, fp32 pool block %d), FLOPs = 4*hd*heads*sum keys:\n",
                Hq, Hkv, hd, block);
    std::printf("  %-22s %10s %10s\n", "queries @ pos0", "ms", "TFLOP/s");
    const int64_t chunk = 4096;
    for (int64_t ctx : {4096, 16384, 65536, 262144}) {
      for (int64_t n : {ctx, chunk}) {
        if (n == chunk && ctx == chunk) continue;  // the same call as the one-shot row
        const int64_t pos0 = ctx - n;
        const double bytes = 2.0 * ctx * kvd * 4 + 2.0 * n * qd * 4;
        if (bytes > max_gib * 1073741824.0) {
          std::printf("  n=%s @ %s: skipped (%.1f GiB > --max-gib)\n", human(n).c_str(), human(pos0).c_str(),
                      bytes / 1073741824.0);
          continue;
        }
        const int blocks = static_cast<int>((ctx + block - 1) / block);
        Buf q(size_t{4} * n * qd), out(size_t{4} * n * qd), k(size_t{4} * blocks * block * kvd),
            v(size_t{4} * blocks * block * kvd), table(size_t{4} * blocks);
        fill_f32(q, -1, 1);
        fill_f32(k, -1, 1);
        fill_f32(v, -1, 1);
        std::vector<int32_t> ids(blocks);
        for (int i = 0; i < blocks; ++i) ids[i] = i;
        check(cudaMemcpy(table.p, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice), "table");
        cuda::CausalPrefillArgs a;
        a.q = q.f();
        a.ldq = qd;
        a.out = out.f();
        a.ldo = qd;
        a.k_pool = k.f();
        a.v_pool = v.f();
        a.block_table = static_cast<const int32_t*>(table.p);
        a.max_blocks = blocks;
        a.block_size = block;
        a.n = static_cast<int>(n);
        a.pos0 = pos0;
        a.n_q_heads = Hq;
        a.n_kv_heads = Hkv;
        a.head_dim = hd;
        a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
        const double ms = time_ms(std::min(reps, 10), [&] {
          check(cuda::causal_attention_prefill(a, g_stream), "causal_attention_prefill");
        });
        // Σ over queries of (p + 1) keys, p = pos0 .. pos0 + n − 1.
        const double keys = static_cast<double>(n) * static_cast<double>(pos0) + 0.5 * n * (n + 1.0);
        const std::string shape = "n=" + human(n) + " @ " + human(pos0);
        std::printf("  %-22s %10.3f %10.1f\n", shape.c_str(), ms, 4.0 * hd * Hq * keys / (ms * 1e-3) / 1e12);
      }
    }
  }

  if (want.count("sample")) {
    const int V = c.vocab_size;
    std::printf("sampling (vocab %d):\n", V);
    for (int batch : {1, 8, 64}) {
      Buf logits(size_t{4} * batch * V), tokens(size_t{4} * batch), params(sizeof(cuda::SamplingRow) * batch),
          seeds(size_t{8} * batch), states(size_t{32} * batch);
      fill_f32(logits, -10, 10);
      std::vector<cuda::SamplingRow> rows(batch);
      for (auto& r : rows) {
        r.temperature = 0.8f;
        r.top_p = 0.9f;
      }
      std::vector<uint64_t> hs(batch);
      for (int i = 0; i < batch; ++i) hs[i] = 1000 + i;
      check(cudaMemcpy(params.p, rows.data(), rows.size() * sizeof(rows[0]), cudaMemcpyHostToDevice), "params");
      check(cudaMemcpy(seeds.p, hs.data(), hs.size() * 8, cudaMemcpyHostToDevice), "seeds");
      check(cuda::sampling_rng_init(static_cast<const uint64_t*>(seeds.p), nullptr, static_cast<uint64_t*>(states.p),
                                    batch, g_stream),
            "sampling_rng_init");
      const double greedy = time_ms(reps, [&] {
        check(cuda::sample_greedy(logits.f(), V, batch, V, static_cast<int32_t*>(tokens.p), g_stream), "sample_greedy");
      });
      cuda::SampleArgs a;
      a.logits = logits.f();
      a.ld = V;
      a.batch = batch;
      a.vocab = V;
      a.params = static_cast<const cuda::SamplingRow*>(params.p);
      a.rng_states = static_cast<uint64_t*>(states.p);
      a.tokens = static_cast<int32_t*>(tokens.p);
      const double topp = time_ms(reps, [&] { check(cuda::sample_tokens(a, g_stream), "sample_tokens"); });
      std::printf("  batch %-3d greedy %.3f ms, top-p 0.9 T 0.8 %.3f ms\n", batch, greedy, topp);
    }
  }
  if (want.count("moe")) {
    if (!c.is_moe()) die("--sections moe needs an MoE preset (e.g. yoco-u-moe)");
    const int E = c.n_experts, k = c.n_experts_per_token, he = c.expert_hidden_dim, D = c.dim;
    std::printf("moe experts of one layer (E %d, k %d, expert hidden %d, dim %d), random routing:\n", E, k, he, D);
    std::printf("  %-10s %10s %10s %10s %12s\n", "rows", "ms", "experts", "GB/s", "TFLOP/s");
    Buf up(size_t{2} * E * 2 * he * D), down(size_t{2} * E * D * he);
    fill_bf16(up, -0.05f, 0.05f);
    fill_bf16(down, -0.05f, 0.05f);
    for (int rows : {1, 2, 4, 8, 16, 32, 512, 4096}) {
      const int A = rows * k;
      Buf x(size_t{2} * rows * D), ids(size_t{4} * A), w(size_t{4} * A), off(size_t{4} * (E + 1)),
          toff(size_t{4} * (E + 1)), src(size_t{4} * A), slot(size_t{4} * A), u(size_t{4} * A * 2 * he),
          act(size_t{2} * A * he), y(size_t{4} * A * D), h(size_t{4} * rows * D);
      fill_bf16(x, -1, 1);
      fill_f32(w, 0, 0.2f);
      std::vector<int32_t> hid(A);
      std::set<int> distinct;
      for (int r = 0; r < rows; ++r) {
        std::vector<int> all(E);
        for (int e = 0; e < E; ++e) all[e] = e;
        for (int j = 0; j < k; ++j) {  // k distinct experts per row
          std::swap(all[j], all[j + static_cast<int>(next_u32() % (E - j))]);
          hid[r * k + j] = all[j];
          distinct.insert(all[j]);
        }
      }
      check(cudaMemcpy(ids.p, hid.data(), hid.size() * 4, cudaMemcpyHostToDevice), "ids");
      auto i32 = [](const Buf& b) { return static_cast<int32_t*>(b.p); };
      cuda::MoePermuteArgs p{i32(ids), rows, k, E, i32(off), i32(toff), i32(src), i32(slot)};
      cuda::MoeGemmArgs g1{x.h(), i32(src), up.h(), 2LL * he * D, u.f(), i32(off), i32(toff), E, A, 2 * he, D};
      cuda::MoeGemmArgs g2{act.h(), nullptr, down.h(), static_cast<int64_t>(D) * he, y.f(), i32(off), i32(toff), E,
                           A,       D,       he};
      const double ms = time_ms(reps, [&] {
        check(cuda::moe_permute(p, g_stream), "moe_permute");
        check(cuda::moe_grouped_gemm(g1, g_stream), "moe_grouped_gemm fc1|gate");
        check(cuda::silu_mul_to_bf16(u.f(), 2 * he, u.f() + he, 2 * he, act.h(), he, A, he, g_stream), "silu");
        check(cuda::moe_grouped_gemm(g2, g_stream), "moe_grouped_gemm fc2");
        check(cuda::moe_combine(y.f(), i32(slot), w.f(), rows, k, D, h.f(), g_stream), "moe_combine");
      });
      const double bytes = static_cast<double>(distinct.size()) * 3.0 * he * D * 2;
      std::printf("  %-10d %10.3f %10zu %10.0f %12.1f\n", rows, ms, distinct.size(), bytes / (ms * 1e-3) / 1e9,
                  2.0 * A * 3.0 * he * D / (ms * 1e-3) / 1e12);
    }
  }
  check(cudaDeviceSynchronize(), "final synchronize");
  return 0;
}
