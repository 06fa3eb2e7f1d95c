// Filters, tests and methods: jinja2 3.1 and Python 3 behaviour on the values chat templates see
// (filters.cc, tests.cc, methods.cc; shared helpers in builtins.cc). (docs/design.md, chat templates)
#pragma once

#include <string>
#include <string_view>
#include <vector>

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
std::string capitalize(const std::string& s);
std::vector<std::string> splitlines(std::string_view s);  // str.splitlines()
// str.replace; count < 0: all.
std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count);
uint32_t cp_of(std::string_view c);  // the code point of one UTF-8 character
bool is_lower_ascii(char c);
bool is_upper_ascii(char c);

// Argument and iteration helpers shared by filters, tests and methods.
std::string need_string(const Value& v, const char* what);
int64_t need_int(const Value& v, const char* what);
std::vector<Value> to_items(const Value& v, const char* what);  // iterate as Python does
Value attr_path(const Value& v, const Value& attribute);        // jinja2's attribute="a.b.0"
int64_t length_of(const Value& v);                              // len()

// Bounds on what a template may build (docs/design.md, chat templates).
inline constexpr size_t kMaxStringBytes = 16u << 20;
inline constexpr size_t kMaxListItems = 1u << 20;
void check_size(const std::string& s);

}  // namespace yoco::jinja
