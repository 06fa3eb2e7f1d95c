// Gated-retention chunkwise prefill (docs/design.md §2.3) of one sequence on bf16 tensor cores.
// Grid: (value-column slices of kDV, heads). A block keeps its slice S[:, j0 : j0 + kDV] of the
// state in fp32 mma accumulators for the whole call and walks the chunks in order; per chunk:
//   1. q, k' = k·k_scale and the slice of v (transposed) become bf16 shared tiles; a_t comes from
//      the gate logits and one thread forms b_i = a_0 + … + a_i in token order, the CPU's rounding.
//   2. k'_j·exp(b_C − b_j), transposed: the left operand of the state update. Warp w owns query
//      rows 16w..16w+15: o = exp(b_i)·(q S_prev) + (q k'ᵀ ⊙ exp(b_i − b_j)[j ≤ i]) v, the score
//      tile staying in registers as the left operand of the second product.
//   3. S ← exp(b_C)·S + (k' ⊙ exp(b_C − b))ᵀ v in the fp32 accumulators; their bf16 copy,
//      transposed, is the right operand of the next chunk's cross term.
// The two products that can cancel, q·S_prev and q·k'ᵀ, take each operand as two bf16 terms
// (x = hi + lo, lo = bf16(x − hi)) and sum hi·hi + hi·lo + lo·hi, about 16 bits of mantissa
// instead of 8, so these sums are close to the fp32 CPU op's (docs/design.md §2.5). Measured on
// an H100 (bench/README.md, GPU): yoco-3b prefill 4.5% slower. head_dim > 128 keeps one term (the
// extra tiles would not fit in an sm_80 block's shared memory).
// Every block recomputes q k'ᵀ for its slice (head_dim / kDV times per head): the price of
// head_dim / kDV times more blocks for one sequence. Later: cp.async double buffering of the next
// chunk, bf16 q/k/v inputs, several sequences per launch, fusing the per-head RMSNorm and gate.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dispatch.cuh"
#include "kernels/cuda/mma.cuh"

namespace yoco::cuda {
namespace {

using detail::bf16;
using detail::c_col;
using detail::c_row;

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kDV = 32;  // value columns (state columns) per block
constexpr int kNT = kDV / 8;
constexpr int kMaxHeadDim = 256;

// Shared-memory layout, in bf16 elements then the fp32 per-token arrays. With kSplit the low
// terms of q, k' and the S slice follow (kQl, kKl, kStl); without, they alias the high ones.
template <int HD, int C>
struct Smem {
  static constexpr bool kSplit = HD <= 128;
  static constexpr int kLdH = HD + 8;                         // row stride of [*][HD] tiles
  static constexpr int kLdC = C + 8;                          // row stride of [*][C] tiles
  static constexpr int kQ = 0;                                // [C][HD]  q
  static constexpr int kK = kQ + C * kLdH;                    // [C][HD]  k'
  static constexpr int kKt = kK + C * kLdH;                   // [HD][C]  k'·exp(b_C − b_j), transposed
  static constexpr int kVt = kKt + HD * kLdC;                 // [kDV][C] v slice, transposed
  static constexpr int kSt = kVt + kDV * kLdC;                // [kDV][HD] S slice before the chunk, transposed
  static constexpr int kQl = kSplit ? kSt + kDV * kLdH : kQ;  // [C][HD]  q − hi(q)
  static constexpr int kKl = kSplit ? kQl + C * kLdH : kK;    // [C][HD]  k' − hi(k')
  static constexpr int kStl = kSplit ? kKl + C * kLdH : kSt;  // [kDV][HD] S − hi(S), transposed
  static constexpr int kEnd = kSplit ? kStl + kDV * kLdH : kSt + kDV * kLdH;
  static constexpr size_t kBytes = kEnd * sizeof(bf16) + 3 * C * sizeof(float);  // b, exp(b), exp(b_C − b)
};

// x as hi + lo, both bf16 (lo = 0 when x is bf16 already).
__device__ __forceinline__ void split_bf16(float x, bf16& hi, bf16& lo) {
  hi = __float2bfloat16_rn(x);
  lo = __float2bfloat16_rn(x - __bfloat162float(hi));
}

// The S slice's bf16 copy, transposed; with kSplit also its low terms in st_lo.
template <int M, int HD, bool kSplit>
__device__ __forceinline__ void store_state_bf16(const float (&s)[M][kNT][4], bf16* st, bf16* st_lo, int ld, int warp,
                                                 int lane) {
#pragma unroll
  for (int mi = 0; mi < M; ++mi) {
    const int mt = warp + mi * kWarps;
    if (mt >= HD / 16) continue;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int at = (nt * 8 + c_col(lane, e)) * ld + mt * 16 + c_row(lane, e);
        if constexpr (kSplit) {
          split_bf16(s[mi][nt][e], st[at], st_lo[at]);
        } else {
          st[at] = __float2bfloat16_rn(s[mi][nt][e]);
        }
      }
  }
}

// acc += a·b on hi/lo operands: hi·hi + hi·lo + lo·hi (the lo·lo term is below the sum's rounding).
template <bool kSplit>
__device__ __forceinline__ void mma_split(float (&acc)[4], const uint32_t (&a)[4], const uint32_t (&a_lo)[4],
                                          const uint32_t (&b)[2], const uint32_t (&b_lo)[2]) {
  detail::mma_16816(acc, a, b);
  if constexpr (kSplit) {
    detail::mma_16816(acc, a, b_lo);
    detail::mma_16816(acc, a_lo, b);
  }
}

template <int HD, int C>
__global__ void __launch_bounds__(kThreads) retention_prefill_kernel(const RetentionPrefillArgs a) {
  using L = Smem<HD, C>;
  constexpr bool kSplit = L::kSplit;
  constexpr int kLdH = L::kLdH, kLdC = L::kLdC;
  constexpr int kRowWarps = C / 16;  // warps that own 16 query rows
  constexpr int kMTiles = HD / 16;   // 16-row tiles of the state (key dims)
  constexpr int kMPerWarp = (kMTiles + kWarps - 1) / kWarps;
  constexpr int kKeyTiles = C / 8;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* const sm = reinterpret_cast<bf16*>(smem_raw);
  bf16* const q_s = sm + L::kQ;
  bf16* const k_s = sm + L::kK;
  bf16* const kt_s = sm + L::kKt;
  bf16* const vt_s = sm + L::kVt;
  bf16* const st_s = sm + L::kSt;
  bf16* const ql_s = sm + L::kQl;
  bf16* const kl_s = sm + L::kKl;
  bf16* const stl_s = sm + L::kStl;
  float* const b_s = reinterpret_cast<float*>(sm + L::kEnd);  // a, then the running sum b
  float* const eq_s = b_s + C;                                // exp(b_i)
  float* const ek_s = eq_s + C;                               // exp(b_C − b_j)

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int h = blockIdx.y, j0 = blockIdx.x * kDV;
  const int hd = a.head_dim;
  const int nv = min(kDV, hd - j0);  // valid value columns of this slice
  const float* const qh = a.q + static_cast<int64_t>(h) * hd;
  const float* const kh = a.k + static_cast<int64_t>(h) * hd;
  const float* const vh = a.v + static_cast<int64_t>(h) * hd + j0;
  float* const oh = a.out + static_cast<int64_t>(h) * hd + j0;
  float* const sh = a.state + static_cast<int64_t>(h) * hd * hd + j0;
  const float inv_tau = 1.0f / a.gate_logit_normalizer;

  // The state slice, in the accumulator layout (m = key dim, n = value column).
  float s_acc[kMPerWarp][kNT][4];
#pragma unroll
  for (int mi = 0; mi < kMPerWarp; ++mi) {
    const int mt = warp + mi * kWarps;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int d = mt * 16 + c_row(lane, e), col = nt * 8 + c_col(lane, e);
        s_acc[mi][nt][e] = (mt < kMTiles && d < hd && col < nv) ? sh[static_cast<int64_t>(d) * hd + col] : 0.f;
      }
  }
  store_state_bf16<kMPerWarp, HD, kSplit>(s_acc, st_s, stl_s, kLdH, warp, lane);

  for (int t0 = 0; t0 < a.n; t0 += C) {
    const int c = min(C, a.n - t0);
    // 1. Tiles of this chunk; rows past c and columns past hd are zeros, so they add nothing.
    for (int i = tid; i < C * HD; i += kThreads) {
      const int r = i / HD, d = i % HD;
      float qv = 0.f, kv = 0.f;
      if (r < c && d < hd) {
        const int64_t t = t0 + r;
        qv = qh[t * a.ldq + d];
        kv = kh[t * a.ldk + d] * a.k_scale;
      }
      if constexpr (kSplit) {
        split_bf16(qv, q_s[r * kLdH + d], ql_s[r * kLdH + d]);
        split_bf16(kv, k_s[r * kLdH + d], kl_s[r * kLdH + d]);
      } else {
        q_s[r * kLdH + d] = __float2bfloat16_rn(qv);
        k_s[r * kLdH + d] = __float2bfloat16_rn(kv);
      }
    }
    for (int i = tid; i < C * kDV; i += kThreads) {
      const int r = i / kDV, col = i % kDV;
      const float vv = (r < c && col < nv) ? vh[static_cast<int64_t>(t0 + r) * a.ldv + col] : 0.f;
      vt_s[col * kLdC + r] = __float2bfloat16_rn(vv);
    }
    if (tid < C) {
      float av = 0.f;  // padding rows decay by nothing, so b of a padding row is b_{c−1}
      if (tid < c) {
        const float x = a.gt[static_cast<int64_t>(t0 + tid) * a.ldg + h];
        av = (fminf(x, 0.f) - log1pf(expf(-fabsf(x)))) * inv_tau;  // logsigmoid, cpu_backend.cc's form
      }
      b_s[tid] = av;
    }
    __syncthreads();
    if (warp == 0) {
      if (lane == 0) {
        float acc = 0.f;
        for (int i = 0; i < C; ++i) b_s[i] = acc += b_s[i];
      }
      __syncwarp();
      const float b_last = b_s[C - 1];
      for (int i = lane; i < C; i += 32) {
        eq_s[i] = expf(b_s[i]);           // ≤ 1: a ≤ 0
        ek_s[i] = expf(b_last - b_s[i]);  // ≤ 1
      }
    }
    __syncthreads();

    // 2a. k'·exp(b_C − b_j), transposed. k is re-read in fp32 so it is rounded to bf16 once.
    for (int i = tid; i < C * HD; i += kThreads) {
      const int r = i / HD, d = i % HD;
      float kv = 0.f;
      if (r < c && d < hd) kv = kh[static_cast<int64_t>(t0 + r) * a.ldk + d] * a.k_scale * ek_s[r];
      kt_s[d * kLdC + r] = __float2bfloat16_rn(kv);
    }

    // 2b. This warp's 16 output rows.
    if (warp < kRowWarps) {
      const int r0 = warp * 16;
      float o[kNT][4];
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[nt][e] = 0.f;
          // Cross term q·S_prev, then each row scaled by exp(b_i).
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk) {
        uint32_t af[4], af_lo[4];
        detail::load_a(af, q_s, kLdH, r0, kk * 16, lane);
        if constexpr (kSplit) detail::load_a(af_lo, ql_s, kLdH, r0, kk * 16, lane);
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          uint32_t bfr[2], bfr_lo[2];
          detail::load_b(bfr, st_s, kLdH, nt * 8, kk * 16, lane);
          if constexpr (kSplit) detail::load_b(bfr_lo, stl_s, kLdH, nt * 8, kk * 16, lane);
          mma_split<kSplit>(o[nt], af, af_lo, bfr, bfr_lo);
        }
      }
      const int i_lo = r0 + (lane >> 2), i_hi = i_lo + 8;
      const float eq_lo = eq_s[i_lo], eq_hi = eq_s[i_hi];
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        o[nt][0] *= eq_lo;
        o[nt][1] *= eq_lo;
        o[nt][2] *= eq_hi;
        o[nt][3] *= eq_hi;
      }
      // Scores against keys 0 .. r0 + 15 (later keys are masked out for every row of the warp).
      const int n_key_tiles = (r0 + 16) / 8;
      float sc[kKeyTiles][4];
#pragma unroll
      for (int nt = 0; nt < kKeyTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) sc[nt][e] = 0.f;
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk) {
        uint32_t af[4], af_lo[4];
        detail::load_a(af, q_s, kLdH, r0, kk * 16, lane);
        if constexpr (kSplit) detail::load_a(af_lo, ql_s, kLdH, r0, kk * 16, lane);
#pragma unroll
        for (int nt = 0; nt < kKeyTiles; ++nt) {
          if (nt >= n_key_tiles) continue;
          uint32_t bfr[2], bfr_lo[2];
          detail::load_b(bfr, k_s, kLdH, nt * 8, kk * 16, lane);
          if constexpr (kSplit) detail::load_b(bfr_lo, kl_s, kLdH, nt * 8, kk * 16, lane);
          mma_split<kSplit>(sc[nt], af, af_lo, bfr, bfr_lo);
        }
      }
      const float b_lo = b_s[i_lo], b_hi = b_s[i_hi];
#pragma unroll
      for (int nt = 0; nt < kKeyTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = e < 2 ? i_lo : i_hi, j = nt * 8 + c_col(lane, e);
          sc[nt][e] = j <= i ? sc[nt][e] * expf((e < 2 ? b_lo : b_hi) - b_s[j]) : 0.f;
        }
        // + P·v over the key steps that reach the diagonal.
#pragma unroll
      for (int kk = 0; kk < C / 16; ++kk) {
        if (kk * 16 >= r0 + 16) continue;
        uint32_t pf[4];
        detail::scores_to_a(pf, sc[2 * kk], sc[2 * kk + 1]);
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          uint32_t bfr[2];
          detail::load_b(bfr, vt_s, kLdC, nt * 8, kk * 16, lane);
          detail::mma_16816(o[nt], pf, bfr);
        }
      }
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = r0 + c_row(lane, e), col = nt * 8 + c_col(lane, e);
          if (i < c && col < nv) oh[static_cast<int64_t>(t0 + i) * a.ldo + col] = o[nt][e];
        }
    }
    __syncthreads();  // kt_s complete; every read of st_s done

    // 3. S ← exp(b_C)·S + ktᵀ-product, then its bf16 copy for the next chunk.
    const float e_last = expf(b_s[C - 1]);
#pragma unroll
    for (int mi = 0; mi < kMPerWarp; ++mi) {
      const int mt = warp + mi * kWarps;
      if (mt >= kMTiles) continue;
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s_acc[mi][nt][e] *= e_last;
#pragma unroll
      for (int kk = 0; kk < C / 16; ++kk) {
        uint32_t af[4];
        detail::load_a(af, kt_s, kLdC, mt * 16, kk * 16, lane);
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          uint32_t bfr[2];
          detail::load_b(bfr, vt_s, kLdC, nt * 8, kk * 16, lane);
          detail::mma_16816(s_acc[mi][nt], af, bfr);
        }
      }
    }
    store_state_bf16<kMPerWarp, HD, kSplit>(s_acc, st_s, stl_s, kLdH, warp, lane);
    __syncthreads();  // the next chunk overwrites every tile
  }

#pragma unroll
  for (int mi = 0; mi < kMPerWarp; ++mi) {
    const int mt = warp + mi * kWarps;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int d = mt * 16 + c_row(lane, e), col = nt * 8 + c_col(lane, e);
        if (mt < kMTiles && d < hd && col < nv) sh[static_cast<int64_t>(d) * hd + col] = s_acc[mi][nt][e];
      }
  }
}

template <int HD, int C>
Status launch(const RetentionPrefillArgs& a, cudaStream_t s) {
  constexpr size_t bytes = Smem<HD, C>::kBytes;
  auto* kernel = retention_prefill_kernel<HD, C>;
  YOCO_CUDA_RETURN_IF_ERROR(detail::cuda_status(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
      "retention_prefill: shared memory size"));
  const dim3 grid(static_cast<unsigned>((a.head_dim + kDV - 1) / kDV), static_cast<unsigned>(a.n_heads));
  kernel<<<grid, kThreads, bytes, s>>>(a);
  return detail::launch_status("retention_prefill");
}

template <int HD>
Status launch_chunk(const RetentionPrefillArgs& a, int chunk, cudaStream_t s) {
  return chunk == 32 ? launch<HD, 32>(a, s) : launch<HD, 64>(a, s);
}

}  // namespace

Status retention_prefill(const RetentionPrefillArgs& a, void* stream) {
  const char* op = "retention_prefill";
  auto bad = [&](const char* what) { return invalid_argument(std::string(op) + ": " + what); };
  if (a.n < 0) return bad("n must be >= 0");
  if (a.n_heads <= 0 || a.n_heads > 65535) return bad("n_heads must be in 1..65535");
  if (a.head_dim <= 0 || a.head_dim > kMaxHeadDim) return bad("head_dim must be in 1..256");
  if (a.chunk != 0 && a.chunk != 32 && a.chunk != 64) return bad("chunk must be 32 or 64 (0 = 64)");
  const int64_t width = static_cast<int64_t>(a.n_heads) * a.head_dim;
  if (a.ldq < width) return bad("ldq must be >= n_heads * head_dim");
  if (a.ldk < width) return bad("ldk must be >= n_heads * head_dim");
  if (a.ldv < width) return bad("ldv must be >= n_heads * head_dim");
  if (a.ldo < width) return bad("ldo must be >= n_heads * head_dim");
  if (a.ldg < a.n_heads) return bad("ldg must be >= n_heads");
  if (!(a.gate_logit_normalizer > 0)) return bad("gate_logit_normalizer must be > 0");
  if (!a.state) return bad("state is null");
  if (a.n == 0) return Status::Ok();
  if (!a.q) return bad("q is null");
  if (!a.k) return bad("k is null");
  if (!a.v) return bad("v is null");
  if (!a.gt) return bad("gt is null");
  if (!a.out) return bad("out is null");
  const int chunk = a.chunk == 0 ? 64 : a.chunk;
  cudaStream_t s = detail::as_stream(stream);
  return detail::dispatch_head_dim(op, a.head_dim,
                                   [&](auto hd) { return launch_chunk<decltype(hd)::value>(a, chunk, s); });
}

}  // namespace yoco::cuda
