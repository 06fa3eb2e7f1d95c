// jinja2's lexer, restricted to what chat templates use (docs/design.md, chat templates).
#include "tokenizer/jinja/lexer.h"

#include <cstring>

#include "tokenizer/jinja/value.h"
#include "tokenizer/utf8.h"

namespace yoco::jinja {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// Python's str.rstrip() (all whitespace).
void rstrip_all(std::string& s) {
  while (!s.empty()) {
    auto cps = code_points(s);
    std::string_view last = cps.back();
    uint32_t cp = utf8::char_len(last, 0) ? utf8::decode(last, 0) : 0xfffd;
    if (!py_isspace(cp)) break;
    s.resize(s.size() - last.size());
  }
}

class Lexer {
 public:
  explicit Lexer(std::string src) : s_(std::move(src)) {}

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < s_.size()) {
      size_t tag = find_tag(pos_);
      std::string text = s_.substr(pos_, tag - pos_);
      if (tag == s_.size()) {
        emit_text(std::move(text), pos_);
        pos_ = tag;
        break;
      }
      char kind = s_[tag + 1];  // '{', '%' or '#'
      char mod = tag + 2 < s_.size() ? s_[tag + 2] : '\0';
      if (mod == '-') {
        rstrip_all(text);
      } else if (kind != '{' && mod != '+') {
        size_t nl = text.rfind('\n');
        size_t l = nl == std::string::npos ? 0 : nl + 1;
        if (l > 0 || line_starting) {
          if (text.find_first_not_of(" \t", l) == std::string::npos) text.resize(l);
        }
      }
      emit_text(std::move(text), pos_);
      pos_ = tag + 2 + ((mod == '-' || mod == '+') ? 1 : 0);
      if (kind == '#') {
        lex_comment(tag);
      } else if (kind == '{') {
        push(Token::Type::kVarBegin, "{{", tag);
        lex_expr("}}", Token::Type::kVarEnd, false);
      } else {
        push(Token::Type::kBlockBegin, "{%", tag);
        lex_expr("%}", Token::Type::kBlockEnd, true);
        maybe_raw();
      }
      line_starting = pos_ > 0 && s_[pos_ - 1] == '\n';
    }
    push(Token::Type::kEof, "", s_.size());
    return std::move(out_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t i = from; i + 1 < s_.size(); ++i)
      if (s_[i] == '{' && (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#')) return i;
    return s_.size();
  }

  // Line and column of a byte offset; offsets mostly grow, so the scan resumes where it stopped.
  void where(size_t at, int& line, int& col) const {
    if (at < at_) {
      at_ = 0;
      line_ = 1;
      col_ = 1;
    }
    for (; at_ < at && at_ < s_.size(); ++at_) {
      if (s_[at_] == '\n') {
        ++line_;
        col_ = 1;
      } else {
        ++col_;
      }
    }
    line = line_;
    col = col_;
  }

  [[noreturn]] void fail(size_t at, const std::string& msg) const {
    int line, col;
    where(at, line, col);
    throw Error(location(line, col) + msg);
  }

  Token& push(Token::Type t, std::string text, size_t at) {
    Token tok{t, std::move(text)};
    where(at, tok.line, tok.col);
    out_.push_back(std::move(tok));
    return out_.back();
  }

  void emit_text(std::string text, size_t at) {
    if (!text.empty()) push(Token::Type::kText, std::move(text), at);
  }

  // After a block or comment end: `-` strips all following whitespace; trim_blocks one newline.
  void after_block_end(bool strip) {
    if (strip)
      while (pos_ < s_.size() && is_space(s_[pos_])) ++pos_;
    if (pos_ < s_.size() && s_[pos_] == '\n') ++pos_;
  }

  void lex_comment(size_t start) {
    size_t end = s_.find("#}", pos_);
    if (end == std::string::npos) fail(start, "missing end of comment tag");
    bool strip = end > pos_ && s_[end - 1] == '-';
    pos_ = end + 2;
    after_block_end(strip);
  }

  // Inside open brackets an end marker is only brackets ({'e': {}} ends with "}}"), as in jinja2.
  void lex_expr(const char* end, Token::Type end_type, bool block) {
    size_t start = pos_;
    brackets_ = 0;
    while (true) {
      while (pos_ < s_.size() && is_space(s_[pos_])) ++pos_;
      if (pos_ >= s_.size()) fail(start, std::string("unexpected end of template, expected '") + end + "'");
      if (brackets_ > 0) {
        lex_one();
        continue;
      }
      if (s_[pos_] == '-' && s_.compare(pos_ + 1, 2, end) == 0) {
        push(end_type, end, pos_);
        pos_ += 3;
        if (block) {
          after_block_end(true);
        } else {
          while (pos_ < s_.size() && is_space(s_[pos_])) ++pos_;
        }
        return;
      }
      if (s_.compare(pos_, 2, end) == 0) {
        push(end_type, end, pos_);
        pos_ += 2;
        if (block) after_block_end(false);
        return;
      }
      lex_one();
    }
  }

  void lex_one() {
    size_t at = pos_;
    char c = s_[pos_];
    if (is_name_start(c) || static_cast<unsigned char>(c) >= 0x80) {
      while (pos_ < s_.size() && (is_name_char(s_[pos_]) || static_cast<unsigned char>(s_[pos_]) >= 0x80)) ++pos_;
      push(Token::Type::kName, s_.substr(at, pos_ - at), at);
      return;
    }
    if (is_digit(c)) return lex_number();
    if (c == '\'' || c == '"') return lex_string();
    static const char* kOps[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "[",
                                 "]",  "(",  ")",  "{",  "}",  "|",  "=", "<", ">", ".", ",", ":", ";"};
    for (const char* op : kOps) {
      size_t n = std::strlen(op);
      if (s_.compare(pos_, n, op) == 0) {
        if (n == 1 && (*op == '(' || *op == '[' || *op == '{')) ++brackets_;
        if (n == 1 && (*op == ')' || *op == ']' || *op == '}')) --brackets_;
        push(Token::Type::kOp, op, at);
        pos_ += n;
        return;
      }
    }
    fail(at, std::string("unexpected character '") + c + "'");
  }

  void lex_number() {
    size_t at = pos_;
    std::string digits;
    auto run = [&] {
      while (pos_ < s_.size() &&
             (is_digit(s_[pos_]) || (s_[pos_] == '_' && pos_ + 1 < s_.size() && is_digit(s_[pos_ + 1])))) {
        if (s_[pos_] != '_') digits += s_[pos_];
        ++pos_;
      }
    };
    run();
    bool is_float = false;
    if (pos_ + 1 < s_.size() && s_[pos_] == '.' && is_digit(s_[pos_ + 1])) {
      is_float = true;
      digits += '.';
      ++pos_;
      run();
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      size_t save = pos_;
      std::string d = digits;
      digits += 'e';
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) digits += s_[pos_++];
      if (pos_ < s_.size() && is_digit(s_[pos_])) {
        is_float = true;
        run();
      } else {
        pos_ = save;
        digits = d;
      }
    }
    Token& t = push(is_float ? Token::Type::kFloat : Token::Type::kInt, digits, at);
    if (is_float) {
      t.float_value = std::strtod(digits.c_str(), nullptr);
    } else {
      if (digits.size() > 18) fail(at, "integer literal too large");
      t.int_value = std::stoll(digits);
    }
  }

  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  // Python's unicode-escape decoding of the literal, as jinja2 applies it.
  void lex_string() {
    size_t at = pos_;
    char q = s_[pos_++];
    std::string v;
    while (true) {
      if (pos_ >= s_.size()) fail(at, "unterminated string literal");
      char c = s_[pos_++];
      if (c == q) break;
      if (c != '\\') {
        v += c;
        continue;
      }
      if (pos_ >= s_.size()) fail(at, "unterminated string literal");
      char e = s_[pos_++];
      switch (e) {
        case 'n':
          v += '\n';
          break;
        case 't':
          v += '\t';
          break;
        case 'r':
          v += '\r';
          break;
        case '\\':
          v += '\\';
          break;
        case '\'':
          v += '\'';
          break;
        case '"':
          v += '"';
          break;
        case 'a':
          v += '\a';
          break;
        case 'b':
          v += '\b';
          break;
        case 'f':
          v += '\f';
          break;
        case 'v':
          v += '\v';
          break;
        case '\n':
          break;
        case 'x':
        case 'u':
        case 'U': {
          int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          uint32_t cp = 0;
          for (int i = 0; i < n; ++i) {
            if (pos_ >= s_.size() || hex(s_[pos_]) < 0) fail(at, std::string("truncated \\") + e + " escape");
            cp = cp * 16 + static_cast<uint32_t>(hex(s_[pos_++]));
          }
          if (cp > 0x10ffff) fail(at, "illegal Unicode character in escape");
          utf8::append(v, cp);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int i = 0; i < 2 && pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '7'; ++i)
              cp = cp * 8 + static_cast<uint32_t>(s_[pos_++] - '0');
            utf8::append(v, cp);
          } else {
            v += '\\';
            v += e;
          }
      }
    }
    push(Token::Type::kString, std::move(v), at);
  }

  // {% raw %}...{% endraw %}: the body is text, untouched.
  void maybe_raw() {
    size_t n = out_.size();
    if (n < 3 || out_[n - 3].type != Token::Type::kBlockBegin || out_[n - 2].type != Token::Type::kName ||
        out_[n - 2].text != "raw")
      return;
    out_.resize(n - 3);
    size_t search = pos_;
    while (true) {
      size_t tag = s_.find("{%", search);
      if (tag == std::string::npos) fail(pos_, "missing {% endraw %}");
      size_t p = tag + 2;
      bool strip = p < s_.size() && s_[p] == '-';
      if (strip || (p < s_.size() && s_[p] == '+')) ++p;
      while (p < s_.size() && is_space(s_[p])) ++p;
      if (s_.compare(p, 6, "endraw") != 0) {
        search = tag + 2;
        continue;
      }
      p += 6;
      while (p < s_.size() && is_space(s_[p])) ++p;
      bool strip_after = p < s_.size() && s_[p] == '-';
      if (strip_after) ++p;
      if (s_.compare(p, 2, "%}") != 0) {
        search = tag + 2;
        continue;
      }
      std::string body = s_.substr(pos_, tag - pos_);
      if (strip) rstrip_all(body);
      emit_text(std::move(body), pos_);
      pos_ = p + 2;
      after_block_end(strip_after);
      return;
    }
  }

  std::string s_;
  size_t pos_ = 0;
  std::vector<Token> out_;
  int brackets_ = 0;  // open brackets in the current tag
  mutable size_t at_ = 0;
  mutable int line_ = 1, col_ = 1;
};

std::string normalize_newlines(std::string_view src) {
  std::string s;
  s.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      s += '\n';
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      s += src[i];
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();  // keep_trailing_newline=False
  return s;
}

}  // namespace

std::vector<Token> lex(std::string_view source) { return Lexer(normalize_newlines(source)).run(); }

}  // namespace yoco::jinja
