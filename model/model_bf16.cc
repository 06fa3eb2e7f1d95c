// Model's weight access for both precisions: fp32 matrices, or their bf16 copies after
// use_bf16_weights() (model/model.h).
#include <cmath>

#include "common/log.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "model/cpu_path.h"
#include "model/model.h"

namespace yoco {

namespace {

// An MoE's expert matrices. The router stays fp32: it is small, and its logits choose the experts,
// so rounding it would move the choice near a tie (docs/design.md §2.5).
void add_experts(MoeWeights& moe, std::vector<std::vector<float>*>& m) {
  for (auto& e : moe.experts) m.insert(m.end(), {&e.w13, &e.w2});
  m.insert(m.end(), {&moe.shared.w13, &moe.shared.w2});
}

// Every matrix a product reads (the norm vectors stay fp32).
std::vector<std::vector<float>*> matrices(ModelWeights& w) {
  std::vector<std::vector<float>*> m = {&w.embed, &w.output, &w.wkv};
  for (auto& L : w.self_layers) {
    for (auto* t : {&L.wqkvg, &L.wgt, &L.wo, &L.w13, &L.w2}) m.push_back(t);
    add_experts(L.moe, m);
  }
  for (auto& L : w.cross_layers) {
    for (auto* t : {&L.wq, &L.wo, &L.w13, &L.w2}) m.push_back(t);
    add_experts(L.moe, m);
  }
  return m;
}

}  // namespace

LogFields cpu_path_fields(const Model& model) {
  LogFields f;
  f.kv("isa", cpu::isa_path()).kv("dtype", model.bf16_weights() ? "bf16" : "fp32").kv("gemm", cpu::gemm_library());
  if (model.bf16_weights() && cpu::linear_bf16_widens())
    f.kv("bf16_products", "no bf16 instructions: weights widened to fp32 in registers, x in fp32");
  return f;
}

Status apply_dtype_flag(Model& model, const std::string& dtype, int device) {
  if (dtype != "fp32" && dtype != "bf16") return invalid_argument("--dtype: \"" + dtype + "\" is not fp32 or bf16");
  if (dtype == "bf16" && device >= 0)
    return invalid_argument("--dtype: bf16 is the CPU engine's option (the CUDA engine computes in bf16 already)");
  if (dtype == "bf16") model.use_bf16_weights();
  if (device < 0) YOCO_LOG(LogLevel::kInfo, "cpu engine", cpu_path_fields(model));
  return Status::Ok();
}

void Model::use_bf16_weights(Bf16Inputs inputs) {
  if (bf16_weights()) return;
  for (std::vector<float>* t : matrices(w_)) {
    if (t->empty()) continue;
    std::vector<uint16_t> b(t->size());
    cpu::to_bf16(t->data(), b.data(), static_cast<int64_t>(t->size()));
    bf16_.emplace(t, std::move(b));
    std::vector<float>().swap(*t);  // frees the fp32 copy
  }
  // Gated retention sums k·vᵀ over the whole sequence into S, so the rounding of the activations
  // entering the self-decoder's products does not average out: with gRet those products take x as
  // two bf16 terms. Measured (bench/README.md, "Goal 2"): mid-gret max |Δ log p| 0.050 → 0.009
  // over 511 tokens, prefill 2.0× → 1.6× the fp32 path. SWA and the Transformer stay within 2e-2
  // without it.
  if (inputs == Bf16Inputs::kCpu && !cfg_.is_swa() && !cfg_.is_transformer())
    for (auto& L : w_.self_layers) {
      std::vector<std::vector<float>*> ffn;
      add_experts(L.moe, ffn);
      for (const auto* t : {&L.wqkvg, &L.wgt, &L.wo, &L.w13, &L.w2}) bf16_split_.insert(t);
      for (const auto* t : ffn) bf16_split_.insert(t);
    }
}

int64_t Model::weight_bytes() const {
  int64_t b = w_.bytes();
  for (const auto& [_, t] : bf16_) b += static_cast<int64_t>(t.size()) * 2;
  return b;
}

void Model::linear(const float* x, const std::vector<float>& w, float* y, int rows, int n, int k,
                   bool accumulate) const {
  if (!bf16_.empty()) {
    auto it = bf16_.find(&w);
    if (it != bf16_.end())
      return cpu::linear_bf16(x, it->second.data(), y, rows, n, k, accumulate, bf16_split_.count(&w) > 0);
  }
  cpu::linear(x, w.data(), y, rows, n, k, accumulate);
}

void Model::embed_rows(const int32_t* ids, int n, float* h) const {
  const int D = cfg_.dim;
  const float scale = std::sqrt(static_cast<float>(D));
  if (!bf16_.empty()) {
    auto it = bf16_.find(&w_.embed);
    if (it != bf16_.end()) return cpu::embed_bf16(it->second.data(), D, ids, n, scale, h);
  }
  cpu::embed(w_.embed.data(), D, ids, n, scale, h);
}

}  // namespace yoco
