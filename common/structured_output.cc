#include "common/structured_output.h"

namespace yoco {

const char* StructuredOutput::kind_name() const {
  switch (kind) {
    case Kind::kNone:
      return "none";
    case Kind::kJsonObject:
      return "json_object";
    case Kind::kJsonSchema:
      return "json_schema";
    case Kind::kRegex:
      return "regex";
    case Kind::kChoice:
      return "choice";
    case Kind::kGrammar:
      return "grammar";
  }
  return "none";
}

std::string StructuredOutput::cache_key() const {
  // Length-prefixed parts: no text can pass for another constraint's.
  std::string key = kind_name();
  auto add = [&](const std::string& s) {
    key += '\0';
    key += std::to_string(s.size());
    key += ':';
    key += s;
  };
  add(text);
  for (const std::string& c : choices) add(c);
  return key;
}

}  // namespace yoco
