// Splits a template into text and tag tokens the way jinja2's lexer does with HF's settings:
// trim_blocks (the first newline after a block or comment tag is dropped), lstrip_blocks (spaces
// and tabs before a block or comment tag at the start of a line are dropped), `-` on either side
// of a tag strips all whitespace on that side, `+` turns lstrip off, one trailing newline of the
// source is dropped, and \r\n / \r become \n. (docs/design.md, chat templates)
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace yoco::jinja {

struct Token {
  enum class Type { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };
  Type type;
  std::string text;  // text, name, operator, or the string literal's unescaped value
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1, col = 1;
};

// Throws jinja::Error "line L col C: ..." on a malformed template.
std::vector<Token> lex(std::string_view source);

}  // namespace yoco::jinja
