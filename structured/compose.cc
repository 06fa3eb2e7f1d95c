// Composed constraints over xgrammar (without it: no_xgrammar.cc).
#include "structured/compose.h"

#include <memory>

#include "structured/xgrammar_impl.h"

namespace yoco {

Result<StructuredOutput> json_slots_grammar(const std::vector<JsonSlot>& alternatives, std::string_view field,
                                            const StructuredLimits& lim) {
  if (alternatives.empty()) return invalid_argument(std::string(field) + ": nothing to choose from");
  // The grammar text is written by the thread run_bounded starts, which may outlive this call.
  auto text = std::make_shared<std::string>();
  Status st = run_bounded(
      [alternatives, text] {
        std::vector<xgrammar::Grammar> each;
        for (const JsonSlot& a : alternatives) {
          std::vector<xgrammar::Grammar> parts;
          if (!a.prefix.empty()) parts.push_back(xgrammar::Grammar::FromEBNF("root ::= " + ebnf_literal(a.prefix)));
          StructuredOutput json;
          json.kind = StructuredOutput::Kind::kJsonSchema;
          json.text = a.schema;
          parts.push_back(to_grammar(json));
          if (!a.suffix.empty()) parts.push_back(xgrammar::Grammar::FromEBNF("root ::= " + ebnf_literal(a.suffix)));
          each.push_back(parts.size() == 1 ? parts[0] : xgrammar::Grammar::Concat(parts));
        }
        *text = (each.size() == 1 ? each[0] : xgrammar::Grammar::Union(each)).ToString();
      },
      field, lim);
  if (!st.ok()) return st;
  StructuredOutput s;
  s.kind = StructuredOutput::Kind::kGrammar;
  s.text = std::move(*text);
  return s;
}

}  // namespace yoco
