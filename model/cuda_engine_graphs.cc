// The CUDA engine's decode steps as CUDA graphs, per (batch size, attention length bucket).
#include <cuda_runtime.h>

#include <utility>

#include "model/cuda_engine_impl.h"

namespace yoco {

using cuda_engine_internal::cuda_check;

Status CudaEngine::Impl::decode_with_graph(int B, int64_t max_len) {
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

}  // namespace yoco
