// What the files over xgrammar share (check.cc, compiler.cc, token_mask.cc); private to
// yoco_structured, the one target that sees xgrammar's headers.
#pragma once

#include <xgrammar/xgrammar.h>

#include <functional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "common/structured_output.h"
#include "structured/check.h"

namespace yoco {

struct CompiledConstraint {
  xgrammar::CompiledGrammar grammar;
};

// The constraint as an xgrammar Grammar (throws what xgrammar throws). JSON keeps one space after
// ':' and ',' and no other whitespace, so a sampled object cannot run on in blanks
// (docs/design.md §3.2c).
xgrammar::Grammar to_grammar(const StructuredOutput& s);

// One EBNF string literal: '"' and '\' escaped, control bytes as \xHH, UTF-8 as it is.
std::string ebnf_literal(const std::string& s);

// The size limits of `lim`, INVALID_ARGUMENT naming `field`.
Status check_sizes(const StructuredOutput& s, std::string_view field, const StructuredLimits& lim);

// Runs fn on a thread of its own and waits at most lim.timeout: an exception becomes
// INVALID_ARGUMENT "field: <what xgrammar said>", a timeout INVALID_ARGUMENT too (the thread
// finishes in the background, at most lim.max_background of them; beyond, RESOURCE_EXHAUSTED).
Status run_bounded(std::function<void()> fn, std::string_view field, const StructuredLimits& lim);

}  // namespace yoco
