#include "common/sampling_params.h"

#include <cmath>
#include <string>
#include <utility>

namespace yoco {

Status SamplingParams::validate() const {
  auto bad = [](const char* field, const std::string& why) {
    return invalid_argument(std::string(field) + ": " + why);
  };
  // NaN and infinities first, by name: a range message ("must be >= 0") would mislead for +inf.
  const std::pair<const char*, float> floats[] = {{"temperature", temperature},
                                                  {"top_p", top_p},
                                                  {"min_p", min_p},
                                                  {"repetition_penalty", repetition_penalty},
                                                  {"presence_penalty", presence_penalty},
                                                  {"frequency_penalty", frequency_penalty}};
  for (const auto& [field, v] : floats)
    if (!std::isfinite(v)) return bad(field, "must be finite (not NaN or infinity)");
  if (!(temperature >= 0.0f)) return bad("temperature", "must be >= 0");
  if (top_k < 0) return bad("top_k", "must be >= 0 (0 disables it)");
  if (!(top_p > 0.0f && top_p <= 1.0f)) return bad("top_p", "must be in (0, 1]");
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return bad("min_p", "must be in [0, 1]");
  if (!(repetition_penalty > 0.0f)) return bad("repetition_penalty", "must be > 0 (1 disables it)");
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) return bad("presence_penalty", "must be in [-2, 2]");
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) return bad("frequency_penalty", "must be in [-2, 2]");
  return Status::Ok();
}

}  // namespace yoco
