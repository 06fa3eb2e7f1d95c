// The values a chat template computes with, modelled on the Python objects jinja2 sees: none,
// booleans, ints, floats, strings, lists, insertion-ordered dicts, namespaces, callables, and
// the undefined value a missing variable or attribute yields (renders as "", is falsy).
// Strings are UTF-8; length, indexing and slicing count code points as Python does.
// (docs/design.md, chat templates)
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/json.h"

namespace yoco::jinja {

// Raised inside the interpreter only; ChatTemplate turns it into a Status at its API.
struct Error : std::runtime_error {
  Error(std::string m, bool raised = false) : std::runtime_error(std::move(m)), from_template(raised) {}
  bool from_template;  // raise_exception(...) in the template: its message is passed on verbatim
};

class Value;
using List = std::vector<Value>;
struct Dict;
struct Args;
using Function = std::function<Value(Args&)>;

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kFunction };

  Value() = default;  // undefined
  static Value none() { return Value(Kind::kNone); }
  Value(bool b) : kind_(Kind::kBool), int_(b) {}
  Value(int64_t v) : kind_(Kind::kInt), int_(v) {}
  Value(int v) : Value(static_cast<int64_t>(v)) {}
  Value(double v) : kind_(Kind::kFloat), float_(v) {}
  Value(std::string s) : kind_(Kind::kString), str_(std::make_shared<const std::string>(std::move(s))) {}
  Value(const char* s) : Value(std::string(s)) {}
  Value(List l);
  static Value tuple(List l);  // a list that prints as (a, b) and is never equal to a list
  // What jinja2's lazy filters (map, select, selectattr, reject, rejectattr, unique, items,
  // reverse of a list) return: iterable once materialized here, but like a Python generator it
  // is always true, has no length or index, and prints as "<generator object>".
  static Value generator(List l);
  static Value dict(std::shared_ptr<Dict> d);
  static Value name_space(std::shared_ptr<Dict> d);
  static Value function(Function f);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt || kind_ == Kind::kBool; }  // Python: bool is an int
  bool is_number() const { return is_int() || kind_ == Kind::kFloat; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kList && tuple_; }
  bool is_generator() const { return kind_ == Kind::kList && generator_; }
  bool is_sequence() const { return kind_ == Kind::kList && !generator_; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_function() const { return kind_ == Kind::kFunction; }

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return int_; }
  double as_double() const { return kind_ == Kind::kFloat ? float_ : static_cast<double>(int_); }
  const std::string& str() const { return *str_; }
  const List& list() const { return *list_; }
  Dict& dict() const { return *dict_; }  // dicts and namespaces
  const Function& fn() const { return *fn_; }

  bool truthy() const;
  // Python's str(): None, True, 1.0, ['a', 1], {'k': 'v'}; undefined is "".
  std::string to_str() const;
  // Python's repr() (what str() of a container shows for its items).
  std::string repr() const;
  const char* type_name() const;

  static Value from_json(const Json& j);

 private:
  explicit Value(Kind k) : kind_(k) {}
  void set_depth_from(const List& items);
  Kind kind_ = Kind::kUndefined;
  bool tuple_ = false;
  bool generator_ = false;
  uint8_t depth_ = 0;  // nesting of lists and dicts (namespaces are leaves: they never print inside)
  int64_t int_ = 0;
  double float_ = 0;
  std::shared_ptr<const std::string> str_;
  std::shared_ptr<const List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<const Function> fn_;
};

// Insertion-ordered string-keyed map (Python dicts keep insertion order; templates iterate them).
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value v);
};

// Positional and keyword arguments of a call.
struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The argument at position i or named `name`; undefined when absent.
  Value get(size_t i, std::string_view name) const;
  bool has(size_t i, std::string_view name) const;
};

bool values_equal(const Value& a, const Value& b);
// Python's str.isspace() for one code point.
bool py_isspace(uint32_t cp);
// Python float repr: shortest round-trip digits, "1.0", "1e+16", "1e-05".
std::string py_float_repr(double d);
// json.dumps(v, ensure_ascii=False, indent=indent (< 0: none), sort_keys=False), as HF's tojson.
std::string to_json(const Value& v, int indent);

// Work accounting for the render running on this thread: the interpreter sets a budget, and
// every statement, loop iteration, call and every operation in proportion to the data it touches
// (items copied or compared, bytes scanned) charges it, so no template can run unbounded.
void reset_work(size_t budget);
void charge_work(size_t units);

// Lists and dicts nest at most this deep (printing, comparing and freeing them recurse).
inline constexpr int kMaxValueDepth = 100;

// "line L col C: ", the prefix of every error about a place in the template.
std::string location(int line, int col);

// UTF-8 code points of s (invalid bytes pass through one by one).
std::vector<std::string_view> code_points(std::string_view s);
size_t code_point_count(std::string_view s);

}  // namespace yoco::jinja
