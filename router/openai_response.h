// The OpenAI-compatible response shapes (docs/design.md, OpenAI HTTP API): completion and chat
// objects, their streamed chunks as server-sent events, usage, and the two log-prob shapes
// (completions: tokens / token_logprobs / top_logprobs / text_offset; chat: content[]).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/json.h"
#include "router/openai_errors.h"  // valid_utf8
#include "yoco/v1/yoco.pb.h"

namespace yoco {

// One token's log-probs: the chosen token's, and its top alternatives (absent for a prompt's
// first token, which nothing precedes: null in both shapes, as vLLM).
struct LogprobItem {
  std::string token;
  std::optional<double> logprob;
  std::optional<std::vector<std::pair<std::string, double>>> top;
};

// The first `top_n` alternatives (completions' logprobs: 0 lists the chosen token alone; chat's
// top_logprobs: 0 lists none).
LogprobItem logprob_item(const v1::LogprobEntry& e, int top_n, bool chosen_when_zero);
// -inf (a token the sampler could never pick) as vLLM writes it: JSON has no infinity.
double finite_logprob(double lp);

// {"tokens", "token_logprobs", "top_logprobs", "text_offset"}; offsets count from `offset`.
Json completion_logprobs(const std::vector<LogprobItem>& items, int64_t offset);
// The characters these tokens add to the text (text_offset's unit, as vLLM: string length).
int64_t logprob_text_length(const std::vector<LogprobItem>& items);
// {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}
Json chat_logprobs(const std::vector<LogprobItem>& items);

const char* finish_reason_name(v1::FinishReason r);  // "length" or "stop"
// A chat reply that made tool calls ended "tool_calls" unless max_tokens cut it.
const char* chat_finish_reason_name(v1::FinishReason r, bool called);
Json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens);

// What every object and chunk of one response shares.
struct ResponseHead {
  std::string id;      // "cmpl-..." / "chatcmpl-..."
  std::string object;  // "text_completion", "chat.completion", "chat.completion.chunk"
  int64_t created = 0;
  std::string model;
};
Json response_json(const ResponseHead& h, Json::Array choices, std::optional<Json> usage = std::nullopt);

Json completion_choice(int index, std::string text, Json logprobs, Json finish_reason);
Json chat_message_choice(int index, std::string content, Json logprobs, Json finish_reason);
// A reply with tool calls (docs/design.md §3.2d): content null when there is none, as OpenAI's.
struct ToolCallOut {
  std::string id, name, arguments;
};
Json chat_tool_calls_choice(int index, const std::string& content, const std::vector<ToolCallOut>& calls, Json logprobs,
                            Json finish_reason);
// A streamed call's delta: the first one of each call has its id, type and name; later ones only
// the next fragment of its arguments.
Json tool_call_delta(int index, const std::optional<ToolCallOut>& first, const std::string& arguments);
Json chat_delta_choice(int index, Json delta, Json logprobs, Json finish_reason);

// "data: <json>\n\n", and the stream's last event.
std::string sse_event(const Json& j);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// GET /v1/models: the served model, with max_model_len as vLLM reports it.
Json models_json(const std::string& name, int64_t created, int64_t max_model_len);

}  // namespace yoco
