// The CUDA engine's weights on the device: matrices as bf16 (round to nearest even), norms fp32,
// from a Model's fp32 tensors or random on the device. Private to yoco_engine_cuda.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "common/status.h"
#include "model/config.h"
#include "model/cuda/device.h"
#include "model/cuda/sizes.h"
#include "model/weights.h"

namespace yoco::cuda_engine {

// One block (docs/design.md §2.2) of either decoder.
struct DeviceBlock {
  const float* mixer_norm = nullptr;
  const float* final_norm = nullptr;
  // The mixer's fused input product: self q|k|v(|g) then gRet's gate rows [mixer_in_width, dim];
  // a transformer's q|k|v [dim + 2·kv_dim, dim]; the cross-decoder's q [dim, dim].
  const uint16_t* mixer_in = nullptr;
  const uint16_t* out = nullptr;       // [dim, dim]
  const uint16_t* ffn_up = nullptr;    // fc1|gate [2·hidden, dim]
  const uint16_t* ffn_down = nullptr;  // fc2 [dim, hidden]
  // An MoE FFN instead (docs/design.md §2.2): the router fp32 [n_experts, dim], every routed
  // expert's fc1|gate [n_experts][2·expert_hidden, dim] and fc2 [n_experts][dim, expert_hidden]
  // back to back (moe_grouped_gemm's w_stride apart), the shared expert's fc1|gate and fc2 (null
  // without one).
  const float* router = nullptr;
  const uint16_t* experts_up = nullptr;
  const uint16_t* experts_down = nullptr;
  const uint16_t* shared_up = nullptr;
  const uint16_t* shared_down = nullptr;
};

class DeviceWeights {
 public:
  // `cross`: the head and the cross-decoder too (a prefill-only weight set has neither).
  Status upload(const ModelWeights& w, const ModelConfig& c, const EngineSizes& s, bool cross, cudaStream_t stream);
  // cuda::fill_normal: N(0, 1/fan_in) matrices, norms N(1, 0.05²); untied unless tie_embeddings.
  Status random(const ModelConfig& c, const EngineSizes& s, uint64_t seed, cudaStream_t stream);

  int64_t bytes() const { return bytes_; }

  const uint16_t* embed = nullptr;
  const uint16_t* output = nullptr;  // == embed when tied
  const float* final_norm = nullptr;
  const float* kv_norm = nullptr;
  const uint16_t* wkv = nullptr;         // [2·kv_dim, dim]
  std::vector<DeviceBlock> self_layers;  // a transformer's layers too
  std::vector<DeviceBlock> cross_layers;

 private:
  Result<uint16_t*> new_bf16(int64_t n, const char* what);
  Result<float*> new_f32(int64_t n, const char* what);
  // Host fp32 parts, concatenated, rounded to bf16 (nearest even) and copied up.
  Result<const uint16_t*> upload_bf16(const std::vector<std::pair<const std::vector<float>*, int64_t>>& parts,
                                      const char* what);
  // The block's FFN: the dense fc1|gate and fc2, or an MoE's router and experts.
  Status upload_ffn(DeviceBlock& g, const std::vector<float>& w13, const std::vector<float>& w2, const MoeWeights& moe,
                    const EngineSizes& s);
  Result<const float*> upload_f32(const std::vector<float>& x, const char* what);
  Status upload_output_head(const ModelWeights& w, int vocab, int dim);
  // docs/design.md §2.6: layer i is self_layers[i] of the host weights, q|k|v [dim + 2·kv_dim, dim].
  Status upload_transformer_layers(const ModelWeights& w, const ModelConfig& c, const EngineSizes& s, bool cross);

  std::vector<DeviceMem> mem_;
  int64_t bytes_ = 0;
  cudaStream_t stream_ = nullptr;
};

}  // namespace yoco::cuda_engine
