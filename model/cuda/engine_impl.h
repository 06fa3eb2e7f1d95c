// Inside the CUDA engine (model/cuda/cuda_engine.h): the engine's parts, one file pair per concern:
//   engine.cc                       creation, device setup, the public accessors
//   weights.{h,cc}                  DeviceWeights: bf16 matrices and fp32 norms (from a Model, or random)
//   slots.{h,cc}                    SequenceSlots: per-sequence device state, the K/V pool, block tables
//   graph_cache.{h,cc}              DecodeGraphs: CUDA graphs of decode steps
//   backend.{h,cc}                  CudaBackend: the layer program's ops (model/program.h), the Workspace
//   calls.cc                        prefill, forward, logits, decode_step: bind the rows, run the program
//   state_io.cc                     upload, download, read_rows (and adopt / snapshot)
// Private to yoco_engine_cuda: includes CUDA headers.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>

#include "model/cuda/backend.h"
#include "model/cuda/cuda_engine.h"
#include "model/cuda/device.h"
#include "model/cuda/graph_cache.h"
#include "model/cuda/sizes.h"
#include "model/cuda/slots.h"
#include "model/cuda/weights.h"

namespace yoco::cuda_engine {

struct Impl {
  ModelConfig cfg;
  CudaEngineOptions opt;
  EngineSizes sizes;
  KvPool* host_pool = nullptr;  // where shipped states arrive (adopt gives their blocks back)
  bool has_head = true;         // the cross-decoder and the output head (not a prefill-only weight set)
  cudaStream_t stream = nullptr;

  DeviceWeights weights;
  SequenceSlots slots;
  Workspace ws;
  DecodeGraphs graphs;

  Impl(const ModelConfig& c, const CudaEngineOptions& o) : cfg(c), opt(o), sizes(EngineSizes::of(c, o)) {}
  ~Impl();

  Status check_options() const;
  Status setup_device();
  // Slots, pools and the workspace, after the weights.
  Status alloc_buffers();
  Status copy_up(void* dst, const void* src, size_t bytes, const char* what) const {
    return cuda_engine::copy_up(dst, src, bytes, what, stream);
  }
  // Reports a launch error, then waits for the device.
  Status finish(const char* what) const;

  // Argument checks (slots.cc).
  int64_t limit() const { return std::min<int64_t>(opt.max_context, cfg.max_seq_len); }
  Status check_tokens(std::span<const int32_t> t, int64_t start, const std::string& field) const;
  Status check_batch(std::span<const int> ids, const char* field) const;

  // A step's metadata (calls.cc): row b's block table (sequence ids[b]), slot, attended length and
  // position.
  Status upload_batch_meta(std::span<const int> ids, std::span<const int64_t> positions,
                           std::span<const int32_t> lengths);

  // Host copies of pool rows [first, first + n) of a slot, pool_row_floats each (state_io.cc).
  Status rows_down(const Slot& slot, int64_t first, int64_t n, float* k, float* v) const;
};

}  // namespace yoco::cuda_engine
