// The CPU backend: plain fp32 kernels, the oracle every other backend is tested against.
// Layout conventions: matrices are row-major; weights are PyTorch [out, in] (y = x·Wᵀ);
// "ld" arguments are row strides in elements, so a head inside a wider row is addressed as
// (base + head * head_dim, ld = row width).
#pragma once

#include <cstdint>

namespace yoco::cpu {

// Threads used by kernels and BLAS. 0 = default_threads().
void set_num_threads(int n);
int num_threads();
// Physical cores among the CPUs this process may run on (sched_getaffinity + sysfs topology):
// hyperthreads of one core count once. The CPU count when the topology is unreadable.
int physical_cores();
// What `--threads 0` means: OMP_NUM_THREADS when set, else one thread per physical core
// (bench/README.md, threads).
int default_threads();

// --- gemm.cc -----------------------------------------------------------------------
// C[m,n] = alpha · A[m,k] · op(B) + beta · C, op(B) = B[n,k]ᵀ when b_trans else B[k,n].
void gemm(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb, bool b_trans, float beta,
          float* c, int ldc);
// The plain triple loop the BLAS path is tested against (and the build without BLAS uses).
void gemm_reference(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb, bool b_trans,
                    float beta, float* c, int ldc);
// y[m,n] = x[m,k] · W[n,k]ᵀ (+ y when accumulate): a linear layer.
inline void linear(const float* x, const float* w, float* y, int m, int n, int k, bool accumulate = false) {
  gemm(m, n, k, 1.0f, x, k, w, k, true, accumulate ? 1.0f : 0.0f, y, n);
}
bool gemm_uses_blas();

// --- gemv.cc -----------------------------------------------------------------------
// gemm with b_trans for m <= kSmallM rows (a decode step: m = batch): tiles of rows of B (4, or
// one at m <= 2) are read from memory once for all m rows, so a step costs one pass over the
// weights whatever m.
// Each output is computed by the same operations whatever m is.
constexpr int kSmallM = 16;
// Products with a smaller B run on one thread (waking the others costs more than they save).
constexpr int64_t kSmallMThreadBytes = int64_t{1} << 20;
void gemm_small_m(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb, float beta,
                  float* c, int ldc);

// --- tile.cc -----------------------------------------------------------------------
// gemm on one thread with no library: the small products of attention and retention tiles, which
// run inside their callers' parallel regions (so the engine's speed there does not depend on
// OpenBLAS or OPENBLAS_CORETYPE). Register-blocked for the running CPU's vector width.
void gemm_tile(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb, bool b_trans,
               float beta, float* c, int ldc);
// The same with A given as Aᵀ [k, m] (row stride ldat): C = alpha · A · B + beta · C, B [k, n].
void gemm_tile_at(int m, int n, int k, float alpha, const float* at, int ldat, const float* b, int ldb, float beta,
                  float* c, int ldc);

// --- rmsnorm.cc --------------------------------------------------------------------
// y = x / sqrt(mean(x²) + eps) · w over each of `rows` rows of `dim`; w may be null (no weight).
void rmsnorm(const float* x, int ldx, const float* w, float* y, int ldy, int rows, int dim, float eps);

// --- rope.cc -----------------------------------------------------------------------
// cos/sin for interleaved RoPE: table[r * half + j] for the r-th position, j < head_dim/2,
// frequency theta^(-j/(head_dim/2 - 1)); angles are formed in double so long positions stay exact.
void rope_table(const int64_t* positions, int rows, int head_dim, double theta, float* cos_out, float* sin_out);
// Rotates the pairs (2j, 2j+1) of every head of every row in place.
void rope_apply(float* x, int ld, int rows, int n_heads, int head_dim, const float* cos_t, const float* sin_t);

// --- activation.cc -----------------------------------------------------------------
// out[r, i] = silu(a[r, i]) · b[r, i]; a and b are row-strided views (SwiGLU and gRet's output gate).
void silu_mul(const float* a, int lda, const float* b, int ldb, float* out, int ldo, int rows, int cols);
// out[i] = scale · table[ids[i]] (embedding lookup with the √dim factor).
void embed(const float* table, int dim, const int32_t* ids, int n, float scale, float* out);
void add_inplace(float* y, const float* x, int64_t n);
void scale_inplace(float* y, float s, int64_t n);
// log-softmax of one row, in place, in fp32 with a max shift.
void log_softmax(float* x, int n);

// --- moe.cc ------------------------------------------------------------------------
// A mixture of experts' routing (docs/design.md §2.2), per row of logits [rows, n_experts]:
// probs = softmax in fp32; the k largest probs, best first, ties to the lower expert index
// (experts [rows, k]); their weights, divided by their sum when norm_topk ([rows, k]).
void moe_route(const float* logits, int rows, int n_experts, int k, bool norm_topk, float* probs, int32_t* experts,
               float* weights);

// --- attention.cc ------------------------------------------------------------------
// Softmax attention for a block of queries against a run of keys with absolute positions.
// Query r has absolute position q_pos0 + r; key c has absolute position k_pos0 + c.
// Query at p sees keys at positions in (p - window, p]; window <= 0 means unbounded (causal).
// Query head h reads kv head h / (n_q_heads / n_kv_heads).
struct AttentionArgs {
  const float* q;
  int ldq;  // [n_q, n_q_heads * head_dim] (strided)
  const float* k;
  int ldk;  // [n_k, n_kv_heads * head_dim]
  const float* v;
  int ldv;
  float* out;
  int ldo;  // [n_q, n_q_heads * head_dim]
  int n_q, n_k, n_q_heads, n_kv_heads, head_dim;
  int64_t q_pos0, k_pos0;
  int window;
  float scale;
};
void attention(const AttentionArgs& a);
// The O(n_q · n_k) textbook version for tests.
void attention_reference(const AttentionArgs& a);

// One query per sequence against all its keys, which live in blocks (a paged pool, one
// contiguous run, or the two halves of a ring in age order). Keys are visited in block order,
// so the same keys in the same order give bitwise the same result wherever they are stored.
// GQA groups share one read of each kv head.
struct KvBlocks {
  const float* const* k_blocks;  // pointers to [rows, kv_dim]
  const float* const* v_blocks;
  int block_size;  // rows per block when block_rows is null (the last may be partial)
  int64_t n_tokens;
  const int* block_rows = nullptr;  // optional per-block row counts
  // 16-bit K/V: when set, the blocks are bf16 (widened exactly as they are read) and k_blocks /
  // v_blocks are ignored. The result is the fp32 kernel's on the widened values, bit for bit.
  const uint16_t* const* k16_blocks = nullptr;
  const uint16_t* const* v16_blocks = nullptr;
};
void decode_attention(const float* q, const KvBlocks& kv, float* out, int n_q_heads, int n_kv_heads, int head_dim,
                      float scale);

// --- retention.cc ------------------------------------------------------------------
// Gated retention for one head: S_t = exp(a_t) S_{t-1} + k_tᵀ v_t, o_t = q_t S_t.
// q, k, v are [n, head_dim] strided views; a[n] are log-decays (≤ 0); s is the hd×hd state
// (row = key dim, col = value dim), read and updated in place.
void retention_recurrent(const float* q, int ldq, const float* k, int ldk, const float* v, int ldv, const float* a,
                         int n, int head_dim, float* s, float* out, int ldo);
// Chunkwise form (docs/design.md §2.3) with chunk size `chunk`; any n.
void retention_chunkwise(const float* q, int ldq, const float* k, int ldk, const float* v, int ldv, const float* a,
                         int n, int head_dim, int chunk, float* s, float* out, int ldo);
// Parallel (quadratic) form in double precision, for tests; starts from s (may be null = zeros)
// and writes the final state to s_out when given.
void retention_parallel(const float* q, int ldq, const float* k, int ldk, const float* v, int ldv, const float* a,
                        int n, int head_dim, const float* s, float* out, int ldo, float* s_out);

}  // namespace yoco::cpu
