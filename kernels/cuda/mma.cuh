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

}  // namespace yoco::cuda::detail
