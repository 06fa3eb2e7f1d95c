#include "model/cuda/graph_cache.h"

#include "model/cuda/device.h"

namespace yoco::cuda_engine {

Status DecodeGraphs::run(int batch, int64_t bucket, cudaStream_t stream, const std::function<Status()>& work) {
  const auto key = std::make_pair(batch, bucket);
  if (auto it = graphs_.find(key); it != graphs_.end())
    return cuda_check(cudaGraphLaunch(it->second, stream), "cudaGraphLaunch");
  if (!warmed_.count(key)) {
    YOCO_RETURN_IF_ERROR(work());
    warmed_.insert(key);
    return Status::Ok();
  }
  YOCO_RETURN_IF_ERROR(
      cuda_check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture"));
  const Status captured = work();
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  if (!captured.ok() || end != cudaSuccess) {
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    return captured.ok() ? cuda_check(end, "cudaStreamEndCapture") : captured;
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  YOCO_RETURN_IF_ERROR(cuda_check(inst, "cudaGraphInstantiate"));
  graphs_[key] = exec;
  return cuda_check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
}

void DecodeGraphs::clear() {
  for (auto& g : graphs_) cudaGraphExecDestroy(g.second);
  graphs_.clear();
  warmed_.clear();
}

}  // namespace yoco::cuda_engine
