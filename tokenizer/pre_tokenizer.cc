#include "tokenizer/pre_tokenizer.h"

#include <algorithm>

namespace yoco {
namespace {

struct Span {
  size_t begin, end;
  bool is_match;
};

// tokenizers' SplitDelimiterBehavior applied to the (offsets, is_match) list of one piece;
// the result's flag means "remove".
void apply_behavior(SplitBehavior behavior, std::vector<Span>& spans) {
  std::vector<Span> out;
  out.reserve(spans.size());
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      return;  // is_match already means "remove"
    case SplitBehavior::kIsolated:
      for (Span& s : spans) s.is_match = false;
      return;
    case SplitBehavior::kMergedWithPrevious:
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back({s.begin, s.end, false});
        }
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (size_t k = spans.size(); k-- > 0;) {
        const Span& s = spans[k];
        if (s.is_match && !previous_match && !out.empty()) {
          out.back().begin = s.begin;
        } else {
          out.push_back({s.begin, s.end, false});
        }
        previous_match = s.is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
    case SplitBehavior::kContiguous:
      for (const Span& s : spans) {
        if (s.is_match == previous_match && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back({s.begin, s.end, false});
        }
        previous_match = s.is_match;
      }
      break;
  }
  spans.swap(out);
}

}  // namespace

void PreTokenizer::split(std::string_view text, const std::function<void(std::string_view)>& emit) const {
  if (!text.empty()) run(0, text, emit);
}

void PreTokenizer::run(size_t step, std::string_view piece, const std::function<void(std::string_view)>& emit) const {
  if (step == steps_.size()) {
    if (!piece.empty()) emit(piece);
    return;
  }
  const PreTokenizerStep& st = steps_[step];
  std::string prefixed;
  if (st.add_prefix_space && (piece.empty() || piece[0] != ' ')) {
    prefixed.reserve(piece.size() + 1);
    prefixed += ' ';
    prefixed.append(piece);
    piece = prefixed;
  }
  if (!st.regex) {
    run(step + 1, piece, emit);
    return;
  }
  const bool streamable = st.behavior == SplitBehavior::kIsolated || st.behavior == SplitBehavior::kRemoved;
  // The flag of a span: true when this behaviour drops it.
  auto drop = [&](bool is_match) { return st.behavior == SplitBehavior::kRemoved && (is_match != st.invert); };
  std::vector<Span> spans;
  size_t prev = 0;
  auto add = [&](size_t b, size_t e, bool is_match) {
    if (streamable) {
      if (!drop(is_match)) run(step + 1, piece.substr(b, e - b), emit);
    } else {
      spans.push_back({b, e, is_match != st.invert});
    }
  };
  const size_t stopped = st.regex->for_each_match(piece, [&](size_t b, size_t e) {
    if (prev != b) add(prev, b, false);
    add(b, e, true);
    prev = e;
  });
  if (stopped < piece.size()) {
    // The regex gave up (a resource limit): what it did not scan stays one piece, never dropped.
    if (prev < stopped) add(prev, stopped, false);
    if (!streamable) {
      apply_behavior(st.behavior, spans);
      for (const Span& s : spans)
        if (!s.is_match) run(step + 1, piece.substr(s.begin, s.end - s.begin), emit);
    }
    run(step + 1, piece.substr(stopped), emit);
    return;
  }
  if (prev != piece.size()) add(prev, piece.size(), false);
  if (!streamable) {
    apply_behavior(st.behavior, spans);
    for (const Span& s : spans)
      if (!s.is_match) run(step + 1, piece.substr(s.begin, s.end - s.begin), emit);
  }
}

}  // namespace yoco
