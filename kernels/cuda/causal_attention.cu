// Causal attention prefill over a paged fp32 K/V pool (the Transformer baseline, docs/design.md §2.6; layout in
// ops.h). Flash attention: a block per (query head, tile of kBQ queries), warp w owning query rows
// 16w..16w+15; q·kᵀ and p·v on bf16 tensor cores (mma.cuh, as swa.cu), the online softmax in fp32
// registers (base 2).
// K/V tiles: the pool is fp32, the tensor cores want bf16, so each tile goes through an fp32
// staging area in shared memory filled by cp.async (16-byte pieces, no registers held), and is
// then converted into the bf16 K and transposed V tiles the fragments read. The copy of tile j+1
// is in flight while tile j is multiplied; only the conversion is on the critical path.
// Query tiles are launched longest-first (the causal triangle makes the last tile of a call the
// heaviest) and the query heads of one tile are adjacent in launch order, so a GQA group's blocks
// walk the same K/V rows together and all but the first read them from L2.
// Later: ldmatrix(.trans) instead of the transposed V tile, bf16 pools (no conversion at all),
// packing a GQA group into one block's rows, wgmma on sm_90a.
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
constexpr float kLog2e = 1.4426950408889634f;

// 16-byte global → shared copies that bypass L1 (sm_80+; the .cu target builds nothing older).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
#else
  __trap();
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
__device__ __forceinline__ void cp_async_wait_all() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

// Shared memory, in bytes from the start (every region 16-byte aligned):
//   fp32 staging K and V [BK][HD + 4] (a row is a whole number of 16-byte pieces; the +4 makes
//   the transposing reads below conflict-free), bf16 q [kBQ][HD + 8], bf16 k [BK][HD + 8] and
//   bf16 vᵀ [HD][BK + 8] (mma.cuh's padding: fragment loads hit 32 different banks).
template <int HD, int BK, int WARPS>
struct CausalSmem {
  static constexpr int kBQ = 16 * WARPS;
  static constexpr int kLdS = HD + 4;
  static constexpr int kLdH = HD + 8;
  static constexpr int kLdK = BK + 8;
  static constexpr size_t kStageK = 0;
  static constexpr size_t kStageV = kStageK + sizeof(float) * BK * kLdS;
  static constexpr size_t kQ = kStageV + sizeof(float) * BK * kLdS;
  static constexpr size_t kK = kQ + sizeof(bf16) * kBQ * kLdH;
  static constexpr size_t kVt = kK + sizeof(bf16) * BK * kLdH;
  static constexpr size_t kBytes = kVt + sizeof(bf16) * HD * kLdK;
  static_assert(HD % 32 == 0 && BK % 16 == 0, "tile shapes");
  static_assert(kStageV % 16 == 0 && kQ % 16 == 0 && kK % 16 == 0 && kVt % 16 == 0, "alignment");
};

// `async`: every K/V piece is 16-byte aligned (head_dim, pool_ld and the pool pointers allow it),
// so cp.async can fetch it; otherwise the staging area is filled with plain loads.
template <int HD, int BK, int WARPS>
__global__ void __launch_bounds__(WARPS * 32) causal_prefill_kernel(const CausalPrefillArgs a, bool async) {
  using L = CausalSmem<HD, BK, WARPS>;
  constexpr int kThreads = WARPS * 32, kBQ = L::kBQ;
  constexpr int kLdS = L::kLdS, kLdH = L::kLdH, kLdK = L::kLdK;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* const stage_k = reinterpret_cast<float*>(smem_raw + L::kStageK);
  float* const stage_v = reinterpret_cast<float*>(smem_raw + L::kStageV);
  bf16* const q_s = reinterpret_cast<bf16*>(smem_raw + L::kQ);
  bf16* const k_s = reinterpret_cast<bf16*>(smem_raw + L::kK);
  bf16* const vt_s = reinterpret_cast<bf16*>(smem_raw + L::kVt);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int h = blockIdx.x, kvh = h / (a.n_q_heads / a.n_kv_heads);
  const int hd = a.head_dim;
  const int tile = static_cast<int>(gridDim.y - 1 - blockIdx.y);  // longest first
  const int i0 = tile * kBQ;
  const int nq = min(kBQ, a.n - i0);
  const int64_t p_first = a.pos0 + i0, p_last = p_first + nq - 1;
  const int64_t ld_pool = a.pool_ld > 0 ? a.pool_ld : static_cast<int64_t>(a.n_kv_heads) * hd;
  const float* const k_base = a.k_pool + static_cast<int64_t>(kvh) * hd;
  const float* const v_base = a.v_pool + static_cast<int64_t>(kvh) * hd;

  // Keys kt0 .. kt0 + BK − 1 (those ≤ p_last) into the staging area.
  auto load_tile = [&](int64_t kt0) {
    const int valid = static_cast<int>(min(static_cast<int64_t>(BK), p_last + 1 - kt0));
    constexpr int kPieces = HD / 4;
    for (int i = tid; i < BK * kPieces; i += kThreads) {
      const int r = i / kPieces, c = 4 * (i % kPieces);
      if (r >= valid || c >= hd) continue;
      const int t = static_cast<int>(kt0) + r;  // < 2^31 (checked on the host): 32-bit division
      const int64_t row = static_cast<int64_t>(a.block_table[t / a.block_size]) * a.block_size + t % a.block_size;
      const float* const ks = k_base + row * ld_pool + c;
      const float* const vs = v_base + row * ld_pool + c;
      float* const kd = stage_k + r * kLdS + c;
      float* const vd = stage_v + r * kLdS + c;
      if (async) {
        cp_async16(kd, ks);
        cp_async16(vd, vs);
      } else {
        for (int e = 0; e < 4 && c + e < hd; ++e) {
          kd[e] = ks[e];
          vd[e] = vs[e];
        }
      }
    }
    cp_async_commit();
  };

  // Staging → bf16 k [BK][HD] and vᵀ [HD][BK]; zeros past head_dim and past the last key, so a
  // masked key's weight (0) never meets a stale or NaN value.
  auto convert_tile = [&](int64_t kt0) {
    const int valid = static_cast<int>(min(static_cast<int64_t>(BK), p_last + 1 - kt0));
    for (int i = tid; i < BK * (HD / 2); i += kThreads) {
      const int r = i / (HD / 2), d = 2 * (i % (HD / 2));
      float x0 = 0.f, x1 = 0.f;
      if (r < valid) {
        if (d < hd) x0 = stage_k[r * kLdS + d];
        if (d + 1 < hd) x1 = stage_k[r * kLdS + d + 1];
      }
      *reinterpret_cast<uint32_t*>(k_s + r * kLdH + d) = detail::pack_bf16x2(x0, x1);
    }
    // vᵀ by 8×8 units: lane → dim 8u + (lane & 7), keys 2·(lane >> 3) + {0, 1}: the staging reads
    // (bank 4·key + dim) and the packed vᵀ writes (bank (BK + 8)/2 · dim + key/2) are both
    // conflict-free.
    constexpr int kUnitsD = HD / 8, kUnits = kUnitsD * (BK / 8);
    for (int u = warp; u < kUnits; u += WARPS) {
      const int d = (u % kUnitsD) * 8 + (lane & 7);
      const int r = (u / kUnitsD) * 8 + 2 * (lane >> 3);
      float v0 = 0.f, v1 = 0.f;
      if (d < hd) {
        if (r < valid) v0 = stage_v[r * kLdS + d];
        if (r + 1 < valid) v1 = stage_v[(r + 1) * kLdS + d];
      }
      *reinterpret_cast<uint32_t*>(vt_s + d * kLdK + r) = detail::pack_bf16x2(v0, v1);
    }
  };

  const int64_t n_tiles = p_last / BK + 1;  // key tiles 0 .. the one holding p_last
  load_tile(0);

  const float* const qh = a.q + static_cast<int64_t>(h) * hd;
  for (int i = tid; i < kBQ * (HD / 2); i += kThreads) {
    const int r = i / (HD / 2), d = 2 * (i % (HD / 2));
    float x0 = 0.f, x1 = 0.f;
    if (r < nq) {
      const float* const qr = qh + static_cast<int64_t>(i0 + r) * a.ldq;
      if (d < hd) x0 = qr[d];
      if (d + 1 < hd) x1 = qr[d + 1];
    }
    *reinterpret_cast<uint32_t*>(q_s + r * kLdH + d) = detail::pack_bf16x2(x0, x1);
  }

  float o[HD / 8][4];
#pragma unroll
  for (int nt = 0; nt < HD / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[nt][e] = 0.f;
  // Rows lo/hi of this lane: warp rows g and g + 8 (C fragment layout).
  float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.f, l_hi = 0.f;
  const int64_t p_warp = p_first + warp * 16;  // position of the warp's first row
  const bool warp_rows = warp * 16 < nq;       // a warp of padding rows only skips the products
  const int row_lo = lane >> 2, row_hi = row_lo + 8;
  const float sl2 = a.scale * kLog2e;

  for (int64_t j = 0; j < n_tiles; ++j) {
    const int64_t kt0 = j * BK;
    cp_async_wait_all();
    __syncthreads();  // tile j staged; tile j − 1's bf16 copies consumed (and q_s written)
    convert_tile(kt0);
    __syncthreads();  // bf16 tile j ready; the staging area is free again
    if (j + 1 < n_tiles) load_tile(kt0 + BK);
    // Causal skip: a tile entirely after this warp's last row contributes nothing.
    if (!warp_rows || kt0 > p_warp + 15) continue;
    // Only tiles reaching past the warp's first row need the mask (key ≤ row position).
    const bool masked = kt0 + BK - 1 > p_warp;
    const int k_rel0 = static_cast<int>(kt0 - p_warp);  // key position − p_warp, tile column 0

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
#pragma unroll
    for (int nt = 0; nt < BK / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[nt][e] * sl2;
        if (masked && k_rel0 + nt * 8 + c_col(lane, e) > (e < 2 ? row_lo : row_hi)) x = -INFINITY;
        s[nt][e] = x;
      }
    detail::softmax_pv_tile<BK, HD>(s, o, m_lo, m_hi, l_lo, l_hi, vt_s, kLdK, lane);
  }

  detail::store_normalized<HD>(o, l_lo, l_hi, a.out + static_cast<int64_t>(h) * hd + static_cast<int64_t>(i0) * a.ldo,
                               a.ldo, warp * 16, nq, hd, lane);
}

template <int HD, int BK, int WARPS>
Status launch(const CausalPrefillArgs& a, bool async, cudaStream_t s) {
  using L = CausalSmem<HD, BK, WARPS>;
  auto* kernel = causal_prefill_kernel<HD, BK, WARPS>;
  YOCO_CUDA_RETURN_IF_ERROR(detail::cuda_status(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(L::kBytes)),
      "causal_attention_prefill: shared memory size"));
  const int64_t tiles = (a.n + L::kBQ - 1) / L::kBQ;
  if (tiles > 65535) return invalid_argument("causal_attention_prefill: n too large for one call (split it)");
  const dim3 grid(static_cast<unsigned>(a.n_q_heads), static_cast<unsigned>(tiles));
  kernel<<<grid, WARPS * 32, L::kBytes, s>>>(a, async);
  return detail::launch_status("causal_attention_prefill");
}

}  // namespace

Status causal_attention_prefill(const CausalPrefillArgs& a, void* stream) {
  auto bad = [](const char* what) { return invalid_argument(std::string("causal_attention_prefill: ") + what); };
  if (a.n < 0) return bad("n must be >= 0");
  if (a.n_q_heads <= 0 || a.n_kv_heads <= 0) return bad("n_q_heads and n_kv_heads must be > 0");
  if (a.n_q_heads % a.n_kv_heads != 0) return bad("n_q_heads must be a multiple of n_kv_heads");
  if (a.head_dim <= 0 || a.head_dim > kMaxHeadDim) return bad("head_dim must be in 1..256");
  if (a.pos0 < 0) return bad("pos0 must be >= 0");
  if (a.block_size <= 0) return bad("block_size must be > 0");
  if (a.max_blocks <= 0) return bad("max_blocks must be > 0");
  if (a.pos0 + a.n > static_cast<int64_t>(a.max_blocks) * a.block_size)
    return bad("pos0 + n must be <= max_blocks * block_size");
  if (a.pos0 + a.n > INT32_MAX) return bad("pos0 + n must be < 2^31");
  const int64_t q_width = static_cast<int64_t>(a.n_q_heads) * a.head_dim;
  const int64_t kv_width = static_cast<int64_t>(a.n_kv_heads) * a.head_dim;
  if (a.ldq < q_width) return bad("ldq must be >= n_q_heads * head_dim");
  if (a.ldo < q_width) return bad("ldo must be >= n_q_heads * head_dim");
  if (a.pool_ld != 0 && a.pool_ld < kv_width) return bad("pool_ld must be 0 or >= n_kv_heads * head_dim");
  if (a.n == 0) return Status::Ok();
  if (!a.q) return bad("q is null");
  if (!a.out) return bad("out is null");
  if (!a.k_pool || !a.v_pool) return bad("k_pool and v_pool must be set");
  if (!a.block_table) return bad("block_table is null");

  const int64_t ld_pool = a.pool_ld > 0 ? a.pool_ld : kv_width;
  const bool async = a.head_dim % 4 == 0 && ld_pool % 4 == 0 && reinterpret_cast<uintptr_t>(a.k_pool) % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(a.v_pool) % 16 == 0;
  cudaStream_t s = detail::as_stream(stream);
  // At 256 the key tile and the block shrink so the output accumulators stay in registers and the
  // shared memory (≈ 135 KB) fits an A100.
  return detail::dispatch_head_dim("causal_attention_prefill", a.head_dim, [&](auto hd) {
    constexpr int HD = decltype(hd)::value;
    if constexpr (HD == 256) return launch<256, 32, 4>(a, async, s);
    else return launch<HD, 64, 8>(a, async, s);
  });
}

}  // namespace yoco::cuda
