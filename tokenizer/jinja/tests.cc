// jinja2 3.1's tests (`x is defined`, `x is string`, ...) (docs/design.md, chat templates).
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "tokenizer/jinja/builtins.h"

namespace yoco::jinja {
namespace {

using TestFn = std::function<bool(const Value&, Args&)>;

// Python's `value % num == want` for ints and floats (divisibleby, odd, even).
bool py_mod_is(const Value& v, const Value& num, int64_t want) {
  if (!v.is_number() || !num.is_number())
    throw Error(std::string("unsupported operand type(s) for %: '") + v.type_name() + "' and '" + num.type_name() +
                "'");
  if (v.is_int() && num.is_int()) {
    int64_t b = num.as_int();
    if (b == 0) throw Error("integer division or modulo by zero");
    int64_t m = v.as_int() % b;
    if (m != 0 && ((m < 0) != (b < 0))) m += b;
    return m == want;
  }
  double b = num.as_double();
  if (b == 0) throw Error("float modulo");
  double m = std::fmod(v.as_double(), b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m == static_cast<double>(want);
}

bool num_cmp(const Value& v, Args& a, const char* op) {
  Value o = a.get(0, "other");
  std::string s(op);
  if (s == "==") return values_equal(v, o);
  if (s == "!=") return !values_equal(v, o);
  if (!(v.is_number() && o.is_number()) && !(v.is_string() && o.is_string()))
    throw Error("'" + s + "' not supported between instances of '" + v.type_name() + "' and '" + o.type_name() + "'");
  int c = v.is_string() ? v.str().compare(o.str())
                        : (v.as_double() < o.as_double()   ? -1
                           : v.as_double() > o.as_double() ? 1
                                                           : 0);
  if (s == "<") return c < 0;
  if (s == "<=") return c <= 0;
  if (s == ">") return c > 0;
  return c >= 0;
}

const std::map<std::string, TestFn, std::less<>>& tests() {
  static const auto* table = new std::map<std::string, TestFn, std::less<>>{
      {"boolean", [](const Value& v, Args&) { return v.is_bool(); }},
      {"callable", [](const Value& v, Args&) { return v.is_function(); }},
      {"defined", [](const Value& v, Args&) { return !v.is_undefined(); }},
      {"divisibleby", [](const Value& v, Args& a) { return py_mod_is(v, a.get(0, "num"), 0); }},
      {"eq", [](const Value& v, Args& a) { return num_cmp(v, a, "=="); }},
      {"equalto", [](const Value& v, Args& a) { return num_cmp(v, a, "=="); }},
      {"==", [](const Value& v, Args& a) { return num_cmp(v, a, "=="); }},
      {"ne", [](const Value& v, Args& a) { return num_cmp(v, a, "!="); }},
      {"!=", [](const Value& v, Args& a) { return num_cmp(v, a, "!="); }},
      {"lt", [](const Value& v, Args& a) { return num_cmp(v, a, "<"); }},
      {"lessthan", [](const Value& v, Args& a) { return num_cmp(v, a, "<"); }},
      {"le", [](const Value& v, Args& a) { return num_cmp(v, a, "<="); }},
      {"gt", [](const Value& v, Args& a) { return num_cmp(v, a, ">"); }},
      {"greaterthan", [](const Value& v, Args& a) { return num_cmp(v, a, ">"); }},
      {"ge", [](const Value& v, Args& a) { return num_cmp(v, a, ">="); }},
      {"even", [](const Value& v, Args&) { return py_mod_is(v, Value(int64_t{2}), 0); }},
      {"odd", [](const Value& v, Args&) { return py_mod_is(v, Value(int64_t{2}), 1); }},
      {"false", [](const Value& v, Args&) { return v.is_bool() && !v.as_bool(); }},
      {"true", [](const Value& v, Args&) { return v.is_bool() && v.as_bool(); }},
      {"float", [](const Value& v, Args&) { return v.kind() == Value::Kind::kFloat; }},
      {"integer", [](const Value& v, Args&) { return v.kind() == Value::Kind::kInt; }},
      {"number", [](const Value& v, Args&) { return v.is_number(); }},
      {"in", [](const Value& v, Args& a) { return contains(a.get(0, "seq"), v); }},
      {"iterable",
       [](const Value& v, Args&) { return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict(); }},
      {"sequence",
       [](const Value& v, Args&) { return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_dict(); }},
      {"mapping", [](const Value& v, Args&) { return v.is_dict(); }},
      {"none", [](const Value& v, Args&) { return v.is_none(); }},
      {"string", [](const Value& v, Args&) { return v.is_string(); }},
      {"undefined", [](const Value& v, Args&) { return v.is_undefined(); }},
      {"lower",
       [](const Value& v, Args&) {
         std::string s = v.to_str();
         return std::any_of(s.begin(), s.end(), is_lower_ascii) && !std::any_of(s.begin(), s.end(), is_upper_ascii);
       }},
      {"upper",
       [](const Value& v, Args&) {
         std::string s = v.to_str();
         return std::any_of(s.begin(), s.end(), is_upper_ascii) && !std::any_of(s.begin(), s.end(), is_lower_ascii);
       }},
      {"sameas",
       [](const Value& v, Args& a) {
         Value o = a.get(0, "other");
         if (v.kind() != o.kind()) return false;
         if (v.is_none() || v.is_undefined()) return true;
         if (v.is_bool() || v.kind() == Value::Kind::kInt) return v.as_int() == o.as_int();
         return values_equal(v, o);
       }},
  };
  return *table;
}

}  // namespace

bool is_known_test(std::string_view name) { return tests().count(name) > 0; }

bool apply_test(std::string_view name, const Value& v, Args& args) {
  auto it = tests().find(name);
  if (it == tests().end()) throw Error("No test named '" + std::string(name) + "'.");
  return it->second(v, args);
}

}  // namespace yoco::jinja
