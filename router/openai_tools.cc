#include "router/openai_tools.h"

#include <cctype>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>

#include "structured/check.h"
#include "structured/compose.h"

namespace yoco {
namespace {

using Choice = ChatTools::Choice;

// OpenAI's rule for function names; it also keeps them plain inside the enforced syntax's JSON.
bool valid_function_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  return true;
}

// tools[i].function.parameters of the raw body as text in the client's key order.
class OrderedParameters {
 public:
  explicit OrderedParameters(std::string_view raw) {
    if (!raw.empty()) doc_ = nlohmann::ordered_json::parse(raw, nullptr, /*allow_exceptions=*/false);
  }
  std::string text(size_t i, const Json& parsed) const {
    const auto tools = doc_.is_object() ? doc_.find("tools") : doc_.end();
    if (!doc_.is_object() || tools == doc_.end() || !tools->is_array() || i >= tools->size()) return parsed.dump();
    const auto& tool = (*tools)[i];
    if (!tool.is_object() || !tool.contains("function") || !tool["function"].is_object()) return parsed.dump();
    const auto& fn = tool["function"];
    if (!fn.contains("parameters")) return parsed.dump();
    return fn["parameters"].dump();
  }

 private:
  nlohmann::ordered_json doc_;
};

std::variant<ToolDef, ApiError> read_tool(const Json& tool, size_t i, const OrderedParameters& order,
                                          std::set<std::string>& names) {
  const std::string at = "tools[" + std::to_string(i) + "]";
  if (!tool.is_object()) return bad_param(at, "must be an object {\"type\": \"function\", \"function\": {...}}");
  const Json* type = tool.find("type");
  if (!type || !type->is_string() || type->as_string() != "function")
    return bad_param(at + ".type", "must be \"function\"");
  const Json* fn = tool.find("function");
  if (!fn || !fn->is_object()) return bad_param(at + ".function", "required: an object with a \"name\"");
  const Json* name = fn->find("name");
  if (!name || !name->is_string() || !valid_function_name(name->as_string()))
    return bad_param(at + ".function.name", "required: 1 to 64 letters, digits, '_' or '-'");
  if (!names.insert(name->as_string()).second)
    return bad_param(at + ".function.name", "\"" + name->as_string() + "\" is defined twice");
  if (const Json* d = fn->find("description"); d && !d->is_null() && !d->is_string())
    return bad_param(at + ".function.description", "must be a string");
  if (const Json* s = fn->find("strict"); s && !s->is_null() && !s->is_bool())
    return bad_param(at + ".function.strict", "must be a boolean");
  ToolDef def;
  def.name = name->as_string();
  const Json* params = fn->find("parameters");
  if (!params || params->is_null()) return def;
  const std::string field = at + ".function.parameters";
  if (!params->is_object()) return bad_param(field, "must be a JSON schema object");
  def.parameters = order.text(i, *params);
  // The schema must be one the grammar engine takes, whether or not this request enforces a call:
  // a definition is bad or good on its own (without the engine, only its shape is checked).
  if (structured_outputs_enabled()) {
    StructuredOutput s;
    s.kind = StructuredOutput::Kind::kJsonSchema;
    s.text = def.parameters;
    if (Status st = check_structured_output(s, field); !st.ok())
      return ApiError{st.code() == StatusCode::kResourceExhausted ? 429 : 400, st.message(),
                      st.code() == StatusCode::kResourceExhausted ? "rate_limit_error" : "invalid_request_error", field,
                      ""};
  }
  return def;
}

std::optional<ApiError> read_choice(const Json* c, ChatTools& t) {
  t.choice = t.tools.empty() ? Choice::kNone : Choice::kAuto;
  if (!c || c->is_null()) return std::nullopt;
  if (c->is_string()) {
    const std::string& s = c->as_string();
    if (s == "none") t.choice = Choice::kNone;
    else if (s == "auto") t.choice = Choice::kAuto;
    else if (s == "required") t.choice = Choice::kRequired;
    else return bad_param("tool_choice", "\"none\", \"auto\", \"required\" or {\"type\": \"function\", ...}");
  } else if (c->is_object()) {
    const Json* type = c->find("type");
    if (!type || !type->is_string() || type->as_string() != "function")
      return bad_param("tool_choice.type", "must be \"function\"");
    const Json* fn = c->find("function");
    if (!fn || !fn->is_object()) return bad_param("tool_choice.function", "required: an object with a \"name\"");
    const Json* name = fn->find("name");
    if (!name || !name->is_string()) return bad_param("tool_choice.function.name", "required: a string");
    bool known = false;
    for (const ToolDef& d : t.tools) known |= d.name == name->as_string();
    if (!known) return bad_param("tool_choice.function.name", "\"" + name->as_string() + "\" is not one of tools");
    t.choice = Choice::kNamed;
    t.named = name->as_string();
  } else {
    return bad_param("tool_choice", "must be a string or an object");
  }
  if (t.choice != Choice::kNone && t.tools.empty())
    return bad_param("tool_choice", "needs tools (a non-empty array of functions)");
  return std::nullopt;
}

}  // namespace

std::variant<ChatTools, ApiError> read_tools(const Json& body, std::string_view raw) {
  ChatTools t;
  const Json* tools = body.find("tools");
  if (tools && !tools->is_null()) {
    if (!tools->is_array()) return bad_param("tools", "must be an array");
    if (tools->as_array().size() > kMaxTools) return bad_param("tools", "at most " + std::to_string(kMaxTools));
    const OrderedParameters order(raw);
    std::set<std::string> names;
    for (size_t i = 0; i < tools->as_array().size(); ++i) {
      auto def = read_tool(tools->as_array()[i], i, order, names);
      if (auto* e = std::get_if<ApiError>(&def)) return *e;
      t.tools.push_back(std::get<ToolDef>(std::move(def)));
    }
  }
  if (auto e = read_choice(body.find("tool_choice"), t)) return *e;
  if (const Json* p = body.find("parallel_tool_calls"); p && !p->is_null()) {
    if (!p->is_bool()) return bad_param("parallel_tool_calls", "must be a boolean");
    t.parallel = p->as_bool();
  }
  return t;
}

std::variant<StructuredOutput, ApiError> tool_call_constraint(const ChatTools& t, ToolCallFormat format) {
  if (format == ToolCallFormat::kNone)
    return bad_param("tool_choice",
                     "this router parses no tool calls: its chat template writes none of the tool-call syntaxes it "
                     "knows (start it with --tool-call-parser hermes, llama3_json, mistral or mistral_args)");
  std::vector<JsonSlot> alternatives;
  for (const ToolDef& d : t.tools) {
    if (t.choice == Choice::kNamed && d.name != t.named) continue;
    const ToolCallSyntax syntax = tool_call_syntax(format, d.name);
    // No parameters: the empty object, as OpenAI sends for such a function.
    alternatives.push_back({syntax.prefix,
                            d.parameters.empty() ? R"({"type": "object", "properties": {}})" : d.parameters,
                            syntax.suffix});
  }
  auto g = json_slots_grammar(alternatives, "tool_choice");
  if (!g.ok()) return ApiError{400, g.status().message(), "invalid_request_error", "tool_choice", ""};
  // The router's Generate checks the constraint again under its bounds: say it here in API terms.
  if (Status st = check_structured_output(*g, "tools"); !st.ok())
    return ApiError{400, st.message() + " (the grammar enforcing the call; fewer or smaller tools fit)",
                    "invalid_request_error", "tools", ""};
  return std::move(g).value();
}

std::variant<Json, ApiError> normalize_tool_call(const Json& call, const std::string& at) {
  if (!call.is_object()) return bad_param("messages", at + " must be an object");
  const Json* fn = call.find("function");
  if (!fn || !fn->is_object()) return bad_param("messages", at + ".function must be an object");
  const Json* name = fn->find("name");
  if (!name || !name->is_string() || name->as_string().empty())
    return bad_param("messages", at + ".function.name must be a non-empty string");
  Json::Object f = fn->as_object();
  if (const Json* a = fn->find("arguments"); a && a->is_string()) {
    auto parsed = Json::parse(a->as_string());
    if (!parsed.ok()) return bad_param("messages", at + ".function.arguments is not JSON text");
    f["arguments"] = std::move(parsed).value();
  } else if (a && !a->is_object()) {
    return bad_param("messages", at + ".function.arguments must be JSON text (a string) or an object");
  }
  Json::Object c = call.as_object();
  c["function"] = Json(std::move(f));
  return Json(std::move(c));
}

std::string with_parsed_arguments(const std::string& raw) {
  if (raw.find("tool_calls") == std::string::npos) return raw;
  auto doc = nlohmann::ordered_json::parse(raw, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("messages") || !doc["messages"].is_array()) return raw;
  bool changed = false;
  for (auto& m : doc["messages"]) {
    if (!m.is_object() || !m.contains("tool_calls") || !m["tool_calls"].is_array()) continue;
    for (auto& c : m["tool_calls"]) {
      if (!c.is_object() || !c.contains("function") || !c["function"].is_object()) continue;
      auto& fn = c["function"];
      if (!fn.contains("arguments") || !fn["arguments"].is_string()) continue;
      auto a = nlohmann::ordered_json::parse(fn["arguments"].get<std::string>(), nullptr, false);
      if (a.is_discarded()) continue;
      fn["arguments"] = std::move(a);
      changed = true;
    }
  }
  return changed ? doc.dump() : raw;
}

std::string new_tool_call_id(ToolCallFormat format) {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  const bool mistral = format == ToolCallFormat::kMistral || format == ToolCallFormat::kMistralArgs;
  std::string id = mistral ? "" : "call_";
  std::lock_guard<std::mutex> lk(mu);
  for (int i = 0; i < (mistral ? 9 : 24); ++i) id += kAlnum[rng() % (sizeof(kAlnum) - 1)];
  return id;
}

}  // namespace yoco
