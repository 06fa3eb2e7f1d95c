// Warp-level bf16 tensor-core products (mma.sync.aligned.m16n8k16, sm_80 and later), shared by the
// prefill kernels. Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating
// point type"), with g = lane / 4 and t = lane % 4:
//   A 16×16 (m×k): a[0] = (g, 2t..2t+1)  a[1] = (g+8, 2t..2t+1)  a[2] = (g, 2t+8..2t+9)  a[3] = (g+8, 2t+8..2t+9)
//   B 16×8  (k×n): b[0] = (2t..2t+1, g)  b[1] = (2t+8..2t+9, g)
//   C 16×8  (m×n): c[0], c[1] = (g, 2t), (g, 2t+1)   c[2], c[3] = (g+8, 2t), (g+8, 2t+1)
// Each 32-bit A/B register holds two bf16, the lower-indexed one in the low half. So the C
// fragments of two adjacent n-tiles, packed pairwise, are the A fragment of one k-step: a score
// tile becomes the left operand of the next product without leaving registers.
//
// Shared-memory tiles are row-major with a row stride `ld` (elements) of (width + 8): then
// ld / 2 ≡ 4 (mod 32) words for widths that are multiples of 64, and the 32 lanes of a
// fragment load hit 32 different banks.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace yoco::cuda::detail {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (low half) = lo
  return *reinterpret_cast<const uint32_t*>(&v);
}

__device__ __forceinline__ float round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// c += a · b on one 16×8×16 tile, fp32 accumulation.
__device__ __forceinline__ void mma_16816(float c[4], const uint32_t a[4], const uint32_t b[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  __trap();  // YOCO_CUDA_ARCHS builds sm_80+ only; an older device fails at launch (no image)
#endif
}

__device__ __forceinline__ uint32_t lds32(const bf16* p) { return *reinterpret_cast<const uint32_t*>(p); }

// A fragment of the 16×16 tile at (row0, k0) of an [m][k] tile (k contiguous).
__device__ __forceinline__ void load_a(uint32_t a[4], const bf16* s, int ld, int row0, int k0, int lane) {
  const bf16* p = s + (row0 + (lane >> 2)) * ld + k0 + 2 * (lane & 3);
  a[0] = lds32(p);
  a[1] = lds32(p + 8 * ld);
  a[2] = lds32(p + 8);
  a[3] = lds32(p + 8 * ld + 8);
}

// B fragment of the 16×8 (k×n) tile at (k0, n0), read from an [n][k] tile (k contiguous).
__device__ __forceinline__ void load_b(uint32_t b[2], const bf16* s, int ld, int n0, int k0, int lane) {
  const bf16* p = s + (n0 + (lane >> 2)) * ld + k0 + 2 * (lane & 3);
  b[0] = lds32(p);
  b[1] = lds32(p + 8);
}

// The A fragment of k-step kk made of score tiles 2kk and 2kk+1 (C layout, see above).
__device__ __forceinline__ void scores_to_a(uint32_t a[4], const float lo[4], const float hi[4]) {
  a[0] = pack_bf16x2(lo[0], lo[1]);
  a[1] = pack_bf16x2(lo[2], lo[3]);
  a[2] = pack_bf16x2(hi[0], hi[1]);
  a[3] = pack_bf16x2(hi[2], hi[3]);
}

// Fragment coordinates of C element e (0..3) of the calling lane, inside its 16×8 tile.
__device__ __forceinline__ int c_row(int lane, int e) { return (lane >> 2) + (e >= 2 ? 8 : 0); }
__device__ __forceinline__ int c_col(int lane, int e) { return 2 * (lane & 3) + (e & 1); }

// --- the flash-attention tile update shared by the prefill attention kernels -------------------
// A warp owns 16 query rows: "lo" are the rows of the lane's C elements 0..1, "hi" of 2..3. It
// keeps the running max m (base 2), the lane's partial normalizer l and the output o [HD/8][4].

// One key tile: s [BK/8][4] holds its scores already scaled into base 2 (log2(e)·scale) with
// hidden keys at −inf. Rescales o and l to the new max, turns s into bf16-rounded weights (so the
// normalizer sums exactly what p·v uses) and adds p·v, vᵀ being [HD][ld] bf16 in shared memory.
template <int BK, int HD>
__device__ __forceinline__ void softmax_pv_tile(float (&s)[BK / 8][4], float (&o)[HD / 8][4], float& m_lo, float& m_hi,
                                                float& l_lo, float& l_hi, const bf16* vt_s, int ld, int lane) {
  float mx_lo = -INFINITY, mx_hi = -INFINITY;
#pragma unroll
  for (int nt = 0; nt < BK / 8; ++nt) {
    mx_lo = fmaxf(mx_lo, fmaxf(s[nt][0], s[nt][1]));
    mx_hi = fmaxf(mx_hi, fmaxf(s[nt][2], s[nt][3]));
  }
  // The four lanes of a quad share a row.
  mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, 1));
  mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, 2));
  mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, 1));
  mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, 2));
  const float new_lo = fmaxf(m_lo, mx_lo), new_hi = fmaxf(m_hi, mx_hi);
  // A row with nothing visible yet keeps m = −inf; exponentiate against 0 so it stays all zeros.
  const float base_lo = new_lo == -INFINITY ? 0.f : new_lo;
  const float base_hi = new_hi == -INFINITY ? 0.f : new_hi;
  const float corr_lo = exp2f(m_lo - base_lo), corr_hi = exp2f(m_hi - base_hi);
  float sum_lo = 0.f, sum_hi = 0.f;
#pragma unroll
  for (int nt = 0; nt < BK / 8; ++nt) {
    s[nt][0] = round_bf16(exp2f(s[nt][0] - base_lo));
    s[nt][1] = round_bf16(exp2f(s[nt][1] - base_lo));
    s[nt][2] = round_bf16(exp2f(s[nt][2] - base_hi));
    s[nt][3] = round_bf16(exp2f(s[nt][3] - base_hi));
    sum_lo += s[nt][0] + s[nt][1];
    sum_hi += s[nt][2] + s[nt][3];
  }
  l_lo = l_lo * corr_lo + sum_lo;  // per-lane partial sums; the quad is summed at the end
  l_hi = l_hi * corr_hi + sum_hi;
  m_lo = new_lo;
  m_hi = new_hi;
#pragma unroll
  for (int nt = 0; nt < HD / 8; ++nt) {
    o[nt][0] *= corr_lo;
    o[nt][1] *= corr_lo;
    o[nt][2] *= corr_hi;
    o[nt][3] *= corr_hi;
  }
#pragma unroll
  for (int kk = 0; kk < BK / 16; ++kk) {
    uint32_t pf[4];
    scores_to_a(pf, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
    for (int nt = 0; nt < HD / 8; ++nt) {
      uint32_t bfr[2];
      load_b(bfr, vt_s, ld, nt * 8, kk * 16, lane);
      mma_16816(o[nt], pf, bfr);
    }
  }
}

// After the last tile: o divided by its row's normalizer (the quad's partial sums added; a row
// that saw no key gives zeros), row r of the warp stored at out[(row0 + r)·ldo + col] for
// row0 + r < nq and col < hd.
template <int HD>
__device__ __forceinline__ void store_normalized(const float (&o)[HD / 8][4], float l_lo, float l_hi, float* out,
                                                 int64_t ldo, int row0, int nq, int hd, int lane) {
  l_lo += __shfl_xor_sync(0xffffffffu, l_lo, 1);
  l_lo += __shfl_xor_sync(0xffffffffu, l_lo, 2);
  l_hi += __shfl_xor_sync(0xffffffffu, l_hi, 1);
  l_hi += __shfl_xor_sync(0xffffffffu, l_hi, 2);
  const float inv_lo = l_lo > 0.f ? 1.f / l_lo : 0.f, inv_hi = l_hi > 0.f ? 1.f / l_hi : 0.f;
#pragma unroll
  for (int nt = 0; nt < HD / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = row0 + c_row(lane, e), col = nt * 8 + c_col(lane, e);
      if (r < nq && col < hd) out[static_cast<int64_t>(r) * ldo + col] = o[nt][e] * (e < 2 ? inv_lo : inv_hi);
    }
}

}  // namespace yoco::cuda::detail
