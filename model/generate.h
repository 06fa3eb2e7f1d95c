// The in-process generation loop: prefill, then decode steps, sampling each token.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/sampler.h"

namespace yoco {

struct GenerateOptions {
  int max_tokens = 16;
  SamplingParams sampling;
  std::vector<int32_t> stop_token_ids;  // generation ends after emitting one of these
  PrefillOptions prefill;
};

struct GenerateResult {
  std::vector<int32_t> tokens;
  std::string finish_reason;  // "length" or "stop"
  double prefill_seconds = 0, decode_seconds = 0;
};

// on_token is called as each token is sampled (streaming).
Result<GenerateResult> generate(const Model& model, std::span<const int32_t> prompt, const GenerateOptions& opt,
                                const std::function<void(int32_t)>& on_token = {});

}  // namespace yoco
