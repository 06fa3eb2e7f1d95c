#include "router/openai_request.h"

#include <cmath>
#include <limits>

namespace yoco {
namespace {

// Typed reads of the body's fields: absent or null leaves the target as it is; a wrong type or
// range records the first error, which names the field.
class Fields {
 public:
  explicit Fields(const Json& body) : body_(body) {}

  const Json* get(std::string_view name) const {
    const Json* v = body_.find(name);
    return v && !v->is_null() ? v : nullptr;
  }
  bool ok() const { return !error_; }
  ApiError error() const { return *error_; }
  void fail(const std::string& param, const std::string& message) {
    if (!error_) error_ = bad_param(param, message);
  }

  bool boolean(const char* name, bool* out) {
    const Json* v = get(name);
    if (!v) return false;
    if (!v->is_bool()) return fail(name, "must be a boolean"), false;
    *out = v->as_bool();
    return true;
  }

  bool integer(const char* name, int64_t lo, int64_t hi, int64_t* out) {
    const Json* v = get(name);
    if (!v) return false;
    const double d = v->is_number() ? v->as_double() : NAN;
    if (!v->is_number() || std::floor(d) != d) return fail(name, "must be an integer"), false;
    const std::string range = "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    // A whole number past int64 (2^70) is read as a double: refused, never wrapped.
    if (!v->is_integer() && !(d >= -0x1p63 && d < 0x1p63)) return fail(name, range + ", got " + v->dump()), false;
    const int64_t i = v->is_integer() ? v->as_int() : static_cast<int64_t>(d);
    if (i < lo || i > hi) return fail(name, range + ", got " + std::to_string(i)), false;
    *out = i;
    return true;
  }

  bool number(const char* name, double* out) {
    const Json* v = get(name);
    if (!v) return false;
    if (!v->is_number()) return fail(name, "must be a number"), false;
    *out = v->as_double();
    return true;
  }

  bool string(const char* name, std::string* out) {
    const Json* v = get(name);
    if (!v) return false;
    if (!v->is_string()) return fail(name, "must be a string"), false;
    *out = v->as_string();
    return true;
  }

  // A string or an array of strings.
  bool strings(const char* name, std::vector<std::string>* out) {
    const Json* v = get(name);
    if (!v) return false;
    if (v->is_string()) {
      out->push_back(v->as_string());
      return true;
    }
    if (!v->is_array()) return fail(name, "must be a string or an array of strings"), false;
    for (size_t i = 0; i < v->as_array().size(); ++i) {
      const Json& s = v->as_array()[i];
      if (!s.is_string()) return fail(name, "[" + std::to_string(i) + "] must be a string"), false;
      out->push_back(s.as_string());
    }
    return true;
  }

 private:
  const Json& body_;
  std::optional<ApiError> error_;
};

// A JSON array of token ids (each an integer that fits int32; the router checks the vocabulary).
bool token_ids(const Json& arr, std::vector<int32_t>* out) {
  for (const Json& t : arr.as_array()) {
    if (!t.is_integer() || t.as_int() < std::numeric_limits<int32_t>::min() ||
        t.as_int() > std::numeric_limits<int32_t>::max())
      return false;
    out->push_back(static_cast<int32_t>(t.as_int()));
  }
  return true;
}

// "prompt": a string, an array of token ids, or a batch of either.
void read_prompt(Fields& f, OpenAiRequest& r) {
  const Json* p = f.get("prompt");
  if (!p) return f.fail("prompt", "required");
  if (p->is_string()) {
    r.prompts.push_back({p->as_string(), {}});
    return;
  }
  const char* kShape = "must be a string, an array of token ids, or an array of either";
  if (!p->is_array()) return f.fail("prompt", kShape);
  const Json::Array& a = p->as_array();
  if (a.empty()) return f.fail("prompt", "empty");
  if (a[0].is_number()) {
    PromptInput in;
    if (!token_ids(*p, &in.ids)) return f.fail("prompt", "token ids must be integers");
    r.prompts.push_back(std::move(in));
    return;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    PromptInput in;
    if (a[i].is_string()) in.text = a[i].as_string();
    else if (!a[i].is_array() || !token_ids(a[i], &in.ids))
      return f.fail("prompt", "[" + std::to_string(i) + "] " + kShape);
    r.prompts.push_back(std::move(in));
  }
}

void read_sampling(Fields& f, v1::SamplingParams& s) {
  double d = 0;
  int64_t i = 0;
  if (f.number("temperature", &d)) s.set_temperature(static_cast<float>(d));
  if (f.number("top_p", &d)) s.set_top_p(static_cast<float>(d));
  if (f.integer("top_k", -1, 1 << 30, &i)) s.set_top_k(static_cast<int32_t>(std::max<int64_t>(i, 0)));  // -1: off
  if (f.number("min_p", &d)) s.set_min_p(static_cast<float>(d));
  if (f.number("repetition_penalty", &d)) s.set_repetition_penalty(static_cast<float>(d));
  if (f.number("presence_penalty", &d)) s.set_presence_penalty(static_cast<float>(d));
  if (f.number("frequency_penalty", &d)) s.set_frequency_penalty(static_cast<float>(d));
  if (f.integer("seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), &i))
    s.set_seed(static_cast<uint64_t>(i));
}

// Stops, our extensions, and what OpenAI defines that we refuse rather than ignore silently.
void read_common(Fields& f, OpenAiRequest& r) {
  v1::GenerateRequest& g = r.base;
  read_sampling(f, *g.mutable_sampling());
  f.string("model", &r.model);
  int64_t i = 0;
  if (f.integer("n", 1, kMaxChoices, &i)) r.n = static_cast<int>(i);
  f.boolean("stream", &r.stream);
  if (const Json* so = f.get("stream_options")) {
    if (!so->is_object()) f.fail("stream_options", "must be an object");
    else if (!r.stream) f.fail("stream_options", "only allowed with stream: true");
    else if (const Json* u = so->find("include_usage"); u && !u->is_null()) {
      if (!u->is_bool()) f.fail("stream_options", "include_usage must be a boolean");
      else r.include_usage = u->as_bool();
    }
  }
  std::vector<std::string> stops;
  if (f.strings("stop", &stops))
    for (auto& s : stops) g.add_stop(std::move(s));
  if (const Json* ids = f.get("stop_token_ids")) {
    std::vector<int32_t> v;
    if (!ids->is_array() || !token_ids(*ids, &v)) f.fail("stop_token_ids", "must be an array of token ids");
    for (int32_t t : v) g.add_stop_token_ids(t);
  }
  std::vector<std::string> docs;
  if (f.get("document_ids") && !f.get("document_ids")->is_string() && f.strings("document_ids", &docs))
    for (auto& d : docs) g.add_document_ids(std::move(d));
  else if (f.get("document_ids") && f.get("document_ids")->is_string())
    f.fail("document_ids", "must be an array of document ids");
  if (f.integer("priority", std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max(), &i))
    g.set_priority(static_cast<int32_t>(i));
  bool b = false;
  if (f.boolean("ignore_eos", &b)) g.set_ignore_eos(b);
  // Special tokens written in a text prompt are parsed unless asked not to (Hugging Face's
  // split_special_tokens); the output leaves their text out unless skip_special_tokens is false
  // (vLLM's two fields).
  if (f.boolean("split_special_tokens", &b)) g.set_split_special_tokens(b);
  if (f.boolean("skip_special_tokens", &b)) g.set_skip_special_tokens(b);
  std::string id;
  if (f.string("request_id", &id)) g.set_request_id(id);
  if (f.integer("best_of", 1, kMaxChoices, &i) && i != r.n) f.fail("best_of", "not supported (other than equal to n)");
  if (const Json* lb = f.get("logit_bias"); lb && !(lb->is_object() && lb->as_object().empty()))
    f.fail("logit_bias", "not supported");
}

void read_max_tokens(Fields& f, OpenAiRequest& r, const char* name) {
  int64_t i = 0;
  if (!f.integer(name, 0, std::numeric_limits<int32_t>::max(), &i)) return;
  r.base.set_max_tokens(static_cast<uint32_t>(i));
  r.max_tokens_given = true;
}

}  // namespace

std::variant<Json, ApiError> parse_body(const std::string& body) {
  std::string where;
  auto j = Json::parse(body, 64, &where);
  if (!j.ok()) {
    // The field the parser was in when it failed, as the error's param ("temperature" for NaN,
    // "messages" for bytes that are not UTF-8 in messages[1].content: such bytes cannot become a
    // gRPC string field; a member name's own bad bytes blame no field).
    const std::string param = where.substr(0, where.find_first_of(".["));
    return ApiError{400, "invalid JSON body: " + j.status().message(), "invalid_request_error", param, ""};
  }
  if (!j->is_object()) return ApiError{400, "the request body must be a JSON object", "invalid_request_error", "", ""};
  return std::move(j).value();
}

std::variant<OpenAiRequest, ApiError> parse_completion_request(const Json& body) {
  OpenAiRequest r;
  Fields f(body);
  read_prompt(f, r);
  read_common(f, r);
  r.base.set_max_tokens(16);  // OpenAI's default for completions
  r.max_tokens_given = true;
  read_max_tokens(f, r, "max_tokens");
  int64_t i = 0;
  if (f.integer("logprobs", 0, kMaxTopLogprobs, &i)) r.logprobs = static_cast<int>(i);
  f.boolean("echo", &r.echo);
  std::string suffix;
  if (f.string("suffix", &suffix) && !suffix.empty()) f.fail("suffix", "not supported");
  if (f.ok() && static_cast<int64_t>(r.prompts.size()) * r.n > kMaxChoices)
    f.fail("n", "prompts x n is at most " + std::to_string(kMaxChoices));
  if (f.ok() && r.base.max_tokens() == 0 && !r.echo)
    f.fail("max_tokens", "0 is allowed only with echo (scoring the prompt)");
  if (!f.ok()) return f.error();
  return r;
}

std::variant<OpenAiRequest, ApiError> parse_chat_request(const Json& body, std::string_view raw) {
  OpenAiRequest r;
  r.chat = true;
  Fields f(body);
  const Json* m = f.get("messages");
  if (!m) f.fail("messages", "required");
  read_common(f, r);
  read_max_tokens(f, r, "max_tokens");
  read_max_tokens(f, r, "max_completion_tokens");  // the newer name wins
  if (f.ok() && r.max_tokens_given && r.base.max_tokens() == 0) f.fail("max_tokens", "must be at least 1");
  bool logprobs = false;
  f.boolean("logprobs", &logprobs);
  int64_t top = 0;
  if (f.integer("top_logprobs", 0, kMaxTopLogprobs, &top) && !logprobs && top > 0)
    f.fail("top_logprobs", "requires logprobs: true");
  if (logprobs) r.logprobs = static_cast<int>(top);
  f.boolean("add_generation_prompt", &r.add_generation_prompt);
  if (!f.ok()) return f.error();
  auto tools = read_tools(body, raw);
  if (auto* e = std::get_if<ApiError>(&tools)) return *e;
  r.tools = std::get<ChatTools>(std::move(tools));
  auto msgs = normalize_messages(*m);
  if (auto* e = std::get_if<ApiError>(&msgs)) return *e;
  r.messages = std::get<Json>(std::move(msgs));
  auto extra = template_extra(body);
  if (auto* e = std::get_if<ApiError>(&extra)) return *e;
  r.template_extra = std::get<Json>(std::move(extra));
  return r;
}

std::variant<Json, ApiError> template_extra(const Json& body) {
  Json::Object extra;
  if (const Json* kw = body.find("chat_template_kwargs"); kw && !kw->is_null()) {
    if (!kw->is_object()) return bad_param("chat_template_kwargs", "must be an object");
    extra = kw->as_object();
  }
  if (const Json* tools = body.find("tools"); tools && !tools->is_null()) {
    if (!tools->is_array()) return bad_param("tools", "must be an array");
    extra["tools"] = *tools;
  }
  return extra.empty() ? Json() : Json(std::move(extra));
}

std::variant<Json, ApiError> normalize_messages(const Json& messages) {
  if (!messages.is_array()) return bad_param("messages", "must be an array of messages");
  if (messages.as_array().empty()) return bad_param("messages", "empty");
  Json::Array out;
  for (size_t i = 0; i < messages.as_array().size(); ++i) {
    const Json& msg = messages.as_array()[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!msg.is_object()) return bad_param("messages", at + " must be an object");
    const Json* role = msg.find("role");
    if (!role || !role->is_string() || role->as_string().empty())
      return bad_param("messages", at + ".role must be a non-empty string");
    Json::Object copy = msg.as_object();
    const Json* content = msg.find("content");
    if (!content || content->is_null()) {
      copy["content"] = Json("");
    } else if (content->is_array()) {  // text parts, joined as vLLM's "string" content format does
      std::string text;
      for (size_t j = 0; j < content->as_array().size(); ++j) {
        const Json& part = content->as_array()[j];
        const Json* type = part.is_object() ? part.find("type") : nullptr;
        const Json* t = part.is_object() ? part.find("text") : nullptr;
        if (!type || !type->is_string() || type->as_string() != "text" || !t || !t->is_string())
          return bad_param("messages", at + ".content[" + std::to_string(j) + "]: only text parts are supported");
        if (j > 0) text += "\n";
        text += t->as_string();
      }
      copy["content"] = Json(std::move(text));
    } else if (!content->is_string()) {
      return bad_param("messages", at + ".content must be a string or an array of text parts");
    }
    if (const Json* calls = msg.find("tool_calls"); calls && calls->is_null()) {
      copy.erase("tool_calls");  // as if absent: templates test `'tool_calls' in message`
    } else if (calls) {
      if (!calls->is_array()) return bad_param("messages", at + ".tool_calls must be an array");
      Json::Array out_calls;
      for (size_t j = 0; j < calls->as_array().size(); ++j) {
        auto c = normalize_tool_call(calls->as_array()[j], at + ".tool_calls[" + std::to_string(j) + "]");
        if (auto* e = std::get_if<ApiError>(&c)) return *e;
        out_calls.push_back(std::get<Json>(std::move(c)));
      }
      copy["tool_calls"] = Json(std::move(out_calls));
    }
    out.push_back(Json(std::move(copy)));
  }
  return Json(std::move(out));
}

}  // namespace yoco
