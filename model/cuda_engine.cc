// The CUDA engine (model/cuda_engine.h): creation, device setup, buffers and the public accessors.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <utility>

#include "model/cuda_engine_impl.h"
#include "model/model.h"

namespace yoco {

using cuda_engine_internal::cuda_check;
using cuda_engine_internal::Slot;

CudaEngine::Impl::~Impl() {
  for (auto& g : graphs) cudaGraphExecDestroy(g.second);
  if (stream) {
    cudaSetDevice(opt.device);
    cudaStreamSynchronize(stream);
    (void)cuda::release_scratch(stream);  // nothing to report from a destructor
    cudaStreamDestroy(stream);
  }
}

void CudaEngine::Impl::init_sizes(const ModelConfig& c, const CudaEngineOptions& o) {
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

Status CudaEngine::Impl::check_options() const {
  if (tf &&
      static_cast<int64_t>(opt.kv_blocks) * (opt.kv_block_size / kKvChunkRows) * cfg.n_layers >= (int64_t{1} << 31))
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

Status CudaEngine::Impl::setup_device() {
  YOCO_RETURN_IF_ERROR(cuda_check(cudaSetDevice(opt.device), "cudaSetDevice"));
  return cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
}

Status CudaEngine::Impl::alloc_buffers() {
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
    YOCO_RETURN_IF_KERNEL_ERROR(cuda::decode_attention_paged_reserve(a, stream));
  }
  slots.assign(opt.max_sequences, Slot{});
  free_blocks.resize(opt.kv_blocks);
  for (int i = 0; i < opt.kv_blocks; ++i) free_blocks[i] = opt.kv_blocks - 1 - i;  // block 0 on top
  return Status::Ok();
}

Status CudaEngine::Impl::copy_up(void* dst, const void* src, size_t bytes, const char* what) const {
  // Pageable source: the runtime stages it before returning, so `src` may be reused at once.
  return cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream), what);
}

Status CudaEngine::Impl::finish(const char* what) const {
  YOCO_RETURN_IF_ERROR(cuda_check(cudaGetLastError(), what));
  return cuda_check(cudaStreamSynchronize(stream), what);
}

CudaEngine::CudaEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CudaEngine::~CudaEngine() = default;

Result<std::unique_ptr<CudaEngine>> CudaEngine::create(const Model& model, const CudaEngineOptions& opt, KvPool* pool) {
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

int64_t CudaEngine::weight_bytes() const { return impl_->weight_bytes; }

int64_t CudaEngine::kv_bytes_per_token() const { return int64_t{2} * impl_->KVR * 4; }

}  // namespace yoco
