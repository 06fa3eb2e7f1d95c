// Python's str/repr/==/json.dumps for template values (docs/design.md, chat templates).
#include "tokenizer/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "tokenizer/utf8.h"

namespace yoco::jinja {

namespace {
thread_local size_t work_left = static_cast<size_t>(-1);
}  // namespace

void reset_work(size_t budget) { work_left = budget; }

void charge_work(size_t units) {
  if (units > work_left) {
    work_left = 0;
    throw Error("template exceeded its work limit");
  }
  work_left -= units;
}

void Value::set_depth_from(const List& items) {
  int d = 0;
  for (const Value& v : items) d = std::max(d, static_cast<int>(v.depth_));
  if (d + 1 > kMaxValueDepth) throw Error("value nested too deeply");
  depth_ = static_cast<uint8_t>(d + 1);
}

Value::Value(List l) : kind_(Kind::kList) {
  charge_work(l.size());
  set_depth_from(l);
  list_ = std::make_shared<const List>(std::move(l));
}

Value Value::tuple(List l) {
  Value v(std::move(l));
  v.tuple_ = true;
  return v;
}

Value Value::generator(List l) {
  Value v(std::move(l));
  v.generator_ = true;
  return v;
}

Value Value::dict(std::shared_ptr<Dict> d) {
  Value v(Kind::kDict);
  charge_work(d->items.size());
  int depth = 0;
  for (const auto& kv : d->items) depth = std::max(depth, static_cast<int>(kv.second.depth_));
  if (depth + 1 > kMaxValueDepth) throw Error("value nested too deeply");
  v.depth_ = static_cast<uint8_t>(depth + 1);
  v.dict_ = std::move(d);
  return v;
}

Value Value::name_space(std::shared_ptr<Dict> d) {
  Value v(Kind::kNamespace);
  v.dict_ = std::move(d);
  return v;
}

Value Value::function(Function f) {
  Value v(Kind::kFunction);
  v.fn_ = std::make_shared<const Function>(std::move(f));
  return v;
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void Dict::set(const std::string& key, Value v) {
  for (auto& [k, old] : items) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  items.emplace_back(key, std::move(v));
}

Value Args::get(size_t i, std::string_view name) const {
  for (const auto& [k, v] : keyword)
    if (k == name) return v;
  if (i < positional.size()) return positional[i];
  return Value();
}

bool Args::has(size_t i, std::string_view name) const {
  for (const auto& kv : keyword)
    if (kv.first == name) return true;
  return i < positional.size();
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
    case Kind::kInt:
      return int_ != 0;
    case Kind::kFloat:
      return float_ != 0;
    case Kind::kString:
      return !str_->empty();
    case Kind::kList:
      return generator_ || !list_->empty();
    case Kind::kDict:
      return !dict_->items.empty();
    default:
      return true;
  }
}

const char* Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kFunction:
      return "function";
  }
  return "?";
}

std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // e.g. "-1.2345e+16"
  size_t epos = sci.find('e');
  int exp = std::atoi(sci.c_str() + epos + 1);
  std::string mant = sci.substr(0, epos);
  bool neg = !mant.empty() && mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out = neg ? "-" : "";
  if (exp < -4 || exp >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) {
      out += '.';
      out.append(digits, 1);
    }
    char e[16];
    std::snprintf(e, sizeof(e), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    return out + e;
  }
  if (exp < 0) {
    out += "0.";
    out.append(static_cast<size_t>(-exp - 1), '0');
    return out + digits;
  }
  size_t int_len = static_cast<size_t>(exp) + 1;
  if (digits.size() <= int_len) return out + digits + std::string(int_len - digits.size(), '0') + ".0";
  return out + digits.substr(0, int_len) + "." + digits.substr(int_len);
}

namespace {

std::string py_str_repr(const std::string& s) {
  char q = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == static_cast<unsigned char>(q)) out += std::string("\\") + q;
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof(b), "\\x%02x", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + q;
}

void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof(b), "\\u%04x", c);
          out += b;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void json_dump(std::string& out, const Value& v, int indent, int level) {
  charge_work(1 + (v.is_string() ? v.str().size() / 64 : 0));
  auto newline = [&](int lvl) {
    out += '\n';
    out.append(static_cast<size_t>(indent * lvl), ' ');
  };
  switch (v.kind()) {
    case Value::Kind::kNone:
      out += "null";
      return;
    case Value::Kind::kBool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Kind::kInt:
      out += std::to_string(v.as_int());
      return;
    case Value::Kind::kFloat: {
      double d = v.as_double();
      if (std::isnan(d)) out += "NaN";
      else if (std::isinf(d)) out += d < 0 ? "-Infinity" : "Infinity";
      else out += py_float_repr(d);
      return;
    }
    case Value::Kind::kString:
      json_string(out, v.str());
      return;
    case Value::Kind::kList: {
      if (v.is_generator()) throw Error("Object of type generator is not JSON serializable");
      const List& l = v.list();
      if (l.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < l.size(); ++i) {
        if (i) out += indent >= 0 ? "," : ", ";
        if (indent >= 0) newline(level + 1);
        json_dump(out, l[i], indent, level + 1);
      }
      if (indent >= 0) newline(level);
      out += ']';
      return;
    }
    case Value::Kind::kDict: {
      const auto& items = v.dict().items;
      if (items.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += indent >= 0 ? "," : ", ";
        if (indent >= 0) newline(level + 1);
        json_string(out, items[i].first);
        out += ": ";
        json_dump(out, items[i].second, indent, level + 1);
      }
      if (indent >= 0) newline(level);
      out += '}';
      return;
    }
    default:
      throw Error(std::string("Object of type ") + v.type_name() + " is not JSON serializable");
  }
}

}  // namespace

std::string to_json(const Value& v, int indent) {
  std::string out;
  json_dump(out, v, indent, 0);
  return out;
}

std::string Value::repr() const {
  if (kind_ == Kind::kString) return py_str_repr(*str_);
  return to_str();
}

std::string Value::to_str() const {
  if (kind_ == Kind::kList) charge_work(list_->size());
  if (kind_ == Kind::kDict) charge_work(dict_->items.size());
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return int_ ? "True" : "False";
    case Kind::kInt:
      return std::to_string(int_);
    case Kind::kFloat:
      return py_float_repr(float_);
    case Kind::kString:
      return *str_;
    case Kind::kList: {
      if (generator_) return "<generator object>";
      std::string out = tuple_ ? "(" : "[";
      for (size_t i = 0; i < list_->size(); ++i) {
        if (i) out += ", ";
        out += (*list_)[i].repr();
      }
      if (tuple_ && list_->size() == 1) out += ',';
      return out + (tuple_ ? ")" : "]");
    }
    case Kind::kDict: {
      std::string out = "{";
      for (size_t i = 0; i < dict_->items.size(); ++i) {
        if (i) out += ", ";
        out += py_str_repr(dict_->items[i].first) + ": " + dict_->items[i].second.repr();
      }
      return out + "}";
    }
    case Kind::kNamespace:
      return "<Namespace>";
    case Kind::kFunction:
      return "<function>";
  }
  return "";
}

bool values_equal(const Value& a, const Value& b) {
  charge_work(1 + (a.is_string() && b.is_string() ? std::min(a.str().size(), b.str().size()) / 64 : 0));
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Value::Kind::kFloat || b.kind() == Value::Kind::kFloat) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.str() == b.str();
    case Value::Kind::kList: {
      if (a.is_generator() || b.is_generator()) return &a.list() == &b.list();
      if (a.is_tuple() != b.is_tuple() || a.list().size() != b.list().size()) return false;
      for (size_t i = 0; i < a.list().size(); ++i)
        if (!values_equal(a.list()[i], b.list()[i])) return false;
      return true;
    }
    case Value::Kind::kDict: {
      const auto& x = a.dict().items;
      if (x.size() != b.dict().items.size()) return false;
      for (const auto& [k, v] : x) {
        const Value* o = b.dict().find(k);
        if (!o || !values_equal(v, *o)) return false;
      }
      return true;
    }
    default:
      return &a.dict() == &b.dict();
  }
}

Value Value::from_json(const Json& j) {
  switch (j.type()) {
    case Json::Type::kNull:
      return none();
    case Json::Type::kBool:
      return Value(j.as_bool());
    case Json::Type::kNumber:
      return j.is_integer() ? Value(j.as_int()) : Value(j.as_double());
    case Json::Type::kString:
      return Value(j.as_string());
    case Json::Type::kArray: {
      List l;
      l.reserve(j.as_array().size());
      for (const Json& e : j.as_array()) l.push_back(from_json(e));
      return Value(std::move(l));
    }
    case Json::Type::kObject: {
      auto d = std::make_shared<Dict>();
      for (const auto& [k, v] : j.as_object()) d->items.emplace_back(k, from_json(v));
      return dict(std::move(d));
    }
  }
  return Value();
}

std::string location(int line, int col) {
  std::string s = "line ";
  s += std::to_string(line);
  s += " col ";
  s += std::to_string(col);
  s += ": ";
  return s;
}

bool py_isspace(uint32_t cp) {
  if (cp == ' ' || (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x1f)) return true;
  return cp == 0x85 || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

std::vector<std::string_view> code_points(std::string_view s) {
  charge_work(1 + s.size() / 16);
  std::vector<std::string_view> out;
  for (size_t i = 0; i < s.size();) {
    size_t n = utf8::char_len(s, i);
    if (n == 0) n = 1;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

size_t code_point_count(std::string_view s) {
  charge_work(1 + s.size() / 64);
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) {
    size_t len = utf8::char_len(s, i);
    i += len ? len : 1;
  }
  return n;
}

}  // namespace yoco::jinja
