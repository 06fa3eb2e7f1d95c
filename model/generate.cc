#include "model/generate.h"

#include <algorithm>
#include <chrono>

namespace yoco {

Result<GenerateResult> generate(const Model& model, std::span<const int32_t> prompt, const GenerateOptions& opt,
                                const std::function<void(int32_t)>& on_token) {
  if (prompt.empty()) return invalid_argument("prompt: must contain at least one token");
  if (opt.max_tokens < 1) return invalid_argument("max_tokens: must be >= 1");
  YOCO_RETURN_IF_ERROR(opt.sampling.validate());
  const auto& cfg = model.config();
  if (static_cast<int64_t>(prompt.size()) + opt.max_tokens > cfg.max_seq_len)
    return invalid_argument("max_tokens: prompt (" + std::to_string(prompt.size()) + ") + max_tokens (" +
                            std::to_string(opt.max_tokens) + ") exceeds max_seq_len " +
                            std::to_string(cfg.max_seq_len));
  YOCO_RETURN_IF_ERROR(model.validate_tokens(prompt, 0, "prompt"));

  using clock = std::chrono::steady_clock;
  GenerateResult res;
  SequenceState st = model.new_sequence();
  SequenceState* one[1] = {&st};
  std::vector<float> logits(cfg.vocab_size);
  Sampler sampler(opt.sampling, cfg.vocab_size, prompt);

  auto t0 = clock::now();
  YOCO_RETURN_IF_ERROR(model.prefill(st, prompt, opt.prefill));
  YOCO_RETURN_IF_ERROR(model.logits(one, logits.data()));
  auto t1 = clock::now();
  res.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
  res.finish_reason = "length";
  while (true) {
    const int32_t tok = sampler.sample(logits.data());
    res.tokens.push_back(tok);
    if (on_token) on_token(tok);
    if (std::find(opt.stop_token_ids.begin(), opt.stop_token_ids.end(), tok) != opt.stop_token_ids.end()) {
      res.finish_reason = "stop";
      break;
    }
    if (static_cast<int>(res.tokens.size()) >= opt.max_tokens) break;
    const int32_t in[1] = {tok};
    YOCO_RETURN_IF_ERROR(model.decode_step(one, in, logits.data()));
  }
  res.decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
  return res;
}

}  // namespace yoco
