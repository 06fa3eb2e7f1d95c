// yoco.v1.StructuredOutput ↔ the plain StructuredOutput (common/structured_output.h). Shape only:
// whether a schema, regex or grammar is valid is structured/'s check. Shared by the router (the API
// and the Decode call it makes) and the decode worker.
#pragma once

#include "common/status.h"
#include "common/structured_output.h"
#include "yoco/v1/yoco.pb.h"

namespace yoco {

inline Result<StructuredOutput> structured_from_proto(const v1::StructuredOutput& p) {
  using K = StructuredOutput::Kind;
  StructuredOutput s;
  switch (p.kind_case()) {
    case v1::StructuredOutput::KIND_NOT_SET:
      break;
    case v1::StructuredOutput::kJsonSchema:
      s.kind = K::kJsonSchema;
      s.text = p.json_schema();
      break;
    case v1::StructuredOutput::kJsonObject:
      if (!p.json_object()) return invalid_argument("structured_output.json_object: must be true when set");
      s.kind = K::kJsonObject;
      break;
    case v1::StructuredOutput::kRegex:
      s.kind = K::kRegex;
      s.text = p.regex();
      break;
    case v1::StructuredOutput::kChoice:
      s.kind = K::kChoice;
      s.choices.assign(p.choice().values().begin(), p.choice().values().end());
      break;
    case v1::StructuredOutput::kGrammar:
      s.kind = K::kGrammar;
      s.text = p.grammar();
      break;
  }
  return s;
}

inline v1::StructuredOutput structured_to_proto(const StructuredOutput& s) {
  using K = StructuredOutput::Kind;
  v1::StructuredOutput p;
  switch (s.kind) {
    case K::kNone:
      break;
    case K::kJsonObject:
      p.set_json_object(true);
      break;
    case K::kJsonSchema:
      p.set_json_schema(s.text);
      break;
    case K::kRegex:
      p.set_regex(s.text);
      break;
    case K::kChoice:
      for (const std::string& c : s.choices) p.mutable_choice()->add_values(c);
      break;
    case K::kGrammar:
      p.set_grammar(s.text);
      break;
  }
  return p;
}

}  // namespace yoco
