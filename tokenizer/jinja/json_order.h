// The key order of a request's JSON text. Our Json sorts object keys; transformers renders
// request objects (tool schemas, tool-call arguments) in the client's order, so a template that
// iterates or `tojson`s them needs that order back. (docs/design.md, chat templates)
#pragma once

#include <optional>
#include <string_view>

#include "tokenizer/jinja/value.h"

namespace yoco::jinja {

// `text` parsed with object keys in document order (nlohmann's ordered_json, non-throwing); nullopt
// when it is not valid JSON (the order is only a hint: the caller keeps the sorted form then).
// Nesting is bounded.
std::optional<Value> parse_json_ordered(std::string_view text);

// `v` with the keys of every object reordered as in the same place of `hint`; keys the hint
// lacks follow in their own order. Lists are matched item by item when their lengths agree.
Value reorder_like(const Value& v, const Value& hint);

}  // namespace yoco::jinja
