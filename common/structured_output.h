// A request's output constraint (docs/design.md §3.2c): what the decode worker's token mask lets
// the model write. A plain value: the router reads it from the API and checks it, the decode worker
// compiles it against its vocabulary (structured/), both without the engine.
#pragma once

#include <string>
#include <vector>

namespace yoco {

struct StructuredOutput {
  enum class Kind {
    kNone,        // unconstrained
    kJsonObject,  // any JSON object
    kJsonSchema,  // JSON valid for the schema in `text` (JSON Schema, as JSON text)
    kRegex,       // the regular expression in `text`, whole
    kChoice,      // exactly one of `choices`
    kGrammar,     // the EBNF grammar in `text` (root rule "root")
  };
  Kind kind = Kind::kNone;
  std::string text;
  std::vector<std::string> choices;

  bool constrained() const { return kind != Kind::kNone; }
  // The kind's name as the gRPC API spells it ("json_schema"): error messages name it.
  const char* kind_name() const;
  // A byte string equal for equal constraints and different otherwise: the compile cache's key.
  std::string cache_key() const;
};

}  // namespace yoco
