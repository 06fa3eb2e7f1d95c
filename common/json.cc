// Json::parse: nlohmann-json reads the text; on top of it hostile input is bounded by a nesting
// depth, duplicate object keys are errors, and an error names where it was found. Objects keep
// their keys sorted (std::map): the API's answers and the fingerprints are written in that order;
// a chat template that needs the client's order reads the text again with nlohmann's ordered_json
// (tokenizer/jinja/json_order.h).
#include "common/json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>

namespace yoco {
namespace {

// The text as nlohmann reads it, one byte at a time, counting: a refusal of ours (a duplicate key,
// the depth) then names the byte offset as the library's own errors do.
struct CountingIterator {
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;
  const char* p;
  size_t* read;
  reference operator*() const { return *p; }
  CountingIterator& operator++() {
    ++p;
    ++*read;
    return *this;
  }
  CountingIterator operator++(int) {
    CountingIterator old = *this;
    ++*this;
    return old;
  }
  bool operator==(const CountingIterator& o) const { return p == o.p; }
  bool operator!=(const CountingIterator& o) const { return p != o.p; }
};

// nlohmann's SAX parser reads the text (iteratively: no recursion however deep); this handler builds
// the Json and adds what the library does not do: the depth limit, refusing duplicate keys, and
// errors that name the member path and quote bytes so the message stays valid UTF-8.
class Builder : public nlohmann::json_sax<nlohmann::json> {
 public:
  Builder(std::string_view s, int max_depth) : s_(s), max_depth_(max_depth) {}

  bool null() override { return add(Json()); }
  bool boolean(bool b) override { return add(Json(b)); }
  bool number_integer(number_integer_t v) override { return add(Json(static_cast<int64_t>(v))); }
  bool number_unsigned(number_unsigned_t v) override {
    // Past int64 a number is a double, as a float literal of the same value would be.
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return add(Json(static_cast<double>(v)));
    return add(Json(static_cast<int64_t>(v)));
  }
  bool number_float(number_float_t v, const string_t&) override {
    if (!std::isfinite(v)) return fail("number out of range");
    return add(Json(static_cast<double>(v)));
  }
  bool string(string_t& v) override { return add(Json(std::move(v))); }
  bool binary(binary_t&) override { return fail("binary values are not JSON"); }
  bool start_object(std::size_t) override { return open(false); }
  bool start_array(std::size_t) override { return open(true); }
  bool key(string_t& k) override {
    Frame& f = stack_.back();
    if (f.obj.count(k)) return fail("duplicate key \"" + k + "\"");
    f.key = std::move(k);
    f.has_key = true;
    return true;
  }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t position, const std::string& /*last_token*/,
                   const nlohmann::detail::exception& ex) override {
    in_parse_error_ = true;
    pos_ = position == 0 ? 0 : std::min(position - 1, s_.size());  // the byte it stopped at
    // The lexer stops at the first byte it cannot take: the 'N' of NaN, the 'I' of [-]Infinity.
    const std::string_view at = s_.substr(pos_);
    const std::string what = ex.what();
    if (at.starts_with("NaN") || at.starts_with("Infinity"))
      return fail("NaN and Infinity are not JSON numbers (RFC 8259); send a finite number");
    if (what.find("number overflow") != std::string::npos) return fail("number out of range");
    if (what.find("ill-formed UTF-8") != std::string::npos) {
      const bool in_name = !stack_.empty() && !stack_.back().is_array && !stack_.back().has_key;
      return fail(std::string(in_name ? "a member name is " : "") +
                  "not valid UTF-8 (JSON text must be UTF-8; send text as UTF-8, or token ids)");
    }
    if (position > s_.size()) return fail("unexpected end of input");
    // nlohmann's reason ("invalid literal", "expected end of input", ...), then the byte it stopped at.
    std::string reason = what.substr(std::min(what.find(" - "), what.size()));
    reason = reason.empty() ? "syntax error" : reason.substr(3, reason.find("; last read") - 3);
    const char c = position > 0 && position <= s_.size() ? s_[position - 1] : '\0';
    return fail(reason + ", at " + describe(c));
  }

  Result<Json> finish(bool parsed) {
    if (!parsed || !error_.empty()) {
      if (error_.empty()) error_ = "unexpected end of input";
      return invalid_argument("JSON parse error at byte " + std::to_string(pos_) +
                              (path_.empty() ? "" : " in " + path_) + ": " + error_);
    }
    return std::move(root_);
  }
  const std::string& path() const { return path_; }
  CountingIterator begin() { return {s_.data(), &read_}; }
  CountingIterator end() { return {s_.data() + s_.size(), &read_}; }

 private:
  struct Frame {
    bool is_array = false;
    Json::Array arr;
    Json::Object obj;
    std::string key;
    bool has_key = false;
  };

  // A byte as an error message may quote it: printable ASCII as itself, anything else in hex, so
  // the message stays valid UTF-8 whatever the input was.
  static std::string describe(char c) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f) return std::string("'") + c + "'";
    char buf[16];
    std::snprintf(buf, sizeof buf, "byte 0x%02x", u);
    return buf;
  }

  // The message names, inside a document, the member or element being read ("messages[2].content"),
  // so a client learns which field it wrote wrong.
  bool fail(const std::string& what) {
    if (!error_.empty()) return false;
    if (!in_parse_error_) pos_ = read_;
    error_ = what;
    for (const Frame& f : stack_) {
      if (f.is_array) {
        path_.append("[").append(std::to_string(f.arr.size())).append("]");
      } else if (f.has_key) {
        path_.append(path_.empty() ? "" : ".").append(f.key);
      } else {
        break;
      }
    }
    return false;
  }
  bool too_deep() const { return static_cast<int>(stack_.size()) > max_depth_; }
  bool add(Json v) {
    if (too_deep()) return fail("nesting deeper than " + std::to_string(max_depth_));
    if (stack_.empty()) {
      root_ = std::move(v);
      return true;
    }
    Frame& f = stack_.back();
    if (f.is_array) {
      f.arr.push_back(std::move(v));
    } else {
      f.obj.emplace(std::move(f.key), std::move(v));
      f.key.clear();
      f.has_key = false;
    }
    return true;
  }
  bool open(bool is_array) {
    if (too_deep()) return fail("nesting deeper than " + std::to_string(max_depth_));
    stack_.emplace_back();
    stack_.back().is_array = is_array;
    return true;
  }
  bool close() {
    Frame f = std::move(stack_.back());
    stack_.pop_back();
    return f.is_array ? add(Json(std::move(f.arr))) : add(Json(std::move(f.obj)));
  }

  std::string_view s_;
  int max_depth_;
  std::vector<Frame> stack_;  // the containers open down to the value being read
  Json root_;
  size_t read_ = 0;  // bytes the library has read so far
  size_t pos_ = 0;
  bool in_parse_error_ = false;
  std::string error_;
  std::string path_;
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
  if (text.starts_with("\xEF\xBB\xBF")) {  // nlohmann would skip it; RFC 8259 forbids sending one
    if (error_path) error_path->clear();
    return invalid_argument("JSON parse error at byte 0: a UTF-8 byte order mark is not allowed before JSON");
  }
  Builder b(text, max_depth);
  const bool parsed = nlohmann::json::sax_parse(b.begin(), b.end(), &b);
  Result<Json> r = b.finish(parsed);
  if (!r.ok() && error_path) *error_path = b.path();
  return r;
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
