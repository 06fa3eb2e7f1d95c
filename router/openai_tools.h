// Tools on chat (docs/design.md §3.2d): `tools`, `tool_choice` and `parallel_tool_calls` read and
// checked (each bad definition a 400 naming its field: tools[0].function.name,
// tools[1].function.parameters, tool_choice.function.name), assistant tool calls in the messages
// made what templates render, and what a choice asks of the reply: nothing parsed ("none"), calls
// parsed from free text ("auto"), or a call enforced ("required", a named function) by an output
// constraint in the template family's syntax with arguments valid for the function's schema.
#pragma once

#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/json.h"
#include "common/structured_output.h"
#include "router/openai_errors.h"
#include "router/tool_calls.h"

namespace yoco {

struct ToolDef {
  std::string name;
  std::string parameters;  // its JSON schema as text, in the client's key order; empty: none given
};

struct ChatTools {
  enum class Choice { kNone, kAuto, kRequired, kNamed };
  std::vector<ToolDef> tools;
  Choice choice = Choice::kNone;
  std::string named;     // kNamed: the function
  bool parallel = true;  // parallel_tool_calls: false keeps a reply's first call only

  bool parsed() const { return choice != Choice::kNone; }
  bool enforced() const { return choice == Choice::kRequired || choice == Choice::kNamed; }
};

inline constexpr int kMaxTools = 128;

// `raw`: the body's text, so each schema keeps the client's key order (arguments are generated
// in the schema's property order); empty: the sorted form. tool_choice defaults to "auto" with
// tools and "none" without, as OpenAI's.
std::variant<ChatTools, ApiError> read_tools(const Json& body, std::string_view raw);

// The output constraint of an enforced choice: one call in `format`'s syntax, to the named
// function or (required) to any one of the tools. 400 naming tool_choice when `format` is kNone,
// or tools when the grammar is past the structured-output bounds.
std::variant<StructuredOutput, ApiError> tool_call_constraint(const ChatTools& t, ToolCallFormat format);

// An assistant message's tool call arguments: a JSON string in the API, an object where chat
// templates render them (`arguments | tojson`), as vLLM passes them. `call` is
// messages[i].tool_calls[j] (checked: a function with a name, arguments JSON text or an object);
// the error names it.
std::variant<Json, ApiError> normalize_tool_call(const Json& call, const std::string& at);
// The request's text with those arguments strings replaced by their JSON, so the template sees
// their keys in the client's order (ChatTemplateContext::request_json); `raw` when there are none.
std::string with_parsed_arguments(const std::string& raw);

// A fresh id for a call: "call_" + 24 alphanumerics; Mistral's templates take 9 alphanumerics.
std::string new_tool_call_id(ToolCallFormat format);

}  // namespace yoco
