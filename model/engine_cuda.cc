// yoco::CudaEngine behind the Engine interface (model/engine.h). Part of yoco_engine_cuda.
#include <algorithm>

#include "model/cuda_engine.h"
#include "model/engine.h"

namespace yoco {

namespace {

class CudaBackedEngine final : public Engine {
 public:
  CudaBackedEngine(std::unique_ptr<CudaEngine> gpu, KvPool* pool, int device)
      : gpu_(std::move(gpu)), pool_(pool), device_(device) {}

  const ModelConfig& config() const override { return gpu_->config(); }
  std::string device() const override { return "cuda:" + std::to_string(device_); }

  Result<SeqId> adopt(SequenceState& st) override {
    if (st.pages && (!pool_ || st.pages->k_pool != pool_->k_data()))
      return invalid_argument("state: its K/V rows are paged in a pool this engine does not own");
    YOCO_ASSIGN_OR_RETURN(SeqId id, gpu_->upload(st));
    // The rows are on the device now: the host blocks go back to the pool for the next transfer.
    if (st.pages) {
      pool_->release(*st.pages);
      st.pages.reset();
    }
    return id;
  }
  Status release(SeqId id) override { return gpu_->release(id); }

  int64_t position(SeqId id) const override { return gpu_->position(id); }
  int64_t capacity(SeqId id) const override { return gpu_->capacity(id); }
  Status reserve(SeqId id, int64_t rows) override { return gpu_->reserve(id, rows); }

  Status prefill(SeqId id, std::span<const int32_t> tokens, const PrefillOptions& opt) override {
    if (opt.chunk_tokens <= 0) return invalid_argument("chunk_tokens must be > 0");
    return gpu_->prefill(id, tokens, std::min(opt.chunk_tokens, gpu_->options().max_chunk_tokens));
  }
  Status logits(std::span<const SeqId> ids, float* out) override { return gpu_->logits(ids, out); }
  Status decode_step(std::span<const SeqId> ids, std::span<const int32_t> tokens, float* out) override {
    return gpu_->decode_step(ids, tokens, out);
  }

  Status read_rows(SeqId id, int64_t first, int64_t n, float* k, float* v) const override {
    return gpu_->read_rows(id, first, n, k, v);
  }
  Status snapshot(SeqId id, SequenceState& out) const override { return gpu_->download(id, out, /*with_kv=*/false); }
  const SequenceState* host_state(SeqId) const override { return nullptr; }

 private:
  std::unique_ptr<CudaEngine> gpu_;
  KvPool* const pool_;
  const int device_;
};

}  // namespace

Result<std::unique_ptr<Engine>> make_cuda_engine(const Model& model, KvPool* pool, const CudaEngineOptions& opt) {
  YOCO_ASSIGN_OR_RETURN(auto gpu, CudaEngine::create(model, opt));
  return std::unique_ptr<Engine>(std::make_unique<CudaBackedEngine>(std::move(gpu), pool, opt.device));
}

}  // namespace yoco
