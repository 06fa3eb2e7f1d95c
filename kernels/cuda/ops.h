// The CUDA backend's interface. Plain C++: callers never see CUDA headers. Every function
// returns a Status; device pointers are passed as void*/float*/uint16_t* (bf16 bit patterns)
// and streams as void* (a cudaStream_t; null = the legacy default stream).
//
// Conventions follow kernels/cpu/ops.h (the oracle): row-major, weights PyTorch [out, in]
// (y = x·Wᵀ), "ld" = row stride in elements. All math is fp32; bf16 is a storage format only.
// Every op is asynchronous on `stream`; a Status reports argument errors and launch errors,
// not faults that happen later on the device (check those with a stream synchronize).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"

namespace yoco::cuda {

enum class DType { kF32, kBF16 };

// Number of usable CUDA devices (0 when there is no driver or no device).
int device_count();

// --- gemm.cu -------------------------------------------------------------------------
// C[m,n] = alpha · A[m,k] · B[n,k]ᵀ + beta · C, through cuBLASLt: A and B bf16 row-major
// (B is the nn.Linear weight layout), fp32 accumulation, C fp32 or bf16 (c_type), dense
// (lda = ldb = k, ldc = n). beta = 1 with fp32 C adds into it (the residual after out_proj).
// The handle, the heuristic's choice per shape/alignment and a workspace per (device,
// stream) are cached inside; the first call on a stream allocates (so not under graph capture).
Status gemm_bf16(const uint16_t* a, const uint16_t* b, void* c, DType c_type, int m, int n, int k, float alpha,
                 float beta, void* stream);

// --- rmsnorm.cu ----------------------------------------------------------------------
// y[r] = x[r] / sqrt(mean(x²) + eps) · w (w may be null), fp32 on the device; y may be x.
Status rmsnorm(const float* x, const float* w, float* y, int rows, int dim, float eps, void* stream);
// The same with bf16 x and y and fp32 statistics; the weight stays fp32 (it is tiny). y may be x.
Status rmsnorm_bf16(const uint16_t* x, const float* w, uint16_t* y, int rows, int dim, float eps, void* stream);

// --- rope.cu -------------------------------------------------------------------------
// Interleaved RoPE in place on `rows` rows of n_heads heads (head h at x + r·ld + h·head_dim):
// pairs (2j, 2j+1) rotate by positions[r] · theta^(−j/(head_dim/2 − 1)) (SPEC 2.2, as
// cpu::rope_table). positions is a device array of `rows` int64. Angles, cos and sin are
// formed in double as on the CPU, so cos/sin match it to the float rounding; the rotation
// itself is fp32 (≤ ~2 ulp apart from the CPU's).
Status rope_interleaved(float* x, int ld, int rows, int n_heads, int head_dim, const int64_t* positions,
                        double theta, void* stream);
Status rope_interleaved_bf16(uint16_t* x, int ld, int rows, int n_heads, int head_dim, const int64_t* positions,
                             double theta, void* stream);

// --- activation.cu -------------------------------------------------------------------
// out[r, i] = silu(a[r, i]) · b[r, i] over rows × cols, strided as cpu::silu_mul. The SwiGLU of
// the fused fc1|gate projection u [rows, 2H] is silu_mul(u, 2H, u + H, 2H, out, H, rows, H)
// (SPEC 2.2: fc1 is the activated half). out may alias a or b (same ld).
Status silu_mul(const float* a, int lda, const float* b, int ldb, float* out, int ldo, int rows, int cols,
                void* stream);
Status silu_mul_bf16(const uint16_t* a, int lda, const uint16_t* b, int ldb, uint16_t* out, int ldo, int rows,
                     int cols, void* stream);
// out[i] = scale · table[ids[i]] (fp32 out), table [vocab, dim] of table_type. ids are device
// int32 and are NOT checked on the device: the caller validates them against the vocabulary.
Status embed(const void* table, DType table_type, int dim, const int32_t* ids, int n, float scale, float* out,
             void* stream);
// y[i] += x[i] (the residual add).
Status add_inplace(float* y, const float* x, int64_t n, void* stream);

// --- attention.cu --------------------------------------------------------------------
// Cross-attention decode over the paged global KV (one query row per sequence), the GPU twin of
// cpu::decode_attention: softmax(scale · q·Kᵀ) V over keys 0..lengths[b]-1 of sequence b, query
// head h reading kv head h / (n_q_heads / n_kv_heads). Key t of sequence b is row t % block_size
// of pool block block_tables[b·max_blocks + t / block_size]; the pool is
// [n_blocks, block_size, n_kv_heads·head_dim] fp32 for K and for V.
// Flash-decoding: each sequence's keys are cut into splits of split_keys keys, one thread block
// per (sequence, kv head, split) (the GQA group shares every K/V read), then a combine kernel.
// The split size depends only on split_keys, so a sequence's result is bitwise independent of
// the batch it runs in.
struct PagedDecodeArgs {
  const float* q = nullptr;  // [batch, n_q_heads·head_dim], row stride ldq
  int ldq = 0;
  float* out = nullptr;  // [batch, n_q_heads·head_dim], row stride ldo
  int ldo = 0;
  const float* k_pool = nullptr;
  const float* v_pool = nullptr;
  const int32_t* block_tables = nullptr;  // device [batch, max_blocks]
  int max_blocks = 0;
  const int32_t* lengths = nullptr;  // device [batch], 0 ≤ lengths[b] ≤ max_length
  int64_t max_length = 0;            // host-side bound on lengths (sizes the grid)
  int batch = 0, n_q_heads = 0, n_kv_heads = 0, head_dim = 0, block_size = 0;
  float scale = 0.f;   // 1/sqrt(head_dim) for SPEC 2.4
  int split_keys = 0;  // keys per split; 0 = the default (512)
};
// Limits: head_dim ≤ 256, n_q_heads / n_kv_heads ≤ 16. A sequence of length 0 gets zeros.
Status decode_attention_paged(const PagedDecodeArgs& args, void* stream);

// --- retention.cu --------------------------------------------------------------------
// One gated-retention decode step for a batch (SPEC 2.3, as model.cc's decode path around
// cpu::retention_recurrent): per sequence b and head h,
//   a = logsigmoid(gt[b, h]) / gate_logit_normalizer,  k' = k · k_scale,
//   S ← exp(a) · S + k'ᵀ v,   o = q · S   (S is hd×hd fp32, row = key dim, col = value dim).
// q, k, v: head h of sequence b at base + b·ld + h·head_dim (post-RoPE); gt: [batch, ldg];
// states: device array of `batch` pointers, each to that sequence's [n_heads, hd, hd] state
// (updated in place); out: [batch, ldo]. The per-head RMSNorm and the silu(g) gate that
// follow in the model are separate ops (rmsnorm with rows = batch·n_heads, silu_mul).
// Limit: head_dim ≤ 1024.
struct RetentionStepArgs {
  const float* q = nullptr;
  int ldq = 0;
  const float* k = nullptr;
  int ldk = 0;
  const float* v = nullptr;
  int ldv = 0;
  const float* gt = nullptr;  // gate logits x·W_gt, [batch, ldg]
  int ldg = 0;
  float* const* states = nullptr;
  float* out = nullptr;
  int ldo = 0;
  int batch = 0, n_heads = 0, head_dim = 0;
  float k_scale = 1.f;                 // hd^(−1/2) for SPEC 2.3
  float gate_logit_normalizer = 16.f;  // τ
};
Status retention_decode_step(const RetentionStepArgs& args, void* stream);

}  // namespace yoco::cuda
