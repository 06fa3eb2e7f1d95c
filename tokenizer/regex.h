// Pre-tokenization regexes on PCRE2 (8-bit, UTF + UCP, JIT where the platform has it).
// A compiled Regex is immutable and shared by threads; each search makes its own match data.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace yoco {

class Regex {
 public:
  // Whose semantics the pattern was written for: Hugging Face tokenizers runs Oniguruma (Ruby
  // syntax: ^ and $ match at every line break, X{n,m}+ is a repeat of a repeat), tiktoken runs
  // Rust's fancy-regex ($ only at the very end). Patterns are rewritten where PCRE2 would read
  // them differently (\s, \w, intervals, \h, (?m): see translate() in regex.cc).
  enum class Dialect { kOniguruma, kRust, kLiteral };

  // `field` names the pattern's origin in errors ("pre_tokenizer.pattern.Regex").
  static Result<std::shared_ptr<const Regex>> compile(std::string_view pattern, Dialect dialect,
                                                      const std::string& field);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls on_match(begin, end) for each successive non-overlapping match in `subject`, which
  // must be valid UTF-8 (it is not checked again). Returns the offset where the search gave
  // up on a match-limit or resource error, or subject.size() when it scanned everything.
  template <class F>
  size_t for_each_match(std::string_view subject, F&& on_match) const {
    Search s(*this, subject);
    size_t b = 0, e = 0;
    while (s.next(b, e)) on_match(b, e);
    return s.stopped_at();
  }

  const std::string& pattern() const { return pattern_; }
  bool jit() const { return jit_; }

 private:
  class Search {
   public:
    Search(const Regex& re, std::string_view subject);
    ~Search();
    bool next(size_t& begin, size_t& end);
    size_t stopped_at() const { return stopped_at_; }

   private:
    const Regex& re_;
    std::string_view subject_;
    void* match_data_;
    size_t pos_ = 0;
    bool retry_not_empty_ = false;
    bool done_ = false;
    size_t stopped_at_;
  };

  Regex() = default;
  std::string pattern_;
  void* code_ = nullptr;           // pcre2_code_8*
  void* match_context_ = nullptr;  // pcre2_match_context_8*
  bool jit_ = false;
};

}  // namespace yoco
