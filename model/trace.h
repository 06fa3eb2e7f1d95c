// Named intermediates (docs/design.md §2.9): while a TraceScope lives on a thread, every run of
// the layer program (model/program.h) on that thread, on either backend, hands each intermediate
// it names to the scope's sink, as host fp32 rows with their positions. A mismatch between the
// backends, or against the float64 reference (tests/reference/), is then located to one stage of
// one layer. A debugging aid: off (one pointer test per stage) unless a scope is open.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

namespace yoco {

struct TraceRows {
  std::string_view name;  // e.g. "self.0.1.q" (model/program.h lists the names)
  int rows = 0, cols = 0;
  const float* data = nullptr;         // [rows, cols], dense; valid during the call only
  const int64_t* positions = nullptr;  // the position of each row in its sequence
};
using TraceSink = std::function<void(const TraceRows&)>;

// Not copyable; scopes nest (the innermost one receives).
class TraceScope {
 public:
  explicit TraceScope(TraceSink sink);
  ~TraceScope();
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

  // The innermost scope's sink on this thread, or null.
  static const TraceSink* current();

 private:
  TraceSink sink_;
  const TraceSink* previous_;
};

}  // namespace yoco
