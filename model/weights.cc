#include "model/weights.h"

#include <sys/stat.h>

#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "common/checksum.h"
#include "common/json.h"
#include "common/log.h"
#include "model/safetensors.h"

namespace yoco {

namespace {

int64_t moe_floats(const MoeWeights& m) {
  int64_t n = m.router.size() + m.shared.w13.size() + m.shared.w2.size();
  for (const auto& e : m.experts) n += e.w13.size() + e.w2.size();
  return n;
}

}  // namespace

int64_t ModelWeights::bytes() const {
  int64_t n = embed.size() + output.size() + final_norm.size() + kv_norm.size() + wkv.size();
  for (const auto& l : self_layers)
    n += l.mixer_norm.size() + l.final_norm.size() + l.wqkvg.size() + l.wgt.size() + l.wo.size() + l.w13.size() +
         l.w2.size() + moe_floats(l.moe);
  for (const auto& l : cross_layers)
    n += l.mixer_norm.size() + l.final_norm.size() + l.wq.size() + l.wo.size() + l.w13.size() + l.w2.size() +
         moe_floats(l.moe);
  return n * 4;
}

std::vector<TensorSlot> model_tensor_slots(const ModelConfig& c, ModelWeights* w, WeightSet set) {
  std::vector<TensorSlot> slots;
  const int64_t D = c.dim, H = c.hidden_dim, V = c.vocab_size, KV = c.kv_dim();
  const bool full = set == WeightSet::kFull;
  auto add = [&](std::string name, std::vector<int64_t> shape, std::vector<float>* dst, int64_t off, bool load,
                 bool optional = false) {
    int64_t n = 1;
    for (auto s : shape) n *= s;
    if (w && dst && load && static_cast<int64_t>(dst->size()) < off + n) dst->resize(off + n);
    slots.push_back({std::move(name), std::move(shape), (w && load) ? dst : nullptr, off, optional});
  };
  if (w) {
    w->set = set;
    w->self_layers.resize(c.n_self_layers);
    w->cross_layers.resize(full ? c.n_cross_layers() : 0);
  }
  // One FFN at prefix p (docs/design.md §2.1): the dense fc1/gate/fc2, or the router, every
  // routed expert and the shared one.
  auto ffn = [&](const std::string& p, std::vector<float>* w13, std::vector<float>* w2, MoeWeights* moe, bool load) {
    if (!c.is_moe()) {
      add(p + "ffn.fc1.weight", {H, D}, w13, 0, load);
      add(p + "ffn.gate.weight", {H, D}, w13, H * D, load);
      add(p + "ffn.fc2.weight", {D, H}, w2, 0, load);
      return;
    }
    const int64_t E = c.n_experts, He = c.expert_hidden_dim, Hs = c.shared_expert_hidden_dim;
    if (moe) moe->experts.resize(E);
    add(p + "ffn.router.weight", {E, D}, moe ? &moe->router : nullptr, 0, load);
    for (int64_t e = 0; e < E; ++e) {
      const std::string q = p + "ffn.experts." + std::to_string(e) + ".";
      ExpertWeights* x = moe ? &moe->experts[e] : nullptr;
      add(q + "fc1.weight", {He, D}, x ? &x->w13 : nullptr, 0, load);
      add(q + "gate.weight", {He, D}, x ? &x->w13 : nullptr, He * D, load);
      add(q + "fc2.weight", {D, He}, x ? &x->w2 : nullptr, 0, load);
    }
    if (Hs == 0) return;
    ExpertWeights* x = moe ? &moe->shared : nullptr;
    add(p + "ffn.shared.fc1.weight", {Hs, D}, x ? &x->w13 : nullptr, 0, load);
    add(p + "ffn.shared.gate.weight", {Hs, D}, x ? &x->w13 : nullptr, Hs * D, load);
    add(p + "ffn.shared.fc2.weight", {D, Hs}, x ? &x->w2 : nullptr, 0, load);
  };
  auto sl = [&](int i) -> SelfLayerWeights* { return w ? &w->self_layers[i] : nullptr; };
  auto cl = [&](int i) -> CrossLayerWeights* { return (w && full) ? &w->cross_layers[i] : nullptr; };
#define YOCO_DST(ptr, field) ((ptr) ? &(ptr)->field : nullptr)
  add("embed_tokens.weight", {V, D}, YOCO_DST(w, embed), 0, true);
  add("layer_norm.weight", {D}, YOCO_DST(w, final_norm), 0, full);
  add("output_projection.weight", {V, D}, YOCO_DST(w, output), 0, full, /*optional=*/true);
  if (c.is_transformer()) {
    // docs/design.md §2.6. Layer i lands in self_layers[i] (both weight sets: a transformer's prefill
    // runs every layer), its fused projection wqkvg being q|k|v, [dim + 2·kv_dim, dim].
    if (w) {
      w->self_layers.resize(c.n_layers);
      w->cross_layers.clear();
    }
    for (int i = 0; i < c.n_layers; ++i) {
      const std::string p = "layers." + std::to_string(i) + ".";
      SelfLayerWeights* l = w ? &w->self_layers[i] : nullptr;
      add(p + "mixer_layer_norm.weight", {D}, YOCO_DST(l, mixer_norm), 0, true);
      add(p + "mixer.q_proj.weight", {D, D}, YOCO_DST(l, wqkvg), 0, true);
      add(p + "mixer.k_proj.weight", {KV, D}, YOCO_DST(l, wqkvg), D * D, true);
      add(p + "mixer.v_proj.weight", {KV, D}, YOCO_DST(l, wqkvg), D * D + KV * D, true);
      add(p + "mixer.out_proj.weight", {D, D}, YOCO_DST(l, wo), 0, true);
      add(p + "final_layer_norm.weight", {D}, YOCO_DST(l, final_norm), 0, true);
      ffn(p, YOCO_DST(l, w13), YOCO_DST(l, w2), YOCO_DST(l, moe), true);
    }
    return slots;
  }
  for (int i = 0; i < c.n_self_layers; ++i) {
    const std::string p = "self_decoder.layers." + std::to_string(i) + ".";
    SelfLayerWeights* l = sl(i);
    add(p + "mixer_layer_norm.weight", {D}, YOCO_DST(l, mixer_norm), 0, true);
    add(p + "final_layer_norm.weight", {D}, YOCO_DST(l, final_norm), 0, true);
    add(p + "mixer.q_proj.weight", {D, D}, YOCO_DST(l, wqkvg), 0, true);
    add(p + "mixer.k_proj.weight", {D, D}, YOCO_DST(l, wqkvg), D * D, true);
    add(p + "mixer.v_proj.weight", {D, D}, YOCO_DST(l, wqkvg), 2 * D * D, true);
    if (!c.is_swa()) {
      add(p + "mixer.g_proj.weight", {D, D}, YOCO_DST(l, wqkvg), 3 * D * D, true);
      add(p + "mixer.gt_proj.weight", {c.n_self_heads, D}, YOCO_DST(l, wgt), 0, true);
    }
    add(p + "mixer.out_proj.weight", {D, D}, YOCO_DST(l, wo), 0, true);
    ffn(p, YOCO_DST(l, w13), YOCO_DST(l, w2), YOCO_DST(l, moe), true);
  }
  add("cross_decoder.kv_layer_norm.weight", {D}, YOCO_DST(w, kv_norm), 0, true);
  add("cross_decoder.k_proj.weight", {KV, D}, YOCO_DST(w, wkv), 0, true);
  add("cross_decoder.v_proj.weight", {KV, D}, YOCO_DST(w, wkv), KV * D, true);
  for (int i = 0; i < c.n_cross_layers(); ++i) {
    const std::string p = "cross_decoder.layers." + std::to_string(i) + ".";
    CrossLayerWeights* l = cl(i);
    add(p + "mixer_layer_norm.weight", {D}, YOCO_DST(l, mixer_norm), 0, full);
    add(p + "final_layer_norm.weight", {D}, YOCO_DST(l, final_norm), 0, full);
    add(p + "mixer.q_proj.weight", {D, D}, YOCO_DST(l, wq), 0, full);
    add(p + "mixer.out_proj.weight", {D, D}, YOCO_DST(l, wo), 0, full);
    ffn(p, YOCO_DST(l, w13), YOCO_DST(l, w2), YOCO_DST(l, moe), full);
  }
#undef YOCO_DST
  return slots;
}

namespace {

bool file_exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

Result<std::string> read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found("cannot open " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

struct Source {
  const SafetensorsFile* file;
  const TensorInfo* info;
};

// Opens the single file or every shard named by the index, mapping tensor name → source.
Status open_sources(const std::string& dir, std::vector<std::unique_ptr<SafetensorsFile>>& files,
                    std::map<std::string, Source>& sources) {
  const std::string single = dir + "/model.safetensors";
  const std::string index = dir + "/model.safetensors.index.json";
  std::map<std::string, std::string> expected_file;  // tensor → shard, from the index
  if (file_exists(index)) {
    YOCO_ASSIGN_OR_RETURN(std::string text, read_text(index));
    auto j = Json::parse(text);
    if (!j.ok()) return invalid_argument(index + ": " + j.status().message());
    const Json* wm = j.value().find("weight_map");
    if (!wm || !wm->is_object()) return invalid_argument(index + ": missing object \"weight_map\"");
    std::map<std::string, bool> shards;
    for (const auto& [name, file] : wm->as_object()) {
      if (!file.is_string()) return invalid_argument(index + ": weight_map[\"" + name + "\"] must be a file name");
      const std::string& fn = file.as_string();
      if (fn.empty() || fn.find('/') != std::string::npos || fn == "." || fn == "..")
        return invalid_argument(index + ": weight_map[\"" + name + "\"] names a path outside the model directory");
      expected_file[name] = fn;
      shards[fn] = true;
    }
    for (const auto& [fn, _] : shards) {
      auto f = SafetensorsFile::open(dir + "/" + fn);
      if (!f.ok()) return f.status();
      files.push_back(std::move(f).value());
    }
  } else if (file_exists(single)) {
    auto f = SafetensorsFile::open(single);
    if (!f.ok()) return f.status();
    files.push_back(std::move(f).value());
  } else {
    return not_found(dir + ": neither model.safetensors nor model.safetensors.index.json exists");
  }
  for (const auto& f : files) {
    const std::string base = f->path().substr(f->path().rfind('/') + 1);
    for (const auto& t : f->header().tensors) {
      if (!expected_file.empty()) {
        auto it = expected_file.find(t.name);
        if (it == expected_file.end() || it->second != base) continue;  // not this shard's per the index
      }
      if (!sources.emplace(t.name, Source{f.get(), &t}).second)
        return invalid_argument("tensor \"" + t.name + "\" appears in more than one shard");
    }
  }
  for (const auto& [name, fn] : expected_file)
    if (!sources.count(name)) return invalid_argument(index + ": tensor \"" + name + "\" is not in shard " + fn);
  return Status::Ok();
}

}  // namespace

Result<LoadedWeights> load_model_dir(const std::string& dir, WeightSet set) {
  LoadedWeights out;
  YOCO_ASSIGN_OR_RETURN(out.config, load_model_config(dir + "/params.json"));
  ModelConfig& c = out.config;

  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::map<std::string, Source> sources;
  YOCO_RETURN_IF_ERROR(open_sources(dir, files, sources));

  const bool has_output = sources.count("output_projection.weight") > 0;
  if (!c.tie_embeddings) c.tie_embeddings = !has_output;
  out.weights.tied = *c.tie_embeddings;

  std::vector<TensorSlot> slots = model_tensor_slots(c, &out.weights, set);
  std::vector<const Source*> found(slots.size(), nullptr);
  for (size_t i = 0; i < slots.size(); ++i) {
    const TensorSlot& s = slots[i];
    auto it = sources.find(s.name);
    if (it == sources.end()) {
      if (s.optional && out.weights.tied) continue;
      return invalid_argument(dir + ": missing tensor \"" + s.name + "\"");
    }
    const TensorInfo& t = *it->second.info;
    if (t.dtype != DType::kF32 && t.dtype != DType::kF16 && t.dtype != DType::kBF16)
      return invalid_argument(dir + ": tensor \"" + s.name + "\" has dtype " + dtype_name(t.dtype) +
                              "; weights must be F32, F16 or BF16");
    if (t.shape != s.shape)
      return invalid_argument(dir + ": tensor \"" + s.name + "\" has shape " + shape_str(t.shape) + ", expected " +
                              shape_str(s.shape));
    found[i] = &it->second;
  }
  if (out.weights.tied) {
    out.weights.output.clear();
    for (size_t i = 0; i < slots.size(); ++i)
      if (slots[i].optional) found[i] = nullptr;  // tied: a stray output_projection is not used
  }

  // Convert (and checksum for the fingerprint) every tensor, in parallel.
  std::vector<uint32_t> crcs(slots.size(), 0);
  std::vector<Status> errors(slots.size());
#pragma omp parallel for schedule(dynamic)
  for (size_t i = 0; i < slots.size(); ++i) {
    if (!found[i]) continue;
    const TensorInfo& t = *found[i]->info;
    const uint8_t* raw = found[i]->file->tensor_data(t);
    crcs[i] = crc32c(raw, t.end - t.begin);
    if (!slots[i].dst) continue;
    float* dst = slots[i].dst->data() + slots[i].dst_offset;
    Status st = convert_to_f32(t.dtype, raw, t.numel(), dst);
    if (st.ok()) {
      for (int64_t e = 0; e < t.numel(); ++e)
        if (!std::isfinite(dst[e])) {
          st = invalid_argument(dir + ": tensor \"" + slots[i].name +
                                "\" has a non-finite value (NaN or Inf) at element " + std::to_string(e));
          break;
        }
    }
    errors[i] = st;
  }
  for (const Status& st : errors)
    if (!st.ok()) return st;

  uint64_t fp = fnv1a64(c.to_json().dump());
  for (size_t i = 0; i < slots.size(); ++i) {
    if (!found[i]) continue;
    fp = mix64(fp, fnv1a64(slots[i].name));
    fp = mix64(fp, (static_cast<uint64_t>(found[i]->info->dtype) << 32) | crcs[i]);
  }
  out.fingerprint = fp;
  size_t extra = sources.size();
  for (const auto* f : found) extra -= f ? 1 : 0;
  if (extra > 0)
    YOCO_LOG(LogLevel::kDebug, "ignoring checkpoint tensors the model does not use", LogFields().kv("count", extra));
  return out;
}

}  // namespace yoco
