#include "tokenizer/regex.h"

#include <algorithm>
#include <vector>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/utf8.h"

namespace yoco {
namespace {

// Bounds for a hostile pattern: a search that exceeds them gives up instead of spinning.
constexpr uint32_t kMatchLimit = 10'000'000;
constexpr uint32_t kHeapLimitKiB = 64 * 1024;
constexpr size_t kMaxPatternBytes = 64 * 1024;

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  const int n = pcre2_get_error_message(code, buf, sizeof buf);
  return n < 0 ? "PCRE2 error " + std::to_string(code) : std::string(reinterpret_cast<char*>(buf));
}

// Rewrites what PCRE2 reads differently from the engine the pattern was written for.
// Both dialects: \s and \w take their Unicode meaning there, not PCRE2's:
//   \s, \S   White_Space (PCRE2's \s also takes U+180E)
//   \w        Oniguruma: L, M, N, Pc; Rust: Alphabetic, M, Nd, Pc, Join_Control (PCRE2: L, N, _)
// Oniguruma (Ruby syntax) only:
//   X{n,m}+   (?:X{n,m})+, a repeat of the repeat; PCRE2 would read "possessive"
//   {,m}      {0,m}; PCRE2 10.42 would read literal text
//   \h, \H   hex digit / not; PCRE2: horizontal white space
//   (?m)      dot matches newline, PCRE2's (?s)
// ?+ *+ ++ (possessive), \d (Nd), \p{..} and the rest mean the same everywhere.
Result<std::string> translate(std::string_view p, Regex::Dialect dialect, const std::string& field) {
  constexpr size_t kNone = std::string::npos;
  const bool onig = dialect == Regex::Dialect::kOniguruma;
  const char* word = onig ? R"(\p{L}\p{M}\p{N}\p{Pc})" : R"(\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D})";
  std::string out;
  out.reserve(p.size() + 16);
  std::vector<size_t> groups;  // output offsets of open '('
  size_t atom = kNone;         // output offset where the last repeatable item starts
  const size_t n = p.size();
  auto copy_char = [&](size_t& i) {  // one whole UTF-8 character
    const size_t k = std::max<size_t>(1, utf8::char_len(p, i));
    out.append(p.substr(i, k));
    i += k;
  };
  // An escape starting at p[i] == '\\', copied or rewritten; in_class changes \h's spelling.
  auto escape = [&](size_t& i, bool in_class) -> Status {
    if (i + 1 >= n) {
      out += p[i++];
      return Status::Ok();
    }
    const char c = p[i + 1];
    if (c == 's' || c == 'S') {
      out += c == 's' ? R"(\p{White_Space})" : R"(\P{White_Space})";
      i += 2;
      return Status::Ok();
    }
    if (c == 'w' || (c == 'W' && !in_class)) {  // \W inside a class keeps PCRE2's meaning
      if (in_class) {
        out += word;
      } else {
        out += c == 'w' ? "[" : "[^";
        out += word;
        out += ']';
      }
      i += 2;
      return Status::Ok();
    }
    if (onig && (c == 'h' || c == 'H')) {
      if (in_class && c == 'H') return invalid_argument(field + ": \\H inside a character class is not supported");
      out += in_class ? "0-9a-fA-F" : (c == 'h' ? "[0-9a-fA-F]" : "[^0-9a-fA-F]");
      i += 2;
      return Status::Ok();
    }
    out += p[i++];
    if ((c == 'p' || c == 'P' || c == 'x' || c == 'N' || c == 'o' || c == 'k' || c == 'g') && i + 1 < n &&
        p[i + 1] == '{') {
      const size_t close = p.find('}', i + 1);
      const size_t end = close == std::string_view::npos ? n : close + 1;
      out.append(p.substr(i, end - i));
      i = end;
    } else if (c == 'c' && i + 1 < n) {
      out += p[i++];
      copy_char(i);
    } else {
      copy_char(i);
    }
    return Status::Ok();
  };
  size_t i = 0;
  while (i < n) {
    const char c = p[i];
    if (c == '\\') {
      atom = out.size();
      YOCO_RETURN_IF_ERROR(escape(i, false));
    } else if (c == '[') {
      atom = out.size();
      out += p[i++];
      if (i < n && p[i] == '^') out += p[i++];
      if (i < n && p[i] == ']') out += p[i++];
      int depth = 1;
      while (i < n && depth > 0) {
        if (p[i] == '\\') {
          YOCO_RETURN_IF_ERROR(escape(i, true));
        } else if (p[i] == '[' && i + 1 < n && p[i + 1] == ':') {
          const size_t close = p.find(":]", i + 2);
          const size_t end = close == std::string_view::npos ? i + 1 : close + 2;
          out.append(p.substr(i, end - i));
          i = end;
        } else {
          if (p[i] == '[') ++depth;
          if (p[i] == ']') --depth;
          copy_char(i);
        }
      }
    } else if (c == '(') {
      const size_t start = out.size();
      out += p[i++];
      atom = kNone;
      if (i < n && p[i] == '?' && i + 1 < n && p[i + 1] == '#') {  // comment
        const size_t close = p.find(')', i);
        const size_t end = close == std::string_view::npos ? n : close + 1;
        out.resize(start);
        i = end;
        continue;
      }
      size_t j = i + 1;
      if (onig && i < n && p[i] == '?') {
        while (j < n && (p[j] == 'i' || p[j] == 'm' || p[j] == 'x' || p[j] == '-')) ++j;
      }
      if (i < n && p[i] == '?' && j > i + 1 && j < n && (p[j] == ')' || p[j] == ':')) {
        for (size_t k = i; k < j; ++k) out += p[k] == 'm' ? 's' : p[k];
        out += p[j];
        i = j + 1;
        if (p[j] == ')') continue;  // (?imx) sets options for the rest of the group: no new group
      } else if (i < n && p[i] == '?') {
        // Group kinds: (?: (?= (?! (?> (?<= (?<! (?<name> (?P<name>
        size_t end = i + 1;
        if (end < n && (p[end] == ':' || p[end] == '=' || p[end] == '!' || p[end] == '>')) {
          end += 1;
        } else if (end + 1 < n && p[end] == '<' && (p[end + 1] == '=' || p[end + 1] == '!')) {
          end += 2;
        } else if (end < n && (p[end] == '<' || p[end] == 'P')) {
          const size_t close = p.find('>', end);
          end = close == std::string_view::npos ? end : close + 1;
        }
        out.append(p.substr(i, end - i));
        i = end;
      }
      groups.push_back(start);
    } else if (c == ')') {
      out += p[i++];
      if (!groups.empty()) {
        atom = groups.back();
        groups.pop_back();
      } else {
        atom = kNone;
      }
    } else if (c == '|') {
      out += p[i++];
      atom = kNone;
    } else if (c == '{') {
      // An interval quantifier {n}, {n,}, {n,m} or {,m}; anything else is a literal '{'.
      size_t j = i + 1, digits_lo = 0, digits_hi = 0;
      while (j < n && p[j] >= '0' && p[j] <= '9') ++j, ++digits_lo;
      bool comma = j < n && p[j] == ',';
      if (comma) {
        ++j;
        while (j < n && p[j] >= '0' && p[j] <= '9') ++j, ++digits_hi;
      }
      const bool interval =
          onig && j < n && p[j] == '}' && (digits_lo > 0 || (comma && digits_hi > 0)) && atom != kNone;
      if (!interval) {
        atom = out.size();
        out += p[i++];
        continue;
      }
      std::string q = "{";
      if (digits_lo == 0) q += '0';
      q.append(p.substr(i + 1, j - i - 1));  // digits, comma, digits
      q += '}';
      i = j + 1;
      if (i < n && p[i] == '+') {
        out.insert(atom, "(?:");
        out += q + ")";
      } else {
        out += q;
      }
    } else if (c == '*' || c == '+' || c == '?') {
      out += p[i++];
    } else {
      atom = out.size();
      copy_char(i);
    }
  }
  return out;
}

}  // namespace

Result<std::shared_ptr<const Regex>> Regex::compile(std::string_view pattern, Dialect dialect,
                                                    const std::string& field) {
  if (pattern.size() > kMaxPatternBytes)
    return invalid_argument(field + ": pattern longer than " + std::to_string(kMaxPatternBytes) + " bytes");
  if (!utf8::is_valid(pattern)) return invalid_argument(field + ": pattern is not valid UTF-8");
  // \C could split a character; nothing a tokenizer needs. UCP: \s, \w, \d and POSIX classes
  // follow Unicode properties, as they do in Oniguruma and Rust.
  uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_NEVER_BACKSLASH_C | PCRE2_NO_UTF_CHECK;
  switch (dialect) {
    case Dialect::kOniguruma:
      options |= PCRE2_MULTILINE;
      break;
    case Dialect::kRust:
      options |= PCRE2_DOLLAR_ENDONLY;
      break;
    case Dialect::kLiteral:
      options = PCRE2_UTF | PCRE2_NO_UTF_CHECK | PCRE2_LITERAL;
      break;
  }
  pcre2_compile_context* cctx = pcre2_compile_context_create(nullptr);
  if (!cctx) return internal_error(field + ": out of memory compiling the pattern");
  pcre2_set_newline(cctx, PCRE2_NEWLINE_LF);
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  std::string translated;
  if (dialect != Dialect::kLiteral) {
    auto t = translate(pattern, dialect, field);
    if (!t.ok()) {
      pcre2_compile_context_free(cctx);
      return t.status();
    }
    translated = std::move(t).value();
    pattern = translated;
  }
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &err, &err_offset, cctx);
  pcre2_compile_context_free(cctx);
  if (!code) {
    return invalid_argument(field + ": bad regex at offset " + std::to_string(err_offset) + ": " + pcre2_message(err));
  }
  std::shared_ptr<Regex> re(new Regex());
  re->pattern_ = std::string(pattern);
  re->code_ = code;
  re->jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  auto* mctx = pcre2_match_context_create(nullptr);
  if (!mctx) return internal_error(field + ": out of memory compiling the pattern");
  pcre2_set_match_limit(mctx, kMatchLimit);
  pcre2_set_heap_limit(mctx, kHeapLimitKiB);
  re->match_context_ = mctx;
  return std::shared_ptr<const Regex>(std::move(re));
}

Regex::~Regex() {
  pcre2_match_context_free(static_cast<pcre2_match_context*>(match_context_));
  pcre2_code_free(static_cast<pcre2_code*>(code_));
}

Regex::Search::Search(const Regex& re, std::string_view subject)
    : re_(re), subject_(subject), stopped_at_(subject.size()) {
  match_data_ = pcre2_match_data_create_from_pattern(static_cast<pcre2_code*>(re.code_), nullptr);
  if (!match_data_) {
    stopped_at_ = 0;
    done_ = true;
  }
}

Regex::Search::~Search() { pcre2_match_data_free(static_cast<pcre2_match_data*>(match_data_)); }

bool Regex::Search::next(size_t& begin, size_t& end) {
  auto* code = static_cast<pcre2_code*>(re_.code_);
  auto* md = static_cast<pcre2_match_data*>(match_data_);
  auto* mctx = static_cast<pcre2_match_context*>(re_.match_context_);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(subject_.data());
  while (!done_ && pos_ <= subject_.size()) {
    // After an empty match, first look for a non-empty one at the same place (Perl's rule).
    const uint32_t opts = retry_not_empty_ ? (PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED) : 0;
    int rc = PCRE2_ERROR_JIT_BADOPTION;
    if (re_.jit_ && opts == 0) rc = pcre2_jit_match(code, subject, subject_.size(), pos_, 0, md, mctx);
    if (rc == PCRE2_ERROR_JIT_BADOPTION || rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      // The interpreter keeps its backtracking frames on the heap: no machine-stack limit.
      rc = pcre2_match(code, subject, subject_.size(), pos_, opts | PCRE2_NO_JIT | PCRE2_NO_UTF_CHECK, md, mctx);
    }
    if (rc == PCRE2_ERROR_NOMATCH) {
      if (!retry_not_empty_) break;
      retry_not_empty_ = false;
      const size_t k = utf8::char_len(subject_, pos_);
      pos_ += k == 0 ? 1 : k;
      continue;
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    if (rc < 0 || ov[0] < pos_ || ov[1] < ov[0] || ov[1] > subject_.size()) {
      // A resource limit, or \K games that report a match ending before it starts.
      stopped_at_ = pos_;
      break;
    }
    begin = ov[0];
    end = ov[1];
    retry_not_empty_ = begin == end;
    pos_ = end;
    return true;
  }
  done_ = true;
  return false;
}

}  // namespace yoco
