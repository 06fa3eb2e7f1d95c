// The CUDA engine's decode steps as CUDA graphs (CudaEngineOptions::cuda_graphs), one per (batch
// size, attention length bucket). Private to yoco_engine_cuda: includes CUDA headers.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <utility>

#include "common/status.h"

namespace yoco::cuda_engine {

class DecodeGraphs {
 public:
  DecodeGraphs() = default;
  ~DecodeGraphs() { clear(); }
  DecodeGraphs(const DecodeGraphs&) = delete;
  DecodeGraphs& operator=(const DecodeGraphs&) = delete;

  // The attention grid of a graph covers a power-of-two bucket of lengths (≥ 512 keys), at most
  // max_rows (a sequence's longest block table).
  static int64_t length_bucket(int64_t length, int64_t max_rows) {
    int64_t b = 512;
    while (b < length) b *= 2;
    return std::min<int64_t>(b, max_rows);
  }

  // Runs `work` (the step's device work for this shape) on `stream`: eagerly the first time
  // (cuBLASLt picks its algorithms outside capture), captured into a graph the second time,
  // replayed from then on.
  Status run(int batch, int64_t bucket, cudaStream_t stream, const std::function<Status()>& work);
  void clear();

 private:
  std::map<std::pair<int, int64_t>, cudaGraphExec_t> graphs_;
  std::set<std::pair<int, int64_t>> warmed_;
};

}  // namespace yoco::cuda_engine
