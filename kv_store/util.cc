#include "kv_store/util.h"

#include <unistd.h>

#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <random>
#include <thread>

#include "common/checksum.h"

namespace yoco::kv {

uint64_t random64() {
  struct State {
    pid_t pid = -1;
    std::mt19937_64 gen;
  };
  thread_local State st;
  if (st.pid != getpid()) {
    st.pid = getpid();
    std::random_device rd;
    uint64_t seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
    seed = mix64(seed, static_cast<uint64_t>(st.pid));
    seed = mix64(seed, std::hash<std::thread::id>{}(std::this_thread::get_id()));
    seed = mix64(seed, static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
    st.gen.seed(seed);
  }
  return st.gen();
}

std::string random_hex() { return hex64(random64()); }

Result<int64_t> parse_byte_size(std::string_view text) {
  auto bad = [&](const char* why) { return invalid_argument("byte size '" + std::string(text) + "': " + why); };
  size_t i = 0;
  while (i < text.size() && ((text[i] >= '0' && text[i] <= '9') || text[i] == '.')) ++i;
  if (i == 0) return bad("expected a number such as 256MiB");
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + i, v);
  if (ec != std::errc() || end != text.data() + i) return bad("not a number");
  std::string unit;
  for (char c : text.substr(i)) unit += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double mult = 0;
  if (unit.empty() || unit == "b") mult = 1;
  else if (unit == "k" || unit == "kib") mult = 1024.0;
  else if (unit == "m" || unit == "mib") mult = 1024.0 * 1024;
  else if (unit == "g" || unit == "gib") mult = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tib") mult = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "kb") mult = 1e3;
  else if (unit == "mb") mult = 1e6;
  else if (unit == "gb") mult = 1e9;
  else if (unit == "tb") mult = 1e12;
  else return bad("unknown unit (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)");
  const double bytes = v * mult;
  if (!std::isfinite(bytes) || bytes > 9.0e18) return bad("too large");
  return static_cast<int64_t>(bytes);
}

Result<int64_t> parse_int(std::string_view text, std::string_view what) {
  if (text.empty() || text.size() > 18)
    return invalid_argument(std::string(what) + ": '" + std::string(text) + "' is not an integer");
  int64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9')
      return invalid_argument(std::string(what) + ": '" + std::string(text) + "' is not an integer");
    v = v * 10 + (c - '0');
  }
  return v;
}

Result<bool> parse_bool(std::string_view text, std::string_view what) {
  if (text == "1" || text == "true" || text == "yes" || text == "on") return true;
  if (text == "0" || text == "false" || text == "no" || text == "off") return false;
  return invalid_argument(std::string(what) + ": '" + std::string(text) + "' is not a boolean (1/0, true/false)");
}

Result<std::string> percent_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  auto hexval = [](char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
  };
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size()) return invalid_argument("bad %-escape in '" + std::string(s) + "'");
    const int hi = hexval(s[i + 1]), lo = hexval(s[i + 2]);
    if (hi < 0 || lo < 0) return invalid_argument("bad %-escape in '" + std::string(s) + "'");
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

Result<std::map<std::string, std::string>> parse_query(std::string_view q) {
  std::map<std::string, std::string> out;
  while (!q.empty()) {
    const size_t amp = q.find('&');
    std::string_view part = q.substr(0, amp);
    q = amp == std::string_view::npos ? std::string_view() : q.substr(amp + 1);
    if (part.empty()) continue;
    const size_t eq = part.find('=');
    if (eq == std::string_view::npos || eq == 0)
      return invalid_argument("query parameter '" + std::string(part) + "' is not key=value");
    YOCO_ASSIGN_OR_RETURN(std::string value, percent_decode(part.substr(eq + 1)));
    if (!out.emplace(std::string(part.substr(0, eq)), std::move(value)).second)
      return invalid_argument("query parameter '" + std::string(part.substr(0, eq)) + "' given twice");
  }
  return out;
}

}  // namespace yoco::kv
