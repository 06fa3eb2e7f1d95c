#include "model/engine.h"

#include "model/cpu_engine.h"
#if defined(YOCO_CUDA_ENGINE)
#include "model/cuda/cuda_engine.h"
#endif

namespace yoco {

Result<std::unique_ptr<Engine>> make_engine(const Model& model, KvPool* pool, const EngineOptions& opt) {
  if (opt.device < 0) return std::unique_ptr<Engine>(std::make_unique<CpuEngine>(model, pool, opt.threads));
#if defined(YOCO_CUDA_ENGINE)
  CudaEngineOptions co = opt.cuda;
  co.device = opt.device;
  YOCO_ASSIGN_OR_RETURN(auto gpu, CudaEngine::create(model, co, pool));
  return std::unique_ptr<Engine>(std::move(gpu));
#else
  // The CPU-only build is complete, and `--device cuda` says why it cannot run.
  return Status(StatusCode::kUnimplemented,
                "device: this build has no CUDA engine (configure with -DYOCO_CUDA=ON and the CUDA toolkit)");
#endif
}

}  // namespace yoco
