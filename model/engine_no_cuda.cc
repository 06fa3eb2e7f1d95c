// make_cuda_engine in a build without YOCO_CUDA: the CPU-only build is complete, and
// `--device cuda` says why it cannot run.
#include "model/engine.h"

namespace yoco {

Result<std::unique_ptr<Engine>> make_cuda_engine(const Model&, KvPool*, const CudaEngineOptions&) {
  return Status(StatusCode::kUnimplemented,
                "device: this build has no CUDA engine (configure with -DYOCO_CUDA=ON and the CUDA toolkit)");
}

}  // namespace yoco
