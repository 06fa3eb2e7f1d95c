// jinja2 3.1's filters as HF's environment has them (tojson is HF's json.dumps) on the values
// chat templates see; case mapping is ASCII-only (docs/design.md, chat templates).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>

#include "tokenizer/jinja/builtins.h"

namespace yoco::jinja {
namespace {

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

}  // namespace

bool is_known_filter(std::string_view name) { return filters().count(name) || name == "d" || name == "e"; }

Value apply_filter(std::string_view name, const Value& v, Args& args) {
  if (name == "d") name = "default";
  if (name == "e") name = "escape";
  auto it = filters().find(name);
  if (it == filters().end()) throw Error("No filter named '" + std::string(name) + "'.");
  return it->second(v, args);
}

}  // namespace yoco::jinja
