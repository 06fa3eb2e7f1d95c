// params.json (SPEC 2.1): the reference implementation's keys plus our extensions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/json.h"
#include "common/status.h"

namespace yoco {

enum class Arch { kYoco, kTransformer };

struct ModelConfig {
  int dim = 0;
  int n_layers = 0;
  int hidden_dim = 0;
  int n_self_heads = 0;
  int n_attn_heads = 0;
  int n_attn_kv_heads = 0;
  int vocab_size = 0;
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;
  int sliding_window = 0;  // 0: gated retention; W > 0: sliding-window attention
  int n_loops = 1;
  bool cross_decoder_rope = true;
  int n_self_layers = 0;  // resolved to n_layers / 2 when absent
  double gate_logit_normalizer = 16.0;
  int64_t max_seq_len = 1 << 20;
  std::optional<bool> tie_embeddings;  // unset: decided by whether output_projection.weight exists
  Arch arch = Arch::kYoco;

  bool is_swa() const { return sliding_window > 0; }
  int self_head_dim() const { return dim / n_self_heads; }
  int cross_head_dim() const { return dim / n_attn_heads; }
  int kv_dim() const { return n_attn_kv_heads * cross_head_dim(); }
  int n_cross_layers() const { return n_layers - n_self_layers; }
  // Self-decoder mixer rows per token: q, k, v (+ g for gated retention).
  int self_qkv_rows() const { return (is_swa() ? 3 : 4) * dim; }

  // Canonical JSON (every key, defaults resolved): the model fingerprint hashes this.
  Json to_json() const;
};

// Parses and validates; an error names the offending key.
Result<ModelConfig> parse_model_config(const Json& j);
Result<ModelConfig> load_model_config(const std::string& params_json_path);
Status validate_model_config(const ModelConfig& c);

}  // namespace yoco
