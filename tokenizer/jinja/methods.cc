// The Python str, dict and list methods templates call, and attribute lookup as jinja2's
// ImmutableSandboxedEnvironment does it (no method that modifies a value) (docs/design.md,
// chat templates).
#include <algorithm>
#include <initializer_list>

#include "tokenizer/jinja/builtins.h"

namespace yoco::jinja {
namespace {

// Python's str.title() (the method): letters after a non-letter start a word.
std::string py_title(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (char c : s) {
    bool letter = is_lower_ascii(c) || is_upper_ascii(c);
    if (letter) {
      out += prev_cased ? (is_upper_ascii(c) ? static_cast<char>(c + 32) : c)
                        : (is_lower_ascii(c) ? static_cast<char>(c - 32) : c);
    } else {
      out += c;
    }
    prev_cased = letter;
  }
  return out;
}

std::vector<std::string> py_split(const std::string& s, const Value& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep.is_undefined() || sep.is_none()) {  // runs of whitespace, no empty strings
    auto cps = code_points(s);
    size_t i = 0;
    while (true) {
      while (i < cps.size() && py_isspace(cp_of(cps[i]))) ++i;
      if (i == cps.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        std::string rest;
        for (size_t j = i; j < cps.size(); ++j) rest += cps[j];
        out.push_back(py_strip(rest, Value(), false, true));
        break;
      }
      std::string word;
      while (i < cps.size() && !py_isspace(cp_of(cps[i]))) word += cps[i++];
      out.push_back(std::move(word));
    }
    return out;
  }
  std::string d = need_string(sep, "separator");
  if (d.empty()) throw Error("empty separator");
  size_t pos = 0;
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    size_t f = s.find(d, pos);
    if (f == std::string::npos) break;
    out.push_back(s.substr(pos, f - pos));
    pos = f + d.size();
  }
  out.push_back(s.substr(pos));
  return out;
}

bool starts_or_ends(const std::string& s, const Value& arg, bool start) {
  auto one = [&](const Value& p) {
    std::string x = need_string(p, start ? "startswith argument" : "endswith argument");
    if (x.size() > s.size()) return false;
    return start ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (arg.is_list()) return std::any_of(arg.list().begin(), arg.list().end(), one);
  return one(arg);
}

Value string_method(const std::string& s, std::string_view name, Args& a) {
  if (name == "strip") return Value(py_strip(s, a.get(0, "chars"), true, true));
  if (name == "lstrip") return Value(py_strip(s, a.get(0, "chars"), true, false));
  if (name == "rstrip") return Value(py_strip(s, a.get(0, "chars"), false, true));
  if (name == "upper") return Value(ascii_upper(s));
  if (name == "lower") return Value(ascii_lower(s));
  if (name == "title") return Value(py_title(s));
  if (name == "capitalize") return Value(capitalize(s));
  if (name == "startswith") return Value(starts_or_ends(s, a.get(0, "prefix"), true));
  if (name == "endswith") return Value(starts_or_ends(s, a.get(0, "suffix"), false));
  if (name == "split") {
    Value m = a.get(1, "maxsplit");
    List out;
    for (auto& p : py_split(s, a.get(0, "sep"), m.is_undefined() ? -1 : need_int(m, "maxsplit")))
      out.emplace_back(std::move(p));
    return Value(std::move(out));
  }
  if (name == "splitlines") {
    List out;
    for (auto& p : splitlines(s)) out.emplace_back(std::move(p));
    return Value(std::move(out));
  }
  if (name == "replace") {
    Value count = a.get(2, "count");
    return Value(replace_all(s, need_string(a.get(0, "old"), "old"), need_string(a.get(1, "new"), "new"),
                             count.is_undefined() ? -1 : need_int(count, "count")));
  }
  if (name == "find" || name == "index" || name == "rfind" || name == "count") {
    std::string sub = need_string(a.get(0, "sub"), "substring");
    if (name == "count") {
      if (sub.empty()) return Value(static_cast<int64_t>(code_point_count(s) + 1));
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value(n);
    }
    size_t p = name == "rfind" ? s.rfind(sub) : s.find(sub);
    if (p == std::string::npos) {
      if (name == "index") throw Error("substring not found");
      return Value(int64_t{-1});
    }
    return Value(static_cast<int64_t>(code_point_count(std::string_view(s).substr(0, p))));
  }
  if (name == "join") {
    std::string out;
    bool first = true;
    for (const Value& e : to_items(a.get(0, "iterable"), "join")) {
      if (!first) out += s;
      first = false;
      out += need_string(e, "join item");
      check_size(out);
    }
    return Value(std::move(out));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    std::string x = need_string(a.get(0, "prefix"), "argument");
    bool pre = name == "removeprefix";
    if (starts_or_ends(s, Value(x), pre) && !x.empty())
      return Value(pre ? s.substr(x.size()) : s.substr(0, s.size() - x.size()));
    return Value(s);
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace") {
    if (s.empty()) return Value(false);
    for (char c : s) {
      bool digit = c >= '0' && c <= '9', alpha = is_lower_ascii(c) || is_upper_ascii(c);
      bool ok = name == "isdigit"   ? digit
                : name == "isalpha" ? alpha
                : name == "isalnum" ? digit || alpha
                                    : py_isspace(static_cast<unsigned char>(c));
      if (!ok) return Value(false);
    }
    return Value(true);
  }
  throw Error("'str' object has no attribute '" + std::string(name) + "'");
}

// Python attributes that jinja2's sandboxed getattr finds before a dict key of the same name
// (`spec.items` is dict.items, not spec["items"]); the mutating ones are unsafe, so undefined.
bool one_of(std::string_view name, std::initializer_list<std::string_view> names) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

bool is_str_method(std::string_view n) {
  return one_of(n, {"capitalize", "casefold",     "center",       "count",   "encode",     "endswith",    "expandtabs",
                    "find",       "format",       "format_map",   "index",   "isalnum",    "isalpha",     "isascii",
                    "isdecimal",  "isdigit",      "isidentifier", "islower", "isnumeric",  "isprintable", "isspace",
                    "istitle",    "isupper",      "join",         "ljust",   "lower",      "lstrip",      "maketrans",
                    "partition",  "removeprefix", "removesuffix", "replace", "rfind",      "rindex",      "rjust",
                    "rpartition", "rsplit",       "rstrip",       "split",   "splitlines", "startswith",  "strip",
                    "swapcase",   "title",        "translate",    "upper",   "zfill"});
}

Value bound_method(const Value& obj, std::string_view name) {
  std::string n(name);
  return Value::function([obj, n](Args& a) { return call_method(obj, n, a); });
}

}  // namespace

Value call_method(const Value& obj, std::string_view name, Args& args) {
  if (obj.is_string()) return string_method(obj.str(), name, args);
  if (obj.is_dict()) {
    const auto& items = obj.dict().items;
    if (name == "items") {
      List out;
      for (const auto& [k, e] : items) out.push_back(Value::tuple(List{Value(k), e}));
      return Value(std::move(out));
    }
    if (name == "keys" || name == "values") {
      List out;
      for (const auto& [k, e] : items) out.push_back(name == "keys" ? Value(k) : e);
      return Value(std::move(out));
    }
    if (name == "copy") return obj;
    if (name == "get") {
      Value key = args.get(0, "key");
      const Value* found = key.is_string() ? obj.dict().find(key.str()) : nullptr;
      if (found) return *found;
      Value d = args.get(1, "default");
      return d.is_undefined() ? Value::none() : d;
    }
    throw Error("'dict' object has no callable attribute '" + std::string(name) + "'");
  }
  if (obj.is_list()) {
    if (name == "copy") return Value(obj.list());
    if (name == "index" || name == "count") {
      Value x = args.get(0, "value");
      int64_t n = 0;
      for (size_t i = 0; i < obj.list().size(); ++i) {
        if (!values_equal(obj.list()[i], x)) continue;
        if (name == "index") return Value(static_cast<int64_t>(i));
        ++n;
      }
      if (name == "index") throw Error("value is not in list");
      return Value(n);
    }
    throw Error("access to attribute '" + std::string(name) + "' of 'list' object is unsafe.");
  }
  throw Error(std::string("'") + obj.type_name() + "' object has no attribute '" + std::string(name) + "'");
}

Value get_attr(const Value& obj, std::string_view name, const std::string& what) {
  if (obj.is_undefined()) throw Error(what);
  if (obj.is_dict()) {
    if (one_of(name, {"items", "keys", "values", "get", "copy", "fromkeys"})) return bound_method(obj, name);
    if (one_of(name, {"pop", "popitem", "setdefault", "update", "clear"})) return Value();
  }
  if (obj.is_dict() || obj.is_namespace()) {
    const Value* v = obj.dict().find(name);
    return v ? *v : Value();
  }
  if (obj.is_string() && is_str_method(name)) return bound_method(obj, name);
  if (obj.is_sequence() && one_of(name, {"index", "count", "copy"})) return bound_method(obj, name);
  return Value();
}

}  // namespace yoco::jinja
