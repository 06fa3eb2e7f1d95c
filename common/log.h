// Structured log lines: `ts=... level=... msg="..." key=value ...` on stderr.
#pragma once

#include <sstream>
#include <string>
#include <string_view>

#include "common/status.h"

namespace yoco {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void set_log_level(LogLevel level);
LogLevel log_level();
// "debug", "info", "warn" or "error" (the servers' --log-level); the error names the value.
Result<LogLevel> parse_log_level(std::string_view name);
void log_line(LogLevel level, std::string_view msg, std::string_view fields);

// `s` with quotes, backslashes, control characters, DEL and invalid UTF-8 escaped (\n, \r, \t,
// \xNN): one log record stays one line whatever a client put in a string.
std::string log_escape(std::string_view s);

// Builds the `key=value` tail; values with spaces, quotes or escapes are quoted and escaped.
class LogFields {
 public:
  template <class V>
  LogFields& kv(std::string_view key, const V& value) {
    std::ostringstream os;
    os << value;
    append(key, os.str());
    return *this;
  }
  const std::string& str() const { return s_; }

 private:
  void append(std::string_view key, const std::string& value);
  std::string s_;
};

}  // namespace yoco

#define YOCO_LOG(level, msg, fields)                                      \
  do {                                                                    \
    if (static_cast<int>(level) >= static_cast<int>(::yoco::log_level())) \
      ::yoco::log_line(level, msg, (fields).str());                       \
  } while (0)

// One debug line per hop of a request through the cluster (docs/architecture.md, a request's
// path): `msg="hop" hop=<service.step> request_id=<id>` and the `more` fields (`.kv(...)`
// calls, e.g. the reservation id), so one grep for a request_id follows it through every
// process's log. Off unless the level is debug (--log-level debug).
#define YOCO_HOP(hop, request_id, more) \
  YOCO_LOG(::yoco::LogLevel::kDebug, "hop", ::yoco::LogFields().kv("hop", hop).kv("request_id", request_id) more)
