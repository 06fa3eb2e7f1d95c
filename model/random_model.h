// Random-weight models in the checkpoint layout of docs/design.md §2.1: test configs and the papers' sizes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/config.h"
#include "model/safetensors.h"

namespace yoco {

struct ModelPreset {
  std::string name;
  std::string summary;
  ModelConfig config;
};

const std::vector<ModelPreset>& model_presets();
Result<ModelConfig> find_preset(const std::string& name);
// The Transformer baseline of the same sizes as `c` (docs/design.md §2.6): every layer has attention
// with a KV cache; the self-decoder keys are unset, as parse_model_config leaves them.
ModelConfig transformer_of(ModelConfig c);

// Writes params.json and model.safetensors (F32 or BF16) into `dir` (created if missing).
// Deterministic in (config, seed) whatever the thread count.
Status write_random_model(const std::string& dir, const ModelConfig& config, uint64_t seed, DType dtype);

}  // namespace yoco
