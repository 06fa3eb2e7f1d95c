// Pre-tokenization: cutting text into the pieces BPE merges within. A pipeline of steps, each
// applied to every piece the previous one produced, as in Hugging Face tokenizers' Sequence:
//   Split      a regex (or literal) with a behaviour for its matches (tokenizers' Split)
//   ByteLevel  optional prefix space, optional GPT-2 regex split (tokenizers' ByteLevel)
// tiktoken's rule ("keep regex matches, drop the rest") is Split with Removed + invert.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace yoco {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// The regex tokenizers' ByteLevel pre-tokenizer uses when use_regex is true.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// cl100k_base's pattern as tiktoken 0.7+ ships it.
inline constexpr std::string_view kCl100kPattern =
    R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s)";

struct PreTokenizerStep {
  std::shared_ptr<const Regex> regex;  // null: no split in this step
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;  // before the split: prepend ' ' unless the piece starts with one
};

class PreTokenizer {
 public:
  PreTokenizer() = default;
  explicit PreTokenizer(std::vector<PreTokenizerStep> steps) : steps_(std::move(steps)) {}

  // Calls emit(piece) for each non-empty piece of `text`, in order. `text` must be valid UTF-8.
  // A piece may live in a temporary buffer: use it before emit returns.
  void split(std::string_view text, const std::function<void(std::string_view)>& emit) const;

  const std::vector<PreTokenizerStep>& steps() const { return steps_; }

 private:
  void run(size_t step, std::string_view piece, const std::function<void(std::string_view)>& emit) const;
  std::vector<PreTokenizerStep> steps_;
};

}  // namespace yoco
