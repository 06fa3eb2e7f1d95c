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

Result<LogLevel> parse_log_level(std::string_view name) {
  for (LogLevel l : {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarn, LogLevel::kError})
    if (name == level_name(l)) return l;
  return invalid_argument("log level \"" + std::string(name) + "\": expected debug, info, warn or error");
}

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
  line += log_escape(msg);
  line += '"';
  if (!fields.empty()) {
    line += ' ';
    line += fields;
  }
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stderr);
}

namespace {

// The length of the valid UTF-8 sequence at s[i] (2..4 bytes), or 0 when it is not one.
size_t utf8_sequence(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  const size_t n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((b(i + k) & 0xc0) != 0x80) return 0;
  if (c == 0xe0 && b(i + 1) < 0xa0) return 0;  // overlong
  if (c == 0xed && b(i + 1) > 0x9f) return 0;  // surrogate
  if (c == 0xf0 && b(i + 1) < 0x90) return 0;  // overlong
  if (c == 0xf4 && b(i + 1) > 0x8f) return 0;  // beyond U+10FFFF
  return n;
}

}  // namespace

// Client-supplied strings reach log fields (request ids, document ids, error messages): a
// newline or a control byte in one must never start a forged record, so every control
// character, DEL and byte that is not valid UTF-8 is written escaped (docs/design.md §3.1).
std::string log_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      if (const size_t n = utf8_sequence(s, i)) {
        out.append(s.substr(i, n));
        i += n;
        continue;
      }
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c >= 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  return out;
}

void LogFields::append(std::string_view key, const std::string& value) {
  if (!s_.empty()) s_ += ' ';
  // Keys are never quoted: a separator in one is replaced so the record still splits into pairs.
  for (char c : log_escape(key)) s_ += c == ' ' || c == '=' || c == '"' ? '_' : c;
  s_ += '=';
  const std::string escaped = log_escape(value);
  const bool quote =
      escaped.empty() || escaped.size() != value.size() || value.find_first_of(" \"=") != std::string::npos;
  if (!quote) {
    s_ += value;
    return;
  }
  s_ += '"';
  s_ += escaped;
  s_ += '"';
}

}  // namespace yoco
