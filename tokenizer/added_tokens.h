// Added and special tokens: found in the text before pre-tokenization, leftmost-longest, as
// Hugging Face tokenizers does (its AddedVocabulary). Tokens with normalized=false are matched
// first on the raw text, then tokens with normalized=true in the normalized gaps between those
// matches (their own content normalized too, as tokenizers does).
// Special tokens count only when the caller allows them; a skipped special token still hides
// the text it covers from other tokens of the same pass, exactly as in tokenizers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/normalizer.h"
#include "tokenizer/regex.h"

namespace yoco {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool lstrip = false;       // the match swallows white space on its left
  bool rstrip = false;       // ... and on its right
  bool single_word = false;  // only when not inside a word
  bool normalized = true;
};

// A piece of the input: either an added token (id >= 0) or text to pre-tokenize (id < 0).
struct TextSegment {
  size_t begin, end;
  int32_t id;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // `normalizer` is the tokenizer's: normalized=true tokens are matched in its output.
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens, const Normalizer& normalizer = Normalizer());

  bool empty() const { return tokens_.empty(); }
  const std::vector<AddedToken>& tokens() const { return tokens_; }

  // Append the segments that cover `text` in order (empty text: none). First split_raw
  // (normalized=false tokens) on the raw text, then split_normalized (normalized=true tokens) on
  // the normalized text of each gap the first left.
  void split_raw(std::string_view text, bool allow_special, std::vector<TextSegment>& out) const;
  void split_normalized(std::string_view text, bool allow_special, std::vector<TextSegment>& out) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> next;  // sorted by byte
    int32_t token = -1;                             // index into tokens_ when a token ends here
  };
  struct Trie {
    std::vector<Node> nodes;
    bool first_byte[256] = {};
    void insert(std::string_view s, int32_t token);
    // Longest token starting at text[i], as (index into tokens_, length); index -1 when none.
    std::pair<int32_t, size_t> longest_at(std::string_view text, size_t i) const;
  };

  void split_pass(const Trie& trie, std::string_view text, bool allow_special, std::vector<TextSegment>& out) const;
  bool word_char_before(std::string_view text, size_t pos) const;
  bool word_char_after(std::string_view text, size_t pos) const;

  std::vector<AddedToken> tokens_;
  Trie raw_, normalized_;
  std::shared_ptr<const Regex> word_;  // \w, for single_word
};

}  // namespace yoco
