// Structured outputs on the OpenAI-compatible API (docs/design.md §3.2c): `response_format`
// (json_object, json_schema) and vLLM's `structured_outputs` (json, regex, choice, grammar,
// json_object; also its older top-level guided_json, guided_regex, guided_choice, guided_grammar)
// become the request's structured_output. At most one constraint per request; each is checked
// here (structured/check.h), so a bad schema, regex or grammar is a 400 naming its field.
#pragma once

#include <optional>
#include <string_view>
#include <variant>

#include "common/json.h"
#include "common/structured_output.h"
#include "router/openai_errors.h"

namespace yoco {

// `raw`: the body's text, so a JSON schema keeps its keys in the client's order (objects are
// generated in the schema's property order; the parsed Json sorts keys). Empty: the sorted form.
std::variant<StructuredOutput, ApiError> read_structured_output(const Json& body, std::string_view raw);

}  // namespace yoco
