// jinja2's filters and tests, and the Python str/dict methods templates call, each as
// ImmutableSandboxedEnvironment allows (no list.append). (docs/design.md, chat templates)
#pragma once

#include <string>
#include <string_view>

#include "tokenizer/jinja/value.h"

namespace yoco::jinja {

bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);

// Throw jinja::Error on a bad argument or type.
Value apply_filter(std::string_view name, const Value& v, Args& args);
bool apply_test(std::string_view name, const Value& v, Args& args);
Value call_method(const Value& obj, std::string_view name, Args& args);

// Attribute and subscript access as jinja2's sandbox does it: a missing key, index or attribute
// is undefined; only undefined itself refuses (`what` names it in the error).
Value get_attr(const Value& obj, std::string_view name, const std::string& what);
Value get_item(const Value& obj, const Value& key, const std::string& what);
bool contains(const Value& container, const Value& item);

// Python str helpers.
std::string py_strip(std::string_view s, const Value& chars, bool left, bool right);
std::string ascii_lower(std::string s);
std::string ascii_upper(std::string s);

// Bounds on what a template may build (docs/design.md, chat templates).
inline constexpr size_t kMaxStringBytes = 16u << 20;
inline constexpr size_t kMaxListItems = 1u << 20;
void check_size(const std::string& s);

}  // namespace yoco::jinja
