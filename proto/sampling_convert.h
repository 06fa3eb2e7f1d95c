// yoco.v1.SamplingParams → the engine's SamplingParams, with the documented defaults; errors
// name the field ("sampling.top_p: ..."). Shared by the router and the decode worker.
#pragma once

#include <random>

#include "common/sampling_params.h"
#include "common/status.h"
#include "yoco/v1/yoco.pb.h"

namespace yoco {

inline Result<SamplingParams> sampling_from_proto(const v1::SamplingParams& s) {
  SamplingParams p;
  p.temperature = s.has_temperature() ? s.temperature() : 1.0f;
  p.top_k = s.has_top_k() ? s.top_k() : 0;
  p.top_p = s.has_top_p() ? s.top_p() : 1.0f;
  p.min_p = s.has_min_p() ? s.min_p() : 0.0f;
  p.repetition_penalty = s.has_repetition_penalty() ? s.repetition_penalty() : 1.0f;
  p.presence_penalty = s.has_presence_penalty() ? s.presence_penalty() : 0.0f;
  p.frequency_penalty = s.has_frequency_penalty() ? s.frequency_penalty() : 0.0f;
  p.seed = s.has_seed() ? s.seed() : std::random_device{}();
  if (Status v = p.validate(); !v.ok()) return invalid_argument("sampling." + v.message());
  return p;
}

}  // namespace yoco
