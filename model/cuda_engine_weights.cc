// The CUDA engine's weights on the device: bf16 matrices and fp32 norms, from a Model or random.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "model/cuda_engine_impl.h"
#include "model/safetensors.h"
#include "model/weights.h"

namespace yoco {

using cuda_engine_internal::cuda_check;

Result<uint16_t*> CudaEngine::Impl::new_bf16(int64_t n, const char* what) {
  weight_mem.emplace_back();
  YOCO_RETURN_IF_ERROR(weight_mem.back().alloc(static_cast<size_t>(n) * 2, what, stream));
  weight_bytes += n * 2;
  return weight_mem.back().as<uint16_t>();
}

Result<float*> CudaEngine::Impl::new_f32(int64_t n, const char* what) {
  weight_mem.emplace_back();
  YOCO_RETURN_IF_ERROR(weight_mem.back().alloc(static_cast<size_t>(n) * 4, what, stream));
  weight_bytes += n * 4;
  return weight_mem.back().as<float>();
}

Result<const uint16_t*> CudaEngine::Impl::upload_bf16(
    std::initializer_list<std::pair<const std::vector<float>*, int64_t>> parts, const char* what) {
  int64_t n = 0;
  for (const auto& p : parts) {
    if (static_cast<int64_t>(p.first->size()) != p.second)
      return internal_error(std::string("cuda engine: weight ") + what + " holds " + std::to_string(p.first->size()) +
                            " values, expected " + std::to_string(p.second));
    n += p.second;
  }
  YOCO_ASSIGN_OR_RETURN(uint16_t * dst, new_bf16(n, what));
  std::vector<uint16_t> host;
  int64_t at = 0;
  for (const auto& p : parts) {
    constexpr int64_t kChunk = 1 << 22;  // bounded host staging for big matrices
    for (int64_t off = 0; off < p.second; off += kChunk) {
      const int64_t m = std::min(kChunk, p.second - off);
      host.resize(static_cast<size_t>(m));
      for (int64_t i = 0; i < m; ++i) host[i] = f32_to_bf16((*p.first)[off + i]);
      YOCO_RETURN_IF_ERROR(copy_up(dst + at, host.data(), static_cast<size_t>(m) * 2, what));
      at += m;
    }
  }
  return static_cast<const uint16_t*>(dst);
}

Result<const float*> CudaEngine::Impl::upload_f32(const std::vector<float>& x, const char* what) {
  YOCO_ASSIGN_OR_RETURN(float* dst, new_f32(static_cast<int64_t>(x.size()), what));
  YOCO_RETURN_IF_ERROR(copy_up(dst, x.data(), x.size() * 4, what));
  return static_cast<const float*>(dst);
}

Status CudaEngine::Impl::upload_weights(const ModelWeights& w) {
  const int64_t d = D;
  YOCO_ASSIGN_OR_RETURN(embed, upload_bf16({{&w.embed, static_cast<int64_t>(V) * d}}, "embed_tokens"));
  if (tf) return upload_transformer_layers(w);
  YOCO_ASSIGN_OR_RETURN(kv_norm, upload_f32(w.kv_norm, "kv_layer_norm"));
  YOCO_ASSIGN_OR_RETURN(wkv, upload_bf16({{&w.wkv, 2 * KV * d}}, "cross_decoder.{k,v}_proj"));
  for (const SelfLayerWeights& L : w.self_layers) {
    DevSelfLayer g;
    YOCO_ASSIGN_OR_RETURN(g.mixer_norm, upload_f32(L.mixer_norm, "mixer_layer_norm"));
    YOCO_ASSIGN_OR_RETURN(g.final_norm, upload_f32(L.final_norm, "final_layer_norm"));
    if (cfg.is_swa()) {
      YOCO_ASSIGN_OR_RETURN(g.wqkvg, upload_bf16({{&L.wqkvg, R * d}}, "mixer.{q,k,v}_proj"));
    } else {
      YOCO_ASSIGN_OR_RETURN(g.wqkvg, upload_bf16({{&L.wqkvg, R * d}, {&L.wgt, Hs * d}}, "mixer.{q,k,v,g,gt}_proj"));
    }
    YOCO_ASSIGN_OR_RETURN(g.wo, upload_bf16({{&L.wo, d * d}}, "mixer.out_proj"));
    YOCO_ASSIGN_OR_RETURN(g.w13, upload_bf16({{&L.w13, 2 * H * d}}, "ffn.{fc1,gate}"));
    YOCO_ASSIGN_OR_RETURN(g.w2, upload_bf16({{&L.w2, d * H}}, "ffn.fc2"));
    self_layers.push_back(g);
  }
  if (!cross) return Status::Ok();
  YOCO_ASSIGN_OR_RETURN(final_norm, upload_f32(w.final_norm, "layer_norm"));
  if (w.tied) {
    output = embed;
  } else {
    YOCO_ASSIGN_OR_RETURN(output, upload_bf16({{&w.output, static_cast<int64_t>(V) * d}}, "output_projection"));
  }
  for (const CrossLayerWeights& L : w.cross_layers) {
    DevCrossLayer g;
    YOCO_ASSIGN_OR_RETURN(g.mixer_norm, upload_f32(L.mixer_norm, "mixer_layer_norm"));
    YOCO_ASSIGN_OR_RETURN(g.final_norm, upload_f32(L.final_norm, "final_layer_norm"));
    YOCO_ASSIGN_OR_RETURN(g.wq, upload_bf16({{&L.wq, Dq * d}}, "mixer.q_proj"));
    YOCO_ASSIGN_OR_RETURN(g.wo, upload_bf16({{&L.wo, d * Dq}}, "mixer.out_proj"));
    YOCO_ASSIGN_OR_RETURN(g.w13, upload_bf16({{&L.w13, 2 * H * d}}, "ffn.{fc1,gate}"));
    YOCO_ASSIGN_OR_RETURN(g.w2, upload_bf16({{&L.w2, d * H}}, "ffn.fc2"));
    cross_layers.push_back(g);
  }
  return Status::Ok();
}

Status CudaEngine::Impl::upload_output_head(const ModelWeights& w) {
  YOCO_ASSIGN_OR_RETURN(final_norm, upload_f32(w.final_norm, "layer_norm"));
  if (w.tied) {
    output = embed;
    return Status::Ok();
  }
  YOCO_ASSIGN_OR_RETURN(output, upload_bf16({{&w.output, static_cast<int64_t>(V) * D}}, "output_projection"));
  return Status::Ok();
}

Status CudaEngine::Impl::upload_transformer_layers(const ModelWeights& w) {
  const int64_t d = D;
  for (const SelfLayerWeights& L : w.self_layers) {
    DevSelfLayer g;
    YOCO_ASSIGN_OR_RETURN(g.mixer_norm, upload_f32(L.mixer_norm, "layers.mixer_layer_norm"));
    YOCO_ASSIGN_OR_RETURN(g.final_norm, upload_f32(L.final_norm, "layers.final_layer_norm"));
    YOCO_ASSIGN_OR_RETURN(g.wqkvg, upload_bf16({{&L.wqkvg, P * d}}, "layers.mixer.{q,k,v}_proj"));
    YOCO_ASSIGN_OR_RETURN(g.wo, upload_bf16({{&L.wo, d * Dq}}, "layers.mixer.out_proj"));
    YOCO_ASSIGN_OR_RETURN(g.w13, upload_bf16({{&L.w13, 2 * H * d}}, "layers.ffn.{fc1,gate}"));
    YOCO_ASSIGN_OR_RETURN(g.w2, upload_bf16({{&L.w2, d * H}}, "layers.ffn.fc2"));
    self_layers.push_back(g);
  }
  if (static_cast<int>(self_layers.size()) != cfg.n_layers)
    return internal_error("cuda engine: transformer weights hold " + std::to_string(self_layers.size()) +
                          " layers, config says " + std::to_string(cfg.n_layers));
  return cross ? upload_output_head(w) : Status::Ok();
}

Status CudaEngine::Impl::random_weights(uint64_t seed) {
  uint64_t tensor = 0;
  auto matrix = [&](int64_t rows, int64_t fan_in, const char* what) -> Result<const uint16_t*> {
    YOCO_ASSIGN_OR_RETURN(uint16_t * p, new_bf16(rows * fan_in, what));
    YOCO_RETURN_IF_KERNEL_ERROR(cuda::fill_normal(p, cuda::DType::kBF16, rows * fan_in, seed + 0x9e37u * ++tensor, 0.f,
                                                  static_cast<float>(1.0 / std::sqrt(static_cast<double>(fan_in))),
                                                  stream));
    return static_cast<const uint16_t*>(p);
  };
  auto norm = [&](const char* what) -> Result<const float*> {
    YOCO_ASSIGN_OR_RETURN(float* p, new_f32(D, what));
    YOCO_RETURN_IF_KERNEL_ERROR(
        cuda::fill_normal(p, cuda::DType::kF32, D, seed + 0x9e37u * ++tensor, 1.f, 0.05f, stream));
    return static_cast<const float*>(p);
  };
  YOCO_ASSIGN_OR_RETURN(embed, matrix(V, D, "embed_tokens"));
  if (!tf) {
    YOCO_ASSIGN_OR_RETURN(kv_norm, norm("kv_layer_norm"));
    YOCO_ASSIGN_OR_RETURN(wkv, matrix(2 * KV, D, "cross_decoder.{k,v}_proj"));
  }
  for (int l = 0; l < (tf ? cfg.n_layers : cfg.n_self_layers); ++l) {
    DevSelfLayer g;
    YOCO_ASSIGN_OR_RETURN(g.mixer_norm, norm("mixer_layer_norm"));
    YOCO_ASSIGN_OR_RETURN(g.final_norm, norm("final_layer_norm"));
    YOCO_ASSIGN_OR_RETURN(g.wqkvg, matrix(P, D, "mixer projections"));
    YOCO_ASSIGN_OR_RETURN(g.wo, matrix(D, D, "mixer.out_proj"));
    YOCO_ASSIGN_OR_RETURN(g.w13, matrix(2 * H, D, "ffn.{fc1,gate}"));
    YOCO_ASSIGN_OR_RETURN(g.w2, matrix(D, H, "ffn.fc2"));
    self_layers.push_back(g);
  }
  YOCO_ASSIGN_OR_RETURN(final_norm, norm("layer_norm"));
  if (cfg.tie_embeddings.value_or(false)) {
    output = embed;
  } else {
    YOCO_ASSIGN_OR_RETURN(output, matrix(V, D, "output_projection"));
  }
  for (int l = 0; l < (tf ? 0 : cfg.n_cross_layers()); ++l) {
    DevCrossLayer g;
    YOCO_ASSIGN_OR_RETURN(g.mixer_norm, norm("mixer_layer_norm"));
    YOCO_ASSIGN_OR_RETURN(g.final_norm, norm("final_layer_norm"));
    YOCO_ASSIGN_OR_RETURN(g.wq, matrix(Dq, D, "mixer.q_proj"));
    YOCO_ASSIGN_OR_RETURN(g.wo, matrix(D, Dq, "mixer.out_proj"));
    YOCO_ASSIGN_OR_RETURN(g.w13, matrix(2 * H, D, "ffn.{fc1,gate}"));
    YOCO_ASSIGN_OR_RETURN(g.w2, matrix(D, H, "ffn.fc2"));
    cross_layers.push_back(g);
  }
  return cuda_check(cudaStreamSynchronize(stream), "random weights");
}

}  // namespace yoco
