// params.json (docs/design.md §2.1): the reference implementation's keys plus our extensions.
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
  int n_self_layers = 0;  // resolved to n_layers / 2 when absent; 0 for a transformer
  double gate_logit_normalizer = 16.0;
  int64_t max_seq_len = 1 << 20;
  std::optional<bool> tie_embeddings;  // unset: decided by whether output_projection.weight exists
  Arch arch = Arch::kYoco;
  // Mixture of experts (docs/design.md §2.2): with n_experts > 0 every FFN of the model is an MoE
  // and hidden_dim is used by none of them.
  int n_experts = 0;                 // E; 0: dense FFNs
  int n_experts_per_token = 0;       // k in [1, E]
  int expert_hidden_dim = 0;         // each routed expert's hidden size
  int shared_expert_hidden_dim = 0;  // 0: no shared expert
  bool moe_norm_topk_prob = false;   // the k chosen weights divided by their sum

  bool is_moe() const { return n_experts > 0; }

  bool is_swa() const { return sliding_window > 0; }
  bool is_transformer() const { return arch == Arch::kTransformer; }
  // 0 for a transformer (no self-decoder: n_self_heads is 0).
  int self_head_dim() const { return n_self_heads > 0 ? dim / n_self_heads : 0; }
  int cross_head_dim() const { return dim / n_attn_heads; }
  // One layer's K (or V) row of one token: n_attn_kv_heads heads of cross_head_dim() values.
  int kv_dim() const { return n_attn_kv_heads * cross_head_dim(); }
  // One token's K (or V) row of the global cache as states and KvPool hold it (KvPool kv_dim,
  // KvPages::kv_dim): YOCO keeps one K/V pair per token for the whole model (kv_dim); a
  // transformer one per layer (n_layers · kv_dim; layout in model/state.h).
  int kv_row_floats() const { return is_transformer() ? n_layers * kv_dim() : kv_dim(); }
  // Bytes of global K and V per token in fp32, as the KV pool accounts them:
  // YOCO 2·kv_dim·4, transformer n_layers·2·kv_dim·4.
  int64_t kv_bytes_per_token() const { return int64_t{2} * kv_row_floats() * 4; }
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
