#include "common/json.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace yoco {
namespace {

class Parser {
 public:
  Parser(std::string_view s, int max_depth, std::string* error_path)
      : s_(s), max_depth_(max_depth), error_path_(error_path) {}

  Result<Json> run() {
    Json v;
    YOCO_RETURN_IF_ERROR(value(v, 0));
    skip_ws();
    if (pos_ != s_.size()) return error("trailing characters after the JSON value");
    return v;
  }

 private:
  // The message names the byte offset and, inside a document, the member or element being read
  // ("messages[2].content"), so a client learns which field it wrote wrong.
  Status error(const std::string& what) const {
    std::string path;
    for (const std::string& seg : path_) path += (seg[0] == '[' || path.empty() ? "" : ".") + seg;
    if (error_path_) *error_path_ = path;
    return invalid_argument("JSON parse error at byte " + std::to_string(pos_) + (path.empty() ? "" : " in " + path) +
                            ": " + what);
  }
  // A byte as an error message may quote it: printable ASCII as itself, anything else in hex, so
  // the message stays valid UTF-8 whatever the input was.
  static std::string describe(char c) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f) return std::string("'") + c + "'";
    char buf[16];
    std::snprintf(buf, sizeof buf, "byte 0x%02x", u);
    return buf;
  }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  bool consume(std::string_view lit) {
    if (s_.substr(pos_, lit.size()) == lit) {
      pos_ += lit.size();
      return true;
    }
    return false;
  }

  Status value(Json& out, int depth) {
    if (depth > max_depth_) return error("nesting deeper than " + std::to_string(max_depth_));
    skip_ws();
    if (pos_ >= s_.size()) return error("unexpected end of input");
    char c = s_[pos_];
    if (c == '{') return object(out, depth);
    if (c == '[') return array(out, depth);
    if (c == '"') {
      std::string str;
      YOCO_RETURN_IF_ERROR(string(str));
      out = Json(std::move(str));
      return Status::Ok();
    }
    if (consume("true")) {
      out = Json(true);
      return Status::Ok();
    }
    if (consume("false")) {
      out = Json(false);
      return Status::Ok();
    }
    if (consume("null")) {
      out = Json();
      return Status::Ok();
    }
    if (c == '-' || (c >= '0' && c <= '9')) return number(out);
    if (consume("NaN") || consume("Infinity"))
      return error("NaN and Infinity are not JSON numbers (RFC 8259); send a finite number");
    if (pos_ == 0 && s_.substr(0, 3) == "\xEF\xBB\xBF")
      return error("a UTF-8 byte order mark is not allowed before JSON");
    return error("unexpected " + describe(c));
  }

  Status object(Json& out, int depth) {
    ++pos_;  // '{'
    Json::Object obj;
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == '}') {
      ++pos_;
      out = Json(std::move(obj));
      return Status::Ok();
    }
    while (true) {
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != '"') return error("expected a string key");
      std::string key;
      YOCO_RETURN_IF_ERROR(string(key));
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != ':') return error("expected ':'");
      ++pos_;
      Json v;
      path_.push_back(key);
      YOCO_RETURN_IF_ERROR(value(v, depth + 1));
      path_.pop_back();
      if (!obj.emplace(key, std::move(v)).second) return error("duplicate key \"" + key + "\"");
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == '}') {
        ++pos_;
        break;
      }
      return error("expected ',' or '}'");
    }
    out = Json(std::move(obj));
    return Status::Ok();
  }

  Status array(Json& out, int depth) {
    ++pos_;  // '['
    Json::Array arr;
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == ']') {
      ++pos_;
      out = Json(std::move(arr));
      return Status::Ok();
    }
    while (true) {
      Json v;
      path_.push_back("[" + std::to_string(arr.size()) + "]");
      YOCO_RETURN_IF_ERROR(value(v, depth + 1));
      path_.pop_back();
      arr.push_back(std::move(v));
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == ']') {
        ++pos_;
        break;
      }
      return error("expected ',' or ']'");
    }
    out = Json(std::move(arr));
    return Status::Ok();
  }

  static void put_utf8(std::string& s, uint32_t cp) {
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else if (cp < 0x800) {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      s += static_cast<char>(0xE0 | (cp >> 12));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      s += static_cast<char>(0xF0 | (cp >> 18));
      s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  Status hex4(uint32_t& v) {
    if (pos_ + 4 > s_.size()) return error("truncated \\u escape");
    v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= c - '0';
      else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
      else return error("bad hex digit in \\u escape");
    }
    return Status::Ok();
  }

  Status string(std::string& out) {
    ++pos_;  // '"'
    while (true) {
      if (pos_ >= s_.size()) return error("unterminated string");
      char c = s_[pos_++];
      if (c == '"') return Status::Ok();
      if (static_cast<unsigned char>(c) < 0x20) return error("control character in string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) return error("unterminated escape");
      char e = s_[pos_++];
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
          uint32_t cp = 0;
          YOCO_RETURN_IF_ERROR(hex4(cp));
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t lo = 0;
            if (!consume("\\u")) return error("unpaired high surrogate");
            YOCO_RETURN_IF_ERROR(hex4(lo));
            if (lo < 0xDC00 || lo > 0xDFFF) return error("bad low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return error("unpaired low surrogate");
          }
          put_utf8(out, cp);
          break;
        }
        default:
          return error("bad escape \\ followed by " + describe(e));
      }
    }
  }

  Status number(Json& out) {
    size_t start = pos_;
    if (s_[pos_] == '-') ++pos_;
    if (s_.substr(pos_, 8) == "Infinity")
      return error("NaN and Infinity are not JSON numbers (RFC 8259); send a finite number");
    bool is_int = true;
    auto digits = [&] {
      size_t d = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      return pos_ - d;
    };
    if (digits() == 0) return error("bad number");
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      is_int = false;
      if (digits() == 0) return error("bad number fraction");
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      is_int = false;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (digits() == 0) return error("bad number exponent");
    }
    std::string_view tok = s_.substr(start, pos_ - start);
    if (is_int) {
      int64_t v = 0;
      auto r = std::from_chars(tok.data(), tok.data() + tok.size(), v);
      if (r.ec == std::errc() && r.ptr == tok.data() + tok.size()) {
        out = Json(v);
        return Status::Ok();
      }
    }
    double d = 0;
    auto r = std::from_chars(tok.data(), tok.data() + tok.size(), d);
    if (r.ec != std::errc() || !std::isfinite(d)) return error("number out of range");
    out = Json(d);
    return Status::Ok();
  }

  std::string_view s_;
  size_t pos_ = 0;
  int max_depth_;
  std::string* error_path_;
  std::vector<std::string> path_;  // keys and "[i]" down to the value being read
};

void dump_string(std::string& out, const std::string& s) {
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
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

}  // namespace

Result<Json> Json::parse(std::string_view text, int max_depth, std::string* error_path) {
  return Parser(text, max_depth, error_path).run();
}

const Json* Json::find(std::string_view key) const {
  if (type_ != Type::kObject) return nullptr;
  auto it = obj_->find(key);
  return it == obj_->end() ? nullptr : &it->second;
}

std::string Json::dump() const {
  std::string out;
  dump_to(out);
  return out;
}

void Json::dump_to(std::string& out) const {
  switch (type_) {
    case Type::kNull:
      out += "null";
      break;
    case Type::kBool:
      out += bool_ ? "true" : "false";
      break;
    case Type::kNumber: {
      char buf[32];
      auto r = is_int_ ? std::to_chars(buf, buf + sizeof buf, int_) : std::to_chars(buf, buf + sizeof buf, num_);
      out.append(buf, r.ptr);
      break;
    }
    case Type::kString:
      dump_string(out, *str_);
      break;
    case Type::kArray: {
      out += '[';
      bool first = true;
      for (const auto& v : *arr_) {
        if (!first) out += ',';
        first = false;
        v.dump_to(out);
      }
      out += ']';
      break;
    }
    case Type::kObject: {
      out += '{';
      bool first = true;
      for (const auto& [k, v] : *obj_) {
        if (!first) out += ',';
        first = false;
        dump_string(out, k);
        out += ':';
        v.dump_to(out);
      }
      out += '}';
      break;
    }
  }
}

const char* json_type_name(Json::Type t) {
  switch (t) {
    case Json::Type::kNull:
      return "null";
    case Json::Type::kBool:
      return "bool";
    case Json::Type::kNumber:
      return "number";
    case Json::Type::kString:
      return "string";
    case Json::Type::kArray:
      return "array";
    case Json::Type::kObject:
      return "object";
  }
  return "?";
}

}  // namespace yoco
