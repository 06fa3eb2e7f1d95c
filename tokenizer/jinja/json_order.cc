// Order-keeping JSON reading for chat-template variables (docs/design.md, chat templates).
#include "tokenizer/jinja/json_order.h"

#include <cstdlib>

#include "tokenizer/utf8.h"

namespace yoco::jinja {
namespace {

constexpr int kMaxDepth = 64;

class Reader {
 public:
  explicit Reader(std::string_view s) : s_(s) {}

  bool document(Value& out) {
    if (!value(out, 0)) return false;
    ws();
    return i_ == s_.size();
  }

 private:
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }

  bool literal(std::string_view word) {
    if (s_.substr(i_, word.size()) != word) return false;
    i_ += word.size();
    return true;
  }

  bool value(Value& out, int depth) {
    if (depth > kMaxDepth) return false;
    ws();
    if (i_ >= s_.size()) return false;
    char c = s_[i_];
    if (c == '{') return object(out, depth);
    if (c == '[') return array(out, depth);
    if (c == '"') {
      std::string str;
      if (!string(str)) return false;
      out = Value(std::move(str));
      return true;
    }
    if (literal("true")) {
      out = Value(true);
    } else if (literal("false")) {
      out = Value(false);
    } else if (literal("null")) {
      out = Value::none();
    } else {
      return number(out);
    }
    return true;
  }

  bool object(Value& out, int depth) {
    ++i_;
    auto d = std::make_shared<Dict>();
    ws();
    if (i_ < s_.size() && s_[i_] == '}') {
      ++i_;
      out = Value::dict(std::move(d));
      return true;
    }
    while (true) {
      ws();
      std::string key;
      if (i_ >= s_.size() || s_[i_] != '"' || !string(key)) return false;
      ws();
      if (i_ >= s_.size() || s_[i_] != ':') return false;
      ++i_;
      Value v;
      if (!value(v, depth + 1)) return false;
      d->set(key, std::move(v));
      ws();
      if (i_ < s_.size() && s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (i_ < s_.size() && s_[i_] == '}') {
        ++i_;
        out = Value::dict(std::move(d));
        return true;
      }
      return false;
    }
  }

  bool array(Value& out, int depth) {
    ++i_;
    List items;
    ws();
    if (i_ < s_.size() && s_[i_] == ']') {
      ++i_;
      out = Value(std::move(items));
      return true;
    }
    while (true) {
      Value v;
      if (!value(v, depth + 1)) return false;
      items.push_back(std::move(v));
      ws();
      if (i_ < s_.size() && s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (i_ < s_.size() && s_[i_] == ']') {
        ++i_;
        out = Value(std::move(items));
        return true;
      }
      return false;
    }
  }

  bool hex4(uint32_t& cp) {
    if (i_ + 4 > s_.size()) return false;
    cp = 0;
    for (int k = 0; k < 4; ++k) {
      char h = s_[i_++];
      cp <<= 4;
      if (h >= '0' && h <= '9') cp |= static_cast<uint32_t>(h - '0');
      else if (h >= 'a' && h <= 'f') cp |= static_cast<uint32_t>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') cp |= static_cast<uint32_t>(h - 'A' + 10);
      else return false;
    }
    return true;
  }

  bool string(std::string& out) {
    ++i_;
    while (i_ < s_.size()) {
      char c = s_[i_++];
      if (c == '"') return true;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) return false;
      char e = s_[i_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          uint32_t cp;
          if (!hex4(cp)) return false;
          if (cp >= 0xd800 && cp < 0xdc00 && i_ + 6 <= s_.size() && s_[i_] == '\\' && s_[i_ + 1] == 'u') {
            size_t save = i_;
            i_ += 2;
            uint32_t lo;
            if (hex4(lo) && lo >= 0xdc00 && lo < 0xe000) {
              cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            } else {
              i_ = save;
            }
          }
          utf8::append(out, cp);
          break;
        }
        default:
          return false;
      }
    }
    return false;
  }

  bool number(Value& out) {
    size_t start = i_;
    bool is_int = true;
    if (i_ < s_.size() && s_[i_] == '-') ++i_;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
    if (i_ < s_.size() && (s_[i_] == '.' || s_[i_] == 'e' || s_[i_] == 'E')) {
      is_int = false;
      while (i_ < s_.size() && ((s_[i_] >= '0' && s_[i_] <= '9') || s_[i_] == '.' || s_[i_] == 'e' || s_[i_] == 'E' ||
                                s_[i_] == '+' || s_[i_] == '-'))
        ++i_;
    }
    if (i_ == start) return false;
    std::string text(s_.substr(start, i_ - start));
    char* end = nullptr;
    if (is_int) {
      long long v = std::strtoll(text.c_str(), &end, 10);
      out = Value(static_cast<int64_t>(v));
    } else {
      out = Value(std::strtod(text.c_str(), &end));
    }
    return end && *end == '\0';
  }

  std::string_view s_;
  size_t i_ = 0;
};

}  // namespace

std::optional<Value> parse_json_ordered(std::string_view text) {
  Value v;
  if (!Reader(text).document(v)) return std::nullopt;
  return v;
}

Value reorder_like(const Value& v, const Value& hint) {
  if (v.is_dict() && hint.is_dict()) {
    auto d = std::make_shared<Dict>();
    for (const auto& [k, h] : hint.dict().items) {
      const Value* mine = v.dict().find(k);
      if (mine) d->items.emplace_back(k, reorder_like(*mine, h));
    }
    for (const auto& [k, mine] : v.dict().items)
      if (!hint.dict().find(k)) d->items.emplace_back(k, mine);
    return Value::dict(std::move(d));
  }
  if (v.is_list() && hint.is_list() && v.list().size() == hint.list().size()) {
    List out;
    out.reserve(v.list().size());
    for (size_t i = 0; i < v.list().size(); ++i) out.push_back(reorder_like(v.list()[i], hint.list()[i]));
    return v.is_tuple() ? Value::tuple(std::move(out)) : Value(std::move(out));
  }
  return v;
}

}  // namespace yoco::jinja
