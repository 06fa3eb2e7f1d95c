#include "router/openai_response.h"

#include <cmath>

#include "tokenizer/utf8.h"

namespace yoco {

double finite_logprob(double lp) { return std::isfinite(lp) ? lp : -9999.0; }

LogprobItem logprob_item(const v1::LogprobEntry& e, int top_n, bool chosen_when_zero) {
  LogprobItem item{valid_utf8(e.chosen().text()), finite_logprob(e.chosen().logprob()), std::nullopt};
  item.top.emplace();
  for (int i = 0; i < e.top_size() && i < top_n; ++i)
    item.top->emplace_back(valid_utf8(e.top(i).text()), finite_logprob(e.top(i).logprob()));
  if (top_n == 0 && chosen_when_zero) item.top->emplace_back(item.token, *item.logprob);
  return item;
}

namespace {

// The number of characters (UTF-8 code points) of a valid UTF-8 string.
int64_t chars(std::string_view s) {
  int64_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

Json bytes_of(std::string_view s) {
  Json::Array a;
  for (char c : s) a.push_back(Json(static_cast<int64_t>(static_cast<unsigned char>(c))));
  return Json(std::move(a));
}

Json opt(const std::optional<double>& v) { return v ? Json(*v) : Json(); }

}  // namespace

int64_t logprob_text_length(const std::vector<LogprobItem>& items) {
  int64_t n = 0;
  for (const auto& it : items) n += chars(it.token);
  return n;
}

Json completion_logprobs(const std::vector<LogprobItem>& items, int64_t offset) {
  Json::Array tokens, lps, tops, offsets;
  for (const auto& it : items) {
    tokens.push_back(Json(it.token));
    lps.push_back(opt(it.logprob));
    if (it.top) {
      Json::Object top;
      for (const auto& [t, lp] : *it.top) top.emplace(t, Json(lp));  // the first of equal spellings stays
      tops.push_back(Json(std::move(top)));
    } else {
      tops.push_back(Json());
    }
    offsets.push_back(Json(offset));
    offset += chars(it.token);
  }
  return Json::Object{{"tokens", std::move(tokens)},
                      {"token_logprobs", std::move(lps)},
                      {"top_logprobs", std::move(tops)},
                      {"text_offset", std::move(offsets)}};
}

Json chat_logprobs(const std::vector<LogprobItem>& items) {
  Json::Array content;
  for (const auto& it : items) {
    Json::Array top;
    if (it.top)
      for (const auto& [t, lp] : *it.top)
        top.push_back(Json::Object{{"token", t}, {"logprob", lp}, {"bytes", bytes_of(t)}});
    content.push_back(Json::Object{
        {"token", it.token}, {"logprob", opt(it.logprob)}, {"bytes", bytes_of(it.token)}, {"top_logprobs", top}});
  }
  return Json::Object{{"content", std::move(content)}};
}

const char* finish_reason_name(v1::FinishReason r) { return r == v1::FINISH_REASON_LENGTH ? "length" : "stop"; }

const char* chat_finish_reason_name(v1::FinishReason r, bool called) {
  return called && r != v1::FINISH_REASON_LENGTH ? "tool_calls" : finish_reason_name(r);
}

Json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens) {
  return Json::Object{{"prompt_tokens", prompt_tokens},
                      {"completion_tokens", completion_tokens},
                      {"total_tokens", prompt_tokens + completion_tokens},
                      {"prompt_tokens_details", Json::Object{{"cached_tokens", cached_tokens}}}};
}

Json response_json(const ResponseHead& h, Json::Array choices, std::optional<Json> usage) {
  Json::Object o{
      {"id", h.id}, {"object", h.object}, {"created", h.created}, {"model", h.model}, {"choices", std::move(choices)}};
  if (usage) o["usage"] = std::move(*usage);
  return o;
}

Json completion_choice(int index, std::string text, Json logprobs, Json finish_reason) {
  return Json::Object{{"index", index},
                      {"text", std::move(text)},
                      {"logprobs", std::move(logprobs)},
                      {"finish_reason", std::move(finish_reason)}};
}

Json chat_message_choice(int index, std::string content, Json logprobs, Json finish_reason) {
  return Json::Object{{"index", index},
                      {"message", Json::Object{{"role", "assistant"}, {"content", std::move(content)}}},
                      {"logprobs", std::move(logprobs)},
                      {"finish_reason", std::move(finish_reason)}};
}

Json chat_tool_calls_choice(int index, const std::string& content, const std::vector<ToolCallOut>& calls, Json logprobs,
                            Json finish_reason) {
  Json::Array out;
  for (const ToolCallOut& c : calls)
    out.push_back(Json::Object{
        {"id", c.id}, {"type", "function"}, {"function", Json::Object{{"name", c.name}, {"arguments", c.arguments}}}});
  return Json::Object{
      {"index", index},
      {"message",
       Json::Object{{"role", "assistant"}, {"content", content.empty() ? Json() : Json(content)}, {"tool_calls", out}}},
      {"logprobs", std::move(logprobs)},
      {"finish_reason", std::move(finish_reason)}};
}

Json tool_call_delta(int index, const std::optional<ToolCallOut>& first, const std::string& arguments) {
  Json::Object call{{"index", index}};
  if (first) {
    call["id"] = Json(first->id);
    call["type"] = Json("function");
    call["function"] = Json::Object{{"name", first->name}, {"arguments", arguments}};
  } else {
    call["function"] = Json::Object{{"arguments", arguments}};
  }
  return Json::Object{{"tool_calls", Json::Array{Json(std::move(call))}}};
}

Json chat_delta_choice(int index, Json delta, Json logprobs, Json finish_reason) {
  return Json::Object{{"index", index},
                      {"delta", std::move(delta)},
                      {"logprobs", std::move(logprobs)},
                      {"finish_reason", std::move(finish_reason)}};
}

std::string sse_event(const Json& j) { return "data: " + j.dump() + "\n\n"; }

Json models_json(const std::string& name, int64_t created, int64_t max_model_len) {
  Json::Object m{{"id", name},
                 {"object", "model"},
                 {"created", created},
                 {"owned_by", "yoco"},
                 {"root", name},
                 {"parent", Json()},
                 {"max_model_len", max_model_len},
                 {"permission", Json::Array{}}};
  return Json::Object{{"object", "list"}, {"data", Json::Array{Json(std::move(m))}}};
}

}  // namespace yoco
