// The router's OpenAI-compatible HTTP API (docs/design.md, OpenAI HTTP API; docs/architecture.md,
// a request's path): POST /v1/completions, /v1/chat/completions, /tokenize, /detokenize; GET
// /v1/models, /health. Every endpoint calls the router's own gRPC service through its in-process
// channel (the client's Authorization header passed on), so HTTP and gRPC share one request path:
// API keys and scopes, validation, admission, documents, migration, metrics. What is HTTP's own:
// parsing (router/openai_request.h), the answer's shapes (router/openai_response.h), errors
// (router/openai_errors.h), and turning messages into a prompt with the chat template.
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "common/structured_output.h"
#include "router/metrics.h"
#include "router/openai_errors.h"
#include "router/openai_generate.h"
#include "router/openai_request.h"
#include "router/tool_calls.h"
#include "server/http_listener.h"
#include "tokenizer/tokenizer.h"
#include "yoco/v1/yoco.grpc.pb.h"

namespace yoco {

// Messages -> the prompt's text (the chat template, with the model's BOS/EOS spellings bound).
// `request_json` is the body as received: the template sees the client's key order (tojson).
// `extra`: further template variables (null or an object).
using ChatRenderer = std::function<Result<std::string>(const Json& messages, bool add_generation_prompt,
                                                       const Json& extra, const std::string& request_json)>;

struct OpenAiConfig {
  std::string served_model_name;
  ChatRenderer chat_template;  // --chat-template, else the model's; empty: chat answers 400
  Json tokenizer_config;       // the model's tokenizer_config.json (null without one): /tokenizer_info
  // The tool-call syntax replies are parsed in and enforced calls written in (docs/design.md
  // §3.2d): --tool-call-parser, else what the chat template writes; kNone: tool_choice "none" only.
  ToolCallFormat tool_format = ToolCallFormat::kNone;
};

class OpenAiServer {
 public:
  // `router`: the in-process channel of the router's gRPC server; `tok` may be null (token ids only).
  OpenAiServer(std::shared_ptr<grpc::Channel> router, const Tokenizer* tok, OpenAiConfig config,
               std::function<bool()> serving, RouterMetrics& metrics);

  void handle(HttpExchange& ex);  // every request of the HTTP listener (server/http_listener.h)

 private:
  int route(HttpExchange& ex, const std::string& endpoint);
  int completions(HttpExchange& ex, bool chat);
  int models(HttpExchange& ex);
  int tokenize(HttpExchange& ex);
  int detokenize(HttpExchange& ex);
  int tokenizer_info(HttpExchange& ex);
  int health(HttpExchange& ex);

  std::unique_ptr<grpc::ClientContext> context(const HttpExchange& ex) const;
  std::variant<v1::ModelInfo, ApiError> model_info(const HttpExchange& ex) const;
  // Messages through the chat template, tokenized with special tokens and no added BOS (the
  // template writes it).
  std::variant<std::vector<int32_t>, ApiError> chat_prompt(const HttpExchange& ex, const Json& messages,
                                                           bool add_generation_prompt, const Json& extra) const;
  std::variant<std::vector<int32_t>, ApiError> tokenize_text(const HttpExchange& ex, const std::string& text,
                                                             bool add_bos, bool allow_special) const;
  // The choices of a completions request: echo (the prompt's own log-probs from Score), n per prompt.
  std::optional<ApiError> plan_completions(const HttpExchange& ex, const OpenAiRequest& r,
                                           std::vector<ChoicePlan>* plans) const;
  std::optional<ApiError> plan_tools(const Json& body, StructuredOutput& constraint, OpenAiRequest& r) const;
  std::optional<ApiError> plan_chat(const HttpExchange& ex, const OpenAiRequest& r,
                                    std::vector<ChoicePlan>* plans) const;
  std::optional<ApiError> echo_logprobs(const HttpExchange& ex, const std::vector<int32_t>& ids, int top_n,
                                        std::vector<LogprobItem>* out) const;
  std::string token_text(int32_t id) const;

  std::unique_ptr<v1::Yoco::Stub> stub_;
  const Tokenizer* const tok_;
  const OpenAiConfig config_;
  const std::function<bool()> serving_;
  RouterMetrics& metrics_;
  const int64_t created_;
};

}  // namespace yoco
