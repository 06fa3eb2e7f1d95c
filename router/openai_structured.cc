#include "router/openai_structured.h"

#include <initializer_list>
#include <nlohmann/json.hpp>
#include <variant>

#include "structured/check.h"

namespace yoco {
namespace {

using Kind = StructuredOutput::Kind;

// The member at `path` of the raw body, as JSON text in the client's key order.
std::string ordered_text(std::string_view raw, std::initializer_list<const char*> path, const Json& parsed) {
  if (raw.empty()) return parsed.dump();
  auto j = nlohmann::ordered_json::parse(raw, nullptr, /*allow_exceptions=*/false);
  const nlohmann::ordered_json* cur = &j;
  for (const char* key : path) {
    if (!cur->is_object()) return parsed.dump();
    auto it = cur->find(key);
    if (it == cur->end()) return parsed.dump();
    cur = &*it;
  }
  return cur->dump();
}

struct Found {
  StructuredOutput so;
  std::string field;  // the OpenAI field it came from, for errors
};

// One constraint member: `name` at `path` in the body, `v` its value.
std::optional<ApiError> read_member(const std::string& field, const std::string& name, const Json& v,
                                    std::string_view raw, std::initializer_list<const char*> path, Found& out) {
  out.field = field;
  if (name == "json") {
    out.so.kind = Kind::kJsonSchema;
    if (v.is_string()) out.so.text = v.as_string();
    else if (v.is_object()) out.so.text = ordered_text(raw, path, v);
    else return bad_param(field, "must be a JSON schema (an object, or its text)");
  } else if (name == "regex" || name == "grammar") {
    if (!v.is_string()) return bad_param(field, "must be a string");
    out.so.kind = name == "regex" ? Kind::kRegex : Kind::kGrammar;
    out.so.text = v.as_string();
  } else if (name == "choice") {
    if (!v.is_array()) return bad_param(field, "must be an array of strings");
    out.so.kind = Kind::kChoice;
    for (size_t i = 0; i < v.as_array().size(); ++i) {
      if (!v.as_array()[i].is_string()) return bad_param(field, "[" + std::to_string(i) + "] must be a string");
      out.so.choices.push_back(v.as_array()[i].as_string());
    }
  } else if (name == "json_object") {
    if (!v.is_bool()) return bad_param(field, "must be a boolean");
    if (v.as_bool()) out.so.kind = Kind::kJsonObject;
  }
  return std::nullopt;
}

std::optional<ApiError> read_response_format(const Json& rf, std::string_view raw, std::optional<Found>& out) {
  const Json* type = rf.is_object() ? rf.find("type") : nullptr;
  if (!type || !type->is_string()) return bad_param("response_format", "must be an object with a string \"type\"");
  const std::string& t = type->as_string();
  if (t == "text") return std::nullopt;
  Found f;
  f.field = "response_format";
  if (t == "json_object") {
    f.so.kind = Kind::kJsonObject;
  } else if (t == "json_schema") {
    const Json* js = rf.find("json_schema");
    if (!js || !js->is_object())
      return bad_param("response_format.json_schema", "required: an object with a \"schema\"");
    const Json* schema = js->find("schema");
    if (!schema || !schema->is_object())
      return bad_param("response_format.json_schema.schema", "required: a JSON schema object");
    f.field = "response_format.json_schema.schema";
    f.so.kind = Kind::kJsonSchema;
    f.so.text = ordered_text(raw, {"response_format", "json_schema", "schema"}, *schema);
  } else {
    return bad_param("response_format.type",
                     "\"" + t + "\" is not supported (\"text\", \"json_object\" or \"json_schema\")");
  }
  out = std::move(f);
  return std::nullopt;
}

}  // namespace

std::variant<StructuredOutput, ApiError> read_structured_output(const Json& body, std::string_view raw) {
  std::optional<Found> found;
  auto take = [&](Found f) -> std::optional<ApiError> {
    if (!f.so.constrained()) return std::nullopt;
    if (found) return bad_param(f.field, "only one output constraint per request (" + found->field + " is given too)");
    found = std::move(f);
    return std::nullopt;
  };
  if (const Json* rf = body.find("response_format"); rf && !rf->is_null()) {
    std::optional<Found> f;
    if (auto e = read_response_format(*rf, raw, f)) return *e;
    if (f)
      if (auto e = take(std::move(*f))) return *e;
  }
  if (const Json* so = body.find("structured_outputs"); so && !so->is_null()) {
    if (!so->is_object()) return bad_param("structured_outputs", "must be an object");
    if (const Json* st = so->find("structural_tag"); st && !st->is_null())
      return bad_param("structured_outputs.structural_tag",
                       "not supported (json, regex, choice, grammar or json_object)");
    for (const char* name : {"json", "regex", "choice", "grammar", "json_object"}) {
      const Json* v = so->find(name);
      if (!v || v->is_null()) continue;
      Found f;
      if (auto e =
              read_member(std::string("structured_outputs.") + name, name, *v, raw, {"structured_outputs", name}, f))
        return *e;
      if (auto e = take(std::move(f))) return *e;
    }
  }
  // vLLM's older names for the same, top-level.
  for (const char* name : {"json", "regex", "choice", "grammar"}) {
    const std::string key = std::string("guided_") + name;
    const Json* v = body.find(key);
    if (!v || v->is_null()) continue;
    Found f;
    if (auto e = read_member(key, name, *v, raw, {key.c_str()}, f)) return *e;
    if (auto e = take(std::move(f))) return *e;
  }
  if (!found) return StructuredOutput{};
  if (Status st = check_structured_output(found->so, found->field); !st.ok())
    return ApiError{400, st.message(), "invalid_request_error", found->field, ""};
  return std::move(found->so);
}

}  // namespace yoco
