// The OpenAI-compatible requests (docs/design.md, OpenAI HTTP API), parsed into the router's own
// GenerateRequest, so an HTTP request runs the same Generate as a gRPC one. Errors are 400s naming
// the OpenAI field. Fields we do not know are ignored, as vLLM ignores them; our extensions
// (document_ids, priority, ignore_eos, stop_token_ids, top_k, min_p, repetition_penalty) are
// top-level fields, which is where the openai SDK's extra_body puts them.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/json.h"
#include "router/openai_errors.h"
#include "router/openai_tools.h"
#include "yoco/v1/yoco.pb.h"

namespace yoco {

// One prompt of a completions request: text, or token ids.
struct PromptInput {
  std::optional<std::string> text;
  std::vector<int32_t> ids;  // when text is absent
};

struct OpenAiRequest {
  bool chat = false;
  std::string model;                  // empty: the served model
  std::vector<PromptInput> prompts;   // completions: one or a batch
  Json messages;                      // chat: the messages array as sent
  Json template_extra;                // chat: more template variables (tools, chat_template_kwargs)
  ChatTools tools;                    // chat: tools, tool_choice, parallel_tool_calls
  bool add_generation_prompt = true;  // chat (a vLLM field)
  v1::GenerateRequest base;           // sampling, stops, extensions; the prompt is set per choice
  bool max_tokens_given = false;      // chat without it: the rest of the context (as vLLM)
  int n = 1;
  bool stream = false, include_usage = false, echo = false;
  int logprobs = -1;  // completions: top-n (0 = the chosen token only); chat: top_logprobs; -1 = none
};

inline constexpr int kMaxChoices = 64;      // n x prompts: one router call each
inline constexpr int kMaxTopLogprobs = 20;  // chat's top_logprobs, as OpenAI

// POST /v1/completions and /v1/chat/completions bodies; an error names the field.
std::variant<OpenAiRequest, ApiError> parse_completion_request(const Json& body);
// `raw`: the body's text (tool schemas keep the client's key order); empty: the sorted form.
std::variant<OpenAiRequest, ApiError> parse_chat_request(const Json& body, std::string_view raw = {});
// The JSON body of a request (400 for invalid JSON or a non-object).
std::variant<Json, ApiError> parse_body(const std::string& body);
// The chat template's further variables, as vLLM gives them: the members of
// "chat_template_kwargs" and "tools" (null when neither is given).
std::variant<Json, ApiError> template_extra(const Json& body);
// A chat message list's checks (roles, content as text or text parts, assistant tool calls) and
// what chat templates read: content parts flattened to strings, tool calls' arguments as objects
// (router/openai_tools.h).
std::variant<Json, ApiError> normalize_messages(const Json& messages);

}  // namespace yoco
