// Token sampling. Order, as vLLM does it: penalties, temperature, top-k, top-p, min-p, draw.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/sampling_params.h"  // SamplingParams, its ranges
#include "common/status.h"

namespace yoco {

// xoshiro256**: fast, seedable, and identical on every platform (std:: distributions are not).
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t next();
  double uniform();  // [0, 1)

 private:
  uint64_t s_[4];
};

class Sampler {
 public:
  Sampler(const SamplingParams& p, int vocab_size, std::span<const int32_t> prompt);
  // Picks the next token from logits (modified in place) and records it.
  int32_t sample(float* logits);
  void accept(int32_t token);
  // Brings a fresh sampler to where one that produced `tokens` would be: records them and
  // advances the generator by the one draw per token a non-greedy sample() makes. A stream
  // moved to another worker (migration) or recomputed continues exactly.
  void replay(std::span<const int32_t> tokens);

 private:
  void apply_penalties(float* logits) const;

  SamplingParams p_;
  int vocab_;
  Rng rng_;
  std::vector<uint8_t> seen_;                   // prompt or generated (repetition penalty)
  std::unordered_map<int32_t, int> generated_;  // counts (presence/frequency penalties)
  std::vector<int32_t> idx_;                    // scratch
};

}  // namespace yoco
