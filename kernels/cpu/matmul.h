// Matrix products beyond gemm.cc's plain fp32 entry point: the library that runs the large
// fp32 products (chosen by measurement, bench/README.md "GEMM roof"), and the bf16 path
// (bf16 weights, fp32 activations converted per product, fp32 accumulation; docs/design.md,
// CPU compute precision).
#pragma once

#include <cstdint>

namespace yoco::cpu {

// --- isa.cc ------------------------------------------------------------------------
// The instruction set the kernels and the products run on: "base" (SSE), "avx2", "avx512",
// "avx512-bf16" or "amx" (the widest the CPU has, narrowed by YOCO_CPU_ISA=avx2|base for our
// kernels and oneDNN alike).
const char* isa_path();

// --- gemm_dnnl.cc ------------------------------------------------------------------
// True when this build has oneDNN and it may be used (YOCO_GEMM_LIBRARY=openblas|reference in
// the environment turns it off, for measurements).
bool dnnl_enabled();
// The library that runs fp32 products of at least kLibraryMinRows rows: "onednn", "openblas" or
// "reference" (the triple loop of a build without BLAS).
const char* gemm_library();
// Fewest rows of A for which gemm() hands an fp32 product to oneDNN: below it, the primitive's
// fixed cost beats its speed (bench/gemm_roof.cc).
inline constexpr int kLibraryMinRows = 32;
// gemm() through oneDNN's matmul, primitives cached per shape. False (nothing written) when
// oneDNN is unavailable or disabled; the caller then runs its own path.
bool gemm_dnnl(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb, bool b_trans,
               float beta, float* c, int ldc);
// C[m,n] = A[m,k] · W[n,k]ᵀ (+ beta · C) in bf16 with fp32 sums; false as gemm_dnnl.
using bf16 = uint16_t;
bool dnnl_bf16_supported();  // oneDNN has a bf16 matmul for this CPU (AVX-512 and up)
bool gemm_dnnl_bf16(int m, int n, int k, const bf16* a, int lda, const bf16* w, int ldw, float beta, float* c, int ldc);

// --- gemv.cc -----------------------------------------------------------------------
// y[m,n] = x[m,k] · W[n,k]ᵀ (+ y when accumulate) for few rows of x (a decode step) with W in
// bf16 and x in fp32: gemm_small_m's kernel (ops.h), W widened exactly as it is read.
void gemm_small_m_bf16(int m, int n, int k, const float* x, const bf16* w, float* y, bool accumulate);

// --- bf16.cc -----------------------------------------------------------------------
// bfloat16 is held as its 16 bits. Conversion rounds to nearest even (NaN stays NaN).
void to_bf16(const float* x, bf16* y, int64_t n);
void from_bf16(const bf16* x, float* y, int64_t n);
// y[m,n] = x[m,k] · W[n,k]ᵀ (+ y when accumulate) with W in bf16 and fp32 sums. Products of many
// rows (8, or 16 with split_x) and at least 64 outputs run through oneDNN's bf16 matmul with x
// rounded to bf16 (linear_bf16_rounds_x); the others (decode steps, a gate of one output per head)
// are bound by reading W or x and keep x in fp32. split_x: x is rounded to two
// bf16 terms hi + lo and both are multiplied (twice the work, ~16 significant bits of x), for
// products whose outputs accumulate over a whole sequence (gated retention's q, k, v).
void linear_bf16(const float* x, const bf16* w, float* y, int m, int n, int k, bool accumulate = false,
                 bool split_x = false);
bool linear_bf16_rounds_x(int m, int n, bool split_x = false);
// Where the CPU has no bf16 matmul (oneDNN's needs AVX-512; bf16 is never a trap without it):
// products of more than kSmallM rows widen W to fp32 a panel of rows at a time and multiply each
// panel with gemm()'s fp32 kernel, x in fp32; fewer rows run gemm_small_m_bf16, which widens W in
// registers. The same function is callable on any CPU (tests compare it with the fp32 product on
// the widened matrix).
bool linear_bf16_widens();
// The panel, in rows of W (whole multiples of 16, so the library sees at most two shapes per
// product): a short product (under kBf16WideRows rows of x) takes kBf16PanelBytes of fp32, which
// stay in cache while it reads them once; a long one is bound by its arithmetic, and each panel
// costs it one more pass of the library over x (packing m·k values), so it takes up to
// kBf16WidePanelBytes: mid-gret's FFN-down (k = 2,816) in one product instead of six 176-row ones.
inline constexpr int64_t kBf16PanelBytes = int64_t{2} << 20;
inline constexpr int64_t kBf16WidePanelBytes = int64_t{32} << 20;
inline constexpr int kBf16WideRows = 256;
int linear_bf16_panel_rows(int m, int n, int k);
void linear_bf16_widened(const float* x, const bf16* w, float* y, int m, int n, int k, bool accumulate = false);
// The plain loop linear_bf16 is tested against: the same rounding of x, fp32 sums.
void linear_bf16_reference(const float* x, const bf16* w, float* y, int m, int n, int k, bool accumulate = false,
                           bool split_x = false);
// out[i] = scale · table[ids[i]] from a bf16 table.
void embed_bf16(const bf16* table, int dim, const int32_t* ids, int n, float scale, float* out);

}  // namespace yoco::cpu
