#include "model/random_model.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "common/checksum.h"
#include "model/sampler.h"
#include "model/weights.h"

namespace yoco {

namespace {

ModelConfig make(int dim, int layers, int hidden, int self_heads, int heads, int kv_heads, int vocab, int window,
                 int loops = 1, bool cross_rope = true) {
  ModelConfig c;
  c.dim = dim;
  c.n_layers = layers;
  c.hidden_dim = hidden;
  c.n_self_heads = self_heads;
  c.n_attn_heads = heads;
  c.n_attn_kv_heads = kv_heads;
  c.vocab_size = vocab;
  c.sliding_window = window;
  c.n_loops = loops;
  c.cross_decoder_rope = cross_rope;
  c.n_self_layers = layers / 2;
  c.max_seq_len = 1 << 20;
  return c;
}

ModelConfig transformer(ModelConfig c) { return transformer_of(c); }

// Every FFN an MoE (docs/design.md §2.2): E experts of `expert_hidden`, k per token, an optional
// shared expert; hidden_dim is then unused and set to 0.
ModelConfig moe(ModelConfig c, int experts, int k, int expert_hidden, int shared_hidden, bool norm_topk = false) {
  c.hidden_dim = 0;
  c.n_experts = experts;
  c.n_experts_per_token = k;
  c.expert_hidden_dim = expert_hidden;
  c.shared_expert_hidden_dim = shared_hidden;
  c.moe_norm_topk_prob = norm_topk;
  return c;
}

ModelConfig tied(ModelConfig c) {
  c.tie_embeddings = true;
  return c;
}

Status mkdirs(const std::string& dir) {
  std::string cur;
  for (size_t i = 0; i <= dir.size(); ++i) {
    if (i == dir.size() || dir[i] == '/') {
      if (!cur.empty() && ::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST)
        return io_error("mkdir " + cur + ": " + std::strerror(errno));
    }
    if (i < dir.size()) cur += dir[i];
  }
  return Status::Ok();
}

}  // namespace

const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> presets = {
      {"tiny-gret", "test config, gated retention", make(64, 4, 160, 4, 4, 2, 256, 0)},
      {"tiny-swa", "test config, sliding window 16", make(64, 4, 160, 4, 4, 2, 256, 16)},
      {"tiny-yocou", "test config, YOCO-U: SWA 16, 3 loops, NoPE cross-decoder",
       make(64, 4, 160, 4, 4, 1, 256, 16, 3, false)},
      {"small-gret", "benchmark config (~50M), gated retention", make(512, 8, 1536, 8, 8, 2, 32000, 0)},
      {"small-swa", "benchmark config (~50M), sliding window 512", make(512, 8, 1536, 8, 8, 2, 32000, 512)},
      {"mid-gret", "benchmark config (~0.3B), gated retention", make(1024, 16, 2816, 8, 16, 4, 32000, 0)},
      {"mid-swa", "benchmark config (~0.3B), sliding window 512", make(1024, 16, 2816, 8, 16, 4, 32000, 512)},
      {"yoco-3b", "YOCO-3B (seed 001): 26 layers, dim 3072, gated retention",
       make(3072, 26, 8192, 24, 24, 8, 100288, 0)},
      {"yoco-u-1.3b", "YOCO-U 1.3B (seed 003): SWA 512, 3 loops, NoPE cross-decoder, tied embeddings",
       tied(make(2560, 20, 7680, 20, 20, 4, 151936, 512, 3, false))},
      {"tiny-moe-gret", "test config, gated retention, MoE: 8 experts x 32, top-2, shared expert 64",
       moe(make(64, 4, 0, 4, 4, 2, 256, 0), 8, 2, 32, 64)},
      {"tiny-moe-yocou", "test config, YOCO-U (SWA 16, 3 loops, NoPE), MoE: 8 experts x 32, top-2 renormalised",
       moe(make(64, 4, 0, 4, 4, 1, 256, 16, 3, false), 8, 2, 32, 0, true)},
      {"small-moe", "benchmark config, SWA 512, MoE: 32 experts x 192, top-4, shared expert 384",
       moe(make(512, 8, 0, 8, 8, 2, 32000, 512), 32, 4, 192, 384)},
      {"mid-moe", "benchmark config (~0.9B, ~0.2B active), SWA 512, MoE: 64 experts x 256, top-8, shared 256",
       moe(make(1024, 16, 0, 8, 16, 4, 32000, 512), 64, 8, 256, 256)},
      {"mid-moe-dense-active", "dense mid-moe of its active size: FFN 2304 = 8 x 256 + 256",
       make(1024, 16, 2304, 8, 16, 4, 32000, 512)},
      {"tiny-moe-yocou-dense-active", "dense tiny-moe-yocou of its active size: FFN 64 = 2 x 32",
       make(64, 4, 64, 4, 4, 1, 256, 16, 3, false)},
      {"yoco-u-moe", "YOCO-U MoE (seed 003, Table 6): 10B, 1.3B active; 64 experts x 1024, top-8, shared 1024",
       tied(moe(make(2560, 20, 0, 20, 20, 4, 151936, 512, 3, false), 64, 8, 1024, 1024))},
      {"yoco-u-dense-active", "dense YOCO-U of yoco-u-moe's active size: FFN 9216 = 8 x 1024 + 1024",
       tied(make(2560, 20, 9216, 20, 20, 4, 151936, 512, 3, false))},
      {"tiny-transformer", "test config, Transformer baseline of tiny-gret's sizes",
       transformer(make(64, 4, 160, 4, 4, 2, 256, 0))},
      {"small-transformer", "benchmark config (~50M), Transformer baseline of small-gret's sizes",
       transformer(make(512, 8, 1536, 8, 8, 2, 32000, 0))},
      {"transformer-3b", "Transformer baseline of YOCO-3B's sizes: 26 layers, dim 3072, GQA 24/8",
       transformer(make(3072, 26, 8192, 24, 24, 8, 100288, 0))},
  };
  return presets;
}

ModelConfig transformer_of(ModelConfig c) {
  c.arch = Arch::kTransformer;
  c.n_self_heads = 0;
  c.n_self_layers = 0;
  c.sliding_window = 0;
  c.n_loops = 1;
  c.cross_decoder_rope = true;
  return c;
}

Result<ModelConfig> find_preset(const std::string& name) {
  std::string names;
  for (const auto& p : model_presets()) {
    if (p.name == name) return p.config;
    names += (names.empty() ? "" : ", ") + p.name;
  }
  return invalid_argument("--preset: unknown preset \"" + name + "\" (one of: " + names + ")");
}

Status write_random_model(const std::string& dir, const ModelConfig& config, uint64_t seed, DType dtype) {
  YOCO_RETURN_IF_ERROR(validate_model_config(config));
  if (dtype != DType::kF32 && dtype != DType::kBF16) return invalid_argument("--dtype: must be f32 or bf16");
  YOCO_RETURN_IF_ERROR(mkdirs(dir));
  const bool tied = config.tie_embeddings.value_or(false);
  std::vector<TensorSpec> specs;
  std::vector<int64_t> fan_in;
  std::vector<bool> is_norm, is_router;
  for (const TensorSlot& s : model_tensor_slots(config, nullptr, WeightSet::kFull)) {
    if (s.optional && tied) continue;
    specs.push_back({s.name, dtype, s.shape});
    is_norm.push_back(s.shape.size() == 1);
    fan_in.push_back(s.shape.back());
    is_router.push_back(s.name.size() >= 17 && s.name.compare(s.name.size() - 17, 17, "ffn.router.weight") == 0);
  }
  const Status st = write_safetensors(
      dir + "/model.safetensors", specs,
      [&](size_t i, std::vector<uint8_t>& bytes) -> Status {
        int64_t n = 1;
        for (auto d : specs[i].shape) n *= d;
        std::vector<float> vals(n);
        // An MoE router 3× wider than the other matrices: a trained router is peaked, and one of
        // the usual scale would leave many tokens near a tie between experts, where engines of
        // different precision may choose differently (docs/design.md §2.5).
        const double stddev = is_norm[i]     ? 0.05
                              : is_router[i] ? 3.0 / std::sqrt(static_cast<double>(fan_in[i]))
                                             : 1.0 / std::sqrt(static_cast<double>(fan_in[i]));
        const double mean = is_norm[i] ? 1.0 : 0.0;
        constexpr int64_t kBlock = 1 << 16;  // each block has its own stream: thread-count independent
#pragma omp parallel for schedule(static)
        for (int64_t b0 = 0; b0 < n; b0 += kBlock) {
          Rng rng(mix64(mix64(seed, fnv1a64(specs[i].name)), static_cast<uint64_t>(b0)));
          for (int64_t e = b0; e < std::min(n, b0 + kBlock); e += 2) {
            const double u1 = 1.0 - rng.uniform(), u2 = rng.uniform();  // Box-Muller
            const double r = std::sqrt(-2.0 * std::log(u1));
            vals[e] = static_cast<float>(mean + stddev * r * std::cos(2 * M_PI * u2));
            if (e + 1 < std::min(n, b0 + kBlock))
              vals[e + 1] = static_cast<float>(mean + stddev * r * std::sin(2 * M_PI * u2));
          }
        }
        if (dtype == DType::kF32) {
          bytes.resize(static_cast<size_t>(n) * 4);
          std::memcpy(bytes.data(), vals.data(), bytes.size());
        } else {
          bytes.resize(static_cast<size_t>(n) * 2);
          for (int64_t e = 0; e < n; ++e) {
            const uint16_t v = f32_to_bf16(vals[e]);
            std::memcpy(bytes.data() + 2 * e, &v, 2);
          }
        }
        return Status::Ok();
      },
      {{"format", "pt"}, {"generator", "yoco-cli make-random-model"}, {"seed", std::to_string(seed)}});
  YOCO_RETURN_IF_ERROR(st);
  Json params = config.to_json();
  params.mutable_object()["tie_embeddings"] = Json(tied);
  std::ofstream f(dir + "/params.json");
  f << params.dump() << "\n";
  if (!f) return io_error("cannot write " + dir + "/params.json");
  return Status::Ok();
}

}  // namespace yoco
