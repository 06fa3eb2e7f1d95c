#include "model/cuda_engine.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/ops.h"
#include "model/kv_pool.h"
#include "model/model.h"
#include "model/safetensors.h"

namespace yoco {

namespace {

Status cuda_check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  cudaGetLastError();  // clear a non-sticky error so later calls report their own
  return internal_error(std::string("cuda engine: ") + what + ": " + cudaGetErrorString(err));
}

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

}  // namespace

struct CudaEngine::Impl {
  ModelConfig cfg;
  CudaEngineOptions opt;
  KvPool* host_pool = nullptr;  // where shipped states arrive (adopt gives their blocks back)
  bool cross = true;
  cudaStream_t stream = nullptr;

  // Sizes (tensor-parallel world 1).
  int D = 0, Hs = 0, hd = 0, R = 0, P = 0, Ha = 0, KVh = 0, hdc = 0, KV = 0, Dq = 0, H = 0, V = 0;
  // Transformer (SPEC 2.6): every layer is attention with its own K/V; a pool row holds one
  // token's K (V) of all n_layers layers (KVR = n_layers·KV floats), layer-major inside each
  // kKvChunkRows-row chunk as model/state.h lays it out. The kernels see layer l as a pool of
  // kKvChunkRows-row "blocks" (chunks) of KV-wide rows starting at k_pool + l·kKvChunkRows·KV,
  // whose block ids are (pool chunk index)·n_layers: chunk c of block b is pool chunk
  // b·(block_size / kKvChunkRows) + c, and its layer-l rows sit at
  // ((chunk·n_layers + l)·kKvChunkRows + row)·KV, exactly that view. So one chunk table serves
  // every layer, and upload/download copy pool rows as the CPU state holds them.
  bool tf = false;
  int KVR = 0;         // floats per pool row: KV (YOCO) or n_layers·KV (transformer)
  int max_chunks = 0;  // transformer: chunk-table entries per sequence
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

  ~Impl() {
    for (auto& g : graphs) cudaGraphExecDestroy(g.second);
    if (stream) {
      cudaSetDevice(opt.device);
      cudaStreamSynchronize(stream);
      (void)cuda::release_scratch(stream);  // nothing to report from a destructor
      cudaStreamDestroy(stream);
    }
  }

  float* slot_state(int slot, int si) const {
    return states.as<float>() + (static_cast<int64_t>(slot) * n_states + si) * layer_floats;
  }

  void init_sizes(const ModelConfig& c, const CudaEngineOptions& o) {
    cfg = c;
    opt = o;
    D = c.dim;
    Hs = c.n_self_heads;
    hd = c.self_head_dim();
    R = c.self_qkv_rows();
    P = R + (c.is_swa() ? 0 : Hs);  // gRet: the gate rows gt ride along in the same GEMM
    Ha = c.n_attn_heads;
    KVh = c.n_attn_kv_heads;
    hdc = c.cross_head_dim();
    KV = c.kv_dim();
    tf = c.arch == Arch::kTransformer;
    KVR = tf ? c.n_layers * KV : KV;
    if (tf) P = D + 2 * KV;  // the fused q|k|v projection (model/weights.cc; Dq = D)
    Dq = D;
    H = c.hidden_dim;
    V = c.vocab_size;
    n_states = c.n_loops * c.n_self_layers;
    layer_floats = c.is_swa() ? 2 * static_cast<int64_t>(c.sliding_window) * D : static_cast<int64_t>(Hs) * hd * hd;
    rows_max = std::max(o.max_batch, o.max_chunk_tokens);
    max_blocks = o.kv_block_size > 0 ? static_cast<int>((o.max_context + o.kv_block_size - 1) / o.kv_block_size) : 0;
    max_chunks = max_blocks * (o.kv_block_size / kKvChunkRows);
  }

  Status check_options() const {
    if (tf && static_cast<int64_t>(opt.kv_blocks) * (opt.kv_block_size / kKvChunkRows) * cfg.n_layers >= (int64_t{1} << 31))
      return invalid_argument("cuda engine: kv_blocks too large for a transformer's chunk ids (int32)");
    if (opt.max_sequences <= 0) return invalid_argument("cuda engine: max_sequences must be > 0");
    if (opt.max_batch <= 0) return invalid_argument("cuda engine: max_batch must be > 0");
    if (opt.max_chunk_tokens <= 0) return invalid_argument("cuda engine: max_chunk_tokens must be > 0");
    if (opt.max_context <= 0) return invalid_argument("cuda engine: max_context must be > 0");
    if (opt.kv_blocks <= 0) return invalid_argument("cuda engine: kv_blocks must be > 0");
    if (opt.kv_block_size <= 0 || opt.kv_block_size % kKvChunkRows != 0)
      return invalid_argument("cuda engine: kv_block_size must be a positive multiple of " +
                              std::to_string(kKvChunkRows));
    if (opt.retention_chunk != 32 && opt.retention_chunk != 64)
      return invalid_argument("cuda engine: retention_chunk must be 32 or 64");
    if (opt.max_context / opt.kv_block_size >= (1 << 30)) return invalid_argument("cuda engine: max_context too large");
    if (hd > 256 || hdc > 256) return invalid_argument("cuda engine: head dims above 256 are not supported");
    if (Ha / KVh > 16) return invalid_argument("cuda engine: n_attn_heads / n_attn_kv_heads above 16 is not supported");
    if (cuda::device_count() <= opt.device || opt.device < 0)
      return failed_precondition("cuda engine: no CUDA device " + std::to_string(opt.device));
    return Status::Ok();
  }

  Status setup_device() {
    YOCO_RETURN_IF_ERROR(cuda_check(cudaSetDevice(opt.device), "cudaSetDevice"));
    return cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  }

  // --- weights -------------------------------------------------------------------------------
  Result<uint16_t*> new_bf16(int64_t n, const char* what) {
    weight_mem.emplace_back();
    YOCO_RETURN_IF_ERROR(weight_mem.back().alloc(static_cast<size_t>(n) * 2, what, stream));
    weight_bytes += n * 2;
    return weight_mem.back().as<uint16_t>();
  }
  Result<float*> new_f32(int64_t n, const char* what) {
    weight_mem.emplace_back();
    YOCO_RETURN_IF_ERROR(weight_mem.back().alloc(static_cast<size_t>(n) * 4, what, stream));
    weight_bytes += n * 4;
    return weight_mem.back().as<float>();
  }
  // Host fp32 parts, concatenated, rounded to bf16 (nearest even) and copied up.
  Result<const uint16_t*> upload_bf16(std::initializer_list<std::pair<const std::vector<float>*, int64_t>> parts,
                                      const char* what) {
    int64_t n = 0;
    for (const auto& p : parts) {
      if (static_cast<int64_t>(p.first->size()) != p.second)
        return internal_error(std::string("cuda engine: weight ") + what + " holds " + std::to_string(p.first->size()) +
                              " values, expected " + std::to_string(p.second));
      n += p.second;
    }
    YOCO_ASSIGN_OR_RETURN(uint16_t * dst, new_bf16(n, what));
    std::vector<uint16_t> host;
    int64_t at = 0;
    for (const auto& p : parts) {
      constexpr int64_t kChunk = 1 << 22;  // bounded host staging for big matrices
      for (int64_t off = 0; off < p.second; off += kChunk) {
        const int64_t m = std::min(kChunk, p.second - off);
        host.resize(static_cast<size_t>(m));
        for (int64_t i = 0; i < m; ++i) host[i] = f32_to_bf16((*p.first)[off + i]);
        YOCO_RETURN_IF_ERROR(copy_up(dst + at, host.data(), static_cast<size_t>(m) * 2, what));
        at += m;
      }
    }
    return static_cast<const uint16_t*>(dst);
  }
  Result<const float*> upload_f32(const std::vector<float>& x, const char* what) {
    YOCO_ASSIGN_OR_RETURN(float* dst, new_f32(static_cast<int64_t>(x.size()), what));
    YOCO_RETURN_IF_ERROR(copy_up(dst, x.data(), x.size() * 4, what));
    return static_cast<const float*>(dst);
  }

  Status upload_weights(const ModelWeights& w) {
    const int64_t d = D;
    YOCO_ASSIGN_OR_RETURN(embed, upload_bf16({{&w.embed, static_cast<int64_t>(V) * d}}, "embed_tokens"));
    if (tf) return upload_transformer_layers(w);
    YOCO_ASSIGN_OR_RETURN(kv_norm, upload_f32(w.kv_norm, "kv_layer_norm"));
    YOCO_ASSIGN_OR_RETURN(wkv, upload_bf16({{&w.wkv, 2 * KV * d}}, "cross_decoder.{k,v}_proj"));
    for (const SelfLayerWeights& L : w.self_layers) {
      DevSelfLayer g;
      YOCO_ASSIGN_OR_RETURN(g.mixer_norm, upload_f32(L.mixer_norm, "mixer_layer_norm"));
      YOCO_ASSIGN_OR_RETURN(g.final_norm, upload_f32(L.final_norm, "final_layer_norm"));
      if (cfg.is_swa()) {
        YOCO_ASSIGN_OR_RETURN(g.wqkvg, upload_bf16({{&L.wqkvg, R * d}}, "mixer.{q,k,v}_proj"));
      } else {
        YOCO_ASSIGN_OR_RETURN(g.wqkvg, upload_bf16({{&L.wqkvg, R * d}, {&L.wgt, Hs * d}}, "mixer.{q,k,v,g,gt}_proj"));
      }
      YOCO_ASSIGN_OR_RETURN(g.wo, upload_bf16({{&L.wo, d * d}}, "mixer.out_proj"));
      YOCO_ASSIGN_OR_RETURN(g.w13, upload_bf16({{&L.w13, 2 * H * d}}, "ffn.{fc1,gate}"));
      YOCO_ASSIGN_OR_RETURN(g.w2, upload_bf16({{&L.w2, d * H}}, "ffn.fc2"));
      self_layers.push_back(g);
    }
    if (!cross) return Status::Ok();
    YOCO_ASSIGN_OR_RETURN(final_norm, upload_f32(w.final_norm, "layer_norm"));
    if (w.tied) {
      output = embed;
    } else {
      YOCO_ASSIGN_OR_RETURN(output, upload_bf16({{&w.output, static_cast<int64_t>(V) * d}}, "output_projection"));
    }
    for (const CrossLayerWeights& L : w.cross_layers) {
      DevCrossLayer g;
      YOCO_ASSIGN_OR_RETURN(g.mixer_norm, upload_f32(L.mixer_norm, "mixer_layer_norm"));
      YOCO_ASSIGN_OR_RETURN(g.final_norm, upload_f32(L.final_norm, "final_layer_norm"));
      YOCO_ASSIGN_OR_RETURN(g.wq, upload_bf16({{&L.wq, Dq * d}}, "mixer.q_proj"));
      YOCO_ASSIGN_OR_RETURN(g.wo, upload_bf16({{&L.wo, d * Dq}}, "mixer.out_proj"));
      YOCO_ASSIGN_OR_RETURN(g.w13, upload_bf16({{&L.w13, 2 * H * d}}, "ffn.{fc1,gate}"));
      YOCO_ASSIGN_OR_RETURN(g.w2, upload_bf16({{&L.w2, d * H}}, "ffn.fc2"));
      cross_layers.push_back(g);
    }
    return Status::Ok();
  }

  // SPEC 2.6: layer i is self_layers[i] of the host weights, wqkvg = q|k|v [dim + 2·KV, dim].
  Status upload_output_head(const ModelWeights& w) {
    YOCO_ASSIGN_OR_RETURN(final_norm, upload_f32(w.final_norm, "layer_norm"));
    if (w.tied) {
      output = embed;
      return Status::Ok();
    }
    YOCO_ASSIGN_OR_RETURN(output, upload_bf16({{&w.output, static_cast<int64_t>(V) * D}}, "output_projection"));
    return Status::Ok();
  }
  Status upload_transformer_layers(const ModelWeights& w) {
    const int64_t d = D;
    for (const SelfLayerWeights& L : w.self_layers) {
      DevSelfLayer g;
      YOCO_ASSIGN_OR_RETURN(g.mixer_norm, upload_f32(L.mixer_norm, "layers.mixer_layer_norm"));
      YOCO_ASSIGN_OR_RETURN(g.final_norm, upload_f32(L.final_norm, "layers.final_layer_norm"));
      YOCO_ASSIGN_OR_RETURN(g.wqkvg, upload_bf16({{&L.wqkvg, P * d}}, "layers.mixer.{q,k,v}_proj"));
      YOCO_ASSIGN_OR_RETURN(g.wo, upload_bf16({{&L.wo, d * Dq}}, "layers.mixer.out_proj"));
      YOCO_ASSIGN_OR_RETURN(g.w13, upload_bf16({{&L.w13, 2 * H * d}}, "layers.ffn.{fc1,gate}"));
      YOCO_ASSIGN_OR_RETURN(g.w2, upload_bf16({{&L.w2, d * H}}, "layers.ffn.fc2"));
      self_layers.push_back(g);
    }
    if (static_cast<int>(self_layers.size()) != cfg.n_layers)
      return internal_error("cuda engine: transformer weights hold " + std::to_string(self_layers.size()) +
                            " layers, config says " + std::to_string(cfg.n_layers));
    return cross ? upload_output_head(w) : Status::Ok();
  }

  Status random_weights(uint64_t seed) {
    uint64_t tensor = 0;
    auto matrix = [&](int64_t rows, int64_t fan_in, const char* what) -> Result<const uint16_t*> {
      YOCO_ASSIGN_OR_RETURN(uint16_t * p, new_bf16(rows * fan_in, what));
      YOCO_RETURN_IF_ERROR(cuda::fill_normal(p, cuda::DType::kBF16, rows * fan_in, seed + 0x9e37u * ++tensor, 0.f,
                                             static_cast<float>(1.0 / std::sqrt(static_cast<double>(fan_in))), stream));
      return static_cast<const uint16_t*>(p);
    };
    auto norm = [&](const char* what) -> Result<const float*> {
      YOCO_ASSIGN_OR_RETURN(float* p, new_f32(D, what));
      YOCO_RETURN_IF_ERROR(cuda::fill_normal(p, cuda::DType::kF32, D, seed + 0x9e37u * ++tensor, 1.f, 0.05f, stream));
      return static_cast<const float*>(p);
    };
    YOCO_ASSIGN_OR_RETURN(embed, matrix(V, D, "embed_tokens"));
    if (!tf) {
      YOCO_ASSIGN_OR_RETURN(kv_norm, norm("kv_layer_norm"));
      YOCO_ASSIGN_OR_RETURN(wkv, matrix(2 * KV, D, "cross_decoder.{k,v}_proj"));
    }
    for (int l = 0; l < (tf ? cfg.n_layers : cfg.n_self_layers); ++l) {
      DevSelfLayer g;
      YOCO_ASSIGN_OR_RETURN(g.mixer_norm, norm("mixer_layer_norm"));
      YOCO_ASSIGN_OR_RETURN(g.final_norm, norm("final_layer_norm"));
      YOCO_ASSIGN_OR_RETURN(g.wqkvg, matrix(P, D, "mixer projections"));
      YOCO_ASSIGN_OR_RETURN(g.wo, matrix(D, D, "mixer.out_proj"));
      YOCO_ASSIGN_OR_RETURN(g.w13, matrix(2 * H, D, "ffn.{fc1,gate}"));
      YOCO_ASSIGN_OR_RETURN(g.w2, matrix(D, H, "ffn.fc2"));
      self_layers.push_back(g);
    }
    YOCO_ASSIGN_OR_RETURN(final_norm, norm("layer_norm"));
    if (cfg.tie_embeddings.value_or(false)) {
      output = embed;
    } else {
      YOCO_ASSIGN_OR_RETURN(output, matrix(V, D, "output_projection"));
    }
    for (int l = 0; l < (tf ? 0 : cfg.n_cross_layers()); ++l) {
      DevCrossLayer g;
      YOCO_ASSIGN_OR_RETURN(g.mixer_norm, norm("mixer_layer_norm"));
      YOCO_ASSIGN_OR_RETURN(g.final_norm, norm("final_layer_norm"));
      YOCO_ASSIGN_OR_RETURN(g.wq, matrix(Dq, D, "mixer.q_proj"));
      YOCO_ASSIGN_OR_RETURN(g.wo, matrix(D, Dq, "mixer.out_proj"));
      YOCO_ASSIGN_OR_RETURN(g.w13, matrix(2 * H, D, "ffn.{fc1,gate}"));
      YOCO_ASSIGN_OR_RETURN(g.w2, matrix(D, H, "ffn.fc2"));
      cross_layers.push_back(g);
    }
    return cuda_check(cudaStreamSynchronize(stream), "random weights");
  }

  // --- buffers -------------------------------------------------------------------------------
  Status alloc_buffers() {
    const size_t rows = rows_max, B = opt.max_batch;
    YOCO_RETURN_IF_ERROR(
        states.alloc(static_cast<size_t>(opt.max_sequences) * n_states * layer_floats * 4, "states", stream));
    YOCO_RETURN_IF_ERROR(last_hidden.alloc(static_cast<size_t>(opt.max_sequences) * D * 4, "last_hidden", stream));
    const size_t pool_bytes = static_cast<size_t>(opt.kv_blocks) * opt.kv_block_size * KVR * 4;
    YOCO_RETURN_IF_ERROR(k_pool.alloc(pool_bytes, "K pool", stream));
    YOCO_RETURN_IF_ERROR(v_pool.alloc(pool_bytes, "V pool", stream));
    YOCO_RETURN_IF_ERROR(tokens.alloc(rows * 4, "tokens", stream));
    YOCO_RETURN_IF_ERROR(positions.alloc(rows * 8, "positions", stream));
    YOCO_RETURN_IF_ERROR(lengths.alloc(B * 4, "lengths", stream));
    YOCO_RETURN_IF_ERROR(slot_ids.alloc(B * 4, "slot ids", stream));
    YOCO_RETURN_IF_ERROR(row_tables.alloc(B * 4, "row tables", stream));
    YOCO_RETURN_IF_ERROR(block_tables.alloc(B * table_width() * 4, "block tables", stream));
    YOCO_RETURN_IF_ERROR(
        state_ptrs.alloc(static_cast<size_t>(n_states) * 2 * B * sizeof(float*), "state pointers", stream));
    const size_t wide = std::max({static_cast<size_t>(P), static_cast<size_t>(Dq)});
    YOCO_RETURN_IF_ERROR(h.alloc(rows * D * 4, "h", stream));
    YOCO_RETURN_IF_ERROR(xb.alloc(rows * D * 2, "normed x (bf16)", stream));
    YOCO_RETURN_IF_ERROR(ob.alloc(rows * std::max(D, Dq) * 2, "mixer out (bf16)", stream));
    YOCO_RETURN_IF_ERROR(act.alloc(rows * H * 2, "ffn act (bf16)", stream));
    YOCO_RETURN_IF_ERROR(proj.alloc(rows * wide * 4, "projections", stream));
    YOCO_RETURN_IF_ERROR(o.alloc(rows * std::max(D, Dq) * 4, "mixer out", stream));
    YOCO_RETURN_IF_ERROR(u.alloc(rows * 2 * H * 4, "ffn fc1|gate", stream));
    YOCO_RETURN_IF_ERROR(kvbuf.alloc(rows * 2 * KV * 4, "global k|v", stream));
    if (cross) YOCO_RETURN_IF_ERROR(logits.alloc(B * V * 4, "logits", stream));
    std::vector<int32_t> ident(B);
    for (size_t b = 0; b < B; ++b) ident[b] = static_cast<int32_t>(b);
    YOCO_RETURN_IF_ERROR(copy_up(row_tables.as<int32_t>(), ident.data(), B * 4, "row tables"));
    if (opt.cuda_graphs && cross) {
      cuda::PagedDecodeArgs a;
      a.batch = opt.max_batch;
      a.n_q_heads = Ha;
      a.head_dim = hdc;
      a.max_length = static_cast<int64_t>(max_blocks) * opt.kv_block_size;
      YOCO_RETURN_IF_ERROR(cuda::decode_attention_paged_reserve(a, stream));
    }
    slots.assign(opt.max_sequences, Slot{});
    free_blocks.resize(opt.kv_blocks);
    for (int i = 0; i < opt.kv_blocks; ++i) free_blocks[i] = opt.kv_blocks - 1 - i;  // block 0 on top
    return Status::Ok();
  }

  Status copy_up(void* dst, const void* src, size_t bytes, const char* what) const {
    // Pageable source: the runtime stages it before returning, so `src` may be reused at once.
    return cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream), what);
  }
  Status finish(const char* what) const {
    YOCO_RETURN_IF_ERROR(cuda_check(cudaGetLastError(), what));
    return cuda_check(cudaStreamSynchronize(stream), what);
  }

  // --- validation ----------------------------------------------------------------------------
  Status check_id(SeqId id, const char* field) const {
    if (id < 0 || id >= static_cast<int>(slots.size()) || !slots[id].used)
      return not_found(std::string(field) + ": no sequence " + std::to_string(id));
    return Status::Ok();
  }
  int64_t limit() const { return std::min<int64_t>(opt.max_context, cfg.max_seq_len); }
  Status check_tokens(std::span<const int32_t> t, int64_t start, const std::string& field) const {
    for (size_t i = 0; i < t.size(); ++i)
      if (t[i] < 0 || t[i] >= V)
        return invalid_argument(field + "[" + std::to_string(i) + "]: token id " + std::to_string(t[i]) +
                                " is outside the vocabulary [0, " + std::to_string(V) + ")");
    if (start + static_cast<int64_t>(t.size()) > limit())
      return invalid_argument(field + ": sequence of " + std::to_string(start + static_cast<int64_t>(t.size())) +
                              " tokens exceeds the engine's context " + std::to_string(limit()));
    return Status::Ok();
  }
  // The block-table rows the attention and append kernels read: the pool blocks (YOCO), or the
  // transformer's chunk ids (see tf above), `table_width()` entries of `table_block()` rows.
  int table_width() const { return tf ? max_chunks : max_blocks; }
  int table_block() const { return tf ? kKvChunkRows : opt.kv_block_size; }
  int table_ids() const { return tf ? opt.kv_blocks * (opt.kv_block_size / kKvChunkRows) * cfg.n_layers : opt.kv_blocks; }
  void fill_table(const Slot& s, int32_t* dst) const {
    std::fill(dst, dst + table_width(), 0);
    if (!tf) {
      std::copy(s.blocks.begin(), s.blocks.end(), dst);
      return;
    }
    const int per = opt.kv_block_size / kKvChunkRows;
    for (size_t b = 0; b < s.blocks.size(); ++b)
      for (int c = 0; c < per; ++c) dst[b * per + c] = (s.blocks[b] * per + c) * cfg.n_layers;
  }
  // Pool rows that hold the first n tokens' K/V: a transformer's chunk is layer-major, so its
  // last chunk is needed whole (model/state.h).
  int64_t stored_rows(int64_t n) const { return tf ? (n + kKvChunkRows - 1) / kKvChunkRows * kKvChunkRows : n; }
  // Host copies of pool rows [first, first + n) of a slot, KVR floats each.
  Status rows_down(const Slot& slot, int64_t first, int64_t n, float* k, float* v) const {
    if (n == 0) return Status::Ok();
    YOCO_RETURN_IF_ERROR(cuda_check(cudaSetDevice(opt.device), "cudaSetDevice"));
    const int bs = opt.kv_block_size;
    for (int64_t r = first; r < first + n;) {
      const int64_t in_block = r % bs, rows = std::min<int64_t>(bs - in_block, first + n - r);
      const size_t off = (static_cast<size_t>(slot.blocks[r / bs]) * bs + in_block) * KVR;
      const size_t bytes = static_cast<size_t>(rows) * KVR * 4;
      // Pageable destinations: each copy returns once complete (ordered after earlier work).
      YOCO_RETURN_IF_ERROR(cuda_check(
          cudaMemcpyAsync(k + (r - first) * KVR, k_pool.as<float>() + off, bytes, cudaMemcpyDeviceToHost, stream),
          "read_rows"));
      YOCO_RETURN_IF_ERROR(cuda_check(
          cudaMemcpyAsync(v + (r - first) * KVR, v_pool.as<float>() + off, bytes, cudaMemcpyDeviceToHost, stream),
          "read_rows"));
      r += rows;
    }
    return finish("read_rows");
  }
  int blocks_for(int64_t rows) const { return static_cast<int>((rows + opt.kv_block_size - 1) / opt.kv_block_size); }
  // Grows each slot to hold need[i] rows, all or nothing.
  Status reserve(std::span<const SeqId> ids, std::span<const int64_t> need) {
    int64_t want = 0;
    for (size_t i = 0; i < ids.size(); ++i)
      want += std::max(0, blocks_for(need[i]) - static_cast<int>(slots[ids[i]].blocks.size()));
    if (want > static_cast<int64_t>(free_blocks.size()))
      return Status(StatusCode::kResourceExhausted, "KV pool: " + std::to_string(want) + " more blocks needed, " +
                                                        std::to_string(free_blocks.size()) + " free");
    for (size_t i = 0; i < ids.size(); ++i) {
      Slot& s = slots[ids[i]];
      while (static_cast<int>(s.blocks.size()) < blocks_for(need[i])) {
        s.blocks.push_back(free_blocks.back());
        free_blocks.pop_back();
      }
    }
    return Status::Ok();
  }

  // --- the model ---------------------------------------------------------------------------------
  // h += x·Wᵀ (fp32 residual, bf16 operands).
  Status add_proj(const uint16_t* x_bf16, const uint16_t* w, int rows, int k) {
    return cuda::gemm_bf16(x_bf16, w, h.as<float>(), cuda::DType::kF32, rows, D, k, 1.f, 1.f, stream);
  }

  Status ffn(int rows, const float* norm, const uint16_t* w13, const uint16_t* w2) {
    const float eps = static_cast<float>(cfg.norm_eps);
    YOCO_RETURN_IF_ERROR(cuda::rmsnorm_to_bf16(h.as<float>(), norm, xb.as<uint16_t>(), rows, D, eps, stream));
    YOCO_RETURN_IF_ERROR(
        cuda::gemm_bf16(xb.as<uint16_t>(), w13, u.as<float>(), cuda::DType::kF32, rows, 2 * H, D, 1.f, 0.f, stream));
    // SPEC 2.2: fc1 (the first H columns) is the activated branch.
    YOCO_RETURN_IF_ERROR(
        cuda::silu_mul_to_bf16(u.as<float>(), 2 * H, u.as<float>() + H, 2 * H, act.as<uint16_t>(), H, rows, H, stream));
    return add_proj(act.as<uint16_t>(), w2, rows, H);
  }

  // Mixer input for `rows` rows of h: xb = bf16(RMSNorm(h)), proj = xb·Wᵀ, RoPE on q and k.
  Status self_projections(const DevSelfLayer& L, int rows) {
    const float eps = static_cast<float>(cfg.norm_eps);
    YOCO_RETURN_IF_ERROR(cuda::rmsnorm_to_bf16(h.as<float>(), L.mixer_norm, xb.as<uint16_t>(), rows, D, eps, stream));
    YOCO_RETURN_IF_ERROR(
        cuda::gemm_bf16(xb.as<uint16_t>(), L.wqkvg, proj.as<float>(), cuda::DType::kF32, rows, P, D, 1.f, 0.f, stream));
    float* q = proj.as<float>();
    YOCO_RETURN_IF_ERROR(cuda::rope_interleaved(q, P, rows, Hs, hd, positions.as<int64_t>(), cfg.rope_theta, stream));
    return cuda::rope_interleaved(q + D, P, rows, Hs, hd, positions.as<int64_t>(), cfg.rope_theta, stream);
  }

  // gRet after the mixer: per-head RMSNorm without weight, silu(g) ⊙ o into ob (bf16).
  Status retention_output(int rows) {
    float* ov = o.as<float>();
    YOCO_RETURN_IF_ERROR(cuda::rmsnorm(ov, nullptr, ov, rows * Hs, hd, static_cast<float>(cfg.norm_eps), stream));
    return cuda::silu_mul_to_bf16(proj.as<float>() + 3 * D, P, ov, D, ob.as<uint16_t>(), D, rows, D, stream);
  }

  // Self-decoder over n consecutive rows of one sequence (positions already on the device).
  Status self_decoder_chunk(int slot, int n, int64_t pos0) {
    for (int loop = 0; loop < cfg.n_loops; ++loop) {
      for (int l = 0; l < cfg.n_self_layers; ++l) {
        const DevSelfLayer& L = self_layers[l];
        float* st = slot_state(slot, loop * cfg.n_self_layers + l);
        YOCO_RETURN_IF_ERROR(self_projections(L, n));
        float* q = proj.as<float>();
        if (!cfg.is_swa()) {
          cuda::RetentionPrefillArgs a;
          a.q = q;
          a.ldq = P;
          a.k = q + D;
          a.ldk = P;
          a.v = q + 2 * D;
          a.ldv = P;
          a.gt = q + R;
          a.ldg = P;
          a.state = st;
          a.out = o.as<float>();
          a.ldo = D;
          a.n = n;
          a.n_heads = Hs;
          a.head_dim = hd;
          a.chunk = opt.retention_chunk;
          a.k_scale = 1.0f / std::sqrt(static_cast<float>(hd));
          a.gate_logit_normalizer = static_cast<float>(cfg.gate_logit_normalizer);
          YOCO_RETURN_IF_ERROR(cuda::retention_prefill(a, stream));
          YOCO_RETURN_IF_ERROR(retention_output(n));
        } else {
          const int W = cfg.sliding_window;
          cuda::SwaPrefillArgs a;
          a.q = q;
          a.ldq = P;
          a.k = q + D;
          a.ldk = P;
          a.v = q + 2 * D;
          a.ldv = P;
          a.k_ring = st;
          a.v_ring = st + static_cast<int64_t>(W) * D;
          a.out = o.as<float>();
          a.ldo = D;
          a.n = n;
          a.n_q_heads = Hs;
          a.n_kv_heads = Hs;
          a.head_dim = hd;
          a.window = W;
          a.pos0 = pos0;
          a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
          YOCO_RETURN_IF_ERROR(cuda::swa_prefill(a, stream));
          YOCO_RETURN_IF_ERROR(cuda::convert_to_bf16(o.as<float>(), D, ob.as<uint16_t>(), D, n, D, stream));
        }
        YOCO_RETURN_IF_ERROR(add_proj(ob.as<uint16_t>(), L.wo, n, D));
        YOCO_RETURN_IF_ERROR(ffn(n, L.final_norm, L.w13, L.w2));
      }
    }
    return Status::Ok();
  }

  // Self-decoder for one token per sequence; state_ptrs holds each (loop, layer)'s pointers.
  Status self_decoder_step(int B) {
    float* const* ptrs = state_ptrs.as<float*>();
    for (int loop = 0; loop < cfg.n_loops; ++loop) {
      for (int l = 0; l < cfg.n_self_layers; ++l) {
        const DevSelfLayer& L = self_layers[l];
        const int si = loop * cfg.n_self_layers + l;
        YOCO_RETURN_IF_ERROR(self_projections(L, B));
        float* q = proj.as<float>();
        if (!cfg.is_swa()) {
          cuda::RetentionStepArgs a;
          a.q = q;
          a.ldq = P;
          a.k = q + D;
          a.ldk = P;
          a.v = q + 2 * D;
          a.ldv = P;
          a.gt = q + R;
          a.ldg = P;
          a.states = ptrs + static_cast<size_t>(si) * 2 * opt.max_batch;
          a.out = o.as<float>();
          a.ldo = D;
          a.batch = B;
          a.n_heads = Hs;
          a.head_dim = hd;
          a.k_scale = 1.0f / std::sqrt(static_cast<float>(hd));
          a.gate_logit_normalizer = static_cast<float>(cfg.gate_logit_normalizer);
          YOCO_RETURN_IF_ERROR(cuda::retention_decode_step(a, stream));
          YOCO_RETURN_IF_ERROR(retention_output(B));
        } else {
          cuda::SwaDecodeArgs a;
          a.q = q;
          a.ldq = P;
          a.k = q + D;
          a.ldk = P;
          a.v = q + 2 * D;
          a.ldv = P;
          a.k_rings = ptrs + static_cast<size_t>(si) * 2 * opt.max_batch;
          a.v_rings = ptrs + (static_cast<size_t>(si) * 2 + 1) * opt.max_batch;
          a.positions = positions.as<int64_t>();
          a.out = o.as<float>();
          a.ldo = D;
          a.batch = B;
          a.n_q_heads = Hs;
          a.n_kv_heads = Hs;
          a.head_dim = hd;
          a.window = cfg.sliding_window;
          a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
          YOCO_RETURN_IF_ERROR(cuda::swa_decode(a, stream));
          YOCO_RETURN_IF_ERROR(cuda::convert_to_bf16(o.as<float>(), D, ob.as<uint16_t>(), D, B, D, stream));
        }
        YOCO_RETURN_IF_ERROR(add_proj(ob.as<uint16_t>(), L.wo, B, D));
        YOCO_RETURN_IF_ERROR(ffn(B, L.final_norm, L.w13, L.w2));
      }
    }
    return Status::Ok();
  }

  // z = RMSNorm_kv(h), K|V = z·W_kvᵀ, RoPE on K; rows go into the pool at `positions` of the
  // sequences whose block tables are rows (row_tables_dev ? row_tables_dev[r] : 0).
  Status global_kv(int rows, const int32_t* row_tables_dev) {
    YOCO_RETURN_IF_ERROR(cuda::rmsnorm_to_bf16(h.as<float>(), kv_norm, xb.as<uint16_t>(), rows, D,
                                               static_cast<float>(cfg.norm_eps), stream));
    float* kv = kvbuf.as<float>();
    YOCO_RETURN_IF_ERROR(
        cuda::gemm_bf16(xb.as<uint16_t>(), wkv, kv, cuda::DType::kF32, rows, 2 * KV, D, 1.f, 0.f, stream));
    if (cfg.cross_decoder_rope)
      YOCO_RETURN_IF_ERROR(
          cuda::rope_interleaved(kv, 2 * KV, rows, KVh, hdc, positions.as<int64_t>(), cfg.rope_theta, stream));
    return append_kv(kv, kv + KV, 2 * KV, 0, rows, row_tables_dev);
  }

  // K/V rows (stride ld) into the pool (offset by pool_off floats: a Transformer layer's view) at
  // `positions`, through the block tables (row_tables_dev as in global_kv).
  Status append_kv(const float* k, const float* v, int ld, int64_t pool_off, int rows, const int32_t* row_tables_dev) {
    cuda::KvAppendArgs a;
    a.k = k;
    a.ldk = ld;
    a.v = v;
    a.ldv = ld;
    a.k_pool = k_pool.as<float>() + pool_off;
    a.v_pool = v_pool.as<float>() + pool_off;
    a.block_tables = block_tables.as<int32_t>();
    a.max_blocks = table_width();
    a.row_tables = row_tables_dev;
    a.positions = positions.as<int64_t>();
    a.rows = rows;
    a.kv_dim = KV;
    a.block_size = table_block();
    a.n_blocks = table_ids();
    return cuda::kv_append_paged(a, stream);
  }

  // o [B, Dq] = attention of q (stride ldq) row b over keys 0..lengths[b]−1 of table row b (the
  // pool offset by pool_off floats).
  Status paged_decode(const float* q, int ldq, int64_t pool_off, int B, int64_t max_length) {
    cuda::PagedDecodeArgs a;
    a.q = q;
    a.ldq = ldq;
    a.out = o.as<float>();
    a.ldo = Dq;
    a.k_pool = k_pool.as<float>() + pool_off;
    a.v_pool = v_pool.as<float>() + pool_off;
    a.block_tables = block_tables.as<int32_t>();
    a.max_blocks = table_width();
    a.lengths = lengths.as<int32_t>();
    a.max_length = max_length;
    a.batch = B;
    a.n_q_heads = Ha;
    a.n_kv_heads = KVh;
    a.head_dim = hdc;
    a.block_size = table_block();
    a.scale = 1.0f / std::sqrt(static_cast<float>(hdc));
    return cuda::decode_attention_paged(a, stream);
  }

  // Cross-decoder on h [B, dim] (query of row b at positions[b], keys 0..lengths[b]−1 of the
  // block table row b), then the output head into `logits`.
  Status cross_decoder(int B, int64_t max_length) {
    const float eps = static_cast<float>(cfg.norm_eps);
    for (const DevCrossLayer& L : cross_layers) {
      YOCO_RETURN_IF_ERROR(cuda::rmsnorm_to_bf16(h.as<float>(), L.mixer_norm, xb.as<uint16_t>(), B, D, eps, stream));
      float* q = proj.as<float>();
      YOCO_RETURN_IF_ERROR(cuda::gemm_bf16(xb.as<uint16_t>(), L.wq, q, cuda::DType::kF32, B, Dq, D, 1.f, 0.f, stream));
      if (cfg.cross_decoder_rope)
        YOCO_RETURN_IF_ERROR(
            cuda::rope_interleaved(q, Dq, B, Ha, hdc, positions.as<int64_t>(), cfg.rope_theta, stream));
      YOCO_RETURN_IF_ERROR(paged_decode(q, Dq, 0, B, max_length));
      YOCO_RETURN_IF_ERROR(cuda::convert_to_bf16(o.as<float>(), Dq, ob.as<uint16_t>(), Dq, B, Dq, stream));
      YOCO_RETURN_IF_ERROR(add_proj(ob.as<uint16_t>(), L.wo, B, Dq));
      YOCO_RETURN_IF_ERROR(ffn(B, L.final_norm, L.w13, L.w2));
    }
    return output_head(B);
  }

  // --- the Transformer baseline (SPEC 2.6) --------------------------------------------------------
  // Every layer over h [rows, dim]: q|k|v, RoPE on q and k, the K/V rows into the pool at
  // `positions`, attention, out_proj, FFN. chunk: the rows are positions pos0 .. of one sequence
  // (table row 0), attended causally (causal_attention_prefill); otherwise row b is sequence b's
  // one token (table row b, keys 0..lengths[b]−1; decode_attention_paged).
  Status transformer_layers(int rows, bool chunk, int64_t pos0, int64_t max_len) {
    const float eps = static_cast<float>(cfg.norm_eps);
    const float scale = 1.0f / std::sqrt(static_cast<float>(hdc));
    for (int l = 0; l < cfg.n_layers; ++l) {
      const DevSelfLayer& L = self_layers[l];
      YOCO_RETURN_IF_ERROR(cuda::rmsnorm_to_bf16(h.as<float>(), L.mixer_norm, xb.as<uint16_t>(), rows, D, eps, stream));
      float* q = proj.as<float>();
      YOCO_RETURN_IF_ERROR(
          cuda::gemm_bf16(xb.as<uint16_t>(), L.wqkvg, q, cuda::DType::kF32, rows, P, D, 1.f, 0.f, stream));
      YOCO_RETURN_IF_ERROR(cuda::rope_interleaved(q, P, rows, Ha, hdc, positions.as<int64_t>(), cfg.rope_theta, stream));
      YOCO_RETURN_IF_ERROR(
          cuda::rope_interleaved(q + Dq, P, rows, KVh, hdc, positions.as<int64_t>(), cfg.rope_theta, stream));
      // Layer l's view of the pool (see tf above).
      const int64_t layer_off = static_cast<int64_t>(l) * kKvChunkRows * KV;
      YOCO_RETURN_IF_ERROR(append_kv(q + Dq, q + Dq + KV, P, layer_off, rows, chunk ? nullptr : row_tables.as<int32_t>()));
      if (chunk) {
        cuda::CausalPrefillArgs a;
        a.q = q;
        a.ldq = P;
        a.out = o.as<float>();
        a.ldo = Dq;
        a.k_pool = k_pool.as<float>() + layer_off;
        a.v_pool = v_pool.as<float>() + layer_off;
        a.block_table = block_tables.as<int32_t>();
        a.max_blocks = table_width();
        a.block_size = table_block();
        a.n = rows;
        a.n_q_heads = Ha;
        a.n_kv_heads = KVh;
        a.head_dim = hdc;
        a.pos0 = pos0;
        a.scale = scale;
        YOCO_RETURN_IF_ERROR(cuda::causal_attention_prefill(a, stream));
      } else {
        YOCO_RETURN_IF_ERROR(paged_decode(q, P, layer_off, rows, max_len));
      }
      YOCO_RETURN_IF_ERROR(cuda::convert_to_bf16(o.as<float>(), Dq, ob.as<uint16_t>(), Dq, rows, Dq, stream));
      YOCO_RETURN_IF_ERROR(add_proj(ob.as<uint16_t>(), L.wo, rows, Dq));
      YOCO_RETURN_IF_ERROR(ffn(rows, L.final_norm, L.w13, L.w2));
    }
    return Status::Ok();
  }

  // logits [B, vocab] = RMSNorm(h)·outputᵀ.
  Status output_head(int B) {
    YOCO_RETURN_IF_ERROR(cuda::rmsnorm_to_bf16(h.as<float>(), final_norm, xb.as<uint16_t>(), B, D,
                                               static_cast<float>(cfg.norm_eps), stream));
    return cuda::gemm_bf16(xb.as<uint16_t>(), output, logits.as<float>(), cuda::DType::kF32, B, V, D, 1.f, 0.f, stream);
  }

  // Uploads the batch's block tables (row b = sequence ids[b]), slots, lengths and positions.
  Status upload_batch_meta(std::span<const SeqId> ids, std::span<const int64_t> pos, std::span<const int32_t> lens) {
    const int B = static_cast<int>(ids.size());
    std::vector<int32_t> tables(static_cast<size_t>(B) * table_width(), 0), slot_v(B);
    for (int b = 0; b < B; ++b) {
      fill_table(slots[ids[b]], tables.data() + static_cast<ptrdiff_t>(b) * table_width());
      slot_v[b] = ids[b];
    }
    YOCO_RETURN_IF_ERROR(copy_up(block_tables.as<int32_t>(), tables.data(), tables.size() * 4, "block tables"));
    YOCO_RETURN_IF_ERROR(copy_up(slot_ids.as<int32_t>(), slot_v.data(), slot_v.size() * 4, "slot ids"));
    YOCO_RETURN_IF_ERROR(copy_up(lengths.as<int32_t>(), lens.data(), lens.size() * 4, "lengths"));
    return copy_up(positions.as<int64_t>(), pos.data(), pos.size() * 8, "positions");
  }

  // Everything decode_step runs on the device once the batch's metadata is uploaded.
  Status decode_device_work(int B, int64_t attn_len) {
    YOCO_RETURN_IF_ERROR(cuda::embed(embed, cuda::DType::kBF16, D, tokens.as<int32_t>(), B,
                                     std::sqrt(static_cast<float>(D)), h.as<float>(), stream));
    if (tf) {
      YOCO_RETURN_IF_ERROR(transformer_layers(B, false, 0, attn_len));
      YOCO_RETURN_IF_ERROR(cuda::copy_rows(h.as<float>(), D, nullptr, last_hidden.as<float>(), D,
                                           slot_ids.as<int32_t>(), B, D, stream));
      return output_head(B);
    }
    YOCO_RETURN_IF_ERROR(self_decoder_step(B));
    YOCO_RETURN_IF_ERROR(global_kv(B, row_tables.as<int32_t>()));
    YOCO_RETURN_IF_ERROR(
        cuda::copy_rows(h.as<float>(), D, nullptr, last_hidden.as<float>(), D, slot_ids.as<int32_t>(), B, D, stream));
    return cross_decoder(B, attn_len);
  }

  // The attention grid of a graph covers a power-of-two bucket of lengths (≥ 512 keys).
  int64_t length_bucket(int64_t len) const {
    int64_t b = 512;
    while (b < len) b *= 2;
    return std::min<int64_t>(b, static_cast<int64_t>(max_blocks) * opt.kv_block_size);
  }

  Status decode_with_graph(int B, int64_t max_len) {
    const auto key = std::make_pair(B, length_bucket(max_len));
    if (auto it = graphs.find(key); it != graphs.end())
      return cuda_check(cudaGraphLaunch(it->second, stream), "cudaGraphLaunch");
    if (!warmed.count(key)) {  // first time: eager (cuBLASLt picks its algorithms outside capture)
      YOCO_RETURN_IF_ERROR(decode_device_work(B, key.second));
      warmed.insert(key);
      return Status::Ok();
    }
    YOCO_RETURN_IF_ERROR(
        cuda_check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture"));
    const Status work = decode_device_work(B, key.second);
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(stream, &graph);
    if (!work.ok() || end != cudaSuccess) {
      if (graph) cudaGraphDestroy(graph);
      cudaGetLastError();
      return work.ok() ? cuda_check(end, "cudaStreamEndCapture") : work;
    }
    cudaGraphExec_t exec = nullptr;
    const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    YOCO_RETURN_IF_ERROR(cuda_check(inst, "cudaGraphInstantiate"));
    graphs[key] = exec;
    return cuda_check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
  }

  Status check_batch(std::span<const SeqId> ids, const char* field) const {
    if (ids.empty()) return invalid_argument(std::string(field) + ": empty batch");
    if (static_cast<int>(ids.size()) > opt.max_batch)
      return invalid_argument(std::string(field) + ": batch of " + std::to_string(ids.size()) + " exceeds max_batch " +
                              std::to_string(opt.max_batch));
    std::vector<char> seen(slots.size(), 0);
    for (size_t b = 0; b < ids.size(); ++b) {
      YOCO_RETURN_IF_ERROR(check_id(ids[b], (std::string(field) + "[" + std::to_string(b) + "]").c_str()));
      if (seen[ids[b]]++)
        return invalid_argument(std::string(field) + ": sequence " + std::to_string(ids[b]) + " appears twice");
    }
    return Status::Ok();
  }
};

// --- public API --------------------------------------------------------------------------------

CudaEngine::CudaEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaEngine::~CudaEngine() = default;

Result<std::unique_ptr<CudaEngine>> CudaEngine::create(const Model& model, const CudaEngineOptions& opt,
                                                        KvPool* pool) {
  if (model.tensor_parallel().world != 1)
    return invalid_argument("cuda engine: tensor-parallel models are not supported");
  auto impl = std::make_unique<Impl>();
  impl->init_sizes(model.config(), opt);
  impl->host_pool = pool;
  impl->cross = model.has_cross_decoder();
  YOCO_RETURN_IF_ERROR(impl->check_options());
  YOCO_RETURN_IF_ERROR(impl->setup_device());
  YOCO_RETURN_IF_ERROR(impl->upload_weights(model.weights()));
  YOCO_RETURN_IF_ERROR(impl->alloc_buffers());
  YOCO_RETURN_IF_ERROR(impl->finish("create"));
  return std::unique_ptr<CudaEngine>(new CudaEngine(std::move(impl)));
}

Result<std::unique_ptr<CudaEngine>> CudaEngine::create_random(const ModelConfig& config, uint64_t seed,
                                                              const CudaEngineOptions& opt) {
  YOCO_RETURN_IF_ERROR(validate_model_config(config));
  auto impl = std::make_unique<Impl>();
  impl->init_sizes(config, opt);
  YOCO_RETURN_IF_ERROR(impl->check_options());
  YOCO_RETURN_IF_ERROR(impl->setup_device());
  YOCO_RETURN_IF_ERROR(impl->random_weights(seed));
  YOCO_RETURN_IF_ERROR(impl->alloc_buffers());
  YOCO_RETURN_IF_ERROR(impl->finish("create"));
  return std::unique_ptr<CudaEngine>(new CudaEngine(std::move(impl)));
}

const ModelConfig& CudaEngine::config() const { return impl_->cfg; }
std::string CudaEngine::device() const { return "cuda:" + std::to_string(impl_->opt.device); }
const CudaEngineOptions& CudaEngine::options() const { return impl_->opt; }
bool CudaEngine::has_cross_decoder() const { return impl_->cross; }
int CudaEngine::free_blocks() const { return static_cast<int>(impl_->free_blocks.size()); }
int CudaEngine::free_sequences() const {
  return static_cast<int>(
      std::count_if(impl_->slots.begin(), impl_->slots.end(), [](const Slot& s) { return !s.used; }));
}
int64_t CudaEngine::weight_bytes() const { return impl_->weight_bytes; }
int64_t CudaEngine::kv_bytes_per_token() const { return int64_t{2} * impl_->KVR * 4; }
int64_t CudaEngine::kv_bytes_used() const {
  const Impl& m = *impl_;
  return static_cast<int64_t>(m.opt.kv_blocks - static_cast<int>(m.free_blocks.size())) * m.opt.kv_block_size *
         kv_bytes_per_token();
}
const float* CudaEngine::device_logits() const { return impl_->logits.as<float>(); }

int64_t CudaEngine::position(SeqId id) const {
  if (!impl_->check_id(id, "id").ok()) return -1;
  return impl_->slots[id].position;
}

int64_t CudaEngine::capacity(SeqId id) const {
  if (!impl_->check_id(id, "id").ok()) return -1;
  return static_cast<int64_t>(impl_->slots[id].blocks.size()) * impl_->opt.kv_block_size;
}

Status CudaEngine::reserve(SeqId id, int64_t rows) {
  Impl& m = *impl_;
  YOCO_RETURN_IF_ERROR(m.check_id(id, "reserve"));
  if (rows < 0 || rows > m.limit())
    return invalid_argument("rows: " + std::to_string(rows) + " is outside [0, the engine's context " +
                            std::to_string(m.limit()) + "]");
  const SeqId one[1] = {id};
  const int64_t need[1] = {rows};
  return m.reserve(one, need);
}

Result<CudaEngine::SeqId> CudaEngine::new_sequence() {
  Impl& m = *impl_;
  for (size_t i = 0; i < m.slots.size(); ++i) {
    if (m.slots[i].used) continue;
    YOCO_RETURN_IF_ERROR(cuda_check(cudaSetDevice(m.opt.device), "cudaSetDevice"));
    // A gRet state must start at zero; zero the rings and last_hidden too (nothing stale).
    YOCO_RETURN_IF_ERROR(cuda_check(cudaMemsetAsync(m.slot_state(static_cast<int>(i), 0), 0,
                                                    static_cast<size_t>(m.n_states) * m.layer_floats * 4, m.stream),
                                    "zero state"));
    YOCO_RETURN_IF_ERROR(
        cuda_check(cudaMemsetAsync(m.last_hidden.as<float>() + i * m.D, 0, static_cast<size_t>(m.D) * 4, m.stream),
                   "zero hidden"));
    YOCO_RETURN_IF_ERROR(m.finish("new_sequence"));
    m.slots[i] = Slot{true, 0, {}};
    return static_cast<SeqId>(i);
  }
  return Status(StatusCode::kResourceExhausted,
                "cuda engine: all " + std::to_string(m.slots.size()) + " sequence slots are in use");
}

Status CudaEngine::release(SeqId id) {
  Impl& m = *impl_;
  YOCO_RETURN_IF_ERROR(m.check_id(id, "release"));
  Slot& s = m.slots[id];
  for (auto it = s.blocks.rbegin(); it != s.blocks.rend(); ++it) m.free_blocks.push_back(*it);
  s = Slot{};
  return Status::Ok();
}

Status CudaEngine::prefill(SeqId id, std::span<const int32_t> tokens, int chunk_tokens) {
  Impl& m = *impl_;
  YOCO_RETURN_IF_ERROR(m.check_id(id, "prefill"));
  if (chunk_tokens < 0 || chunk_tokens > m.opt.max_chunk_tokens)
    return invalid_argument("chunk_tokens must be in 0..max_chunk_tokens (" + std::to_string(m.opt.max_chunk_tokens) +
                            ")");
  const int chunk = chunk_tokens == 0 ? m.opt.max_chunk_tokens : chunk_tokens;
  Slot& s = m.slots[id];
  YOCO_RETURN_IF_ERROR(m.check_tokens(tokens, s.position, "tokens"));
  if (tokens.empty()) return Status::Ok();
  const SeqId one[1] = {id};
  const int64_t need[1] = {s.position + static_cast<int64_t>(tokens.size())};
  YOCO_RETURN_IF_ERROR(m.reserve(one, need));
  YOCO_RETURN_IF_ERROR(cuda_check(cudaSetDevice(m.opt.device), "cudaSetDevice"));

  std::vector<int32_t> table(m.table_width());
  m.fill_table(s, table.data());
  YOCO_RETURN_IF_ERROR(m.copy_up(m.block_tables.as<int32_t>(), table.data(), table.size() * 4, "block table"));
  std::vector<int64_t> pos;
  int64_t position = s.position;
  for (size_t off = 0; off < tokens.size(); off += chunk) {
    const int n = static_cast<int>(std::min<size_t>(chunk, tokens.size() - off));
    pos.resize(n);
    for (int i = 0; i < n; ++i) pos[i] = position + i;
    YOCO_RETURN_IF_ERROR(m.copy_up(m.tokens.as<int32_t>(), tokens.data() + off, static_cast<size_t>(n) * 4, "tokens"));
    YOCO_RETURN_IF_ERROR(m.copy_up(m.positions.as<int64_t>(), pos.data(), static_cast<size_t>(n) * 8, "positions"));
    YOCO_RETURN_IF_ERROR(cuda::embed(m.embed, cuda::DType::kBF16, m.D, m.tokens.as<int32_t>(), n,
                                     std::sqrt(static_cast<float>(m.D)), m.h.as<float>(), m.stream));
    if (m.tf) {
      YOCO_RETURN_IF_ERROR(m.transformer_layers(n, true, position, 0));
    } else {
      YOCO_RETURN_IF_ERROR(m.self_decoder_chunk(id, n, position));
      YOCO_RETURN_IF_ERROR(m.global_kv(n, nullptr));
    }
    YOCO_RETURN_IF_ERROR(cuda_check(cudaMemcpyAsync(m.last_hidden.as<float>() + static_cast<size_t>(id) * m.D,
                                                    m.h.as<float>() + static_cast<size_t>(n - 1) * m.D,
                                                    static_cast<size_t>(m.D) * 4, cudaMemcpyDeviceToDevice, m.stream),
                                    "last_hidden"));
    position += n;
  }
  YOCO_RETURN_IF_ERROR(m.finish("prefill"));
  s.position = position;
  return Status::Ok();
}

Status CudaEngine::prefill(SeqId id, std::span<const int32_t> tokens, const PrefillOptions& opt) {
  if (opt.chunk_tokens <= 0) return invalid_argument("chunk_tokens must be > 0");
  return prefill(id, tokens, std::min(opt.chunk_tokens, impl_->opt.max_chunk_tokens));
}

Status CudaEngine::logits(std::span<const SeqId> ids, float* out) {
  Impl& m = *impl_;
  if (!m.cross) return failed_precondition("this engine holds no cross-decoder (prefill weights)");
  YOCO_RETURN_IF_ERROR(m.check_batch(ids, "logits"));
  const int B = static_cast<int>(ids.size());
  std::vector<int64_t> pos(B);
  std::vector<int32_t> lens(B);
  int64_t max_len = 0;
  for (int b = 0; b < B; ++b) {
    const int64_t p = m.slots[ids[b]].position;
    if (p <= 0) return failed_precondition("sequence " + std::to_string(ids[b]) + " has consumed no tokens");
    pos[b] = p - 1;
    lens[b] = static_cast<int32_t>(p);
    max_len = std::max(max_len, p);
  }
  YOCO_RETURN_IF_ERROR(cuda_check(cudaSetDevice(m.opt.device), "cudaSetDevice"));
  YOCO_RETURN_IF_ERROR(m.upload_batch_meta(ids, pos, lens));
  YOCO_RETURN_IF_ERROR(cuda::copy_rows(m.last_hidden.as<float>(), m.D, m.slot_ids.as<int32_t>(), m.h.as<float>(), m.D,
                                       nullptr, B, m.D, m.stream));
  YOCO_RETURN_IF_ERROR(m.tf ? m.output_head(B) : m.cross_decoder(B, max_len));
  if (out)
    YOCO_RETURN_IF_ERROR(cuda_check(
        cudaMemcpyAsync(out, m.logits.as<float>(), static_cast<size_t>(B) * m.V * 4, cudaMemcpyDeviceToHost, m.stream),
        "logits to host"));
  return m.finish("logits");
}

Status CudaEngine::decode_step(std::span<const SeqId> ids, std::span<const int32_t> tokens, float* out) {
  Impl& m = *impl_;
  if (!m.cross) return failed_precondition("this engine holds no cross-decoder (prefill weights)");
  YOCO_RETURN_IF_ERROR(m.check_batch(ids, "decode_step"));
  if (tokens.size() != ids.size()) return invalid_argument("decode_step: one token per sequence");
  const int B = static_cast<int>(ids.size());
  std::vector<int64_t> pos(B), need(B);
  std::vector<int32_t> lens(B);
  int64_t max_len = 0;
  for (int b = 0; b < B; ++b) {
    const int64_t p = m.slots[ids[b]].position;
    YOCO_RETURN_IF_ERROR(m.check_tokens(tokens.subspan(b, 1), p, "tokens[" + std::to_string(b) + "]"));
    pos[b] = p;
    need[b] = p + 1;
    lens[b] = static_cast<int32_t>(p + 1);
    max_len = std::max(max_len, p + 1);
  }
  YOCO_RETURN_IF_ERROR(m.reserve(ids, need));
  YOCO_RETURN_IF_ERROR(cuda_check(cudaSetDevice(m.opt.device), "cudaSetDevice"));
  // Per (loop, layer): the B state pointers (gRet S, or the SWA K ring), then the B V rings.
  std::vector<float*> ptrs(static_cast<size_t>(m.n_states) * 2 * m.opt.max_batch, nullptr);
  for (int si = 0; si < m.n_states; ++si)
    for (int b = 0; b < B; ++b) {
      float* st = m.slot_state(ids[b], si);
      ptrs[(static_cast<size_t>(si) * 2) * m.opt.max_batch + b] = st;
      if (m.cfg.is_swa())
        ptrs[(static_cast<size_t>(si) * 2 + 1) * m.opt.max_batch + b] =
            st + static_cast<int64_t>(m.cfg.sliding_window) * m.D;
    }
  if (!ptrs.empty())  // a transformer has no self-decoder state
    YOCO_RETURN_IF_ERROR(
        m.copy_up(m.state_ptrs.as<float*>(), ptrs.data(), ptrs.size() * sizeof(float*), "state pointers"));
  YOCO_RETURN_IF_ERROR(m.upload_batch_meta(ids, pos, lens));
  YOCO_RETURN_IF_ERROR(m.copy_up(m.tokens.as<int32_t>(), tokens.data(), static_cast<size_t>(B) * 4, "tokens"));

  YOCO_RETURN_IF_ERROR(m.opt.cuda_graphs ? m.decode_with_graph(B, max_len) : m.decode_device_work(B, max_len));
  if (out)
    YOCO_RETURN_IF_ERROR(cuda_check(
        cudaMemcpyAsync(out, m.logits.as<float>(), static_cast<size_t>(B) * m.V * 4, cudaMemcpyDeviceToHost, m.stream),
        "logits to host"));
  YOCO_RETURN_IF_ERROR(m.finish("decode_step"));
  for (int b = 0; b < B; ++b) m.slots[ids[b]].position += 1;
  return Status::Ok();
}

Result<CudaEngine::SeqId> CudaEngine::upload(const SequenceState& st) {
  Impl& m = *impl_;
  const ModelConfig& c = m.cfg;
  auto bad = [](const std::string& what) { return invalid_argument("upload: " + what); };
  const int64_t n = st.position;
  if (n < 0 || n > m.limit()) return bad("position " + std::to_string(n) + " is outside the engine's context");
  if (static_cast<int>(st.self.size()) != m.n_states)
    return bad("state has " + std::to_string(st.self.size()) + " self-decoder layers, model has " +
               std::to_string(m.n_states));
  const int64_t n_rows = m.stored_rows(n);  // a transformer's last chunk whole (model/state.h)
  if (st.pages) {
    if (st.pages->kv_dim != m.KVR || st.pages->capacity() < n_rows)
      return bad("KV pages do not hold the state's rows");
  } else if (static_cast<int64_t>(st.k.size()) < n_rows * m.KVR || static_cast<int64_t>(st.v.size()) < n_rows * m.KVR) {
    return bad("K/V rows shorter than the position");
  }
  if (n > 0 && static_cast<int>(st.last_hidden.size()) != m.D) return bad("last_hidden must hold dim values");
  const int W = c.sliding_window;
  for (int si = 0; si < m.n_states; ++si) {
    const SelfLayerState& s = st.self[si];
    const std::string at = "self-decoder state " + std::to_string(si) + ": ";
    if (!c.is_swa()) {
      if (static_cast<int64_t>(s.s.size()) != m.layer_floats) return bad(at + "S has the wrong size");
    } else {
      if (s.capacity != W || static_cast<int64_t>(s.k.size()) != static_cast<int64_t>(W) * m.D ||
          s.v.size() != s.k.size())
        return bad(at + "the window ring must be [window, dim]");
      // The GPU reads positions n − W + 1 .. n − 1 at p % W: those rows must be there.
      const int64_t must = std::min<int64_t>(n, W - 1);
      if (s.count < must || s.count > std::min<int64_t>(n, W)) return bad(at + "the ring holds too few rows");
      if (s.count > 0 && s.head != static_cast<int>(((n - s.count) % W + W) % W))
        return bad(at + "the ring's rows are not at position mod window");
    }
  }
  YOCO_ASSIGN_OR_RETURN(SeqId id, new_sequence());
  Slot& slot = m.slots[id];
  const SeqId one[1] = {id};
  const int64_t need[1] = {n};
  if (Status r = m.reserve(one, need); !r.ok()) {
    (void)release(id);  // id is ours and valid: cannot fail
    return r;
  }
  auto fail = [&](Status s) {
    (void)release(id);  // id is ours and valid: cannot fail
    return s;
  };
  for (int si = 0; si < m.n_states; ++si) {
    const SelfLayerState& s = st.self[si];
    float* dst = m.slot_state(id, si);
    Status r = !c.is_swa() ? m.copy_up(dst, s.s.data(), s.s.size() * 4, "upload S")
                           : m.copy_up(dst, s.k.data(), s.k.size() * 4, "upload K ring");
    if (r.ok() && c.is_swa())
      r = m.copy_up(dst + static_cast<int64_t>(W) * m.D, s.v.data(), s.v.size() * 4, "upload V ring");
    if (!r.ok()) return fail(r);
  }
  if (n > 0) {
    Status r = m.copy_up(m.last_hidden.as<float>() + static_cast<size_t>(id) * m.D, st.last_hidden.data(),
                         static_cast<size_t>(m.D) * 4, "upload last_hidden");
    if (!r.ok()) return fail(r);
  }
  // K/V rows block by block ([block_size, row width] contiguous in the pool; a transformer's
  // rows are copied as the CPU state lays them out, chunk by chunk).
  const int bs = m.opt.kv_block_size, w = m.KVR;
  std::vector<float> kb, vb;
  for (size_t bi = 0; bi < slot.blocks.size(); ++bi) {
    const int64_t r0 = static_cast<int64_t>(bi) * bs, rows = std::min<int64_t>(bs, n_rows - r0);
    if (rows <= 0) break;
    kb.resize(static_cast<size_t>(rows) * w);
    vb.resize(kb.size());
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(&kb[r * w], st.k_row(r0 + r, w), static_cast<size_t>(w) * 4);
      std::memcpy(&vb[r * w], st.v_row(r0 + r, w), static_cast<size_t>(w) * 4);
    }
    const size_t off = static_cast<size_t>(slot.blocks[bi]) * bs * w;
    Status r = m.copy_up(m.k_pool.as<float>() + off, kb.data(), kb.size() * 4, "upload K rows");
    if (r.ok()) r = m.copy_up(m.v_pool.as<float>() + off, vb.data(), vb.size() * 4, "upload V rows");
    if (!r.ok()) return fail(r);
  }
  if (Status r = m.finish("upload"); !r.ok()) return fail(r);
  slot.position = n;
  return id;
}

Status CudaEngine::download(SeqId id, SequenceState& out, bool with_kv) const {
  const Impl& m = *impl_;
  YOCO_RETURN_IF_ERROR(m.check_id(id, "download"));
  const Slot& slot = m.slots[id];
  const int64_t n = slot.position;
  const int W = m.cfg.sliding_window;
  YOCO_RETURN_IF_ERROR(cuda_check(cudaSetDevice(m.opt.device), "cudaSetDevice"));
  YOCO_RETURN_IF_ERROR(m.finish("download"));
  SequenceState st = make_sequence_state(m.cfg);
  st.position = n;
  auto down = [&](void* dst, const void* src, size_t bytes) {
    // Pageable destination: returns once the copy (ordered on the stream) is complete.
    return cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, m.stream), "download");
  };
  for (int si = 0; si < m.n_states; ++si) {
    SelfLayerState& s = st.self[si];
    const float* src = m.slot_state(id, si);
    if (!m.cfg.is_swa()) {
      YOCO_RETURN_IF_ERROR(down(s.s.data(), src, s.s.size() * 4));
    } else {
      YOCO_RETURN_IF_ERROR(down(s.k.data(), src, s.k.size() * 4));
      YOCO_RETURN_IF_ERROR(down(s.v.data(), src + static_cast<int64_t>(W) * m.D, s.v.size() * 4));
      // As the CPU's ring_push leaves it: the newest min(n, W) positions, oldest at (n − count) % W.
      s.count = static_cast<int>(std::min<int64_t>(n, W));
      s.head = static_cast<int>((n - s.count) % W);
    }
  }
  if (n > 0) {
    st.last_hidden.resize(m.D);
    YOCO_RETURN_IF_ERROR(down(st.last_hidden.data(), m.last_hidden.as<float>() + static_cast<size_t>(id) * m.D,
                              static_cast<size_t>(m.D) * 4));
  }
  if (with_kv) {
    const int64_t n_rows = m.stored_rows(n);
    st.k.resize(static_cast<size_t>(n_rows) * m.KVR);
    st.v.resize(st.k.size());
    YOCO_RETURN_IF_ERROR(m.rows_down(slot, 0, n_rows, st.k.data(), st.v.data()));
  }
  out = std::move(st);
  return Status::Ok();
}

Status CudaEngine::read_rows(SeqId id, int64_t first, int64_t n, float* k, float* v) const {
  const Impl& m = *impl_;
  YOCO_RETURN_IF_ERROR(m.check_id(id, "read_rows"));
  if (m.tf)
    return Status(StatusCode::kUnimplemented,
                  "read_rows: arch \"transformer\" keeps each chunk's rows layer-major (model/state.h); use download");
  const Slot& slot = m.slots[id];
  if (first < 0 || n < 0 || first + n > slot.position)
    return invalid_argument("rows: [" + std::to_string(first) + ", " + std::to_string(first + n) +
                            ") is outside the sequence's " + std::to_string(slot.position) + " rows");
  return m.rows_down(slot, first, n, k, v);
}

Result<CudaEngine::SeqId> CudaEngine::adopt(SequenceState& st) {
  KvPool* pool = impl_->host_pool;
  if (st.pages && (!pool || st.pages->k_pool != pool->k_data()))
    return invalid_argument("state: its K/V rows are paged in a pool this engine does not own");
  YOCO_ASSIGN_OR_RETURN(SeqId id, upload(st));
  // The rows are on the device now: the host blocks go back to the pool for the next transfer.
  if (st.pages) {
    pool->release(*st.pages);
    st.pages.reset();
  }
  return id;
}

Status CudaEngine::snapshot(SeqId id, SequenceState& out) const { return download(id, out, /*with_kv=*/false); }

}  // namespace yoco
