// The CUDA engine (model/cuda/cuda_engine.h): creation, device setup, buffers and the public accessors.
#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "model/cuda/engine_impl.h"
#include "model/model.h"

namespace yoco {

namespace cuda_engine {

Impl::~Impl() {
  graphs.clear();
  if (stream) {
    cudaSetDevice(opt.device);
    cudaStreamSynchronize(stream);
    (void)cuda::release_scratch(stream);  // nothing to report from a destructor
    cudaStreamDestroy(stream);
  }
}

Status Impl::check_options() const {
  const program::Widths& w = sizes.widths;
  if (cfg.is_transformer() &&
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
  if (w.self_head_dim > 256 || w.attn_head_dim > 256)
    return invalid_argument("cuda engine: head dims above 256 are not supported");
  if (w.attn_heads / w.kv_heads > 16)
    return invalid_argument("cuda engine: n_attn_heads / n_attn_kv_heads above 16 is not supported");
  if (cuda::device_count() <= opt.device || opt.device < 0)
    return failed_precondition("cuda engine: no CUDA device " + std::to_string(opt.device));
  return Status::Ok();
}

Status Impl::setup_device() {
  YOCO_RETURN_IF_ERROR(cuda_check(cudaSetDevice(opt.device), "cudaSetDevice"));
  return cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
}

Status Impl::alloc_buffers() {
  YOCO_RETURN_IF_ERROR(slots.init(cfg, opt, sizes, stream));
  YOCO_RETURN_IF_ERROR(ws.alloc(sizes, opt.max_batch, slots.table_width(), has_head, stream));
  if (opt.cuda_graphs && has_head) {
    cuda::PagedDecodeArgs a;
    a.batch = opt.max_batch;
    a.n_q_heads = sizes.widths.attn_heads;
    a.head_dim = sizes.widths.attn_head_dim;
    a.max_length = static_cast<int64_t>(sizes.blocks_per_sequence) * opt.kv_block_size;
    YOCO_RETURN_IF_KERNEL_ERROR(cuda::decode_attention_paged_reserve(a, stream));
  }
  return Status::Ok();
}

Status Impl::finish(const char* what) const {
  YOCO_RETURN_IF_ERROR(cuda_check(cudaGetLastError(), what));
  return cuda_check(cudaStreamSynchronize(stream), what);
}

}  // namespace cuda_engine

using cuda_engine::Impl;

CudaEngine::CudaEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CudaEngine::~CudaEngine() = default;

Result<std::unique_ptr<CudaEngine>> CudaEngine::create(const Model& model, const CudaEngineOptions& opt, KvPool* pool) {
  if (model.tensor_parallel().world != 1)
    return invalid_argument("cuda engine: tensor-parallel models are not supported");
  auto impl = std::make_unique<Impl>(model.config(), opt);
  impl->host_pool = pool;
  impl->has_head = model.has_cross_decoder();
  YOCO_RETURN_IF_ERROR(impl->check_options());
  YOCO_RETURN_IF_ERROR(impl->setup_device());
  YOCO_RETURN_IF_ERROR(impl->weights.upload(model.weights(), impl->cfg, impl->sizes, impl->has_head, impl->stream));
  YOCO_RETURN_IF_ERROR(impl->alloc_buffers());
  YOCO_RETURN_IF_ERROR(impl->finish("create"));
  return std::unique_ptr<CudaEngine>(new CudaEngine(std::move(impl)));
}

Result<std::unique_ptr<CudaEngine>> CudaEngine::create_random(const ModelConfig& config, uint64_t seed,
                                                              const CudaEngineOptions& opt) {
  YOCO_RETURN_IF_ERROR(validate_model_config(config));
  auto impl = std::make_unique<Impl>(config, opt);
  YOCO_RETURN_IF_ERROR(impl->check_options());
  YOCO_RETURN_IF_ERROR(impl->setup_device());
  YOCO_RETURN_IF_ERROR(impl->weights.random(impl->cfg, impl->sizes, seed, impl->stream));
  YOCO_RETURN_IF_ERROR(impl->alloc_buffers());
  YOCO_RETURN_IF_ERROR(impl->finish("create"));
  return std::unique_ptr<CudaEngine>(new CudaEngine(std::move(impl)));
}

const ModelConfig& CudaEngine::config() const { return impl_->cfg; }

std::string CudaEngine::device() const { return "cuda:" + std::to_string(impl_->opt.device); }

const CudaEngineOptions& CudaEngine::options() const { return impl_->opt; }

bool CudaEngine::has_cross_decoder() const { return impl_->has_head; }

int64_t CudaEngine::weight_bytes() const { return impl_->weights.bytes(); }

int64_t CudaEngine::kv_bytes_per_token() const { return int64_t{2} * impl_->sizes.pool_row_floats * 4; }

const float* CudaEngine::device_logits() const { return impl_->ws.logits.as<float>(); }

}  // namespace yoco
