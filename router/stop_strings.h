// Stop strings over a text stream (docs/design.md §3.2): the router sees the generated text delta by
// delta and must (a) stop at the first occurrence of any stop string, which is not part of
// the output, and (b) never emit text that might turn out to be the start of a stop string.
// A small value type, unit-tested alone (docs/architecture.md, rule 8).
#pragma once

#include <string>
#include <vector>

namespace yoco {

class StopStringMatcher {
 public:
  explicit StopStringMatcher(std::vector<std::string> stops);

  // Appends generated text; returns the text that is now safe to emit. After a match,
  // stopped() is true and later pushes return nothing.
  std::string push(const std::string& text);
  // End of generation without a match: everything held back is emitted.
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  size_t max_len_ = 0;
  std::string held_;  // text received but not emitted (shorter than the longest stop string)
  bool stopped_ = false;
};

}  // namespace yoco
