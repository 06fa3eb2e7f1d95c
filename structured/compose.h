// Constraints made of literal text around JSON (docs/design.md §3.2d: a tool call as its chat
// template family writes it, the arguments valid for the function's schema), built as one EBNF
// grammar, which the router sends and the decode worker compiles like any other
// (StructuredOutput::Kind::kGrammar): nothing new travels in Generate's structured_output.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/structured_output.h"
#include "structured/check.h"

namespace yoco {

struct JsonSlot {
  std::string prefix;  // literal text before the JSON
  std::string schema;  // the JSON Schema (text) the JSON satisfies
  std::string suffix;  // literal text after it
};

// A grammar for exactly one of `alternatives`, its JSON written as every JSON constraint is
// (compact: ", " and ": ", members in the schema's order). INVALID_ARGUMENT naming `field` when a
// schema does not compile (within lim's bounds); UNIMPLEMENTED in a build without xgrammar.
Result<StructuredOutput> json_slots_grammar(const std::vector<JsonSlot>& alternatives, std::string_view field,
                                            const StructuredLimits& lim = {});

}  // namespace yoco
