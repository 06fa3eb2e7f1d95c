// A request's sampling parameters and their ranges: the engine's Sampler (model/sampler.h) draws
// with them, and the router validates them without the engine (docs/design.md, sampling).
#pragma once

#include <cstdint>

#include "common/status.h"

namespace yoco {

struct SamplingParams {
  float temperature = 1.0f;         // 0: greedy
  int top_k = 0;                    // 0: off
  float top_p = 1.0f;               // (0, 1]
  float min_p = 0.0f;               // [0, 1]
  float repetition_penalty = 1.0f;  // > 0; applied to prompt and generated tokens
  float presence_penalty = 0.0f;    // [-2, 2]; generated tokens
  float frequency_penalty = 0.0f;   // [-2, 2]; generated tokens
  uint64_t seed = 0;

  // INVALID_ARGUMENT naming the field for out-of-range values.
  Status validate() const;
};

}  // namespace yoco
