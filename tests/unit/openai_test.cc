// The OpenAI-compatible API's pure parts (docs/design.md, OpenAI HTTP API): request parsing (each
// bad field a 400 naming it, unknown fields ignored as vLLM does), the gRPC -> HTTP error mapping,
// and the response shapes (log-probs, usage, SSE framing, models).
#include <gtest/gtest.h>

#include <cmath>

#include "router/openai_errors.h"
#include "router/openai_request.h"
#include "router/openai_response.h"
#include "router/openai_structured.h"
#include "structured/check.h"

namespace yoco {
namespace {

Json body_of(const std::string& text) {
  auto j = Json::parse(text);
  EXPECT_TRUE(j.ok()) << text;
  return j.ok() ? *j : Json();
}

std::variant<OpenAiRequest, ApiError> completion(const std::string& text) {
  return parse_completion_request(body_of(text));
}

// The parameter a bad request is blamed on ("" when it parsed).
std::string bad(const std::variant<OpenAiRequest, ApiError>& r) {
  if (const auto* e = std::get_if<ApiError>(&r)) {
    EXPECT_EQ(e->http_status, 400);
    EXPECT_EQ(e->type, "invalid_request_error");
    EXPECT_EQ(e->message.rfind(e->param + ": ", 0), 0u) << e->message;
    return e->param;
  }
  return "";
}

TEST(OpenAiRequest, CompletionFieldsMapOntoGenerate) {
  auto r = completion(R"({"model":"m","prompt":"In the beginning","max_tokens":7,"temperature":0,"top_p":0.9,
    "top_k":-1,"min_p":0.05,"seed":42,"stop":["\n","God"],"presence_penalty":0.5,"frequency_penalty":-0.5,
    "repetition_penalty":1.1,"n":3,"logprobs":2,"echo":true,"stream":true,"stream_options":{"include_usage":true},
    "document_ids":["doc-a"],"priority":5,"ignore_eos":true,"stop_token_ids":[3],"user":"x","unknown_field":{"a":1}})");
  ASSERT_TRUE(std::holds_alternative<OpenAiRequest>(r)) << std::get<ApiError>(r).message;
  const OpenAiRequest& q = std::get<OpenAiRequest>(r);
  EXPECT_EQ(q.model, "m");
  ASSERT_EQ(q.prompts.size(), 1u);
  EXPECT_EQ(*q.prompts[0].text, "In the beginning");
  EXPECT_EQ(q.base.max_tokens(), 7u);
  EXPECT_EQ(q.base.sampling().temperature(), 0.f);
  EXPECT_FLOAT_EQ(q.base.sampling().top_p(), 0.9f);
  EXPECT_EQ(q.base.sampling().top_k(), 0);  // -1: off
  EXPECT_FLOAT_EQ(q.base.sampling().min_p(), 0.05f);
  EXPECT_EQ(q.base.sampling().seed(), 42u);
  EXPECT_FLOAT_EQ(q.base.sampling().presence_penalty(), 0.5f);
  EXPECT_FLOAT_EQ(q.base.sampling().frequency_penalty(), -0.5f);
  EXPECT_FLOAT_EQ(q.base.sampling().repetition_penalty(), 1.1f);
  ASSERT_EQ(q.base.stop_size(), 2);
  EXPECT_EQ(q.base.stop(1), "God");
  EXPECT_EQ(q.n, 3);
  EXPECT_EQ(q.logprobs, 2);
  EXPECT_TRUE(q.echo && q.stream && q.include_usage);
  ASSERT_EQ(q.base.document_ids_size(), 1);
  EXPECT_EQ(q.base.priority(), 5);
  EXPECT_TRUE(q.base.ignore_eos());
  EXPECT_EQ(q.base.stop_token_ids(0), 3);
}

TEST(OpenAiRequest, PromptShapes) {
  auto ids = std::get<OpenAiRequest>(completion(R"({"prompt":[1,2,3]})"));
  ASSERT_EQ(ids.prompts.size(), 1u);
  EXPECT_FALSE(ids.prompts[0].text);
  EXPECT_EQ(ids.prompts[0].ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(ids.base.max_tokens(), 16u);  // OpenAI's default
  auto texts = std::get<OpenAiRequest>(completion(R"({"prompt":["a","b"],"stop":"x"})"));
  EXPECT_EQ(texts.prompts.size(), 2u);
  EXPECT_EQ(texts.base.stop(0), "x");
  auto batch = std::get<OpenAiRequest>(completion(R"({"prompt":[[1,2],[3]]})"));
  ASSERT_EQ(batch.prompts.size(), 2u);
  EXPECT_EQ(batch.prompts[1].ids, std::vector<int32_t>{3});
  EXPECT_EQ(std::get<OpenAiRequest>(completion(R"({"prompt":"x","max_tokens":0,"echo":true,"logprobs":0})"))
                .base.max_tokens(),
            0u);
}

TEST(OpenAiRequest, EachBadFieldIsA400NamingIt) {
  EXPECT_EQ(bad(completion(R"({})")), "prompt");
  EXPECT_EQ(bad(completion(R"({"prompt":5})")), "prompt");
  EXPECT_EQ(bad(completion(R"({"prompt":[]})")), "prompt");
  EXPECT_EQ(bad(completion(R"({"prompt":[1,"a"]})")), "prompt");
  EXPECT_EQ(bad(completion(R"({"prompt":["a",5]})")), "prompt");
  EXPECT_EQ(bad(completion(R"({"prompt":[1.5]})")), "prompt");
  EXPECT_EQ(bad(completion(R"({"prompt":"x","max_tokens":"7"})")), "max_tokens");
  EXPECT_EQ(bad(completion(R"({"prompt":"x","max_tokens":-1})")), "max_tokens");
  EXPECT_EQ(bad(completion(R"({"prompt":"x","max_tokens":1.5})")), "max_tokens");
  EXPECT_EQ(bad(completion(R"({"prompt":"x","max_tokens":0})")), "max_tokens");
  EXPECT_EQ(bad(completion(R"({"prompt":"x","temperature":"hot"})")), "temperature");
  EXPECT_EQ(bad(completion(R"({"prompt":"x","top_p":true})")), "top_p");
  EXPECT_EQ(bad(completion(R"({"prompt":"x","top_k":0.5})")), "top_k");
  EXPECT_EQ(bad(completion(R"({"prompt":"x","seed":"1"})")), "seed");
  EXPECT_EQ(bad(completion(R"({"prompt":"x","n":0})")), "n");
  EXPECT_EQ(bad(completion(R"({"prompt":"x","n":65})")), "n");
  EXPECT_EQ(bad(completion(R"({"prompt":["a","b"],"n":40})")), "n");
  EXPECT_EQ(bad(completion(R"({"prompt":"x","stop":5})")), "stop");
  EXPECT_EQ(bad(completion(R"({"prompt":"x","stop":["a",1]})")), "stop");
  EXPECT_EQ(bad(completion(R"({"prompt":"x","logprobs":21})")), "logprobs");
  EXPECT_EQ(bad(completion(R"({"prompt":"x","echo":"yes"})")), "echo");
  EXPECT_EQ(bad(completion(R"({"prompt":"x","stream":1})")), "stream");
  EXPECT_EQ(bad(completion(R"({"prompt":"x","stream_options":{"include_usage":true}})")), "stream_options");
  EXPECT_EQ(bad(completion(R"({"prompt":"x","stream":true,"stream_options":{"include_usage":1}})")), "stream_options");
  EXPECT_EQ(bad(completion(R"({"prompt":"x","document_ids":"doc"})")), "document_ids");
  EXPECT_EQ(bad(completion(R"({"prompt":"x","priority":"high"})")), "priority");
  EXPECT_EQ(bad(completion(R"({"prompt":"x","ignore_eos":"no"})")), "ignore_eos");
  EXPECT_EQ(bad(completion(R"({"prompt":"x","stop_token_ids":[1,"a"]})")), "stop_token_ids");
  EXPECT_EQ(bad(completion(R"({"prompt":"x","best_of":3})")), "best_of");
  EXPECT_EQ(bad(completion(R"({"prompt":"x","logit_bias":{"5":1}})")), "logit_bias");
  EXPECT_EQ(bad(completion(R"({"prompt":"x","suffix":"end"})")), "suffix");
  EXPECT_EQ(bad(completion(R"({"prompt":"x","model":7})")), "model");
  // null is "not given", as in OpenAI's own API.
  EXPECT_EQ(bad(completion(R"({"prompt":"x","max_tokens":null,"stop":null,"logprobs":null,"seed":null})")), "");
}

TEST(OpenAiRequest, Chat) {
  auto r = parse_chat_request(body_of(R"({"messages":[{"role":"system","content":"Be brief."},
    {"role":"user","content":[{"type":"text","text":"Hello"},{"type":"text","text":"there"}]},
    {"role":"assistant","content":null}],"max_completion_tokens":9,"logprobs":true,"top_logprobs":3})"));
  ASSERT_TRUE(std::holds_alternative<OpenAiRequest>(r)) << std::get<ApiError>(r).message;
  const OpenAiRequest& q = std::get<OpenAiRequest>(r);
  EXPECT_TRUE(q.chat);
  EXPECT_EQ(q.base.max_tokens(), 9u);
  EXPECT_TRUE(q.max_tokens_given);
  EXPECT_EQ(q.logprobs, 3);
  EXPECT_EQ(q.messages.as_array()[1].find("content")->as_string(), "Hello\nthere");
  EXPECT_EQ(q.messages.as_array()[2].find("content")->as_string(), "");
  EXPECT_FALSE(std::get<OpenAiRequest>(parse_chat_request(body_of(R"({"messages":[{"role":"user","content":"x"}]})")))
                   .max_tokens_given);
  EXPECT_EQ(
      std::get<OpenAiRequest>(parse_chat_request(body_of(R"({"messages":[{"role":"user","content":"x"}]})"))).logprobs,
      -1);

  auto chat = [&](const std::string& t) { return parse_chat_request(body_of(t)); };
  EXPECT_TRUE(q.template_extra.is_null());
  const auto with_extra = std::get<OpenAiRequest>(
      chat(R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],)"
           R"("tool_choice":"none","chat_template_kwargs":{"enable_thinking":false}})"));
  EXPECT_EQ(with_extra.template_extra.dump(),
            R"({"enable_thinking":false,"tools":[{"function":{"name":"f"},"type":"function"}]})");
  EXPECT_EQ(with_extra.tools.choice, ChatTools::Choice::kNone);
  EXPECT_EQ(bad(chat(R"({"messages":[{"role":"user","content":"x"}],"tools":{}})")), "tools");
  // Tool calls (router/openai_tools.h): with tools, tool_choice defaults to "auto" (parsed); a tool
  // without a function is refused naming it; tool_choice without tools is refused.
  // response_format is read by read_structured_output.
  const auto with_tools = std::get<OpenAiRequest>(
      chat(R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}]})"));
  EXPECT_EQ(with_tools.tools.choice, ChatTools::Choice::kAuto);
  EXPECT_EQ(bad(chat(R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}]})")),
            "tools[0].function");
  EXPECT_EQ(bad(chat(R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"auto"})")), "tool_choice");
  EXPECT_TRUE(std::holds_alternative<OpenAiRequest>(
      chat(R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"text"}})")));
  EXPECT_EQ(bad(chat(R"({"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":[]})")),
            "chat_template_kwargs");
  EXPECT_EQ(bad(chat(R"({})")), "messages");
  EXPECT_EQ(bad(chat(R"({"messages":[]})")), "messages");
  EXPECT_EQ(bad(chat(R"({"messages":"hi"})")), "messages");
  EXPECT_EQ(bad(chat(R"({"messages":[{"content":"x"}]})")), "messages");
  EXPECT_EQ(bad(chat(R"({"messages":[{"role":"user","content":5}]})")), "messages");
  EXPECT_EQ(bad(chat(R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})")), "messages");
  EXPECT_EQ(bad(chat(R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":2})")), "top_logprobs");
  EXPECT_EQ(bad(chat(R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":21})")),
            "top_logprobs");
  EXPECT_EQ(bad(chat(R"({"messages":[{"role":"user","content":"x"}],"max_tokens":0})")), "max_tokens");
}

TEST(OpenAiRequest, InvalidJsonIs400) {
  auto r = parse_body("{\"prompt\": ");
  ASSERT_TRUE(std::holds_alternative<ApiError>(r));
  EXPECT_EQ(std::get<ApiError>(r).http_status, 400);
  EXPECT_NE(std::get<ApiError>(r).message.find("invalid JSON"), std::string::npos);
  EXPECT_TRUE(std::holds_alternative<ApiError>(parse_body("[1,2]")));
  EXPECT_TRUE(std::holds_alternative<Json>(parse_body("{\"prompt\":\"x\"}")));
}

// Issue 33: hostile bodies get a 400 naming the field, never a 5xx, and the error body is
// valid JSON whatever it quotes.
ApiError body_error(const std::string& text) {
  auto r = parse_body(text);
  EXPECT_TRUE(std::holds_alternative<ApiError>(r)) << text;
  if (!std::holds_alternative<ApiError>(r)) return {};
  const ApiError e = std::get<ApiError>(r);
  EXPECT_EQ(e.http_status, 400);
  EXPECT_TRUE(Json::parse(e.body()).ok()) << e.body();
  return e;
}

TEST(OpenAiRequest, InvalidUtf8NamesTheField) {
  ApiError e = body_error("{\"prompt\": \"In the \xff\xfe beginning\"}");
  EXPECT_EQ(e.param, "prompt");
  EXPECT_NE(e.message.find("prompt: not valid UTF-8"), std::string::npos) << e.message;
  e = body_error("{\"prompt\": [\"ok\", \"\xc0\xaf\"]}");  // overlong '/'
  EXPECT_EQ(e.param, "prompt");
  EXPECT_NE(e.message.find("prompt[1]"), std::string::npos) << e.message;
  e = body_error(
      "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"user\", "
      "\"content\": \"\xed\xa0\x80\"}]}");  // a surrogate
  EXPECT_EQ(e.param, "messages");
  EXPECT_NE(e.message.find("messages[1].content"), std::string::npos) << e.message;
  e = body_error("{\"stop\": [\"\xf4\x90\x80\x80\"], \"prompt\": \"x\"}");  // past U+10FFFF
  EXPECT_EQ(e.param, "stop");
  e = body_error("{\"user\xff\": 1}");
  EXPECT_EQ(e.param, "");
  EXPECT_TRUE(std::holds_alternative<Json>(parse_body("{\"prompt\": \"caf\xc3\xa9 \xf0\x9f\x98\x80\"}")));
}

TEST(OpenAiRequest, JsonErrorsNameTheFieldAndStayValidJson) {
  ApiError e = body_error("{\"prompt\": \"x\", \"temperature\": NaN}");
  EXPECT_EQ(e.param, "temperature");
  EXPECT_NE(e.message.find("NaN and Infinity"), std::string::npos) << e.message;
  EXPECT_EQ(body_error("{\"prompt\": \"x\", \"top_p\": -Infinity}").param, "top_p");
  EXPECT_EQ(body_error("{\"messages\": [{\"role\": \"user\", \"content\": Infinity}]}").param, "messages");
  e = body_error("\xef\xbb\xbf{\"prompt\": \"x\"}");  // a UTF-8 byte order mark
  EXPECT_NE(e.message.find("byte order mark"), std::string::npos) << e.message;
  e = body_error("{\"prompt\": \xfe}");
  EXPECT_NE(e.message.find("0xfe"), std::string::npos) << e.message;
  // A message with raw bytes still makes a valid body.
  const ApiError raw{400, "bad \xff\xfe bytes", "invalid_request_error", "x\xc0", ""};
  EXPECT_TRUE(Json::parse(raw.body()).ok()) << raw.body();
}

TEST(OpenAiRequest, SeedPastInt64IsRefusedNotWrapped) {
  EXPECT_EQ(bad(completion(R"({"prompt":"x","seed":1180591620717411303424})")), "seed");  // 2^70
  EXPECT_EQ(bad(completion(R"({"prompt":"x","seed":-1180591620717411303424})")), "seed");
  EXPECT_EQ(bad(completion(R"({"prompt":"x","seed":9223372036854775808})")), "seed");  // 2^63
  auto r = completion(R"({"prompt":"x","seed":9223372036854775807})");
  ASSERT_TRUE(std::holds_alternative<OpenAiRequest>(r));
  EXPECT_EQ(std::get<OpenAiRequest>(r).base.sampling().seed(), 9223372036854775807ull);
}

TEST(OpenAiRequest, SpecialTokenFields) {
  auto r = completion(R"({"prompt":"<|endoftext|>x"})");
  ASSERT_TRUE(std::holds_alternative<OpenAiRequest>(r));
  EXPECT_FALSE(std::get<OpenAiRequest>(r).base.split_special_tokens());
  EXPECT_FALSE(std::get<OpenAiRequest>(r).base.has_skip_special_tokens());
  r = completion(R"({"prompt":"<|endoftext|>x","split_special_tokens":true,"skip_special_tokens":false})");
  ASSERT_TRUE(std::holds_alternative<OpenAiRequest>(r));
  EXPECT_TRUE(std::get<OpenAiRequest>(r).base.split_special_tokens());
  EXPECT_TRUE(std::get<OpenAiRequest>(r).base.has_skip_special_tokens());
  EXPECT_FALSE(std::get<OpenAiRequest>(r).base.skip_special_tokens());
  EXPECT_EQ(bad(completion(R"({"prompt":"x","split_special_tokens":1})")), "split_special_tokens");
}

TEST(OpenAiErrors, GrpcSizeLimitIs413NotARateLimit) {
  const ApiError e =
      from_grpc({grpc::StatusCode::RESOURCE_EXHAUSTED, "Received message larger than max (7208969 vs. 4194304)"});
  EXPECT_EQ(e.http_status, 413);
  EXPECT_EQ(e.type, "invalid_request_error");
}

TEST(OpenAiErrors, GrpcCodesMapToHttp) {
  struct Case {
    grpc::StatusCode code;
    int http;
    const char* type;
  } cases[] = {{grpc::StatusCode::INVALID_ARGUMENT, 400, "invalid_request_error"},
               {grpc::StatusCode::FAILED_PRECONDITION, 400, "invalid_request_error"},
               {grpc::StatusCode::UNAUTHENTICATED, 401, "authentication_error"},
               {grpc::StatusCode::PERMISSION_DENIED, 403, "permission_error"},
               {grpc::StatusCode::NOT_FOUND, 404, "not_found_error"},
               {grpc::StatusCode::RESOURCE_EXHAUSTED, 429, "rate_limit_error"},
               {grpc::StatusCode::UNAVAILABLE, 503, "service_unavailable"},
               {grpc::StatusCode::DEADLINE_EXCEEDED, 504, "server_error"},
               {grpc::StatusCode::INTERNAL, 500, "server_error"}};
  for (const Case& c : cases) {
    const ApiError e = from_grpc({c.code, "boom"});
    EXPECT_EQ(e.http_status, c.http) << c.type;
    EXPECT_EQ(e.type, c.type);
    EXPECT_EQ(e.message, "boom");
  }
  EXPECT_EQ(from_grpc({grpc::StatusCode::UNAUTHENTICATED, "x"}).code, "invalid_api_key");
  EXPECT_EQ(from_grpc({grpc::StatusCode::RESOURCE_EXHAUSTED, "x"}).code, "rate_limit_exceeded");
}

TEST(OpenAiErrors, ParamFromTheRoutersMessage) {
  EXPECT_EQ(param_of_message("sampling.top_p: must be in (0, 1]"), "top_p");
  EXPECT_EQ(param_of_message("prompt.tokens[1]: token id 5000 outside [0, 4096)"), "prompt");
  EXPECT_EQ(param_of_message("max_tokens: prompt (3 tokens) + max_tokens (9000) exceeds"), "max_tokens");
  EXPECT_EQ(param_of_message("document_ids[0]: unknown document \"x\""), "document_ids");
  EXPECT_EQ(param_of_message("stop[2]: empty"), "stop");
  EXPECT_EQ(param_of_message("router is draining"), "");
  EXPECT_EQ(param_of_message("no decode worker has KV room: for 5 rows"), "");
  const ApiError e = from_grpc({grpc::StatusCode::INVALID_ARGUMENT, "sampling.temperature: must be >= 0"});
  EXPECT_EQ(e.param, "temperature");
  EXPECT_EQ(e.body(), R"({"error":{"code":null,"message":"sampling.temperature: must be >= 0","param":"temperature",)"
                      R"("type":"invalid_request_error"}})");
}

v1::LogprobEntry entry(const std::string& text, float lp, std::vector<std::pair<std::string, float>> top) {
  v1::LogprobEntry e;
  e.mutable_chosen()->set_text(text);
  e.mutable_chosen()->set_logprob(lp);
  for (auto& [t, l] : top) {
    auto* x = e.add_top();
    x->set_text(t);
    x->set_logprob(l);
  }
  return e;
}

TEST(OpenAiResponse, CompletionLogprobsShape) {
  std::vector<LogprobItem> items = {{"In", std::nullopt, std::nullopt}};  // a prompt's first token
  items.push_back(logprob_item(entry(" the", -0.5f, {{" the", -0.5f}, {" a", -1.5f}}), 1, true));
  items.push_back(logprob_item(entry(" é", -INFINITY, {}), 0, true));
  const Json j = completion_logprobs(items, 0);
  EXPECT_EQ(j.dump(), R"({"text_offset":[0,2,6],"token_logprobs":[null,-0.5,-9999],"tokens":["In"," the"," é"],)"
                      R"("top_logprobs":[null,{" the":-0.5},{" é":-9999}]})");
  EXPECT_EQ(logprob_text_length(items), 8);
}

TEST(OpenAiResponse, ChatLogprobsShape) {
  const std::vector<LogprobItem> items = {logprob_item(entry("Hi", -0.25f, {{"Hi", -0.25f}, {"Yo", -2.f}}), 2, false)};
  EXPECT_EQ(chat_logprobs(items).dump(),
            R"({"content":[{"bytes":[72,105],"logprob":-0.25,"token":"Hi","top_logprobs":[)"
            R"({"bytes":[72,105],"logprob":-0.25,"token":"Hi"},{"bytes":[89,111],"logprob":-2,"token":"Yo"}]}]})");
  EXPECT_EQ(chat_logprobs({logprob_item(entry("Hi", -0.25f, {{"Hi", -0.25f}}), 0, false)}).dump(),
            R"({"content":[{"bytes":[72,105],"logprob":-0.25,"token":"Hi","top_logprobs":[]}]})");
}

TEST(OpenAiResponse, ObjectsChunksAndUsage) {
  const ResponseHead head{"cmpl-1", "text_completion", 1700000000, "kjv-yoco"};
  const Json whole =
      response_json(head, Json::Array{completion_choice(0, "God", Json(), Json("length"))}, usage_json(4, 1, 2));
  EXPECT_EQ(whole.dump(),
            R"({"choices":[{"finish_reason":"length","index":0,"logprobs":null,"text":"God"}],"created":1700000000,)"
            R"("id":"cmpl-1","model":"kjv-yoco","object":"text_completion","usage":{"completion_tokens":1,)"
            R"("prompt_tokens":4,"prompt_tokens_details":{"cached_tokens":2},"total_tokens":5}})");
  const std::string ev = sse_event(response_json(head, Json::Array{}));
  EXPECT_EQ(ev.rfind("data: {", 0), 0u);
  EXPECT_EQ(ev.substr(ev.size() - 2), "\n\n");
  EXPECT_EQ(std::string(kSseDone), "data: [DONE]\n\n");
  EXPECT_EQ(chat_message_choice(0, "Hi", Json(), Json("stop")).dump(),
            R"({"finish_reason":"stop","index":0,"logprobs":null,"message":{"content":"Hi","role":"assistant"}})");
  EXPECT_EQ(chat_delta_choice(1, Json::Object{{"content", "x"}}, Json(), Json()).dump(),
            R"({"delta":{"content":"x"},"finish_reason":null,"index":1,"logprobs":null})");
  EXPECT_EQ(std::string(finish_reason_name(v1::FINISH_REASON_EOS)), "stop");
  EXPECT_EQ(std::string(finish_reason_name(v1::FINISH_REASON_LENGTH)), "length");
  const Json models = models_json("kjv-yoco", 1, 4096);
  EXPECT_EQ(models.find("object")->as_string(), "list");
  EXPECT_EQ(models.find("data")->as_array()[0].find("max_model_len")->as_int(), 4096);
  EXPECT_EQ(models.find("data")->as_array()[0].find("id")->as_string(), "kjv-yoco");
}

// Tool calls in OpenAI's shapes (docs/design.md §3.2d): the whole message (content null without
// text) and the streamed deltas (id, type and name in a call's first one only).
TEST(OpenAiResponse, ToolCallShapes) {
  EXPECT_EQ(chat_tool_calls_choice(0, "", {{"call_1", "f", R"({"a": 1})"}}, Json(), Json("tool_calls")).dump(),
            R"({"finish_reason":"tool_calls","index":0,"logprobs":null,"message":{"content":null,"role":"assistant",)"
            R"("tool_calls":[{"function":{"arguments":"{\"a\": 1}","name":"f"},"id":"call_1","type":"function"}]}})");
  EXPECT_EQ(
      chat_tool_calls_choice(0, "Hm.", {{"c", "f", "{}"}}, Json(), Json()).find("message")->find("content")->dump(),
      R"("Hm.")");
  EXPECT_EQ(
      tool_call_delta(2, ToolCallOut{"call_1", "f", ""}, "{\"").dump(),
      R"({"tool_calls":[{"function":{"arguments":"{\"","name":"f"},"id":"call_1","index":2,"type":"function"}]})");
  EXPECT_EQ(tool_call_delta(2, std::nullopt, "1}").dump(),
            R"({"tool_calls":[{"function":{"arguments":"1}"},"index":2}]})");
  EXPECT_EQ(std::string(chat_finish_reason_name(v1::FINISH_REASON_EOS, true)), "tool_calls");
  EXPECT_EQ(std::string(chat_finish_reason_name(v1::FINISH_REASON_STOP, true)), "tool_calls");
  EXPECT_EQ(std::string(chat_finish_reason_name(v1::FINISH_REASON_LENGTH, true)), "length");
  EXPECT_EQ(std::string(chat_finish_reason_name(v1::FINISH_REASON_EOS, false)), "stop");
}

TEST(OpenAiResponse, InvalidUtf8IsReplaced) {
  EXPECT_EQ(valid_utf8("ok \xC3\xA9"), "ok \xC3\xA9");
  EXPECT_EQ(valid_utf8("\xE2\x82"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(valid_utf8("a\xFF"
                       "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(finite_logprob(-INFINITY), -9999.0);
  EXPECT_EQ(finite_logprob(-1.5), -1.5);
}

// response_format / structured_outputs / guided_* → one StructuredOutput, or a 400 naming the field.
TEST(OpenAiRequest, StructuredOutputFields) {
  using Kind = StructuredOutput::Kind;
  auto read = [](const std::string& text) { return read_structured_output(body_of(text), text); };
  auto param = [&](const std::string& text) {
    auto r = read(text);
    const auto* e = std::get_if<ApiError>(&r);
    if (!e) return std::string();
    EXPECT_EQ(e->http_status, 400);
    EXPECT_EQ(e->message.rfind(e->param + ": ", 0), 0u) << e->message;
    return e->param;
  };
  EXPECT_EQ(std::get<StructuredOutput>(read(R"({"response_format":{"type":"text"}})")).kind, Kind::kNone);
  EXPECT_EQ(std::get<StructuredOutput>(read(R"({"prompt":"x"})")).kind, Kind::kNone);
  EXPECT_EQ(param(R"({"response_format":"json"})"), "response_format");
  EXPECT_EQ(param(R"({"response_format":{"type":"yaml"}})"), "response_format.type");
  EXPECT_EQ(param(R"({"response_format":{"type":"json_schema"}})"), "response_format.json_schema");
  EXPECT_EQ(param(R"({"response_format":{"type":"json_schema","json_schema":{"name":"n"}}})"),
            "response_format.json_schema.schema");
  EXPECT_EQ(param(R"({"structured_outputs":[]})"), "structured_outputs");
  EXPECT_EQ(param(R"({"structured_outputs":{"choice":"a"}})"), "structured_outputs.choice");
  EXPECT_EQ(param(R"({"structured_outputs":{"regex":5}})"), "structured_outputs.regex");
  EXPECT_EQ(param(R"({"response_format":{"type":"json_object"},"guided_regex":"a+"})"), "guided_regex");
  if (!structured_outputs_enabled()) return;  // the rest compiles constraints
  // The schema keeps the client's key order (objects are generated in property order).
  const std::string schema = R"({"type":"object","properties":{"zeta":{"type":"integer"},"alpha":{"type":"string"}}})";
  auto s = read(R"({"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":)" + schema + "}}}");
  ASSERT_TRUE(std::holds_alternative<StructuredOutput>(s)) << std::get<ApiError>(s).message;
  EXPECT_EQ(std::get<StructuredOutput>(s).kind, Kind::kJsonSchema);
  EXPECT_EQ(std::get<StructuredOutput>(s).text, schema);
  auto j = read(R"({"response_format":{"type":"json_object"}})");
  EXPECT_EQ(std::get<StructuredOutput>(j).kind, Kind::kJsonObject);
  auto c = read(R"({"structured_outputs":{"choice":["a","b"]}})");
  EXPECT_EQ(std::get<StructuredOutput>(c).choices, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(std::get<StructuredOutput>(read(R"({"guided_grammar":"root ::= \"a\""})")).kind, Kind::kGrammar);
  EXPECT_EQ(param(R"({"structured_outputs":{"regex":"(unclosed"}})"), "structured_outputs.regex");
  EXPECT_EQ(param(R"({"structured_outputs":{"json":"{not json"}})"), "structured_outputs.json");
  EXPECT_EQ(param(R"({"structured_outputs":{"grammar":"root ::= nothing_defined"}})"), "structured_outputs.grammar");
}

}  // namespace
}  // namespace yoco
