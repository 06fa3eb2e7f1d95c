#include "common/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>

namespace yoco {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
const char* level_name(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
  }
  return "info";
}
}  // namespace

void set_log_level(LogLevel level) { g_level = static_cast<int>(level); }
LogLevel log_level() { return static_cast<LogLevel>(g_level.load()); }

void log_line(LogLevel level, std::string_view msg, std::string_view fields) {
  using namespace std::chrono;
  auto now = system_clock::now();
  std::time_t t = system_clock::to_time_t(now);
  long ms = static_cast<long>(duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char ts[32];
  std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
  std::string line;
  line.reserve(64 + msg.size() + fields.size());
  line += "ts=";
  line += ts;
  line += '.';
  char msbuf[8];
  std::snprintf(msbuf, sizeof msbuf, "%03ldZ", ms);
  line += msbuf;
  line += " level=";
  line += level_name(level);
  line += " msg=\"";
  line += msg;
  line += '"';
  if (!fields.empty()) {
    line += ' ';
    line += fields;
  }
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stderr);
}

void LogFields::append(std::string_view key, const std::string& value) {
  if (!s_.empty()) s_ += ' ';
  s_ += key;
  s_ += '=';
  bool quote = value.empty() || value.find_first_of(" \t\"=") != std::string::npos;
  if (!quote) {
    s_ += value;
    return;
  }
  s_ += '"';
  for (char c : value) {
    if (c == '"' || c == '\\') s_ += '\\';
    s_ += c;
  }
  s_ += '"';
}

}  // namespace yoco
