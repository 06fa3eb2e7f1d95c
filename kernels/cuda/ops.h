// The CUDA backend's interface. Plain C++: callers never see CUDA headers. Every function
// returns a Status; device pointers are passed as void*/float*/uint16_t* (bf16 bit patterns)
// and streams as void* (a cudaStream_t; null = the legacy default stream).
//
// Conventions follow kernels/cpu/ops.h (the oracle): row-major, weights PyTorch [out, in]
// (y = x·Wᵀ), "ld" = row stride in elements. Math is fp32 and bf16 a storage format, except the
// ops that say they round their matmul inputs to bf16 for the tensor cores (fp32 accumulation).
// Every op is asynchronous on `stream`; a Status reports argument errors and launch errors,
// not faults that happen later on the device (check those with a stream synchronize).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/status.h"

namespace yoco::cuda {

enum class DType { kF32, kBF16 };

// Number of usable CUDA devices (0 when there is no driver or no device).
int device_count();
// Frees the scratch buffers the ops keep for `stream` on the current device (gemm workspace,
// attention partials, sampling keys). Call it before destroying a stream, after its work has
// finished (e.g. a cudaStreamSynchronize); a later op on that stream allocates afresh.
Status release_scratch(void* stream);

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
// pairs (2j, 2j+1) rotate by positions[r] · theta^(−j/(head_dim/2 − 1)) (docs/design.md §2.2, as
// cpu::rope_table). positions is a device array of `rows` int64. Angles, cos and sin are
// formed in double as on the CPU, so cos/sin match it to the float rounding; the rotation
// itself is fp32 (≤ ~2 ulp apart from the CPU's).
Status rope_interleaved(float* x, int ld, int rows, int n_heads, int head_dim, const int64_t* positions, double theta,
                        void* stream);
Status rope_interleaved_bf16(uint16_t* x, int ld, int rows, int n_heads, int head_dim, const int64_t* positions,
                             double theta, void* stream);

// --- activation.cu -------------------------------------------------------------------
// out[r, i] = silu(a[r, i]) · b[r, i] over rows × cols, strided as cpu::silu_mul. The SwiGLU of
// the fused fc1|gate projection u [rows, 2H] is silu_mul(u, 2H, u + H, 2H, out, H, rows, H)
// (docs/design.md §2.2: fc1 is the activated half). out may alias a or b (same ld).
Status silu_mul(const float* a, int lda, const float* b, int ldb, float* out, int ldo, int rows, int cols,
                void* stream);
Status silu_mul_bf16(const uint16_t* a, int lda, const uint16_t* b, int ldb, uint16_t* out, int ldo, int rows, int cols,
                     void* stream);
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
// [n_blocks, block_size, n_kv_heads·head_dim] fp32 for K and for V, or, with pool_ld set, pool
// row i starts at k_pool + i · pool_ld (one layer's columns of a wider row: point k_pool and
// v_pool at the layer's column offset, as causal_attention_prefill).
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
  int64_t pool_ld = 0;                    // floats between pool rows; 0 = n_kv_heads·head_dim
  const int32_t* block_tables = nullptr;  // device [batch, max_blocks]
  int max_blocks = 0;
  const int32_t* lengths = nullptr;  // device [batch], 0 ≤ lengths[b] ≤ max_length
  int64_t max_length = 0;            // host-side bound on lengths (sizes the grid)
  int batch = 0, n_q_heads = 0, n_kv_heads = 0, head_dim = 0, block_size = 0;
  float scale = 0.f;   // 1/sqrt(head_dim) for docs/design.md §2.4
  int split_keys = 0;  // keys per split; 0 = the default (512)
};
// Limits: head_dim ≤ 256, n_q_heads / n_kv_heads ≤ 16. A sequence of length 0 gets zeros.
Status decode_attention_paged(const PagedDecodeArgs& args, void* stream);
// Sizes the scratch decode_attention_paged keeps per stream for calls with up to args.batch
// sequences and args.max_length keys (other fields: n_q_heads, head_dim, split_keys), so that
// such calls never reallocate it: a CUDA graph that captured them keeps valid pointers. Allocates
// (not under capture).
Status decode_attention_paged_reserve(const PagedDecodeArgs& args, void* stream);

// --- retention.cu --------------------------------------------------------------------
// One gated-retention decode step for a batch (docs/design.md §2.3, as model/cpu_backend.cc's retention op around
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
  float k_scale = 1.f;                 // hd^(−1/2) for docs/design.md §2.3
  float gate_logit_normalizer = 16.f;  // τ
};
Status retention_decode_step(const RetentionStepArgs& args, void* stream);

// --- retention_prefill.cu ------------------------------------------------------------
// Gated-retention prefill of one sequence's chunk of n tokens, the GPU twin of the chunkwise
// form (docs/design.md §2.3, cpu::retention_chunkwise as model/cpu_backend.cc's retention op uses it): per head h,
// with a_t = logsigmoid(gt[t, h]) / gate_logit_normalizer, k'_t = k_t · k_scale and, inside each
// chunk of C tokens, b_i the running sum of a (in token order, as the CPU forms it),
//   o_i = Σ_{j≤i} (q_i·k'_j) exp(b_i − b_j) v_j + exp(b_i) q_i S_prev,
//   S_next = exp(b_C) S_prev + Σ_j k'_jᵀ v_j exp(b_C − b_j).
// Chunks start at token 0 of the call; state is read from and written back to `state`
// ([n_heads, hd, hd] fp32, row = key dim, col = value dim, one sequence), so two calls of n1 and
// n2 tokens equal one call of n1 + n2 (up to rounding; the chunk boundaries differ).
// q, k, v: row t, head h at base + t·ld + h·head_dim (post-RoPE, k NOT yet scaled); gt: [n, ldg];
// out: [n, ldo]. The per-head RMSNorm and the silu(g) gate that follow are separate ops.
// Precision: q, k', v, the masked decay matrix P and the bf16 copy of S_prev enter bf16
// tensor-core products (mma.sync m16n8k16, fp32 accumulation); the gate, the cumulative decays,
// the decay factors and the carried state S stay fp32 (docs/design.md §2.5). Expect ~2^-8 relative error
// against the fp32 CPU op, not ~1e-6.
// Limits: head_dim ≤ 256 (padded inside to 32/64/128/256), chunk ∈ {32, 64} (0 = 64), sm_80+.
struct RetentionPrefillArgs {
  const float* q = nullptr;
  int ldq = 0;
  const float* k = nullptr;
  int ldk = 0;
  const float* v = nullptr;
  int ldv = 0;
  const float* gt = nullptr;  // gate logits x·W_gt, [n, ldg]
  int ldg = 0;
  float* state = nullptr;  // [n_heads, head_dim, head_dim], read and updated
  float* out = nullptr;
  int ldo = 0;
  int n = 0, n_heads = 0, head_dim = 0;
  int chunk = 0;                       // C; 0 = 64
  float k_scale = 1.f;                 // hd^(−1/2) for docs/design.md §2.3
  float gate_logit_normalizer = 16.f;  // τ
};
Status retention_prefill(const RetentionPrefillArgs& args, void* stream);

// --- swa.cu --------------------------------------------------------------------------
// Sliding-window attention (docs/design.md §2.3) over a per-sequence window ring: the GPU layout of
// SelfLayerState's ring. A ring is [window, n_kv_heads·head_dim] fp32 for K and the same for V;
// the post-RoPE row of position p lives in row p % window (the layout depends on the position
// alone, so a restored state needs no rotation). Before a call that starts at position pos0 the
// ring must hold positions max(0, pos0 − window + 1) .. pos0 − 1 (every earlier row went through
// it, as the CPU model's ring_push does, or a restored state was written there).
// Query at position p sees keys p − window < j ≤ p; query head h reads kv head
// h / (n_q_heads / n_kv_heads); scores scaled by `scale` (1/sqrt(hd)).

// Prefill of one sequence's n queries at positions pos0 .. pos0 + n − 1 against the ring's older
// keys and this call's own k/v rows, then the call's last min(n, window) k/v rows are written
// into the ring (a second kernel on the same stream, after the attention has read the ring), so
// consecutive calls resume exactly like one call (up to rounding).
// Flash-attention style: a block per (64 queries, query head); q·kᵀ and p·v on bf16 tensor cores
// (mma.sync m16n8k16, fp32 accumulation), the online softmax in fp32 registers; q, k, v and
// the softmax weights are rounded to bf16 for the products (expect ~2^-8 relative error).
// Limits: head_dim ≤ 256, sm_80+.
struct SwaPrefillArgs {
  const float* q = nullptr;  // [n, n_q_heads·head_dim], row stride ldq
  int ldq = 0;
  const float* k = nullptr;  // [n, n_kv_heads·head_dim] this call's keys (post-RoPE), stride ldk
  int ldk = 0;
  const float* v = nullptr;
  int ldv = 0;
  float* k_ring = nullptr;  // [window, n_kv_heads·head_dim], read, then updated
  float* v_ring = nullptr;
  float* out = nullptr;  // [n, n_q_heads·head_dim], stride ldo
  int ldo = 0;
  int n = 0, n_q_heads = 0, n_kv_heads = 0, head_dim = 0, window = 0;
  int64_t pos0 = 0;
  float scale = 0.f;
};
Status swa_prefill(const SwaPrefillArgs& args, void* stream);

// One decode step for a batch: sequence b's token at position positions[b] attends keys
// max(0, pos − window + 1) .. pos, where key pos is this step's k/v row (read from k and v) and
// the older ones come from its ring; the step's k/v row is then stored in ring row pos % window
// (a row no query of this step reads, so one kernel does both). fp32 throughout (CUDA cores):
// within ~1e-5 of cpu::decode_attention over the same window. One block per (sequence, kv head),
// the GQA group sharing every K/V read.
// Limits: head_dim ≤ 256, n_q_heads / n_kv_heads ≤ 16.
struct SwaDecodeArgs {
  const float* q = nullptr;  // [batch, n_q_heads·head_dim], stride ldq
  int ldq = 0;
  const float* k = nullptr;  // [batch, n_kv_heads·head_dim] this step's keys (post-RoPE)
  int ldk = 0;
  const float* v = nullptr;
  int ldv = 0;
  float* const* k_rings = nullptr;  // device array of `batch` ring pointers (see above)
  float* const* v_rings = nullptr;
  const int64_t* positions = nullptr;  // device [batch]: position of this step's token (≥ 0)
  float* out = nullptr;                // [batch, n_q_heads·head_dim], stride ldo
  int ldo = 0;
  int batch = 0, n_q_heads = 0, n_kv_heads = 0, head_dim = 0, window = 0;
  float scale = 0.f;
};
Status swa_decode(const SwaDecodeArgs& args, void* stream);

// --- causal_attention.cu ------------------------------------------------------------
// Causal attention prefill of one sequence over its paged K/V (the Transformer baseline's
// attention, docs/design.md §2.6): the n queries at positions pos0 .. pos0 + n − 1 each attend keys 0 .. p of
// their position p, softmax(scale · q·kᵀ) v, query head h reading kv head h / (n_q_heads /
// n_kv_heads). Every key 0 .. pos0 + n − 1, this call's included, must already be in the pool
// (append the chunk's rows first). Key t is row t % block_size of pool block
// block_table[t / block_size]; pool row i of that layout starts at k_pool + i · pool_ld, and its
// kv head g at + g · head_dim. So a pool whose row holds every layer's K side by side is read
// one layer at a time by pointing k_pool (v_pool) at the layer's column offset and setting
// pool_ld to the whole row width. Block ids are NOT checked on the device.
// Flash-attention style: a block per (128 queries (64 at head_dim > 128), query head); K/V tiles
// are fetched with cp.async into an fp32 staging area and converted to bf16 in shared memory;
// q·kᵀ and p·v on bf16 tensor cores (mma.sync m16n8k16, fp32 accumulation), the online softmax in
// fp32; key tiles entirely after a warp's queries are skipped. q, k, v and the softmax weights
// are rounded to bf16 for the products (expect ~2^-8 relative error).
// Limits: head_dim ≤ 256, n ≤ 65535 · 64, sm_80+.
struct CausalPrefillArgs {
  const float* q = nullptr;  // [n, n_q_heads·head_dim], row stride ldq (post-RoPE)
  int ldq = 0;
  float* out = nullptr;  // [n, n_q_heads·head_dim], row stride ldo
  int ldo = 0;
  const float* k_pool = nullptr;  // this layer's column 0 of pool row 0 (see above), post-RoPE K
  const float* v_pool = nullptr;
  int64_t pool_ld = 0;                   // floats between pool rows; 0 = n_kv_heads·head_dim
  const int32_t* block_table = nullptr;  // device [max_blocks]
  int max_blocks = 0, block_size = 0;
  int n = 0, n_q_heads = 0, n_kv_heads = 0, head_dim = 0;
  int64_t pos0 = 0;
  float scale = 0.f;  // 1/sqrt(head_dim)
};
Status causal_attention_prefill(const CausalPrefillArgs& args, void* stream);

// --- sampling.cu ---------------------------------------------------------------------
// Token sampling on the device, model/sampler.cc's Sampler::sample without the penalties (apply
// those to the logits first): temperature 0 is greedy (argmax, lowest index on ties); otherwise
// candidates sorted by logit (ties: lower index first), cut to top_k (0 = off), probabilities
// exp((l − max) / T) normalized over them in double, then top-p (smallest prefix whose mass
// reaches top_p), then min-p (keep while prob ≥ min_p · prob[0]), then one draw r = U · mass
// walking the kept prefix in order.
// Randomness: each row carries model/sampler.cc's xoshiro256** state (4 × u64, seeded by the same
// splitmix64 expansion, see sampling_rng_init) and a non-greedy row makes exactly one draw per
// call, as the CPU sampler does. So U is bit-identical to the CPU's; the probabilities are the
// same formulas but the normalizer and the prefix sums are added in a different order (a tree,
// not a loop), so the token equals the CPU sampler's except when the draw or the top-p cut falls
// within ~1e-15 (relative) of a boundary between two candidates. A row's token is a function of
// (logits, params, seed, number of earlier draws) alone, never of the batch it runs in.
// Parameters are NOT validated on the device: check them with SamplingParams::validate.
struct SamplingRow {
  float temperature = 1.0f;  // 0: greedy
  int top_k = 0;             // 0 or ≥ vocab: off
  float top_p = 1.0f;        // (0, 1]
  float min_p = 0.0f;        // [0, 1]
};
struct SampleArgs {
  const float* logits = nullptr;  // [batch, ld] fp32 (columns 0..vocab−1 used); not modified
  int64_t ld = 0;
  int batch = 0, vocab = 0;
  const SamplingRow* params = nullptr;  // device [batch]
  uint64_t* rng_states = nullptr;       // device [batch, 4]; advanced by one draw per non-greedy row
  int32_t* tokens = nullptr;            // device [batch] out
};
// Sorts every row (cub radix sort of (row, logit, index) keys in a per-stream scratch buffer of
// 16·batch·vocab bytes plus cub's temporary storage, so not under graph capture on first use).
// Limits: batch·vocab < 2^31 and ⌈log2 batch⌉ + ⌈log2 vocab⌉ ≤ 32 (split bigger batches).
// Logits must not be NaN (−inf is fine: a masked token).
Status sample_tokens(const SampleArgs& args, void* stream);
// argmax per row (lowest index on ties): what sample_tokens does for temperature 0, without the sort.
Status sample_greedy(const float* logits, int64_t ld, int batch, int vocab, int32_t* tokens, void* stream);
// states[b] = the xoshiro256** state of model/sampler.cc's Rng(seeds[b]) after draws[b] draws
// (draws may be null = 0; ≥ 0): what Sampler::replay leaves after that many non-greedy tokens.
Status sampling_rng_init(const uint64_t* seeds, const int64_t* draws, uint64_t* states, int batch, void* stream);

// --- moe.cu --------------------------------------------------------------------------
// A mixture of experts (docs/design.md §2.2), the twin of cpu::moe_route and of the CPU engine's
// grouped experts (model/moe_cpu.h). Every count stays on the device (nothing is read back), so
// the decode step's FFN is captured in its CUDA graph like the rest of the step. The pipeline:
// moe_router_logits → moe_route → moe_permute → moe_grouped_gemm (fc1|gate, gathering the rows)
// → silu_mul_to_bf16 → moe_grouped_gemm (fc2) → moe_combine.
constexpr int kMoeMaxExperts = 1024;
constexpr int kMoeTileRows = 64;  // the grouped GEMM's rows per tile (moe_permute's tile_offsets)
// logits[r, e] = x[r] · router[e] with fp32 sums: x bf16 [rows, dim] (the FFN's normed input), the
// router fp32 [n_experts, dim] (it chooses the experts: not rounded). dim ≤ 12288.
Status moe_router_logits(const uint16_t* x, const float* router, int rows, int dim, int n_experts, float* logits,
                         void* stream);
// cpu::moe_route on the device: probs [rows, n_experts] = softmax in fp32, the k largest best
// first with ties to the lower index (experts int32 [rows, k]; experts_f, when set, the same as
// float values for traces), their weights [rows, k] (divided by their sum with norm_topk).
struct MoeRouteArgs {
  const float* logits = nullptr;
  int rows = 0, n_experts = 0, k = 0;
  bool norm_topk = false;
  float* probs = nullptr;
  int32_t* experts = nullptr;
  float* experts_f = nullptr;
  float* weights = nullptr;
};
Status moe_route(const MoeRouteArgs& args, void* stream);
// The rows·k assignments (assignment r·k + j is row r's j-th expert) sorted by expert, rows
// ascending within an expert: offsets [n_experts + 1] (expert e's sorted rows are [offsets[e],
// offsets[e + 1])), tile_offsets [n_experts + 1] (kMoeTileRows-row tiles before each expert),
// src_rows [rows·k] (sorted row i is input row src_rows[i]) and slot_rows [rows·k] (assignment a
// is sorted row slot_rows[a]). One block; rows · k is the sorted total.
struct MoePermuteArgs {
  const int32_t* experts = nullptr;
  int rows = 0, k = 0, n_experts = 0;
  int32_t* offsets = nullptr;
  int32_t* tile_offsets = nullptr;
  int32_t* src_rows = nullptr;
  int32_t* slot_rows = nullptr;
};
Status moe_permute(const MoePermuteArgs& args, void* stream);
// Every expert's product in one launch, bf16 tensor cores, fp32 sums: c[i] = a[row(i)] · W_eᵀ for
// the sorted rows i of expert e (offsets), W_e = w + e·w_stride, [n, k] bf16; row(i) = a_rows[i]
// when a_rows is set (moe_permute's src_rows: the gather), else i. a bf16 rows of k (lda = k), c
// fp32 [total_rows, n]. An expert without rows costs nothing: its weights are not read. k a
// multiple of 8; a and w 16-byte aligned.
struct MoeGemmArgs {
  const uint16_t* a = nullptr;
  const int32_t* a_rows = nullptr;
  const uint16_t* w = nullptr;
  int64_t w_stride = 0;
  float* c = nullptr;
  const int32_t* offsets = nullptr;
  const int32_t* tile_offsets = nullptr;
  int n_experts = 0, total_rows = 0, n = 0, k = 0;
};
Status moe_grouped_gemm(const MoeGemmArgs& args, void* stream);
// h[r] += Σ_j weights[r·k + j] · y[slot_rows[r·k + j]] over the row's slots in order, y fp32
// [rows·k, dim] in sorted order (the weighted un-permute).
Status moe_combine(const float* y, const int32_t* slot_rows, const float* weights, int rows, int k, int dim, float* h,
                   void* stream);

// --- engine_ops.cu -------------------------------------------------------------------
// The glue of the GPU engine (model/cuda/cuda_engine.h): fp32 activations into the bf16 inputs of
// gemm_bf16 (math fp32, one round-to-nearest-even at the store), rows between per-sequence slots
// and the batch, K/V rows into the paged pool, seeded random weights for benchmarks.

// y[r] = bf16(x[r] / sqrt(mean(x²) + eps) · w) (w may be null): rmsnorm's kernel (rmsnorm.cu)
// with an fp32 input and a bf16 output, the A operand of the gemm that follows. x fp32 [rows, dim].
Status rmsnorm_to_bf16(const float* x, const float* w, uint16_t* y, int rows, int dim, float eps, void* stream);
// out[r, i] = bf16(silu(a[r, i]) · b[r, i]): silu_mul's kernel (activation.cu) storing bf16, for
// the SwiGLU of the fp32 fc1|gate product (silu_mul_to_bf16(u, 2H, u + H, 2H, act, H, rows, H))
// and gRet's silu(g) ⊙ o gate.
Status silu_mul_to_bf16(const float* a, int lda, const float* b, int ldb, uint16_t* out, int ldo, int rows, int cols,
                        void* stream);
// y[r, i] = bf16(x[r, i]) over rows × cols, strided.
Status convert_to_bf16(const float* x, int ldx, uint16_t* y, int ldy, int rows, int cols, void* stream);
// Row (dst_rows ? dst_rows[r] : r) of dst = row (src_rows ? src_rows[r] : r) of src, `cols` fp32
// values each, for r < rows: gathers per-sequence rows into a batch and scatters them back.
// The index arrays are device int32 and NOT checked on the device; destination rows must be
// distinct.
Status copy_rows(const float* src, int64_t lds, const int32_t* src_rows, float* dst, int64_t ldd,
                 const int32_t* dst_rows, int rows, int cols, void* stream);
// Writes K/V rows into the paged pool of decode_attention_paged: row r (k + r·ldk, v + r·ldv,
// kv_dim values) goes to position positions[r] of the sequence whose block table is row
// (row_tables ? row_tables[r] : 0) of block_tables [tables, max_blocks], i.e. to row
// positions[r] % block_size of pool block table[positions[r] / block_size]. A row whose position
// or block falls outside [0, max_blocks · block_size) or [0, n_blocks) is skipped (the caller
// validates; this only keeps a bad table from writing outside the pool). Destinations of one
// call must be distinct.
struct KvAppendArgs {
  const float* k = nullptr;
  int ldk = 0;
  const float* v = nullptr;
  int ldv = 0;
  float* k_pool = nullptr;  // [n_blocks, block_size, kv_dim] fp32
  float* v_pool = nullptr;
  const int32_t* block_tables = nullptr;  // device [tables, max_blocks]
  int max_blocks = 0;
  const int32_t* row_tables = nullptr;  // device [rows] or null (every row uses table 0)
  const int64_t* positions = nullptr;   // device [rows]
  int rows = 0, kv_dim = 0, block_size = 0, n_blocks = 0;
};
Status kv_append_paged(const KvAppendArgs& args, void* stream);
// y[i] = mean + stddev · N(0, 1) for i < n (fp32 or bf16): Box-Muller on two 24-bit uniforms from
// splitmix64(seed ^ splitmix64(i)), so element i depends on (seed, i) alone, never on the launch
// shape. For benchmark weights too big to generate on the host; not the host generator's values.
Status fill_normal(void* y, DType type, int64_t n, uint64_t seed, float mean, float stddev, void* stream);

}  // namespace yoco::cuda
