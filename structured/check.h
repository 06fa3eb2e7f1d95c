// Whether a request's constraint can be compiled, before anything is reserved for it
// (docs/design.md §3.2c): sizes within StructuredLimits, the schema, regex or grammar well formed.
// No vocabulary is needed, so the router checks here and answers INVALID_ARGUMENT (400) at once.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/status.h"
#include "common/structured_output.h"

namespace yoco {

// Small value type: what one constraint may cost (docs/architecture.md, rule 8). A text past
// max_text_bytes is refused unread; a parse or compile still running after `timeout` is refused
// (its thread finishes in the background, at most max_background of them at once).
struct StructuredLimits {
  size_t max_text_bytes = 64 << 10;
  int max_choices = 256;
  size_t max_choice_bytes = 1024;
  std::chrono::milliseconds timeout{10000};
  int max_background = 2;
  int64_t cache_bytes = int64_t{256} << 20;  // compiled grammars kept per worker
};

// True when this build has the grammar engine (xgrammar, scripts/setup.sh); without it every
// constraint is refused with UNIMPLEMENTED and unconstrained requests work as before.
bool structured_outputs_enabled();

// Parses and compiles still running after their callers were refused (timeouts), process-wide.
int background_compiles();

// INVALID_ARGUMENT whose message starts with `field` for a constraint that cannot be compiled.
Status check_structured_output(const StructuredOutput& s, std::string_view field, const StructuredLimits& lim = {});

}  // namespace yoco
