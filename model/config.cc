#include "model/config.h"

#include <fstream>
#include <sstream>
#include <utility>

namespace yoco {
namespace {

Status get_int(const Json& j, const char* key, bool required, int64_t& out) {
  const Json* v = j.find(key);
  if (!v || v->is_null()) {
    if (required) return invalid_argument(std::string("params.json: missing required key \"") + key + "\"");
    return Status::Ok();
  }
  if (!v->is_number() || (!v->is_integer() && v->as_double() != static_cast<double>(v->as_int())))
    return invalid_argument(std::string("params.json: \"") + key + "\" must be an integer");
  out = v->as_int();
  return Status::Ok();
}

Status get_int32(const Json& j, const char* key, bool required, int& out) {
  int64_t v = out;
  YOCO_RETURN_IF_ERROR(get_int(j, key, required, v));
  if (v < INT32_MIN || v > INT32_MAX) return invalid_argument(std::string("params.json: \"") + key + "\" out of range");
  out = static_cast<int>(v);
  return Status::Ok();
}

Status get_double(const Json& j, const char* key, double& out) {
  const Json* v = j.find(key);
  if (!v || v->is_null()) return Status::Ok();
  if (!v->is_number()) return invalid_argument(std::string("params.json: \"") + key + "\" must be a number");
  out = v->as_double();
  return Status::Ok();
}

Status get_bool(const Json& j, const char* key, bool& out, bool& present) {
  const Json* v = j.find(key);
  present = v && !v->is_null();
  if (!present) return Status::Ok();
  if (!v->is_bool()) return invalid_argument(std::string("params.json: \"") + key + "\" must be true or false");
  out = v->as_bool();
  return Status::Ok();
}

Status positive(const char* key, int64_t v) {
  if (v <= 0)
    return invalid_argument(std::string("params.json: \"") + key + "\" must be > 0, got " + std::to_string(v));
  return Status::Ok();
}

// docs/design.md §2.1: the MoE keys are all zero for a dense model; hidden_dim is unused by an MoE.
Status validate_moe(const ModelConfig& c) {
  if (c.n_experts < 0)
    return invalid_argument("params.json: \"n_experts\" must be >= 0, got " + std::to_string(c.n_experts));
  if (c.n_experts == 0) {
    const std::pair<const char*, int> keys[] = {{"n_experts_per_token", c.n_experts_per_token},
                                                {"expert_hidden_dim", c.expert_hidden_dim},
                                                {"shared_expert_hidden_dim", c.shared_expert_hidden_dim}};
    for (const auto& [key, v] : keys)
      if (v != 0)
        return invalid_argument(std::string("params.json: \"") + key + "\" needs \"n_experts\" > 0 (got " +
                                std::to_string(v) + " with a dense model)");
    if (c.moe_norm_topk_prob) return invalid_argument("params.json: \"moe_norm_topk_prob\" needs \"n_experts\" > 0");
    return positive("hidden_dim", c.hidden_dim);
  }
  if (c.hidden_dim < 0)
    return invalid_argument("params.json: \"hidden_dim\" must be >= 0, got " + std::to_string(c.hidden_dim));
  if (c.n_experts_per_token < 1 || c.n_experts_per_token > c.n_experts)
    return invalid_argument("params.json: \"n_experts_per_token\" must be in [1, n_experts] = [1, " +
                            std::to_string(c.n_experts) + "], got " + std::to_string(c.n_experts_per_token));
  YOCO_RETURN_IF_ERROR(positive("expert_hidden_dim", c.expert_hidden_dim));
  if (c.shared_expert_hidden_dim < 0)
    return invalid_argument("params.json: \"shared_expert_hidden_dim\" must be >= 0, got " +
                            std::to_string(c.shared_expert_hidden_dim));
  return Status::Ok();
}

}  // namespace

Status validate_model_config(const ModelConfig& c) {
  YOCO_RETURN_IF_ERROR(positive("dim", c.dim));
  YOCO_RETURN_IF_ERROR(positive("n_layers", c.n_layers));
  YOCO_RETURN_IF_ERROR(validate_moe(c));
  YOCO_RETURN_IF_ERROR(positive("n_attn_heads", c.n_attn_heads));
  YOCO_RETURN_IF_ERROR(positive("n_attn_kv_heads", c.n_attn_kv_heads));
  YOCO_RETURN_IF_ERROR(positive("vocab_size", c.vocab_size));
  YOCO_RETURN_IF_ERROR(positive("n_loops", c.n_loops));
  YOCO_RETURN_IF_ERROR(positive("max_seq_len", c.max_seq_len));
  if (c.dim % c.n_attn_heads != 0)
    return invalid_argument("params.json: \"dim\" must be divisible by \"n_attn_heads\"");
  if (c.n_attn_heads % c.n_attn_kv_heads != 0)
    return invalid_argument("params.json: \"n_attn_heads\" must be a multiple of \"n_attn_kv_heads\"");
  if (!(c.rope_theta > 1.0)) return invalid_argument("params.json: \"rope_theta\" must be > 1");
  if (!(c.norm_eps > 0.0)) return invalid_argument("params.json: \"norm_eps\" must be > 0");
  const bool cross_rope = c.arch == Arch::kTransformer || c.cross_decoder_rope;
  if (cross_rope && (c.cross_head_dim() % 2 != 0 || c.cross_head_dim() < 4))
    return invalid_argument("params.json: attention head dim (dim / n_attn_heads) must be even and >= 4 for RoPE");
  if (c.arch == Arch::kTransformer) return Status::Ok();
  YOCO_RETURN_IF_ERROR(positive("n_self_heads", c.n_self_heads));
  if (c.dim % c.n_self_heads != 0)
    return invalid_argument("params.json: \"dim\" must be divisible by \"n_self_heads\"");
  if (c.self_head_dim() % 2 != 0 || c.self_head_dim() < 4)
    return invalid_argument("params.json: self-decoder head dim (dim / n_self_heads) must be even and >= 4");
  if (c.n_self_layers < 1 || c.n_self_layers >= c.n_layers)
    return invalid_argument("params.json: \"n_self_layers\" must be in [1, n_layers - 1], got " +
                            std::to_string(c.n_self_layers));
  if (c.sliding_window < 0) return invalid_argument("params.json: \"sliding_window\" must be null or > 0");
  if (!c.is_swa() && !(c.gate_logit_normalizer > 0))
    return invalid_argument("params.json: \"gate_logit_normalizer\" must be > 0");
  return Status::Ok();
}

Result<ModelConfig> parse_model_config(const Json& j) {
  if (!j.is_object()) return invalid_argument("params.json: top level must be a JSON object");
  ModelConfig c;
  if (const Json* a = j.find("arch"); a && !a->is_null()) {
    if (!a->is_string()) return invalid_argument("params.json: \"arch\" must be a string");
    if (a->as_string() == "yoco") c.arch = Arch::kYoco;
    else if (a->as_string() == "transformer") c.arch = Arch::kTransformer;
    else
      return invalid_argument("params.json: \"arch\" must be \"yoco\" or \"transformer\", got \"" + a->as_string() +
                              "\"");
  }
  YOCO_RETURN_IF_ERROR(get_int32(j, "dim", true, c.dim));
  YOCO_RETURN_IF_ERROR(get_int32(j, "n_layers", true, c.n_layers));
  YOCO_RETURN_IF_ERROR(get_int32(j, "n_experts", false, c.n_experts));
  YOCO_RETURN_IF_ERROR(get_int32(j, "hidden_dim", c.n_experts <= 0, c.hidden_dim));  // unused by an MoE
  YOCO_RETURN_IF_ERROR(get_int32(j, "n_experts_per_token", false, c.n_experts_per_token));
  YOCO_RETURN_IF_ERROR(get_int32(j, "expert_hidden_dim", false, c.expert_hidden_dim));
  YOCO_RETURN_IF_ERROR(get_int32(j, "shared_expert_hidden_dim", false, c.shared_expert_hidden_dim));
  bool norm_present = false;
  YOCO_RETURN_IF_ERROR(get_bool(j, "moe_norm_topk_prob", c.moe_norm_topk_prob, norm_present));
  YOCO_RETURN_IF_ERROR(get_int32(j, "n_attn_heads", true, c.n_attn_heads));
  YOCO_RETURN_IF_ERROR(get_int32(j, "n_attn_kv_heads", false, c.n_attn_kv_heads));
  if (c.n_attn_kv_heads == 0) c.n_attn_kv_heads = c.n_attn_heads;
  YOCO_RETURN_IF_ERROR(get_int32(j, "vocab_size", true, c.vocab_size));
  YOCO_RETURN_IF_ERROR(get_double(j, "rope_theta", c.rope_theta));
  YOCO_RETURN_IF_ERROR(get_double(j, "norm_eps", c.norm_eps));
  YOCO_RETURN_IF_ERROR(get_int(j, "max_seq_len", false, c.max_seq_len));
  if (c.arch == Arch::kYoco) {
    YOCO_RETURN_IF_ERROR(get_int32(j, "n_self_heads", true, c.n_self_heads));
    YOCO_RETURN_IF_ERROR(get_int32(j, "sliding_window", false, c.sliding_window));
    if (const Json* w = j.find("sliding_window"); w && !w->is_null() && c.sliding_window <= 0)
      return invalid_argument("params.json: \"sliding_window\" must be null or > 0");
    YOCO_RETURN_IF_ERROR(get_int32(j, "n_loops", false, c.n_loops));
    bool present = false;
    YOCO_RETURN_IF_ERROR(get_bool(j, "cross_decoder_rope", c.cross_decoder_rope, present));
    c.n_self_layers = c.n_layers / 2;
    YOCO_RETURN_IF_ERROR(get_int32(j, "n_self_layers", false, c.n_self_layers));
    YOCO_RETURN_IF_ERROR(get_double(j, "gate_logit_normalizer", c.gate_logit_normalizer));
  }
  bool tie = false, tie_present = false;
  YOCO_RETURN_IF_ERROR(get_bool(j, "tie_embeddings", tie, tie_present));
  if (tie_present) c.tie_embeddings = tie;
  YOCO_RETURN_IF_ERROR(validate_model_config(c));
  return c;
}

Result<ModelConfig> load_model_config(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found("cannot open " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  auto j = Json::parse(ss.str());
  if (!j.ok()) return invalid_argument(path + ": " + j.status().message());
  return parse_model_config(j.value());
}

Json ModelConfig::to_json() const {
  Json::Object o;
  o["arch"] = Json(arch == Arch::kYoco ? "yoco" : "transformer");
  o["dim"] = Json(dim);
  o["n_layers"] = Json(n_layers);
  o["hidden_dim"] = Json(hidden_dim);
  o["n_attn_heads"] = Json(n_attn_heads);
  o["n_attn_kv_heads"] = Json(n_attn_kv_heads);
  o["vocab_size"] = Json(vocab_size);
  o["rope_theta"] = Json(rope_theta);
  o["norm_eps"] = Json(norm_eps);
  o["max_seq_len"] = Json(max_seq_len);
  if (arch == Arch::kYoco) {
    o["n_self_heads"] = Json(n_self_heads);
    o["sliding_window"] = sliding_window > 0 ? Json(sliding_window) : Json();
    o["n_loops"] = Json(n_loops);
    o["cross_decoder_rope"] = Json(cross_decoder_rope);
    o["n_self_layers"] = Json(n_self_layers);
    o["gate_logit_normalizer"] = Json(gate_logit_normalizer);
  }
  if (tie_embeddings) o["tie_embeddings"] = Json(*tie_embeddings);
  if (is_moe()) {  // absent for a dense model, whose fingerprint stays what it was
    o["n_experts"] = Json(n_experts);
    o["n_experts_per_token"] = Json(n_experts_per_token);
    o["expert_hidden_dim"] = Json(expert_hidden_dim);
    o["shared_expert_hidden_dim"] = Json(shared_expert_hidden_dim);
    o["moe_norm_topk_prob"] = Json(moe_norm_topk_prob);
  }
  return Json(std::move(o));
}

}  // namespace yoco
