#include "model/trace.h"

#include <utility>

namespace yoco {

namespace {
thread_local const TraceSink* current_sink = nullptr;
}  // namespace

TraceScope::TraceScope(TraceSink sink) : sink_(std::move(sink)), previous_(current_sink) { current_sink = &sink_; }

TraceScope::~TraceScope() { current_sink = previous_; }

const TraceSink* TraceScope::current() { return current_sink; }

}  // namespace yoco
