// What filters.cc, tests.cc and methods.cc share: attribute and item access, membership,
// Python str helpers, and the bounds (docs/design.md, chat templates).
#include "tokenizer/jinja/builtins.h"

#include <algorithm>

#include "tokenizer/utf8.h"

namespace yoco::jinja {

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

std::string capitalize(const std::string& s) {
  std::string out = ascii_lower(s);
  if (!out.empty() && is_lower_ascii(out[0])) out[0] = static_cast<char>(out[0] - 32);
  return out;
}

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
