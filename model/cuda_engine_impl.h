// Inside the CUDA engine (model/cuda_engine.h): CudaEngine::Impl and its device helpers, shared
// by the engine's files, one per concern:
//   cuda_engine.cc          creation, device setup, buffers, the public accessors
//   cuda_engine_weights.cc  weights to the device as bf16 (from a Model, or random on the device)
//   cuda_engine_slots.cc    sequence slots, the K/V block allocator and block tables, argument checks
//   cuda_engine_forward.cc  the model: prefill, decode steps, logits
//   cuda_engine_graphs.cc   CUDA graphs of decode steps
//   cuda_engine_state.cc    state I/O: upload, download, read_rows (and adopt / snapshot)
// Private to yoco_engine_cuda: includes CUDA headers.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/ops.h"
#include "model/cuda_engine.h"

namespace yoco {

namespace cuda_engine_internal {

inline Status cuda_check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  cudaGetLastError();  // clear a non-sticky error so later calls report their own
  return internal_error(std::string("cuda engine: ") + what + ": " + cudaGetErrorString(err));
}

// A kernel's status as the engine's: kernels/cuda/status.h keeps common/status.h's codes.
inline Status to_status(const cuda::Status& s) {
  return s.ok() ? Status::Ok() : Status(static_cast<StatusCode>(s.code()), s.message());
}
static_assert(static_cast<int>(cuda::StatusCode::kOk) == static_cast<int>(StatusCode::kOk));
static_assert(static_cast<int>(cuda::StatusCode::kInvalidArgument) == static_cast<int>(StatusCode::kInvalidArgument));
static_assert(static_cast<int>(cuda::StatusCode::kResourceExhausted) ==
              static_cast<int>(StatusCode::kResourceExhausted));
static_assert(static_cast<int>(cuda::StatusCode::kUnimplemented) == static_cast<int>(StatusCode::kUnimplemented));
static_assert(static_cast<int>(cuda::StatusCode::kInternal) == static_cast<int>(StatusCode::kInternal));

// One device allocation, freed on destruction.
class DeviceMem {
 public:
  DeviceMem() = default;
  ~DeviceMem() {
    if (p_) cudaFree(p_);
  }
  DeviceMem(DeviceMem&& o) noexcept : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceMem& operator=(DeviceMem&&) = delete;
  DeviceMem(const DeviceMem&) = delete;

  // Zeroed on `stream`: everything the engine does is ordered on its one (non-blocking) stream,
  // which does not wait for the legacy default stream.
  Status alloc(size_t bytes, const char* what, cudaStream_t stream) {
    YOCO_CHECK(!p_);
    if (cudaMalloc(&p_, std::max<size_t>(bytes, 16)) != cudaSuccess) {
      cudaGetLastError();
      p_ = nullptr;
      return Status(StatusCode::kResourceExhausted, std::string("cuda engine: cudaMalloc of ") + std::to_string(bytes) +
                                                        " bytes for " + what + " failed");
    }
    bytes_ = bytes;
    return cuda_check(cudaMemsetAsync(p_, 0, std::max<size_t>(bytes, 16), stream), what);
  }
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

struct DevSelfLayer {
  const float* mixer_norm = nullptr;
  const float* final_norm = nullptr;
  const uint16_t* wqkvg = nullptr;  // [P, dim]: q, k, v (, g, then the gRet gate rows gt)
  const uint16_t* wo = nullptr;     // [dim, dim]
  const uint16_t* w13 = nullptr;    // [2·hidden, dim]
  const uint16_t* w2 = nullptr;     // [dim, hidden]
};

struct DevCrossLayer {
  const float* mixer_norm = nullptr;
  const float* final_norm = nullptr;
  const uint16_t *wq = nullptr, *wo = nullptr, *w13 = nullptr, *w2 = nullptr;
};

struct Slot {
  bool used = false;
  int64_t position = 0;
  std::vector<int32_t> blocks;
};

}  // namespace cuda_engine_internal

struct CudaEngine::Impl {
  using DeviceMem = cuda_engine_internal::DeviceMem;
  using DevSelfLayer = cuda_engine_internal::DevSelfLayer;
  using DevCrossLayer = cuda_engine_internal::DevCrossLayer;
  using Slot = cuda_engine_internal::Slot;

  ModelConfig cfg;
  CudaEngineOptions opt;
  KvPool* host_pool = nullptr;  // where shipped states arrive (adopt gives their blocks back)
  bool cross = true;
  cudaStream_t stream = nullptr;

  // Sizes (tensor-parallel world 1).
  int D = 0, Hs = 0, hd = 0, R = 0, P = 0, Ha = 0, KVh = 0, hdc = 0, KV = 0, Dq = 0, H = 0, V = 0;
  // Transformer (docs/design.md §2.6): every layer is attention with its own K/V; a pool row holds one
  // token's K (V) of all n_layers layers (KVR = n_layers·KV floats), layer-major inside each
  // kKvChunkRows-row chunk as model/state.h lays it out. The kernels see layer l as a pool of
  // kKvChunkRows-row "blocks" (chunks) of KV-wide rows starting at k_pool + l·kKvChunkRows·KV,
  // whose block ids are (pool chunk index)·n_layers: chunk c of block b is pool chunk
  // b·(block_size / kKvChunkRows) + c, and its layer-l rows sit at
  // ((chunk·n_layers + l)·kKvChunkRows + row)·KV, exactly that view. So one chunk table serves
  // every layer, and upload/download copy pool rows as the CPU state holds them.
  bool tf = false;
  int KVR = 0;               // floats per pool row: KV (YOCO) or n_layers·KV (transformer)
  int max_chunks = 0;        // transformer: chunk-table entries per sequence
  int n_states = 0;          // n_loops · n_self_layers
  int64_t layer_floats = 0;  // one (loop, layer) state: Hs·hd² (gRet) or 2·W·D (SWA)
  int rows_max = 0;          // max(max_batch, max_chunk_tokens)
  int max_blocks = 0;        // block-table entries per sequence

  // Weights.
  std::vector<DeviceMem> weight_mem;
  int64_t weight_bytes = 0;
  const uint16_t* embed = nullptr;
  const uint16_t* output = nullptr;  // == embed when tied
  const float* final_norm = nullptr;
  const float* kv_norm = nullptr;
  const uint16_t* wkv = nullptr;  // [2·KV, dim]
  std::vector<DevSelfLayer> self_layers;
  std::vector<DevCrossLayer> cross_layers;

  // Sequences.
  DeviceMem states;       // [max_sequences, n_states · layer_floats]
  DeviceMem last_hidden;  // [max_sequences, dim]
  DeviceMem k_pool, v_pool;
  std::vector<Slot> slots;
  std::vector<int32_t> free_blocks;  // a stack

  // Activations and per-call metadata (sized once; reused by every call in stream order).
  DeviceMem tokens, positions, lengths, slot_ids, row_tables, block_tables, state_ptrs;
  DeviceMem h, xb, ob, act, proj, o, u, kvbuf, logits;

  // CUDA graphs of decode_step per (batch, attention length bucket); shapes run eagerly once.
  std::map<std::pair<int, int64_t>, cudaGraphExec_t> graphs;
  std::set<std::pair<int, int64_t>> warmed;

  // Creation, device setup and buffers (cuda_engine.cc).
  ~Impl();

  float* slot_state(int slot, int si) const {
    return states.as<float>() + (static_cast<int64_t>(slot) * n_states + si) * layer_floats;
  }

  void init_sizes(const ModelConfig& c, const CudaEngineOptions& o);
  Status check_options() const;
  Status setup_device();
  Status alloc_buffers();
  Status copy_up(void* dst, const void* src, size_t bytes, const char* what) const;
  Status finish(const char* what) const;

  // Weights (cuda_engine_weights.cc).
  Result<uint16_t*> new_bf16(int64_t n, const char* what);
  Result<float*> new_f32(int64_t n, const char* what);
  // Host fp32 parts, concatenated, rounded to bf16 (nearest even) and copied up.
  Result<const uint16_t*> upload_bf16(std::initializer_list<std::pair<const std::vector<float>*, int64_t>> parts,
                                      const char* what);
  Result<const float*> upload_f32(const std::vector<float>& x, const char* what);

  Status upload_weights(const ModelWeights& w);
  // docs/design.md §2.6: layer i is self_layers[i] of the host weights, wqkvg = q|k|v [dim + 2·KV, dim].
  Status upload_output_head(const ModelWeights& w);
  Status upload_transformer_layers(const ModelWeights& w);

  Status random_weights(uint64_t seed);

  // Slots, the block allocator, argument checks (cuda_engine_slots.cc).
  Status check_id(SeqId id, const char* field) const;
  int64_t limit() const { return std::min<int64_t>(opt.max_context, cfg.max_seq_len); }
  Status check_tokens(std::span<const int32_t> t, int64_t start, const std::string& field) const;
  // The block-table rows the attention and append kernels read: the pool blocks (YOCO), or the
  // transformer's chunk ids (see tf above), `table_width()` entries of `table_block()` rows.
  int table_width() const { return tf ? max_chunks : max_blocks; }
  int table_block() const { return tf ? kKvChunkRows : opt.kv_block_size; }
  int table_ids() const {
    return tf ? opt.kv_blocks * (opt.kv_block_size / kKvChunkRows) * cfg.n_layers : opt.kv_blocks;
  }
  void fill_table(const Slot& s, int32_t* dst) const;
  // Pool rows that hold the first n tokens' K/V: a transformer's chunk is layer-major, so its
  // last chunk is needed whole (model/state.h).
  int64_t stored_rows(int64_t n) const { return tf ? (n + kKvChunkRows - 1) / kKvChunkRows * kKvChunkRows : n; }
  int blocks_for(int64_t rows) const { return static_cast<int>((rows + opt.kv_block_size - 1) / opt.kv_block_size); }
  // Grows each slot to hold need[i] rows, all or nothing.
  Status reserve(std::span<const SeqId> ids, std::span<const int64_t> need);
  Status check_batch(std::span<const SeqId> ids, const char* field) const;

  // State I/O (cuda_engine_state.cc): host copies of pool rows [first, first + n) of a slot, KVR
  // floats each.
  Status rows_down(const Slot& slot, int64_t first, int64_t n, float* k, float* v) const;

  // The model (cuda_engine_forward.cc).
  // h += x·Wᵀ (fp32 residual, bf16 operands).
  Status add_proj(const uint16_t* x_bf16, const uint16_t* w, int rows, int k);

  Status ffn(int rows, const float* norm, const uint16_t* w13, const uint16_t* w2);

  // Mixer input for `rows` rows of h: xb = bf16(RMSNorm(h)), proj = xb·Wᵀ, RoPE on q and k.
  Status self_projections(const DevSelfLayer& L, int rows);

  // gRet after the mixer: per-head RMSNorm without weight, silu(g) ⊙ o into ob (bf16).
  Status retention_output(int rows);

  // Self-decoder over n consecutive rows of one sequence (positions already on the device).
  Status self_decoder_chunk(int slot, int n, int64_t pos0);

  // Self-decoder for one token per sequence; state_ptrs holds each (loop, layer)'s pointers.
  Status self_decoder_step(int B);

  // z = RMSNorm_kv(h), K|V = z·W_kvᵀ, RoPE on K; rows go into the pool at `positions` of the
  // sequences whose block tables are rows (row_tables_dev ? row_tables_dev[r] : 0).
  Status global_kv(int rows, const int32_t* row_tables_dev);

  // K/V rows (stride ld) into the pool (offset by pool_off floats: a Transformer layer's view) at
  // `positions`, through the block tables (row_tables_dev as in global_kv).
  Status append_kv(const float* k, const float* v, int ld, int64_t pool_off, int rows, const int32_t* row_tables_dev);

  // o [B, Dq] = attention of q (stride ldq) row b over keys 0..lengths[b]−1 of table row b (the
  // pool offset by pool_off floats).
  Status paged_decode(const float* q, int ldq, int64_t pool_off, int B, int64_t max_length);

  // Cross-decoder on h [B, dim] (query of row b at positions[b], keys 0..lengths[b]−1 of the
  // block table row b), then the output head into `logits`.
  Status cross_decoder(int B, int64_t max_length);

  // Every layer over h [rows, dim]: q|k|v, RoPE on q and k, the K/V rows into the pool at
  // `positions`, attention, out_proj, FFN. chunk: the rows are positions pos0 .. of one sequence
  // (table row 0), attended causally (causal_attention_prefill); otherwise row b is sequence b's
  // one token (table row b, keys 0..lengths[b]−1; decode_attention_paged).
  Status transformer_layers(int rows, bool chunk, int64_t pos0, int64_t max_len);

  // logits [B, vocab] = RMSNorm(h)·outputᵀ.
  Status output_head(int B);

  // Uploads the batch's block tables (row b = sequence ids[b]), slots, lengths and positions.
  Status upload_batch_meta(std::span<const SeqId> ids, std::span<const int64_t> pos, std::span<const int32_t> lens);

  // Everything decode_step runs on the device once the batch's metadata is uploaded.
  Status decode_device_work(int B, int64_t attn_len);

  // CUDA graphs (cuda_engine_graphs.cc). The attention grid of a graph covers a power-of-two
  // bucket of lengths (≥ 512 keys).
  int64_t length_bucket(int64_t len) const {
    int64_t b = 512;
    while (b < len) b *= 2;
    return std::min<int64_t>(b, static_cast<int64_t>(max_blocks) * opt.kv_block_size);
  }

  Status decode_with_graph(int B, int64_t max_len);
};

}  // namespace yoco

// YOCO_RETURN_IF_ERROR for a kernel call (kernels/cuda/ops.h returns cuda::Status).
#define YOCO_RETURN_IF_KERNEL_ERROR(expr) YOCO_RETURN_IF_ERROR(::yoco::cuda_engine_internal::to_status(expr))
