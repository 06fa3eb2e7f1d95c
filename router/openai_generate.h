// The choices of one completions or chat request, run and answered (docs/design.md, OpenAI HTTP
// API). Each choice is one Generate on the router's own service through its in-process channel,
// so it passes the same API keys, validation, admission, routing, migration, stall watch and
// metrics as a gRPC client's. Choices run side by side; the answer is one JSON object, or
// server-sent events as tokens arrive. The client going away cancels every call (its decode
// worker frees the blocks).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "router/openai_errors.h"
#include "router/openai_response.h"
#include "router/tool_calls.h"
#include "server/http_listener.h"
#include "yoco/v1/yoco.grpc.pb.h"

namespace yoco {

struct ChoicePlan {
  int prompt_index = 0;
  v1::GenerateRequest req;
  bool generate = true;   // false: echo with max_tokens 0 (the prompt scored, nothing generated)
  std::string echo_text;  // echo: the prompt, before the completion
  std::vector<LogprobItem> echo_logprobs;
  int64_t prompt_tokens = 0;  // when known here (echo, chat); otherwise the router's usage tells
  // Choice fork_index of the prompt's n (n > 1: they share one prefill, router/fork_groups.h).
  int fork_index = 0, fork_n = 1;
};

struct GenerationJob {
  ResponseHead head;
  bool chat = false, stream = false, include_usage = false;
  int logprobs = -1;  // -1: none
  // Chat with tools: each choice's reply parsed into tool calls in this syntax (kNone: not parsed),
  // at most max_tool_calls of them (docs/design.md §3.2d).
  ToolCallFormat tool_format = ToolCallFormat::kNone;
  int max_tool_calls = 0;
  std::string tool_end_text;        // the stop token's text, when special tokens' text is kept
  std::string authorization;        // the client's header, passed on as the calls' metadata
  std::vector<ChoicePlan> choices;  // index = position
};

// Answers `ex`; returns the HTTP status (499: the client went away).
int run_generation(v1::Yoco::Stub& stub, const GenerationJob& job, HttpExchange& ex);

// An error answer in OpenAI's shape (429 with Retry-After).
int respond_error(HttpExchange& ex, const ApiError& e);

}  // namespace yoco
