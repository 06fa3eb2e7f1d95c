// Builds the statement tree from the lexer's tokens, with jinja2's operator precedence.
// (docs/design.md, chat templates)
#pragma once

#include <memory>
#include <string_view>

#include "tokenizer/jinja/ast.h"

namespace yoco::jinja {

// Throws jinja::Error "line L col C: ..." on a syntax error or an unsupported tag.
std::unique_ptr<Template> parse(std::string_view source);

}  // namespace yoco::jinja
