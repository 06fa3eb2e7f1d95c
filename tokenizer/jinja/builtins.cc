// Filters, tests and methods (docs/design.md, chat templates). Each follows jinja2 3.1 and
// Python 3 on the values chat templates see; case mapping is ASCII-only.
#include "tokenizer/jinja/builtins.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <map>
#include <set>

#include "tokenizer/utf8.h"

namespace yoco::jinja {
namespace {

uint32_t cp_of(std::string_view c) { return utf8::char_len(c, 0) ? utf8::decode(c, 0) : 0xfffd; }

bool is_lower_ascii(char c) { return c >= 'a' && c <= 'z'; }
bool is_upper_ascii(char c) { return c >= 'A' && c <= 'Z'; }

std::string need_string(const Value& v, const char* what) {
  if (!v.is_string()) throw Error(std::string(what) + " must be a string, not '" + v.type_name() + "'");
  return v.str();
}

int64_t need_int(const Value& v, const char* what) {
  if (!v.is_int()) throw Error(std::string(what) + " must be an integer, not '" + v.type_name() + "'");
  return v.as_int();
}

// Python's str.splitlines() (without keepends).
std::vector<std::string> splitlines(std::string_view s) {
  std::vector<std::string> out;
  std::string cur;
  auto cps = code_points(s);
  for (size_t i = 0; i < cps.size(); ++i) {
    uint32_t cp = cp_of(cps[i]);
    bool brk = cp == '\n' || cp == '\r' || cp == 0x0b || cp == 0x0c || (cp >= 0x1c && cp <= 0x1e) || cp == 0x85 ||
               cp == 0x2028 || cp == 0x2029;
    if (!brk) {
      cur += cps[i];
      continue;
    }
    if (cp == '\r' && i + 1 < cps.size() && cps[i + 1] == "\n") ++i;
    out.push_back(std::move(cur));
    cur.clear();
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` between every character
    auto cps = code_points(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      if (i < cps.size()) out += cps[i];
    }
    check_size(out);
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t f = s.find(from, pos);
    if (f == std::string::npos) break;
    out.append(s, pos, f - pos);
    out += to;
    pos = f + from.size();
    ++done;
    check_size(out);
  }
  out.append(s, pos, std::string::npos);
  check_size(out);
  return out;
}

std::vector<Value> to_items(const Value& v, const char* what) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kList:
      return v.list();
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& kv : v.dict().items) keys.emplace_back(kv.first);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> out;
      for (std::string_view c : code_points(v.str())) out.emplace_back(std::string(c));
      return out;
    }
    default:
      throw Error(std::string("'") + v.type_name() + "' object is not iterable (" + what + ")");
  }
}

// jinja2's attribute= path: "a.b" or "0".
Value attr_path(const Value& v, const Value& attribute) {
  if (attribute.is_int()) return get_item(v, attribute, "value is undefined");
  std::string path = attribute.to_str();
  Value cur = v;
  size_t pos = 0;
  while (true) {
    size_t dot = path.find('.', pos);
    std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = digits ? get_item(cur, Value(static_cast<int64_t>(std::stoll(part))), "value is undefined")
                 : get_item(cur, Value(part), "'" + part + "' is undefined");
    if (dot == std::string::npos) return cur;
    pos = dot + 1;
  }
}

int64_t length_of(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return static_cast<int64_t>(code_point_count(v.str()));
    case Value::Kind::kList:
      if (v.is_generator()) throw Error("object of type 'generator' has no len()");
      return static_cast<int64_t>(v.list().size());
    case Value::Kind::kDict:
      return static_cast<int64_t>(v.dict().items.size());
    default:
      throw Error(std::string("object of type '") + v.type_name() + "' has no len()");
  }
}

// select/reject/selectattr/rejectattr: args after the attribute are a test name and its arguments.
Value select(const Value& seq, Args& args, bool by_attr, bool keep) {
  size_t first = by_attr ? 1 : 0;
  Value attribute = by_attr ? args.get(0, "attribute") : Value();
  if (by_attr && attribute.is_undefined()) throw Error("selectattr/rejectattr need an attribute");
  std::string test;
  Args test_args;
  if (args.positional.size() > first) {
    test = need_string(args.positional[first], "test name");
    if (!is_known_test(test)) throw Error("No test named '" + test + "'.");
    test_args.positional.assign(args.positional.begin() + static_cast<long>(first) + 1, args.positional.end());
  }
  List out;
  for (const Value& item : to_items(seq, "select")) {
    Value probe = by_attr ? attr_path(item, attribute) : item;
    bool ok = test.empty() ? probe.truthy() : apply_test(test, probe, test_args);
    if (ok == keep) out.push_back(item);
  }
  return Value::generator(std::move(out));
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string capitalize(const std::string& s) {
  std::string out = ascii_lower(s);
  if (!out.empty() && is_lower_ascii(out[0])) out[0] = static_cast<char>(out[0] - 32);
  return out;
}

// jinja2's title: words start after '-', whitespace, '(', '{', '[' or '<'.
std::string title(const std::string& s) {
  std::string out;
  bool start = true;
  for (char c : s) {
    bool sep = c == '-' || c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' || c == '(' ||
               c == '{' || c == '[' || c == '<';
    if (sep) {
      out += c;
      start = true;
    } else if (start) {
      out += is_lower_ascii(c) ? static_cast<char>(c - 32) : c;
      start = false;
    } else {
      out += is_upper_ascii(c) ? static_cast<char>(c + 32) : c;
    }
  }
  return out;
}

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

Value to_int(const Value& v, const Value& dflt) {
  if (v.is_undefined()) throw Error("value is undefined");  // int(Undefined) raises in jinja2
  Value d = dflt.is_undefined() ? Value(int64_t{0}) : dflt;
  if (v.is_int()) return Value(v.as_int());
  if (v.kind() == Value::Kind::kFloat)
    return std::isfinite(v.as_double()) ? Value(static_cast<int64_t>(v.as_double())) : d;
  if (v.is_string()) {
    std::string s = py_strip(v.str(), Value(), true, true);
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    if (s.empty()) return d;
    char* end = nullptr;
    errno = 0;
    long long n = std::strtoll(s.c_str(), &end, 10);
    if (*end == '\0' && errno == 0) return Value(static_cast<int64_t>(n));
    double f = std::strtod(s.c_str(), &end);
    if (*end == '\0' && std::isfinite(f)) return Value(static_cast<int64_t>(f));
    return d;
  }
  return d;
}

Value to_float(const Value& v, const Value& dflt) {
  if (v.is_undefined()) throw Error("value is undefined");
  Value d = dflt.is_undefined() ? Value(0.0) : dflt;
  if (v.is_number()) return Value(v.as_double());
  if (v.is_string()) {
    std::string s = py_strip(v.str(), Value(), true, true);
    char* end = nullptr;
    double f = std::strtod(s.c_str(), &end);
    if (!s.empty() && *end == '\0') return Value(f);
  }
  return d;
}

std::string indent(const std::string& s, const Value& width, bool first, bool blank) {
  std::string ind = width.is_string() ? width.str()
                                      : std::string(static_cast<size_t>(std::max<int64_t>(
                                                        0, width.is_undefined() ? 4 : need_int(width, "indent width"))),
                                                    ' ');
  std::vector<std::string> lines = splitlines(s + "\n");
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) {
        rv += '\n';
        rv += ind;
      }
      rv += lines[i];
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      rv += '\n';
      if (!lines[i].empty()) rv += ind;
      rv += lines[i];
    }
  }
  if (first) rv = ind + rv;
  check_size(rv);
  return rv;
}

Value sort_keys(const Value& v) {
  if (v.is_list()) {
    List out;
    for (const Value& e : v.list()) out.push_back(sort_keys(e));
    return Value(std::move(out));
  }
  if (!v.is_dict()) return v;
  auto d = std::make_shared<Dict>();
  for (const auto& [k, e] : v.dict().items) d->items.emplace_back(k, sort_keys(e));
  std::stable_sort(d->items.begin(), d->items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return Value::dict(std::move(d));
}

std::string ensure_ascii(const std::string& s) {
  std::string out;
  for (std::string_view c : code_points(s)) {
    if (c.size() == 1) {
      out += c;
      continue;
    }
    uint32_t cp = cp_of(c);
    char b[16];
    if (cp >= 0x10000) {
      cp -= 0x10000;
      std::snprintf(b, sizeof(b), "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
    } else {
      std::snprintf(b, sizeof(b), "\\u%04x", cp);
    }
    out += b;
  }
  return out;
}

using FilterFn = std::function<Value(const Value&, Args&)>;

const std::map<std::string, FilterFn, std::less<>>& filters() {
  static const auto* table = new std::map<std::string, FilterFn, std::less<>>{
      {"abs",
       [](const Value& v, Args&) -> Value {
         if (v.kind() == Value::Kind::kFloat) return Value(std::fabs(v.as_double()));
         return Value(static_cast<int64_t>(std::llabs(need_int(v, "abs() argument"))));
       }},
      {"attr", [](const Value& v,
                  Args& a) { return get_attr(v, need_string(a.get(0, "name"), "attr name"), "value is undefined"); }},
      {"capitalize", [](const Value& v, Args&) { return Value(capitalize(v.to_str())); }},
      {"count", [](const Value& v, Args&) { return Value(length_of(v)); }},
      {"default",
       [](const Value& v, Args& a) {
         bool boolean = a.get(1, "boolean").truthy();
         if (v.is_undefined() || (boolean && !v.truthy())) {
           Value d = a.get(0, "default_value");
           return d.is_undefined() ? Value("") : d;
         }
         return v;
       }},
      {"dictsort",
       [](const Value& v, Args& a) {
         if (!v.is_dict()) throw Error("dictsort needs a dict");
         bool by_value = a.get(1, "by").is_string() && a.get(1, "by").str() == "value";
         auto items = v.dict().items;
         std::stable_sort(items.begin(), items.end(), [&](const auto& x, const auto& y) {
           if (by_value) return x.second.to_str() < y.second.to_str();
           return ascii_lower(x.first) < ascii_lower(y.first);
         });
         if (a.get(2, "reverse").truthy()) std::reverse(items.begin(), items.end());
         List out;
         for (auto& [k, e] : items) out.push_back(Value::tuple(List{Value(k), e}));
         return Value(std::move(out));
       }},
      {"escape", [](const Value& v, Args&) { return Value(html_escape(v.to_str())); }},
      {"first",
       [](const Value& v, Args&) {
         auto items = to_items(v, "first");
         return items.empty() ? Value() : items.front();
       }},
      {"float", [](const Value& v, Args& a) { return to_float(v, a.get(0, "default")); }},
      {"indent",
       [](const Value& v, Args& a) {
         if (!v.is_string())
           throw Error(std::string("unsupported operand type(s) for +=: '") + v.type_name() + "' and 'str'");
         return Value(indent(v.to_str(), a.get(0, "width"), a.get(1, "first").truthy(), a.get(2, "blank").truthy()));
       }},
      {"int", [](const Value& v, Args& a) { return to_int(v, a.get(0, "default")); }},
      {"items",
       [](const Value& v, Args&) -> Value {
         if (v.is_undefined()) return Value::generator(List{});
         if (!v.is_dict()) throw Error("Can only get item pairs from a mapping.");
         List out;
         for (const auto& [k, e] : v.dict().items) out.push_back(Value::tuple(List{Value(k), e}));
         return Value::generator(std::move(out));
       }},
      {"join",
       [](const Value& v, Args& a) {
         std::string sep = a.get(0, "d").is_undefined() ? "" : a.get(0, "d").to_str();
         Value attribute = a.get(1, "attribute");
         std::string out;
         bool first = true;
         for (const Value& e : to_items(v, "join")) {
           if (!first) out += sep;
           first = false;
           out += (attribute.is_undefined() ? e : attr_path(e, attribute)).to_str();
           check_size(out);
         }
         return Value(std::move(out));
       }},
      {"last",
       [](const Value& v, Args&) {
         if (v.is_generator()) throw Error("'generator' object is not reversible");
         auto items = to_items(v, "last");
         return items.empty() ? Value() : items.back();
       }},
      {"length", [](const Value& v, Args&) { return Value(length_of(v)); }},
      {"list", [](const Value& v, Args&) { return Value(to_items(v, "list")); }},
      {"lower", [](const Value& v, Args&) { return Value(ascii_lower(v.to_str())); }},
      {"map",
       [](const Value& v, Args& a) {
         List out;
         Value attribute = a.get(99, "attribute");
         if (!attribute.is_undefined()) {
           Value dflt = a.get(99, "default");
           for (const Value& e : to_items(v, "map")) {
             Value r = attr_path(e, attribute);
             out.push_back(r.is_undefined() && !dflt.is_undefined() ? dflt : r);
           }
           return Value::generator(std::move(out));
         }
         if (a.positional.empty()) throw Error("map needs a filter name or attribute=");
         std::string f = need_string(a.positional[0], "filter name");
         if (!is_known_filter(f)) throw Error("No filter named '" + f + "'.");
         Args rest;
         rest.positional.assign(a.positional.begin() + 1, a.positional.end());
         rest.keyword = a.keyword;
         for (const Value& e : to_items(v, "map")) out.push_back(apply_filter(f, e, rest));
         return Value::generator(std::move(out));
       }},
      {"reject", [](const Value& v, Args& a) { return select(v, a, false, false); }},
      {"rejectattr", [](const Value& v, Args& a) { return select(v, a, true, false); }},
      {"replace",
       [](const Value& v, Args& a) {
         Value count = a.get(2, "count");
         return Value(replace_all(v.to_str(), a.get(0, "old").to_str(), a.get(1, "new").to_str(),
                                  count.is_undefined() || count.is_none() ? -1 : need_int(count, "count")));
       }},
      {"reverse",
       [](const Value& v, Args&) -> Value {
         if (v.is_string()) {
           auto cps = code_points(v.str());
           std::string out;
           for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
           return Value(std::move(out));
         }
         auto items = to_items(v, "reverse");
         std::reverse(items.begin(), items.end());
         if (v.is_sequence()) return Value::generator(std::move(items));  // reversed(list): an iterator
         return Value(std::move(items));
       }},
      {"round",
       [](const Value& v, Args& a) {
         int64_t p = a.get(0, "precision").is_undefined() ? 0 : need_int(a.get(0, "precision"), "precision");
         std::string method = a.get(1, "method").is_undefined() ? "common" : a.get(1, "method").to_str();
         if (!v.is_number()) throw Error("round needs a number");
         if (v.is_int() && method == "common") return Value(v.as_int());  // Python: round(int, n) is an int
         double x = v.as_double(), m = std::pow(10.0, static_cast<double>(p));
         double r = method == "ceil"    ? std::ceil(x * m) / m
                    : method == "floor" ? std::floor(x * m) / m
                                        : std::nearbyint(x * m) / m;  // Python round: half to even
         return Value(r);
       }},
      {"safe", [](const Value& v, Args&) { return Value(v.to_str()); }},  // Markup(value) is a str
      {"select", [](const Value& v, Args& a) { return select(v, a, false, true); }},
      {"selectattr", [](const Value& v, Args& a) { return select(v, a, true, true); }},
      {"string", [](const Value& v, Args&) { return Value(v.to_str()); }},
      {"sum",
       [](const Value& v, Args& a) {
         Value attribute = a.get(0, "attribute");
         Value total = a.get(1, "start").is_undefined() ? Value(int64_t{0}) : a.get(1, "start");
         for (const Value& e : to_items(v, "sum")) {
           Value x = attribute.is_undefined() ? e : attr_path(e, attribute);
           if (!x.is_number() || !total.is_number()) throw Error("sum needs numbers");
           total = (x.is_int() && total.is_int()) ? Value(total.as_int() + x.as_int())
                                                  : Value(total.as_double() + x.as_double());
         }
         return total;
       }},
      {"title", [](const Value& v, Args&) { return Value(title(v.to_str())); }},
      {"tojson",
       [](const Value& v, Args& a) {
         Value ind = a.get(1, "indent");
         int indent = ind.is_undefined() || ind.is_none() ? -1 : static_cast<int>(need_int(ind, "indent"));
         Value x = a.get(4, "sort_keys").truthy() ? sort_keys(v) : v;
         std::string out = to_json(x, indent);
         if (a.get(0, "ensure_ascii").truthy()) out = ensure_ascii(out);
         check_size(out);
         return Value(std::move(out));
       }},
      {"trim", [](const Value& v, Args& a) { return Value(py_strip(v.to_str(), a.get(0, "chars"), true, true)); }},
      {"unique",
       [](const Value& v, Args& a) {
         bool cs = a.get(0, "case_sensitive").truthy();
         Value attribute = a.get(1, "attribute");
         List out;
         std::set<std::string> seen;  // Python's set: 1, 1.0 and True are one key
         for (const Value& e : to_items(v, "unique")) {
           Value key = attribute.is_undefined() ? e : attr_path(e, attribute);
           std::string canon(1, key.is_number() ? 'n' : key.is_string() ? 's' : 'o');
           canon += key.is_number()   ? py_float_repr(key.as_double())
                    : key.is_string() ? (cs ? key.str() : ascii_lower(key.str()))
                                      : key.repr();
           if (seen.insert(std::move(canon)).second) out.push_back(e);
         }
         return Value::generator(std::move(out));
       }},
      {"upper", [](const Value& v, Args&) { return Value(ascii_upper(v.to_str())); }},
      {"wordcount",
       [](const Value& v, Args&) {
         int64_t n = 0;
         bool in = false;
         for (char c : v.to_str()) {
           bool w = is_lower_ascii(c) || is_upper_ascii(c) || (c >= '0' && c <= '9') || c == '_' ||
                    static_cast<unsigned char>(c) >= 0x80;
           if (w && !in) ++n;
           in = w;
         }
         return Value(n);
       }},
  };
  return *table;
}

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

}  // namespace

void check_size(const std::string& s) {
  charge_work(1 + s.size() / 64);
  if (s.size() > kMaxStringBytes) throw Error("string exceeds " + std::to_string(kMaxStringBytes) + " bytes");
}

std::string ascii_lower(std::string s) {
  for (char& c : s)
    if (is_upper_ascii(c)) c = static_cast<char>(c + 32);
  return s;
}

std::string ascii_upper(std::string s) {
  for (char& c : s)
    if (is_lower_ascii(c)) c = static_cast<char>(c - 32);
  return s;
}

std::string py_strip(std::string_view s, const Value& chars, bool left, bool right) {
  auto cps = code_points(s);
  std::vector<std::string_view> set;
  bool by_set = chars.is_string();
  if (by_set) set = code_points(chars.str());
  else if (!chars.is_undefined() && !chars.is_none()) throw Error("strip arg must be None or str");
  auto strip = [&](std::string_view c) {
    if (by_set) return std::find(set.begin(), set.end(), c) != set.end();
    return py_isspace(cp_of(c));
  };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip(cps[b])) ++b;
  if (right)
    while (e > b && strip(cps[e - 1])) --e;
  std::string out;
  for (size_t i = b; i < e; ++i) out += cps[i];
  return out;
}

bool is_known_filter(std::string_view name) { return filters().count(name) || name == "d" || name == "e"; }

bool is_known_test(std::string_view name) { return tests().count(name) > 0; }

Value apply_filter(std::string_view name, const Value& v, Args& args) {
  if (name == "d") name = "default";
  if (name == "e") name = "escape";
  auto it = filters().find(name);
  if (it == filters().end()) throw Error("No filter named '" + std::string(name) + "'.");
  return it->second(v, args);
}

bool apply_test(std::string_view name, const Value& v, Args& args) {
  auto it = tests().find(name);
  if (it == tests().end()) throw Error("No test named '" + std::string(name) + "'.");
  return it->second(v, args);
}

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

namespace {

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

Value get_item(const Value& obj, const Value& key, const std::string& what) {
  if (obj.is_undefined()) throw Error(what);
  if (obj.is_dict() || obj.is_namespace()) {
    if (!key.is_string()) return Value();
    const Value* v = obj.dict().find(key.str());
    return v ? *v : Value();
  }
  if ((obj.is_sequence() || obj.is_string()) && key.is_int()) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      int64_t n = static_cast<int64_t>(obj.list().size());
      if (i < 0) i += n;
      return i >= 0 && i < n ? obj.list()[static_cast<size_t>(i)] : Value();
    }
    auto cps = code_points(obj.str());
    int64_t n = static_cast<int64_t>(cps.size());
    if (i < 0) i += n;
    return i >= 0 && i < n ? Value(std::string(cps[static_cast<size_t>(i)])) : Value();
  }
  return Value();
}

bool contains(const Value& container, const Value& item) {
  if (container.is_string()) charge_work(1 + container.str().size() / 64);
  switch (container.kind()) {
    case Value::Kind::kString:
      if (!item.is_string())
        throw Error("'in <string>' requires string as left operand, not " + std::string(item.type_name()));
      return container.str().find(item.str()) != std::string::npos;
    case Value::Kind::kList:
      return std::any_of(container.list().begin(), container.list().end(),
                         [&](const Value& e) { return values_equal(e, item); });
    case Value::Kind::kDict:
      if (item.is_list() || item.is_dict()) throw Error(std::string("unhashable type: '") + item.type_name() + "'");
      return item.is_string() && container.dict().find(item.str()) != nullptr;
    case Value::Kind::kUndefined:
      return false;
    default:
      throw Error(std::string("argument of type '") + container.type_name() + "' is not iterable");
  }
}

}  // namespace yoco::jinja
