#include "router/openai_server.h"

#include <atomic>
#include <chrono>
#include <ctime>

#include "common/checksum.h"
#include "common/log.h"
#include "proto/structured_convert.h"
#include "router/openai_structured.h"
#include "router/openai_tools.h"

namespace yoco {
namespace {

struct Route {
  const char* path;
  const char* method;
};

constexpr Route kRoutes[] = {{"/v1/completions", "POST"}, {"/v1/chat/completions", "POST"}, {"/v1/models", "GET"},
                             {"/tokenize", "POST"},       {"/detokenize", "POST"},          {"/tokenizer_info", "GET"},
                             {"/health", "GET"}};

// A fresh response id ("cmpl-<16 hex>").
std::string new_id(const char* prefix) {
  static std::atomic<uint64_t> counter{0};
  const uint64_t t = static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  return prefix + hex64(t ^ (counter.fetch_add(1) * 0x9E3779B97F4A7C15ull));
}

int respond_json(HttpExchange& ex, const Json& j) {
  ex.respond(200, "application/json", j.dump(), {});
  return 200;
}

template <class T>
std::optional<ApiError> take(std::variant<T, ApiError>&& v, T* out) {
  if (auto* e = std::get_if<ApiError>(&v)) return *e;
  *out = std::get<T>(std::move(v));
  return std::nullopt;
}

// Headers that become gRPC metadata (the API key) must be what gRPC accepts, printable ASCII:
// anything else is refused here, before authentication, instead of reaching the gRPC core.
std::optional<ApiError> check_headers(const HttpRequest& req) {
  const std::string auth = req.header("authorization");
  for (unsigned char c : auth)
    if (c < 0x20 || c > 0x7e)
      return ApiError{400,
                      "Authorization header: only printable ASCII is allowed (\"Bearer <key>\"); it holds a control "
                      "or non-ASCII byte",
                      "invalid_request_error", "", "invalid_header"};
  return std::nullopt;
}

ApiError no_chat_template() {
  return {400,
          "this model has no chat template (no \"chat_template\" in its tokenizer_config.json); start the router with "
          "--chat-template FILE to give one, or use /v1/completions",
          "invalid_request_error", "messages", "chat_template_missing"};
}

}  // namespace

OpenAiServer::OpenAiServer(std::shared_ptr<grpc::Channel> router, const Tokenizer* tok, OpenAiConfig config,
                           std::function<bool()> serving, RouterMetrics& metrics)
    : stub_(v1::Yoco::NewStub(std::move(router))),
      tok_(tok),
      config_(std::move(config)),
      serving_(std::move(serving)),
      metrics_(metrics),
      created_(static_cast<int64_t>(std::time(nullptr))) {}

void OpenAiServer::handle(HttpExchange& ex) {
  const HttpRequest& req = ex.request();
  std::string endpoint = "other";
  for (const Route& r : kRoutes)
    if (req.path == r.path) endpoint = r.path;
  const std::optional<ApiError> bad = check_headers(req);
  const int status = bad ? respond_error(ex, *bad) : route(ex, endpoint);
  metrics_.observe_http(endpoint, status);
  if (status >= 500 || (status >= 400 && status != 404))
    YOCO_LOG(LogLevel::kInfo, "http request failed",
             LogFields().kv("method", req.method).kv("path", req.path).kv("status", static_cast<int64_t>(status)));
}

int OpenAiServer::route(HttpExchange& ex, const std::string& endpoint) {
  const HttpRequest& req = ex.request();
  for (const Route& r : kRoutes) {
    if (endpoint != r.path) continue;
    if (req.method != r.method) {
      ApiError e{405, "method " + req.method + " not allowed on " + req.path + " (use " + r.method + ")",
                 "invalid_request_error", "", "method_not_allowed"};
      ex.respond(405, "application/json", e.body(), {{"Allow", r.method}});
      return 405;
    }
    if (endpoint == "/v1/completions") return completions(ex, false);
    if (endpoint == "/v1/chat/completions") return completions(ex, true);
    if (endpoint == "/v1/models") return models(ex);
    if (endpoint == "/tokenize") return tokenize(ex);
    if (endpoint == "/detokenize") return detokenize(ex);
    if (endpoint == "/tokenizer_info") return tokenizer_info(ex);
    return health(ex);
  }
  return respond_error(ex, not_found_error("unknown route: " + req.method + " " + req.path, "", "unknown_route"));
}

// ---- the router's service, as this client ----

std::unique_ptr<grpc::ClientContext> OpenAiServer::context(const HttpExchange& ex) const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  if (std::string auth = ex.request().header("authorization"); !auth.empty()) ctx->AddMetadata("authorization", auth);
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  return ctx;
}

std::variant<v1::ModelInfo, ApiError> OpenAiServer::model_info(const HttpExchange& ex) const {
  v1::ModelInfo info;
  auto ctx = context(ex);
  if (grpc::Status st = stub_->GetModelInfo(ctx.get(), v1::GetModelInfoRequest(), &info); !st.ok())
    return from_grpc(st);
  return info;
}

std::variant<std::vector<int32_t>, ApiError> OpenAiServer::tokenize_text(const HttpExchange& ex,
                                                                         const std::string& text, bool add_bos,
                                                                         bool allow_special) const {
  v1::TokenizeRequest req;
  req.set_text(text);
  req.set_add_bos(add_bos);
  req.set_allow_special(allow_special);
  v1::TokenizeResponse resp;
  auto ctx = context(ex);
  if (grpc::Status st = stub_->Tokenize(ctx.get(), req, &resp); !st.ok()) return from_grpc(st);
  return std::vector<int32_t>(resp.ids().begin(), resp.ids().end());
}

std::variant<std::vector<int32_t>, ApiError> OpenAiServer::chat_prompt(const HttpExchange& ex, const Json& messages,
                                                                       bool add_generation_prompt,
                                                                       const Json& extra) const {
  if (!config_.chat_template) return no_chat_template();
  auto text = config_.chat_template(messages, add_generation_prompt, extra, with_parsed_arguments(ex.request().body));
  if (!text.ok()) return bad_param("messages", "the chat template failed: " + text.status().message());
  return tokenize_text(ex, *text, /*add_bos=*/false, /*allow_special=*/true);
}

std::string OpenAiServer::token_text(int32_t id) const {
  return tok_ ? tok_->decode(std::span<const int32_t>(&id, 1)) : std::string();
}

// ---- completions and chat ----

int OpenAiServer::completions(HttpExchange& ex, bool chat) {
  Json body;
  if (auto e = take(parse_body(ex.request().body), &body)) return respond_error(ex, *e);
  OpenAiRequest r;
  if (auto e = take(chat ? parse_chat_request(body, ex.request().body) : parse_completion_request(body), &r))
    return respond_error(ex, *e);
  StructuredOutput constraint;
  if (auto e = take(read_structured_output(body, ex.request().body), &constraint)) return respond_error(ex, *e);
  if (auto e = plan_tools(body, constraint, r)) return respond_error(ex, *e);
  if (constraint.constrained()) *r.base.mutable_structured_output() = structured_to_proto(constraint);
  if (!r.model.empty() && r.model != config_.served_model_name)
    return respond_error(ex, not_found_error("the model \"" + r.model + "\" does not exist (this router serves \"" +
                                                 config_.served_model_name + "\")",
                                             "model", "model_not_found"));
  GenerationJob job;
  job.head = {new_id(chat ? "chatcmpl-" : "cmpl-"),
              chat ? (r.stream ? "chat.completion.chunk" : "chat.completion") : "text_completion",
              static_cast<int64_t>(std::time(nullptr)), config_.served_model_name};
  job.chat = chat;
  job.stream = r.stream;
  job.include_usage = r.include_usage;
  job.logprobs = r.logprobs;
  if (r.tools.parsed()) {
    job.tool_format = config_.tool_format;
    job.max_tool_calls = r.tools.parallel ? kMaxTools : 1;
    if (r.base.has_skip_special_tokens() && !r.base.skip_special_tokens() && tok_ && tok_->eos_id())
      job.tool_end_text = tok_->id_to_token(*tok_->eos_id()).value_or("");
  }
  job.authorization = ex.request().header("authorization");
  // The router's logprobs is top-n with 0 meaning none: ask for at least one to get the chosen token's.
  if (r.logprobs >= 0) r.base.set_logprobs(static_cast<uint32_t>(std::max(1, r.logprobs)));
  if (auto e = chat ? plan_chat(ex, r, &job.choices) : plan_completions(ex, r, &job.choices))
    return respond_error(ex, *e);
  return run_generation(*stub_, job, ex);
}

// Tool calls (docs/design.md §3.2d): "auto" needs a syntax to parse, and "required" or a named
// function becomes the request's output constraint (so it is the only one).
std::optional<ApiError> OpenAiServer::plan_tools(const Json& body, StructuredOutput& constraint,
                                                 OpenAiRequest& r) const {
  if (!r.tools.parsed()) return std::nullopt;
  if (config_.tool_format == ToolCallFormat::kNone)
    return bad_param(
        "tool_choice",
        "this router parses no tool calls: its chat template writes none of the tool-call syntaxes it "
        "knows (start it with --tool-call-parser hermes, llama3_json, mistral or mistral_args), so only \"none\" is "
        "served");
  // Mistral's [TOOL_CALLS] (and [ARGS]) are special tokens: their text must stay in the reply to be parsed.
  const bool mistral =
      config_.tool_format == ToolCallFormat::kMistral || config_.tool_format == ToolCallFormat::kMistralArgs;
  if (mistral && !body.find("skip_special_tokens")) r.base.set_skip_special_tokens(false);
  if (!r.tools.enforced()) return std::nullopt;
  if (constraint.constrained())
    return bad_param("tool_choice",
                     "a required tool call is an output constraint of its own: it cannot be combined "
                     "with response_format or structured_outputs");
  return take(tool_call_constraint(r.tools, config_.tool_format), &constraint);
}

namespace {

// n choices of one prompt; with a seed, choice j samples with seed + j so they differ. They share
// one prefill: choice 0 leads its fork group (router/fork_groups.h).
void add_choices(const OpenAiRequest& r, ChoicePlan plan, std::vector<ChoicePlan>* plans) {
  const bool seeded = plan.req.sampling().has_seed();
  const uint64_t seed = plan.req.sampling().seed();
  for (int j = 0; j < r.n; ++j) {
    if (seeded) plan.req.mutable_sampling()->set_seed(seed + static_cast<uint64_t>(j));
    plan.fork_index = j;  // the n share one prefill (router/fork_groups.h)
    plan.fork_n = r.n;
    plans->push_back(plan);
  }
}

}  // namespace

std::optional<ApiError> OpenAiServer::plan_chat(const HttpExchange& ex, const OpenAiRequest& r,
                                                std::vector<ChoicePlan>* plans) const {
  std::vector<int32_t> ids;
  if (auto e = take(chat_prompt(ex, r.messages, r.add_generation_prompt, r.template_extra), &ids)) return e;
  ChoicePlan plan;
  plan.req = r.base;
  plan.req.mutable_tokens()->mutable_ids()->Add(ids.begin(), ids.end());
  plan.prompt_tokens = static_cast<int64_t>(ids.size());
  if (!r.max_tokens_given) {  // as vLLM: the rest of the context
    v1::ModelInfo info;
    if (auto e = take(model_info(ex), &info)) return e;
    plan.req.set_max_tokens(static_cast<uint32_t>(std::max<int64_t>(1, info.max_seq_len() - plan.prompt_tokens)));
  }
  add_choices(r, std::move(plan), plans);
  return std::nullopt;
}

std::optional<ApiError> OpenAiServer::plan_completions(const HttpExchange& ex, const OpenAiRequest& r,
                                                       std::vector<ChoicePlan>* plans) const {
  for (size_t i = 0; i < r.prompts.size(); ++i) {
    const PromptInput& in = r.prompts[i];
    ChoicePlan plan;
    plan.prompt_index = static_cast<int>(i);
    plan.req = r.base;
    if (!r.echo) {
      if (in.text) plan.req.set_text(*in.text);
      else plan.req.mutable_tokens()->mutable_ids()->Add(in.ids.begin(), in.ids.end());
      add_choices(r, std::move(plan), plans);
      continue;
    }
    // Echo: the prompt's tokens are fixed here (the same encoding the router's Generate uses), so
    // its text and log-probs line up with what is generated after it.
    if (!tok_) return bad_param("echo", "needs the router's tokenizer (the model directory has none)");
    std::vector<int32_t> ids = in.ids;
    if (in.text) {
      if (auto e = take(tokenize_text(ex, *in.text, tok_->add_bos_token(), !r.base.split_special_tokens()), &ids))
        return e;
    }
    if (ids.empty()) return bad_param("prompt", "empty");
    plan.echo_text = in.text ? *in.text : tok_->decode(ids, /*skip_special=*/true);
    if (r.logprobs >= 0) {
      if (auto e = echo_logprobs(ex, ids, r.logprobs, &plan.echo_logprobs)) return e;
    }
    plan.req.mutable_tokens()->mutable_ids()->Add(ids.begin(), ids.end());
    plan.prompt_tokens = static_cast<int64_t>(ids.size());
    plan.generate = r.base.max_tokens() > 0;
    add_choices(r, std::move(plan), plans);
  }
  return std::nullopt;
}

// The prompt's own log-probs, from the router's Score (a harness's loglikelihood request): the
// first token has none (null), as OpenAI and vLLM answer.
std::optional<ApiError> OpenAiServer::echo_logprobs(const HttpExchange& ex, const std::vector<int32_t>& ids, int top_n,
                                                    std::vector<LogprobItem>* out) const {
  out->push_back({valid_utf8(token_text(ids[0])), std::nullopt, std::nullopt});
  if (ids.size() < 2) return std::nullopt;
  v1::ScoreRequest req;
  req.mutable_tokens()->mutable_ids()->Add(ids.begin(), ids.end());
  req.set_top_logprobs(static_cast<uint32_t>(top_n));
  v1::ScoreResponse resp;
  auto ctx = context(ex);
  if (grpc::Status st = stub_->Score(ctx.get(), req, &resp); !st.ok()) return from_grpc(st);
  for (size_t i = 1; i < ids.size(); ++i) {
    v1::LogprobEntry e;
    if (static_cast<int>(i - 1) < resp.top_size()) e = resp.top(static_cast<int>(i - 1));
    e.mutable_chosen()->set_id(ids[i]);
    e.mutable_chosen()->set_logprob(resp.token_logprobs(static_cast<int>(i - 1)));
    e.mutable_chosen()->set_text(token_text(ids[i]));
    for (auto& t : *e.mutable_top()) t.set_text(token_text(t.id()));
    out->push_back(logprob_item(e, top_n, /*chosen_when_zero=*/true));
  }
  return std::nullopt;
}

// ---- the model and the tokenizer ----

int OpenAiServer::models(HttpExchange& ex) {
  v1::ModelInfo info;
  if (auto e = take(model_info(ex), &info)) return respond_error(ex, *e);
  return respond_json(ex, models_json(config_.served_model_name, created_, info.max_seq_len()));
}

// {"prompt": text, "add_special_tokens": bool} or {"messages": [...], "add_generation_prompt": bool}.
int OpenAiServer::tokenize(HttpExchange& ex) {
  Json body;
  if (auto e = take(parse_body(ex.request().body), &body)) return respond_error(ex, *e);
  std::vector<int32_t> ids;
  const Json* prompt = body.find("prompt");
  const Json* messages = body.find("messages");
  auto flag = [&](const char* name, bool def) -> std::variant<bool, ApiError> {
    const Json* v = body.find(name);
    if (!v || v->is_null()) return def;
    if (!v->is_bool()) return bad_param(name, "must be a boolean");
    return v->as_bool();
  };
  if (prompt && !prompt->is_null()) {
    if (!prompt->is_string()) return respond_error(ex, bad_param("prompt", "must be a string"));
    bool special = true, split = false;
    if (auto e = take(flag("add_special_tokens", true), &special)) return respond_error(ex, *e);
    if (auto e = take(flag("split_special_tokens", false), &split)) return respond_error(ex, *e);
    if (auto e = take(tokenize_text(ex, prompt->as_string(), special && tok_ && tok_->add_bos_token(), !split), &ids))
      return respond_error(ex, *e);
  } else if (messages && !messages->is_null()) {
    Json msgs, extra;
    bool add_gen = true;
    if (auto e = take(normalize_messages(*messages), &msgs)) return respond_error(ex, *e);
    if (auto e = take(flag("add_generation_prompt", true), &add_gen)) return respond_error(ex, *e);
    if (auto e = take(template_extra(body), &extra)) return respond_error(ex, *e);
    if (auto e = take(chat_prompt(ex, msgs, add_gen, extra), &ids)) return respond_error(ex, *e);
  } else {
    return respond_error(ex, bad_param("prompt", "required (or messages)"));
  }
  v1::ModelInfo info;
  if (auto e = take(model_info(ex), &info)) return respond_error(ex, *e);
  Json::Array tokens;
  for (int32_t t : ids) tokens.push_back(Json(static_cast<int64_t>(t)));
  return respond_json(ex, Json::Object{{"tokens", std::move(tokens)},
                                       {"count", static_cast<int64_t>(ids.size())},
                                       {"max_model_len", info.max_seq_len()}});
}

int OpenAiServer::detokenize(HttpExchange& ex) {
  Json body;
  if (auto e = take(parse_body(ex.request().body), &body)) return respond_error(ex, *e);
  const Json* tokens = body.find("tokens");
  v1::DetokenizeRequest req;
  if (!tokens || !tokens->is_array()) return respond_error(ex, bad_param("tokens", "must be an array of token ids"));
  for (const Json& t : tokens->as_array()) {
    if (!t.is_integer() || t.as_int() < 0 || t.as_int() > INT32_MAX)
      return respond_error(ex, bad_param("tokens", "must be an array of token ids"));
    req.add_ids(static_cast<int32_t>(t.as_int()));
  }
  v1::DetokenizeResponse resp;
  auto ctx = context(ex);
  if (grpc::Status st = stub_->Detokenize(ctx.get(), req, &resp); !st.ok()) {
    ApiError e = from_grpc(st);
    if (e.http_status == 400) e.param = "tokens";
    return respond_error(ex, e);
  }
  return respond_json(ex, Json::Object{{"prompt", valid_utf8(resp.text())}});
}

// As vLLM's: the model's tokenizer_config.json with its class named, so a client (lm-evaluation-
// harness's remote tokenizer) learns the special tokens and template without a model hub; with
// /tokenize and /detokenize it needs no tokenizer files of its own.
int OpenAiServer::tokenizer_info(HttpExchange& ex) {
  if (!tok_) return respond_error(ex, not_found_error("this router has no tokenizer (the model directory has none)"));
  Json::Object info = config_.tokenizer_config.is_object() ? config_.tokenizer_config.as_object() : Json::Object{};
  if (auto cls = info.find("tokenizer_class"); cls == info.end() || !cls->second.is_string())
    info["tokenizer_class"] = Json("PreTrainedTokenizerFast");
  return respond_json(ex, Json(std::move(info)));
}

int OpenAiServer::health(HttpExchange& ex) {
  const int status = serving_() ? 200 : 503;
  ex.respond(status, "text/plain", status == 200 ? "" : "draining\n", {});
  return status;
}

}  // namespace yoco
