// The model's tensors in fp32, with the projections that always run together fused into one
// matrix (q|k|v|g, fc1|gate, k|v) so each becomes a single matrix product.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/config.h"

namespace yoco {

// One SwiGLU FFN of a mixture of experts (a routed expert or the shared one).
struct ExpertWeights {
  std::vector<float> w13;  // [2·expert_hidden, dim]: fc1 then gate
  std::vector<float> w2;   // [dim, expert_hidden]
};

// An MoE FFN (docs/design.md §2.2); empty in a dense model, whose FFN is the layer's w13/w2.
struct MoeWeights {
  std::vector<float> router;           // [n_experts, dim]
  std::vector<ExpertWeights> experts;  // n_experts
  ExpertWeights shared;                // empty without a shared expert
};

struct SelfLayerWeights {
  std::vector<float> mixer_norm, final_norm;  // [dim]
  std::vector<float> wqkvg;                   // [(3 or 4)·dim, dim]: q, k, v (, g) rows
  std::vector<float> wgt;                     // [n_self_heads, dim], gated retention only
  std::vector<float> wo;                      // [dim, dim]
  std::vector<float> w13;                     // [2·hidden, dim]: fc1 then gate (dense)
  std::vector<float> w2;                      // [dim, hidden]
  MoeWeights moe;                             // instead of w13/w2 when n_experts > 0
};

struct CrossLayerWeights {
  std::vector<float> mixer_norm, final_norm;
  std::vector<float> wq, wo;  // [dim, dim]
  std::vector<float> w13, w2;
  MoeWeights moe;
};

// Which tensors a process needs: a prefill worker holds only embedding, self-decoder and the
// K/V projection (docs/design.md §3.1).
enum class WeightSet { kFull, kPrefill };

struct ModelWeights {
  WeightSet set = WeightSet::kFull;
  bool tied = false;
  std::vector<float> embed;       // [vocab, dim]
  std::vector<float> output;      // [vocab, dim]; empty when tied
  std::vector<float> final_norm;  // [dim]
  std::vector<float> kv_norm;     // [dim]
  std::vector<float> wkv;         // [2·kv_dim, dim]: k rows then v rows
  std::vector<SelfLayerWeights> self_layers;
  std::vector<CrossLayerWeights> cross_layers;

  const float* output_matrix() const { return tied ? embed.data() : output.data(); }
  int64_t bytes() const;
};

// One checkpoint tensor: its name, shape, and where it lands (matrix + row offset).
struct TensorSlot {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float>* dst = nullptr;  // null: not loaded by this weight set (still fingerprinted)
  int64_t dst_offset = 0;             // in elements
  bool optional = false;              // output_projection.weight when tying is not forced
};

// The full list of tensor names and shapes of docs/design.md §2.1 for a config, in checkpoint order.
// With `w` given, each slot also says where the tensor is stored (and `w` is sized for it).
std::vector<TensorSlot> model_tensor_slots(const ModelConfig& c, ModelWeights* w, WeightSet set);

struct LoadedWeights {
  ModelConfig config;
  ModelWeights weights;
  uint64_t fingerprint = 0;
};

// Loads params.json + model.safetensors (or a sharded set with model.safetensors.index.json),
// validating every tensor (presence, shape, dtype, finite values). Errors name the tensor.
Result<LoadedWeights> load_model_dir(const std::string& dir, WeightSet set = WeightSet::kFull);

}  // namespace yoco
