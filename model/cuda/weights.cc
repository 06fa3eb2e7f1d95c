#include "model/cuda/weights.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cuda/ops.h"
#include "model/safetensors.h"

namespace yoco::cuda_engine {

Result<uint16_t*> DeviceWeights::new_bf16(int64_t n, const char* what) {
  mem_.emplace_back();
  YOCO_RETURN_IF_ERROR(mem_.back().alloc(static_cast<size_t>(n) * 2, what, stream_));
  bytes_ += n * 2;
  return mem_.back().as<uint16_t>();
}

Result<float*> DeviceWeights::new_f32(int64_t n, const char* what) {
  mem_.emplace_back();
  YOCO_RETURN_IF_ERROR(mem_.back().alloc(static_cast<size_t>(n) * 4, what, stream_));
  bytes_ += n * 4;
  return mem_.back().as<float>();
}

Result<const uint16_t*> DeviceWeights::upload_bf16(
    const std::vector<std::pair<const std::vector<float>*, int64_t>>& parts, const char* what) {
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
      YOCO_RETURN_IF_ERROR(copy_up(dst + at, host.data(), static_cast<size_t>(m) * 2, what, stream_));
      at += m;
    }
  }
  return static_cast<const uint16_t*>(dst);
}

Result<const float*> DeviceWeights::upload_f32(const std::vector<float>& x, const char* what) {
  YOCO_ASSIGN_OR_RETURN(float* dst, new_f32(static_cast<int64_t>(x.size()), what));
  YOCO_RETURN_IF_ERROR(copy_up(dst, x.data(), x.size() * 4, what, stream_));
  return static_cast<const float*>(dst);
}

Status DeviceWeights::upload_ffn(DeviceBlock& g, const std::vector<float>& w13, const std::vector<float>& w2,
                                 const MoeWeights& moe, const EngineSizes& s) {
  const program::Widths& wd = s.widths;
  const int64_t dim = wd.dim;
  if (wd.experts == 0) {
    YOCO_ASSIGN_OR_RETURN(g.ffn_up, upload_bf16({{&w13, 2 * wd.hidden * dim}}, "ffn.{fc1,gate}"));
    YOCO_ASSIGN_OR_RETURN(g.ffn_down, upload_bf16({{&w2, dim * wd.hidden}}, "ffn.fc2"));
    return Status::Ok();
  }
  if (static_cast<int>(moe.experts.size()) != wd.experts)
    return internal_error("cuda engine: an MoE layer holds " + std::to_string(moe.experts.size()) +
                          " experts, expected " + std::to_string(wd.experts));
  YOCO_ASSIGN_OR_RETURN(g.router, upload_f32(moe.router, "ffn.router"));
  const int64_t he = wd.expert_hidden;
  std::vector<std::pair<const std::vector<float>*, int64_t>> up, down;
  for (const ExpertWeights& e : moe.experts) {
    up.push_back({&e.w13, 2 * he * dim});
    down.push_back({&e.w2, dim * he});
  }
  YOCO_ASSIGN_OR_RETURN(g.experts_up, upload_bf16(up, "ffn.experts.{fc1,gate}"));
  YOCO_ASSIGN_OR_RETURN(g.experts_down, upload_bf16(down, "ffn.experts.fc2"));
  if (wd.shared_hidden == 0) return Status::Ok();
  const int64_t hs = wd.shared_hidden;
  YOCO_ASSIGN_OR_RETURN(g.shared_up, upload_bf16({{&moe.shared.w13, 2 * hs * dim}}, "ffn.shared.{fc1,gate}"));
  YOCO_ASSIGN_OR_RETURN(g.shared_down, upload_bf16({{&moe.shared.w2, dim * hs}}, "ffn.shared.fc2"));
  return Status::Ok();
}

Status DeviceWeights::upload(const ModelWeights& w, const ModelConfig& c, const EngineSizes& s, bool cross,
                             cudaStream_t stream) {
  stream_ = stream;
  const int64_t dim = s.widths.dim, vocab = s.widths.vocab, kv_dim = s.widths.kv_dim, attn_width = s.widths.attn_width;
  YOCO_ASSIGN_OR_RETURN(embed, upload_bf16({{&w.embed, vocab * dim}}, "embed_tokens"));
  if (c.is_transformer()) return upload_transformer_layers(w, c, s, cross);
  YOCO_ASSIGN_OR_RETURN(kv_norm, upload_f32(w.kv_norm, "kv_layer_norm"));
  YOCO_ASSIGN_OR_RETURN(wkv, upload_bf16({{&w.wkv, 2 * kv_dim * dim}}, "cross_decoder.{k,v}_proj"));
  for (const SelfLayerWeights& L : w.self_layers) {
    DeviceBlock g;
    YOCO_ASSIGN_OR_RETURN(g.mixer_norm, upload_f32(L.mixer_norm, "mixer_layer_norm"));
    YOCO_ASSIGN_OR_RETURN(g.final_norm, upload_f32(L.final_norm, "final_layer_norm"));
    if (c.is_swa()) {
      YOCO_ASSIGN_OR_RETURN(g.mixer_in, upload_bf16({{&L.wqkvg, s.self_qkv_width * dim}}, "mixer.{q,k,v}_proj"));
    } else {
      // The gate rows gt ride along in the same product (EngineSizes::mixer_in_width).
      YOCO_ASSIGN_OR_RETURN(g.mixer_in, upload_bf16({{&L.wqkvg, s.self_qkv_width * dim},
                                                     {&L.wgt, static_cast<int64_t>(s.widths.self_heads) * dim}},
                                                    "mixer.{q,k,v,g,gt}_proj"));
    }
    YOCO_ASSIGN_OR_RETURN(g.out, upload_bf16({{&L.wo, dim * dim}}, "mixer.out_proj"));
    YOCO_RETURN_IF_ERROR(upload_ffn(g, L.w13, L.w2, L.moe, s));
    self_layers.push_back(g);
  }
  if (!cross) return Status::Ok();
  YOCO_RETURN_IF_ERROR(upload_output_head(w, static_cast<int>(vocab), static_cast<int>(dim)));
  for (const CrossLayerWeights& L : w.cross_layers) {
    DeviceBlock g;
    YOCO_ASSIGN_OR_RETURN(g.mixer_norm, upload_f32(L.mixer_norm, "mixer_layer_norm"));
    YOCO_ASSIGN_OR_RETURN(g.final_norm, upload_f32(L.final_norm, "final_layer_norm"));
    YOCO_ASSIGN_OR_RETURN(g.mixer_in, upload_bf16({{&L.wq, attn_width * dim}}, "mixer.q_proj"));
    YOCO_ASSIGN_OR_RETURN(g.out, upload_bf16({{&L.wo, dim * attn_width}}, "mixer.out_proj"));
    YOCO_RETURN_IF_ERROR(upload_ffn(g, L.w13, L.w2, L.moe, s));
    cross_layers.push_back(g);
  }
  return Status::Ok();
}

Status DeviceWeights::upload_output_head(const ModelWeights& w, int vocab, int dim) {
  YOCO_ASSIGN_OR_RETURN(final_norm, upload_f32(w.final_norm, "layer_norm"));
  if (w.tied) {
    output = embed;
    return Status::Ok();
  }
  YOCO_ASSIGN_OR_RETURN(output, upload_bf16({{&w.output, static_cast<int64_t>(vocab) * dim}}, "output_projection"));
  return Status::Ok();
}

Status DeviceWeights::upload_transformer_layers(const ModelWeights& w, const ModelConfig& c, const EngineSizes& s,
                                                bool cross) {
  const int64_t dim = s.widths.dim, attn_width = s.widths.attn_width;
  for (const SelfLayerWeights& L : w.self_layers) {
    DeviceBlock g;
    YOCO_ASSIGN_OR_RETURN(g.mixer_norm, upload_f32(L.mixer_norm, "layers.mixer_layer_norm"));
    YOCO_ASSIGN_OR_RETURN(g.final_norm, upload_f32(L.final_norm, "layers.final_layer_norm"));
    YOCO_ASSIGN_OR_RETURN(g.mixer_in, upload_bf16({{&L.wqkvg, s.mixer_in_width * dim}}, "layers.mixer.{q,k,v}_proj"));
    YOCO_ASSIGN_OR_RETURN(g.out, upload_bf16({{&L.wo, dim * attn_width}}, "layers.mixer.out_proj"));
    YOCO_RETURN_IF_ERROR(upload_ffn(g, L.w13, L.w2, L.moe, s));
    self_layers.push_back(g);
  }
  if (static_cast<int>(self_layers.size()) != c.n_layers)
    return internal_error("cuda engine: transformer weights hold " + std::to_string(self_layers.size()) +
                          " layers, config says " + std::to_string(c.n_layers));
  return cross ? upload_output_head(w, s.widths.vocab, s.widths.dim) : Status::Ok();
}

Status DeviceWeights::random(const ModelConfig& c, const EngineSizes& s, uint64_t seed, cudaStream_t stream) {
  stream_ = stream;
  const int dim = s.widths.dim, hidden = s.widths.hidden, vocab = s.widths.vocab, kv_dim = s.widths.kv_dim,
            attn_width = s.widths.attn_width;
  uint64_t tensor = 0;
  auto matrix = [&](int64_t rows, int64_t fan_in, const char* what) -> Result<const uint16_t*> {
    YOCO_ASSIGN_OR_RETURN(uint16_t * p, new_bf16(rows * fan_in, what));
    YOCO_RETURN_IF_KERNEL_ERROR(cuda::fill_normal(p, cuda::DType::kBF16, rows * fan_in, seed + 0x9e37u * ++tensor, 0.f,
                                                  static_cast<float>(1.0 / std::sqrt(static_cast<double>(fan_in))),
                                                  stream));
    return static_cast<const uint16_t*>(p);
  };
  auto norm = [&](const char* what) -> Result<const float*> {
    YOCO_ASSIGN_OR_RETURN(float* p, new_f32(dim, what));
    YOCO_RETURN_IF_KERNEL_ERROR(
        cuda::fill_normal(p, cuda::DType::kF32, dim, seed + 0x9e37u * ++tensor, 1.f, 0.05f, stream));
    return static_cast<const float*>(p);
  };
  // The FFN of a block: dense, or an MoE's router (fp32, N(0, 9/dim), as write_random_model's) and experts.
  auto ffn = [&](DeviceBlock& g) -> Status {
    const program::Widths& wd = s.widths;
    if (wd.experts == 0) {
      YOCO_ASSIGN_OR_RETURN(g.ffn_up, matrix(2 * hidden, dim, "ffn.{fc1,gate}"));
      YOCO_ASSIGN_OR_RETURN(g.ffn_down, matrix(dim, hidden, "ffn.fc2"));
      return Status::Ok();
    }
    YOCO_ASSIGN_OR_RETURN(float* router, new_f32(static_cast<int64_t>(wd.experts) * dim, "ffn.router"));
    YOCO_RETURN_IF_KERNEL_ERROR(
        cuda::fill_normal(router, cuda::DType::kF32, static_cast<int64_t>(wd.experts) * dim, seed + 0x9e37u * ++tensor,
                          0.f, static_cast<float>(3.0 / std::sqrt(static_cast<double>(dim))), stream));
    g.router = router;
    const int64_t he = wd.expert_hidden;
    // Expert-major as upload_ffn's; each row's fan-in is dim (fc1|gate) or expert_hidden (fc2).
    YOCO_ASSIGN_OR_RETURN(g.experts_up, matrix(wd.experts * 2 * he, dim, "ffn.experts.{fc1,gate}"));
    YOCO_ASSIGN_OR_RETURN(g.experts_down, matrix(static_cast<int64_t>(wd.experts) * dim, he, "ffn.experts.fc2"));
    if (wd.shared_hidden == 0) return Status::Ok();
    YOCO_ASSIGN_OR_RETURN(g.shared_up,
                          matrix(2 * static_cast<int64_t>(wd.shared_hidden), dim, "ffn.shared.{fc1,gate}"));
    YOCO_ASSIGN_OR_RETURN(g.shared_down, matrix(dim, wd.shared_hidden, "ffn.shared.fc2"));
    return Status::Ok();
  };
  const bool transformer = c.is_transformer();
  YOCO_ASSIGN_OR_RETURN(embed, matrix(vocab, dim, "embed_tokens"));
  if (!transformer) {
    YOCO_ASSIGN_OR_RETURN(kv_norm, norm("kv_layer_norm"));
    YOCO_ASSIGN_OR_RETURN(wkv, matrix(2 * kv_dim, dim, "cross_decoder.{k,v}_proj"));
  }
  for (int l = 0; l < (transformer ? c.n_layers : c.n_self_layers); ++l) {
    DeviceBlock g;
    YOCO_ASSIGN_OR_RETURN(g.mixer_norm, norm("mixer_layer_norm"));
    YOCO_ASSIGN_OR_RETURN(g.final_norm, norm("final_layer_norm"));
    YOCO_ASSIGN_OR_RETURN(g.mixer_in, matrix(s.mixer_in_width, dim, "mixer projections"));
    YOCO_ASSIGN_OR_RETURN(g.out, matrix(dim, dim, "mixer.out_proj"));
    YOCO_RETURN_IF_ERROR(ffn(g));
    self_layers.push_back(g);
  }
  YOCO_ASSIGN_OR_RETURN(final_norm, norm("layer_norm"));
  if (c.tie_embeddings.value_or(false)) {
    output = embed;
  } else {
    YOCO_ASSIGN_OR_RETURN(output, matrix(vocab, dim, "output_projection"));
  }
  for (int l = 0; l < (transformer ? 0 : c.n_cross_layers()); ++l) {
    DeviceBlock g;
    YOCO_ASSIGN_OR_RETURN(g.mixer_norm, norm("mixer_layer_norm"));
    YOCO_ASSIGN_OR_RETURN(g.final_norm, norm("final_layer_norm"));
    YOCO_ASSIGN_OR_RETURN(g.mixer_in, matrix(attn_width, dim, "mixer.q_proj"));
    YOCO_ASSIGN_OR_RETURN(g.out, matrix(dim, attn_width, "mixer.out_proj"));
    YOCO_RETURN_IF_ERROR(ffn(g));
    cross_layers.push_back(g);
  }
  return cuda_check(cudaStreamSynchronize(stream), "random weights");
}

}  // namespace yoco::cuda_engine
