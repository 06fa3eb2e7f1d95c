// Renders a parsed template: statements, scopes (a for loop's body and a macro have their own;
// `namespace` objects carry values out), loop controls, and the bounds on output size, work
// and recursion that keep a hostile template harmless. (docs/design.md, chat templates)
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/ast.h"

namespace yoco::jinja {

struct RenderLimits {
  size_t max_output_bytes = 16u << 20;
  size_t max_steps = 5'000'000;  // work units: statements, loop iterations, calls, items and bytes touched
  int max_call_depth = 100;      // macro recursion
};

// Renders `tpl` with the given top-level variables. Throws jinja::Error.
std::string render(const Template& tpl, std::vector<std::pair<std::string, Value>> globals,
                   const RenderLimits& limits = {});

}  // namespace yoco::jinja
