#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "tokenizer/utf8.h"

namespace yoco {
namespace {

// Start of the character that ends at `pos` (exclusive), or npos when the bytes before `pos`
// do not end with a well-formed character.
size_t char_before(std::string_view text, size_t pos) {
  for (size_t k = 1; k <= 4 && k <= pos; ++k) {
    const uint8_t b = static_cast<uint8_t>(text[pos - k]);
    if (b >= 0x80 && b <= 0xBF) continue;
    return utf8::char_len(text, pos - k) == k ? pos - k : std::string_view::npos;
  }
  return std::string_view::npos;
}

// Where the run of white space that ends at `pos` begins.
size_t white_space_run_start(std::string_view text, size_t pos) {
  while (pos > 0) {
    const size_t c = char_before(text, pos);
    if (c == std::string_view::npos || !utf8::is_white_space(utf8::decode(text, c))) break;
    pos = c;
  }
  return pos;
}

// Length of the run of white space that starts at `pos`.
size_t white_space_run_len(std::string_view text, size_t pos) {
  size_t i = pos;
  while (i < text.size()) {
    const size_t k = utf8::char_len(text, i);
    if (k == 0 || !utf8::is_white_space(utf8::decode(text, i))) break;
    i += k;
  }
  return i - pos;
}

}  // namespace

void AddedTokenMatcher::Trie::insert(std::string_view s, int32_t token) {
  if (nodes.empty()) nodes.emplace_back();
  int32_t n = 0;
  for (unsigned char c : s) {
    auto& next = nodes[n].next;
    auto it = std::lower_bound(next.begin(), next.end(), std::make_pair(c, INT32_MIN));
    if (it != next.end() && it->first == c) {
      n = it->second;
    } else {
      const auto child = static_cast<int32_t>(nodes.size());
      next.insert(it, {c, child});
      nodes.emplace_back();  // may reallocate: `next` is not used after this
      n = child;
    }
  }
  if (nodes[n].token < 0) nodes[n].token = token;  // the first of duplicate contents wins
  first_byte[static_cast<unsigned char>(s[0])] = true;
}

std::pair<int32_t, size_t> AddedTokenMatcher::Trie::longest_at(std::string_view text, size_t i) const {
  std::pair<int32_t, size_t> best{-1, 0};
  int32_t n = 0;
  for (size_t j = i; j < text.size(); ++j) {
    const auto c = static_cast<unsigned char>(text[j]);
    const auto& next = nodes[n].next;
    auto it = std::lower_bound(next.begin(), next.end(), std::make_pair(c, INT32_MIN));
    if (it == next.end() || it->first != c) break;
    n = it->second;
    if (nodes[n].token >= 0) best = {nodes[n].token, j + 1 - i};
  }
  return best;
}

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens, const Normalizer& normalizer)
    : tokens_(std::move(tokens)) {
  bool any_single_word = false;
  std::string scratch;
  for (size_t t = 0; t < tokens_.size(); ++t) {
    if (tokens_[t].content.empty()) continue;
    if (tokens_[t].normalized) {
      const std::string_view content = normalizer.apply(tokens_[t].content, scratch);
      if (!content.empty()) normalized_.insert(content, static_cast<int32_t>(t));
    } else {
      raw_.insert(tokens_[t].content, static_cast<int32_t>(t));
    }
    any_single_word |= tokens_[t].single_word;
  }
  if (any_single_word) {
    // tokenizers tests single_word with Rust's \w (the Rust dialect spells it out for PCRE2).
    auto re = Regex::compile(R"(\w)", Regex::Dialect::kRust, "word");
    YOCO_CHECK(re.ok());
    word_ = std::move(re).value();
  }
}

bool AddedTokenMatcher::word_char_before(std::string_view text, size_t pos) const {
  const size_t c = char_before(text, pos);
  if (c == std::string_view::npos) return false;
  bool found = false;
  word_->for_each_match(text.substr(c, pos - c), [&](size_t, size_t) { found = true; });
  return found;
}

bool AddedTokenMatcher::word_char_after(std::string_view text, size_t pos) const {
  const size_t k = utf8::char_len(text, pos);
  if (k == 0) return false;
  bool found = false;
  word_->for_each_match(text.substr(pos, k), [&](size_t, size_t) { found = true; });
  return found;
}

void AddedTokenMatcher::split_pass(const Trie& trie, std::string_view text, bool allow_special,
                                   std::vector<TextSegment>& out) const {
  const size_t n = text.size();
  size_t start_offset = 0;
  size_t i = 0;
  while (i < n && !trie.nodes.empty()) {
    if (!trie.first_byte[static_cast<unsigned char>(text[i])]) {
      ++i;
      continue;
    }
    const auto [t, len] = trie.longest_at(text, i);
    if (t < 0) {
      ++i;
      continue;
    }
    size_t start = i, stop = i + len;
    i = stop;  // matches never overlap, even when this one is then discarded
    const AddedToken& tok = tokens_[t];
    if (tok.special && !allow_special) continue;
    if (tok.single_word) {
      const bool space_before = start == 0 || !word_char_before(text, start);
      const bool space_after = stop == n || !word_char_after(text, stop);
      if (!space_before || !space_after) continue;
    }
    if (tok.lstrip) start = std::max(white_space_run_start(text, start), start_offset);
    if (tok.rstrip) stop += white_space_run_len(text, stop);
    if (start < start_offset) continue;  // inside white space an rstrip token already took
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, tok.id});
    start_offset = stop;
  }
  if (start_offset < n) out.push_back({start_offset, n, -1});
}

void AddedTokenMatcher::split_raw(std::string_view text, bool allow_special, std::vector<TextSegment>& out) const {
  if (!text.empty()) split_pass(raw_, text, allow_special, out);
}

void AddedTokenMatcher::split_normalized(std::string_view text, bool allow_special,
                                         std::vector<TextSegment>& out) const {
  if (!text.empty()) split_pass(normalized_, text, allow_special, out);
}

}  // namespace yoco
