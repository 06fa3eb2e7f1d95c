// Sliding-window attention over a per-sequence window ring (docs/design.md §2.3; layout in ops.h).
// Prefill: flash attention, a block per (kBQ queries, query head), warp w owning query rows
// 16w..16w+15. Per key tile: s = q·kᵀ on bf16 tensor cores, causal + window mask, online softmax in
// fp32 registers (base 2), then the score fragments, packed to bf16, are the left operand of p·v.
// Keys of positions before pos0 come from the ring, the others from this call's k/v rows; a second
// kernel then appends the call's rows to the ring. Decode: fp32 on CUDA cores, a block per
// (sequence, kv head) as in attention.cu, with the window's rows gathered from the ring.
// Later: cp.async double buffering of K/V tiles, bf16 rings, packing the GQA group into one block's
// rows, and splitting long windows across blocks for small decode batches.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dispatch.cuh"
#include "kernels/cuda/mma.cuh"

namespace yoco::cuda {
namespace {

using detail::bf16;
using detail::c_col;
using detail::c_row;

constexpr int kMaxHeadDim = 256;
constexpr int kMaxGroup = 16;
constexpr float kLog2e = 1.4426950408889634f;

// --- prefill ---------------------------------------------------------------------------------------
constexpr int kThreads = 128;  // 4 warps
constexpr int kBQ = 16 * (kThreads / 32);

template <int HD, int BK>
struct PrefillSmem {
  static constexpr int kLdH = HD + 8;
  static constexpr int kLdK = BK + 8;
  static constexpr int kQ = 0;                // [kBQ][HD] q
  static constexpr int kK = kQ + kBQ * kLdH;  // [BK][HD] k tile
  static constexpr int kVt = kK + BK * kLdH;  // [HD][BK] v tile, transposed
  static constexpr size_t kBytes = static_cast<size_t>(kVt + HD * kLdK) * sizeof(bf16);
};

template <int HD, int BK>
__global__ void __launch_bounds__(kThreads) swa_prefill_kernel(const SwaPrefillArgs a) {
  using L = PrefillSmem<HD, BK>;
  constexpr int kLdH = L::kLdH, kLdK = L::kLdK;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* const q_s = reinterpret_cast<bf16*>(smem_raw) + L::kQ;
  bf16* const k_s = reinterpret_cast<bf16*>(smem_raw) + L::kK;
  bf16* const vt_s = reinterpret_cast<bf16*>(smem_raw) + L::kVt;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int h = blockIdx.y, kvh = h / (a.n_q_heads / a.n_kv_heads);
  const int hd = a.head_dim, W = a.window;
  const int64_t kv_dim = static_cast<int64_t>(a.n_kv_heads) * hd;
  const int i0 = blockIdx.x * kBQ;
  const int nq = min(kBQ, a.n - i0);
  const int64_t p_first = a.pos0 + i0, p_last = p_first + nq - 1;
  const int64_t lo = p_first - W + 1 > 0 ? p_first - W + 1 : 0;  // oldest key any query here sees

  const float* const qh = a.q + static_cast<int64_t>(h) * hd;
  for (int i = tid; i < kBQ * HD; i += kThreads) {
    const int r = i / HD, d = i % HD;
    const float qv = (r < nq && d < hd) ? qh[static_cast<int64_t>(i0 + r) * a.ldq + d] : 0.f;
    q_s[r * kLdH + d] = __float2bfloat16_rn(qv);
  }

  float o[HD / 8][4];
#pragma unroll
  for (int nt = 0; nt < HD / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[nt][e] = 0.f;
  // Rows lo/hi of this lane: block rows warp·16 + g and + 8 (C fragment layout).
  float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.f, l_hi = 0.f;
  const int64_t p_lo = p_first + warp * 16 + (lane >> 2), p_hi = p_lo + 8;
  const float sl2 = a.scale * kLog2e;

  for (int64_t kt0 = lo; kt0 <= p_last; kt0 += BK) {
    __syncthreads();  // the previous tile has been consumed
    // Key kp lives in ring row kp % W when it precedes this call, else in this call's rows.
    const int slot0 = static_cast<int>(kt0 % W);
    for (int i = tid; i < BK * HD; i += kThreads) {
      const int r = i / HD, d = i % HD;
      const int64_t kp = kt0 + r;
      float kv = 0.f, vv = 0.f;
      if (kp <= p_last && d < hd) {
        const float *kr, *vr;
        if (kp < a.pos0) {
          const int64_t off = static_cast<int64_t>((slot0 + r) % W) * kv_dim;
          kr = a.k_ring + off;
          vr = a.v_ring + off;
        } else {
          const int64_t t = kp - a.pos0;
          kr = a.k + t * a.ldk;
          vr = a.v + t * a.ldv;
        }
        kv = kr[kvh * hd + d];
        vv = vr[kvh * hd + d];
      }
      k_s[r * kLdH + d] = __float2bfloat16_rn(kv);
      vt_s[d * kLdK + r] = __float2bfloat16_rn(vv);
    }
    __syncthreads();

    float s[BK / 8][4];
#pragma unroll
    for (int nt = 0; nt < BK / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
      uint32_t af[4];
      detail::load_a(af, q_s, kLdH, warp * 16, kk * 16, lane);
#pragma unroll
      for (int nt = 0; nt < BK / 8; ++nt) {
        uint32_t bfr[2];
        detail::load_b(bfr, k_s, kLdH, nt * 8, kk * 16, lane);
        detail::mma_16816(s[nt], af, bfr);
      }
    }

    // Mask (p − W < kp ≤ p, and no key past the block's last query), scale into base 2.
#pragma unroll
    for (int nt = 0; nt < BK / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t kp = kt0 + nt * 8 + c_col(lane, e);
        const int64_t p = e < 2 ? p_lo : p_hi;
        const bool visible = kp <= p && kp > p - W && kp <= p_last;
        const float x = visible ? s[nt][e] * sl2 : -INFINITY;
        s[nt][e] = x;
      }
    detail::softmax_pv_tile<BK, HD>(s, o, m_lo, m_hi, l_lo, l_hi, vt_s, kLdK, lane);
  }

  detail::store_normalized<HD>(o, l_lo, l_hi, a.out + static_cast<int64_t>(h) * hd + static_cast<int64_t>(i0) * a.ldo,
                               a.ldo, warp * 16, nq, hd, lane);
}

// Rows first..n−1 of this call (positions pos0 + t) into ring rows (pos0 + t) % W.
__global__ void swa_ring_append_kernel(const SwaPrefillArgs a, int first) {
  const int64_t kv_dim = static_cast<int64_t>(a.n_kv_heads) * a.head_dim;
  const int64_t total = (a.n - first) * kv_dim;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = first + i / kv_dim, col = i % kv_dim;
    const int64_t dst = ((a.pos0 + t) % a.window) * kv_dim + col;
    a.k_ring[dst] = a.k[t * a.ldk + col];
    a.v_ring[dst] = a.v[t * a.ldv + col];
  }
}

template <int HD, int BK>
Status launch_prefill(const SwaPrefillArgs& a, cudaStream_t s) {
  constexpr size_t bytes = PrefillSmem<HD, BK>::kBytes;
  auto* kernel = swa_prefill_kernel<HD, BK>;
  YOCO_CUDA_RETURN_IF_ERROR(detail::cuda_status(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
      "swa_prefill: shared memory size"));
  const dim3 grid(static_cast<unsigned>((a.n + kBQ - 1) / kBQ), static_cast<unsigned>(a.n_q_heads));
  kernel<<<grid, kThreads, bytes, s>>>(a);
  return detail::launch_status("swa_prefill (attention)");
}

// The head dim as a template parameter (dispatch.cuh); the key tile shrinks at 256 so that the
// output accumulators stay in registers.
Status dispatch_prefill(const SwaPrefillArgs& a, cudaStream_t s) {
  return detail::dispatch_head_dim("swa_prefill", a.head_dim, [&](auto hd) {
    constexpr int HD = decltype(hd)::value;
    if constexpr (HD == 256) return launch_prefill<256, 32>(a, s);
    else return launch_prefill<HD, 64>(a, s);
  });
}

// --- decode ----------------------------------------------------------------------------------------
constexpr int kDecThreads = 128;
constexpr int kDecTile = 128;  // keys per pass through shared memory
constexpr int kDecDims = kMaxHeadDim / kDecThreads;

template <int G>
__global__ void __launch_bounds__(kDecThreads) swa_decode_kernel(const SwaDecodeArgs a, int group) {
  const int b = blockIdx.x, kvh = blockIdx.y;
  const int hd = a.head_dim, W = a.window;
  const int64_t kv_dim = static_cast<int64_t>(a.n_kv_heads) * hd;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* q_s = reinterpret_cast<float*>(smem_raw);  // [group, hd]
  float* p_s = q_s + group * hd;                    // [group, kDecTile] scores, then weights
  __shared__ const float* krow_s[kDecTile];
  __shared__ const float* vrow_s[kDecTile];
  __shared__ float m_s[G], l_s[G], corr_s[G];

  const int64_t pos = a.positions[b];
  const int64_t lo = pos - W + 1 > 0 ? pos - W + 1 : 0;
  const float* const k_new = a.k + static_cast<int64_t>(b) * a.ldk + static_cast<int64_t>(kvh) * hd;
  const float* const v_new = a.v + static_cast<int64_t>(b) * a.ldv + static_cast<int64_t>(kvh) * hd;
  float* const k_ring = a.k_rings[b] + static_cast<int64_t>(kvh) * hd;
  float* const v_ring = a.v_rings[b] + static_cast<int64_t>(kvh) * hd;
  const int h0 = kvh * group;  // the group's query heads are adjacent

  for (int i = tid; i < group * hd; i += kDecThreads) q_s[i] = a.q[static_cast<int64_t>(b) * a.ldq + h0 * hd + i];
  if (tid < G) {
    m_s[tid] = -INFINITY;
    l_s[tid] = 0.f;
  }
  float acc[G][kDecDims];
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int i = 0; i < kDecDims; ++i) acc[g][i] = 0.f;
  __syncthreads();

  for (int64_t t0 = lo; t0 <= pos; t0 += kDecTile) {
    const int nt = static_cast<int>(min(static_cast<int64_t>(kDecTile), pos - t0 + 1));
    for (int tt = tid; tt < nt; tt += kDecThreads) {
      const int64_t kp = t0 + tt;
      if (kp == pos) {
        krow_s[tt] = k_new;
        vrow_s[tt] = v_new;
      } else {
        const int64_t off = (kp % W) * kv_dim;
        krow_s[tt] = k_ring + off;
        vrow_s[tt] = v_ring + off;
      }
    }
    __syncthreads();
    // Scores: a warp per key, lanes over the head dims; each K row is read once for the group.
    for (int tt = warp; tt < nt; tt += kDecThreads / 32) {
      const float* kr = krow_s[tt];
      float sc[G];
#pragma unroll
      for (int g = 0; g < G; ++g) sc[g] = 0.f;
      for (int d = lane; d < hd; d += 32) {
        const float kd = kr[d];
#pragma unroll
        for (int g = 0; g < G; ++g)
          if (g < group) sc[g] += q_s[g * hd + d] * kd;
      }
#pragma unroll
      for (int g = 0; g < G; ++g) {
        if (g >= group) break;
        float v = sc[g];
        for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
        if (lane == 0) p_s[g * kDecTile + tt] = v * a.scale;
      }
    }
    __syncthreads();
    if (tid < group) {
      float mt = -INFINITY;
      for (int tt = 0; tt < nt; ++tt) mt = fmaxf(mt, p_s[tid * kDecTile + tt]);
      const float m_new = fmaxf(m_s[tid], mt);
      corr_s[tid] = expf(m_s[tid] - m_new);  // exp(−inf) = 0 on the first tile
      m_s[tid] = m_new;
    }
    __syncthreads();
    for (int i = tid; i < group * nt; i += kDecThreads) {
      const int g = i / nt, tt = i % nt;
      p_s[g * kDecTile + tt] = expf(p_s[g * kDecTile + tt] - m_s[g]);
    }
    __syncthreads();
    if (tid < group) {
      float sum = 0.f;
      for (int tt = 0; tt < nt; ++tt) sum += p_s[tid * kDecTile + tt];
      l_s[tid] = l_s[tid] * corr_s[tid] + sum;
    }
#pragma unroll
    for (int i = 0; i < kDecDims; ++i) {
      const int d = tid + i * kDecThreads;
      if (d >= hd) break;
#pragma unroll
      for (int g = 0; g < G; ++g)
        if (g < group) acc[g][i] *= corr_s[g];
      for (int tt = 0; tt < nt; ++tt) {
        const float vd = vrow_s[tt][d];
#pragma unroll
        for (int g = 0; g < G; ++g)
          if (g < group) acc[g][i] += p_s[g * kDecTile + tt] * vd;
      }
    }
    __syncthreads();  // krow_s, p_s and corr_s are rewritten by the next tile
  }

  float* const out = a.out + static_cast<int64_t>(b) * a.ldo + static_cast<int64_t>(h0) * hd;
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (g >= group) break;
    const float inv = 1.f / l_s[g];  // the step's own key is always visible: l ≥ 1
#pragma unroll
    for (int i = 0; i < kDecDims; ++i) {
      const int d = tid + i * kDecThreads;
      if (d < hd) out[g * hd + d] = acc[g][i] * inv;
    }
  }
  // This step's row into ring row pos % W: the one row of the ring no query of this step reads
  // (it holds position pos − W), so the other kv heads' blocks may still be reading the rest.
  const int64_t dst = (pos % W) * kv_dim;
  for (int d = tid; d < hd; d += kDecThreads) {
    k_ring[dst + d] = k_new[d];
    v_ring[dst + d] = v_new[d];
  }
}

template <int G>
void launch_decode(dim3 grid, size_t smem, cudaStream_t s, const SwaDecodeArgs& a, int group) {
  swa_decode_kernel<G><<<grid, kDecThreads, smem, s>>>(a, group);
}

}  // namespace

Status swa_prefill(const SwaPrefillArgs& a, void* stream) {
  const char* op = "swa_prefill";
  auto bad = [&](const char* what) { return invalid_argument(std::string(op) + ": " + what); };
  if (a.n < 0) return bad("n must be >= 0");
  if (a.n_q_heads <= 0 || a.n_kv_heads <= 0) return bad("n_q_heads and n_kv_heads must be > 0");
  if (a.n_q_heads % a.n_kv_heads != 0) return bad("n_q_heads must be a multiple of n_kv_heads");
  if (a.n_q_heads > 65535) return bad("n_q_heads must be <= 65535");
  if (a.head_dim <= 0 || a.head_dim > kMaxHeadDim) return bad("head_dim must be in 1..256");
  if (a.window <= 0) return bad("window must be > 0");
  if (a.pos0 < 0) return bad("pos0 must be >= 0");
  const int64_t q_width = static_cast<int64_t>(a.n_q_heads) * a.head_dim;
  const int64_t kv_width = static_cast<int64_t>(a.n_kv_heads) * a.head_dim;
  if (a.ldq < q_width) return bad("ldq must be >= n_q_heads * head_dim");
  if (a.ldo < q_width) return bad("ldo must be >= n_q_heads * head_dim");
  if (a.ldk < kv_width) return bad("ldk must be >= n_kv_heads * head_dim");
  if (a.ldv < kv_width) return bad("ldv must be >= n_kv_heads * head_dim");
  if (!a.k_ring || !a.v_ring) return bad("k_ring and v_ring must be set");
  if (a.n == 0) return Status::Ok();
  if (!a.q) return bad("q is null");
  if (!a.k) return bad("k is null");
  if (!a.v) return bad("v is null");
  if (!a.out) return bad("out is null");
  cudaStream_t s = detail::as_stream(stream);
  YOCO_CUDA_RETURN_IF_ERROR(dispatch_prefill(a, s));
  // Only the last `window` rows can still be seen by a later query.
  const int first = a.n > a.window ? a.n - a.window : 0;
  const int64_t total = static_cast<int64_t>(a.n - first) * kv_width;
  const int blocks = static_cast<int>(std::min<int64_t>((total + 255) / 256, 4096));
  swa_ring_append_kernel<<<blocks, 256, 0, s>>>(a, first);
  return detail::launch_status("swa_prefill (ring append)");
}

Status swa_decode(const SwaDecodeArgs& a, void* stream) {
  const char* op = "swa_decode";
  auto bad = [&](const char* what) { return invalid_argument(std::string(op) + ": " + what); };
  if (a.batch < 0) return bad("batch must be >= 0");
  if (a.batch == 0) return Status::Ok();
  if (a.n_q_heads <= 0 || a.n_kv_heads <= 0) return bad("n_q_heads and n_kv_heads must be > 0");
  if (a.n_q_heads % a.n_kv_heads != 0) return bad("n_q_heads must be a multiple of n_kv_heads");
  const int group = a.n_q_heads / a.n_kv_heads;
  if (group > kMaxGroup) return bad("n_q_heads / n_kv_heads must be <= 16");
  if (a.n_kv_heads > 65535) return bad("n_kv_heads must be <= 65535");
  if (a.head_dim <= 0 || a.head_dim > kMaxHeadDim) return bad("head_dim must be in 1..256");
  if (a.window <= 0) return bad("window must be > 0");
  if (a.ldq < a.n_q_heads * a.head_dim) return bad("ldq must be >= n_q_heads * head_dim");
  if (a.ldo < a.n_q_heads * a.head_dim) return bad("ldo must be >= n_q_heads * head_dim");
  if (a.ldk < a.n_kv_heads * a.head_dim) return bad("ldk must be >= n_kv_heads * head_dim");
  if (a.ldv < a.n_kv_heads * a.head_dim) return bad("ldv must be >= n_kv_heads * head_dim");
  if (!a.q) return bad("q is null");
  if (!a.k) return bad("k is null");
  if (!a.v) return bad("v is null");
  if (!a.k_rings || !a.v_rings) return bad("k_rings and v_rings must be set");
  if (!a.positions) return bad("positions is null");
  if (!a.out) return bad("out is null");

  const size_t smem = static_cast<size_t>(group) * (a.head_dim + kDecTile) * sizeof(float);
  const dim3 grid(static_cast<unsigned>(a.batch), static_cast<unsigned>(a.n_kv_heads));
  cudaStream_t s = detail::as_stream(stream);
  // The one place the runtime group size becomes a template parameter.
  if (group <= 1) launch_decode<1>(grid, smem, s, a, group);
  else if (group <= 2) launch_decode<2>(grid, smem, s, a, group);
  else if (group <= 4) launch_decode<4>(grid, smem, s, a, group);
  else if (group <= 8) launch_decode<8>(grid, smem, s, a, group);
  else launch_decode<16>(grid, smem, s, a, group);
  return detail::launch_status(op);
}

}  // namespace yoco::cuda
