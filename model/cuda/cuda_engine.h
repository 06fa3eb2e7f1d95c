// The YOCO engine on one CUDA device, an Engine (model/engine.h): the layer program
// (model/program.h) on a CUDA backend (model/cuda/backend.h) over the ops of kernels/cuda/ops.h, for
// the serving path (prefill = self-decoder only with early exit, batched decode steps, next-token
// logits). Plain C++: this header never includes CUDA headers (docs/architecture.md, rule 2); the
// target yoco_engine_cuda exists only with YOCO_CUDA. Its files split by concern
// (model/cuda/engine_impl.h lists them).
//
// Numerics (docs/design.md §2.5): matrices live on the device as bf16 and every projection is a bf16 ×
// bf16 GEMM with fp32 accumulation (its activation input rounded to bf16 once, by a fused
// rmsnorm/silu/convert op); the residual stream, norms, gate log-decays, the gRet state S, the
// SWA window and the global K/V cache stay fp32. Chunkwise retention and SWA prefill use bf16
// tensor cores inside; decode steps are fp32 apart from the GEMMs. The program is the CPU Model's,
// so a state moves between the CPU Model and this engine at any point (upload/download) and
// decoding goes on within bf16 tolerance.
//
// State on the device, per sequence (a slot): the self-decoder state of every (loop, layer):
// gRet S [n_self_heads, hd, hd] fp32 or the SWA ring [window, dim] fp32 for K and for V (the row
// of position p in row p % window, as SelfLayerState and ops.h's swa_* ops), and last_hidden
// [dim]; the global K/V rows in a paged pool [blocks, block_size, kv_dim] fp32 for K and for V
// (decode_attention_paged's layout) with a block table per sequence. The position lives on the
// host.
//
// Arch "transformer" (docs/design.md §2.6, the baseline of the benchmarks) runs on the same engine: prefill
// runs every layer (no early exit; attention by causal_attention_prefill over the pool), decode
// steps every layer (decode_attention_paged per layer), last_hidden is the last layer's output,
// so logits() is the final norm and the output head. Its pool row holds one token's K (V) of
// every layer, n_layers · kv_dim floats, layer-major inside each kKvChunkRows-row chunk exactly
// as model/state.h lays out a transformer's SequenceState, so upload/download copy whole chunks;
// read_rows answers UNIMPLEMENTED for it. No self-decoder state.
// KV bytes per token (fp32 K and V): 2 · kv_dim · 4 for YOCO (one K/V for the whole model),
// 2 · n_layers · kv_dim · 4 for a transformer (ModelConfig::kv_bytes_per_token); the pool
// accounts whole blocks (kv_bytes_used).
//
// Not thread-safe: one caller at a time. Every call is synchronous (it returns after the device
// finished, with the device's errors reported). A call that fails its argument checks (including
// RESOURCE_EXHAUSTED for slots or KV blocks) changes nothing; a call that fails on the device
// after the checks leaves the sequences it touched unusable (release them).
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "common/status.h"
#include "model/config.h"
#include "model/engine.h"
#include "model/state.h"

namespace yoco {

class Model;
namespace cuda_engine {
struct Impl;
}

class CudaEngine final : public Engine {
 public:
  // Uploads a whole-model (tensor-parallel world 1) Model's weights. A prefill-only weight set
  // (WeightSet::kPrefill) gives an engine whose logits/decode_step fail FAILED_PRECONDITION.
  // `pool` (optional; must outlive the engine): the host KvPool shipped states arrive in; adopt
  // gives their blocks back to it once the rows are on the device.
  static Result<std::unique_ptr<CudaEngine>> create(const Model& model, const CudaEngineOptions& opt = {},
                                                    KvPool* pool = nullptr);
  // Random weights generated on the device (cuda::fill_normal; N(0, 1/fan_in) matrices, norms
  // N(1, 0.05²), the host generator's distribution, not its values): for benchmarks of models too
  // big to generate on the host. Untied output head unless config.tie_embeddings is true.
  static Result<std::unique_ptr<CudaEngine>> create_random(const ModelConfig& config, uint64_t seed,
                                                           const CudaEngineOptions& opt = {});
  ~CudaEngine() override;
  CudaEngine(const CudaEngine&) = delete;
  CudaEngine& operator=(const CudaEngine&) = delete;

  const ModelConfig& config() const override;
  std::string device() const override;  // "cuda:N"
  const CudaEngineOptions& options() const;
  bool has_cross_decoder() const;
  int free_blocks() const;
  int free_sequences() const;
  int64_t weight_bytes() const;  // device bytes of the weights (bf16 matrices + fp32 norms)
  // The K/V pool's accounting: bytes of one token's K and V rows (see above), and bytes of the
  // blocks sequences hold now ((kv_blocks − free_blocks) · block_size · that).
  int64_t kv_bytes_per_token() const;
  int64_t kv_bytes_used() const;

  // A fresh sequence (position 0, zero state, no KV blocks). RESOURCE_EXHAUSTED when every slot
  // is taken.
  Result<SeqId> new_sequence();
  // Frees the slot and its KV blocks. NOT_FOUND for an unknown id.
  Status release(SeqId id) override;
  // Tokens consumed, or −1 for an unknown id.
  int64_t position(SeqId id) const override;
  // Rows the sequence's KV blocks hold (≥ position), or −1 for an unknown id.
  int64_t capacity(SeqId id) const override;
  // Grows the sequence's KV blocks to hold `rows` rows (never shrinks). RESOURCE_EXHAUSTED
  // (nothing taken) when the pool lacks the blocks; INVALID_ARGUMENT past the engine's context.
  Status reserve(SeqId id, int64_t rows) override;

  // Consumes `tokens` into the sequence, chunk_tokens at a time (0 = max_chunk_tokens; at most
  // max_chunk_tokens); resumable. Self-decoder only (early exit): writes the state, the K/V rows
  // and last_hidden. The KV blocks for all tokens are reserved first: RESOURCE_EXHAUSTED (nothing
  // consumed) when the pool cannot hold them.
  Status prefill(SeqId id, std::span<const int32_t> tokens, int chunk_tokens = 0);
  // Engine's form: chunk_tokens must be > 0 and is capped at max_chunk_tokens; the retention
  // chunk is the engine's option, not the call's.
  Status prefill(SeqId id, std::span<const int32_t> tokens, const PrefillOptions& opt) override;

  // Prefill with every row's logits (Engine::forward): the chunks stop at max_chunk_tokens and
  // at the logits buffer's rows; each chunk's [rows, vocab] logits are copied into host `out`.
  Status forward(SeqId id, std::span<const int32_t> tokens, const PrefillOptions& opt, float* out) override;

  // Next-token logits [B, vocab] for each sequence (cross-decoder at position − 1), into host
  // `out`; out null: they stay in device_logits().
  Status logits(std::span<const SeqId> ids, float* out) override;

  // One token per sequence (any lengths, distinct ids, B ≤ max_batch): self-decoder step, one
  // K/V row, cross-decoder; next-token logits [B, vocab] into host `out` (or device_logits() when
  // out is null). RESOURCE_EXHAUSTED (nothing changed) when the pool lacks a block some sequence
  // needs for its new row.
  Status decode_step(std::span<const SeqId> ids, std::span<const int32_t> tokens, float* out) override;

  // The device buffer [≥ max_batch, vocab] fp32 the last logits/decode_step wrote (rows 0..B−1).
  const float* device_logits() const;

  // A new sequence holding a copy of a CPU state (contiguous or paged K/V rows; world 1), e.g.
  // one prefilled by the CPU Model or restored by deserialize_state. Checks every shape.
  Result<SeqId> upload(const SequenceState& st);
  // The sequence's state as the CPU Model holds it: contiguous K/V rows (k, v of `position`
  // rows; none without with_kv), the self-decoder states, last_hidden. `out` is replaced.
  Status download(SeqId id, SequenceState& out, bool with_kv = true) const;
  // Host copies of K/V rows [first, first + n) (post-RoPE K), [n, kv_dim] each: a prefill
  // worker ships each chunk's rows while the sequence stays on the device.
  Status read_rows(SeqId id, int64_t first, int64_t n, float* k, float* v) const override;

  // Engine's hand-over: upload, then a paged state's host blocks go back to the pool (st.pages is
  // cleared) and the rest of `st` stays as it was. INVALID_ARGUMENT for pages of another pool.
  Result<SeqId> adopt(SequenceState& st) override;
  // download without the K/V rows.
  Status snapshot(SeqId id, SequenceState& out) const override;
  // Engine::fork on the device (model/cuda/slots.cc): whole K/V blocks shared by count.
  Result<SeqId> fork(SeqId id) override;

 private:
  explicit CudaEngine(std::unique_ptr<cuda_engine::Impl> impl);
  // prefill and forward: the chunks of one sequence, with each row's logits copied into host
  // `out` when it is not null (chunks then at most the logits buffer's rows).
  Status consume(SeqId id, std::span<const int32_t> tokens, int chunk_tokens, float* out);
  std::unique_ptr<cuda_engine::Impl> impl_;
};

}  // namespace yoco
