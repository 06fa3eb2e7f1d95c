// yoco-cli bench --trace FILE: the request trace the SLA planner simulates (tools/planner/README.md,
// traces): CSV with a header naming TIMESTAMP (seconds, or `2023-11-16 18:15:46.680…` as the
// public Azure LLM inference traces write it), ContextTokens, GeneratedTokens, and optionally
// DocumentId + DocumentTokens (the prompt's first DocumentTokens tokens are that shared document).
// Errors name the file, line and column, as tools/planner/traces.py's do.
#pragma once

#include <cmath>
#include <cstdint>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/status.h"

namespace yoco::bench {

struct TraceRequest {
  double arrival = 0;  // seconds after the first request
  int64_t prompt = 0, output = 0;
  std::string document;  // "" for none
  int64_t document_tokens = 0;
};

namespace detail {

inline std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (char c : line) {
    if (c == '"') quoted = !quoted;
    else if (c == ',' && !quoted) out.emplace_back();
    else if (c != '\r') out.back() += c;
  }
  for (auto& f : out) {
    while (!f.empty() && (f.back() == ' ' || f.back() == '\t')) f.pop_back();
    while (!f.empty() && (f.front() == ' ' || f.front() == '\t')) f.erase(f.begin());
  }
  return out;
}

// Seconds: a plain number, or an Azure trace timestamp (UTC, any fraction digits).
inline bool parse_time(const std::string& s, double* out) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (!s.empty() && end == s.c_str() + s.size() && std::isfinite(v)) {
    *out = v;
    return true;
  }
  std::tm tm{};
  int frac_at = 0;
  if (std::sscanf(s.c_str(), "%4d-%2d-%2d%*1[ T]%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                  &tm.tm_min, &tm.tm_sec, &frac_at) != 6)
    return false;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  double frac = 0;
  const std::string rest = s.substr(static_cast<size_t>(frac_at));
  if (!rest.empty()) {
    if (rest[0] != '.' || rest.size() < 2 || rest.find_first_not_of("0123456789", 1) != std::string::npos) return false;
    frac = std::stod("0" + rest);
  }
  *out = static_cast<double>(timegm(&tm)) + frac;
  return true;
}

inline bool parse_whole(const std::string& s, int64_t* out) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 15) return false;
  *out = std::stoll(s);
  return true;
}

}  // namespace detail

inline Result<std::vector<TraceRequest>> read_trace(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status(StatusCode::kInvalidArgument, path + ": cannot read");
  auto fail = [&](int line, const std::string& field, const std::string& msg) {
    return Status(StatusCode::kInvalidArgument,
                  path + ":" + std::to_string(line) + (field.empty() ? "" : ": " + field) + ": " + msg);
  };
  std::string line;
  if (!std::getline(in, line))
    return fail(1, "", "empty file (needs a header: TIMESTAMP,ContextTokens,GeneratedTokens)");
  const std::vector<std::string> header = detail::split_csv(line);
  std::map<std::string, size_t> col;
  for (size_t i = 0; i < header.size(); ++i) col[header[i]] = i;
  for (const char* c : {"TIMESTAMP", "ContextTokens", "GeneratedTokens"})
    if (!col.count(c)) return fail(1, c, "missing column");
  if (col.count("DocumentId") != col.count("DocumentTokens"))
    return fail(1, col.count("DocumentId") ? "DocumentTokens" : "DocumentId",
                "DocumentId and DocumentTokens come together");
  std::vector<TraceRequest> out;
  std::map<std::string, int64_t> docs;
  double t0 = 0;
  for (int n = 2; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r,") == std::string::npos) continue;
    const std::vector<std::string> f = detail::split_csv(line);
    if (f.size() != header.size())
      return fail(n, "", std::to_string(f.size()) + " fields, the header has " + std::to_string(header.size()));
    TraceRequest r;
    double t = 0;
    if (!detail::parse_time(f[col["TIMESTAMP"]], &t))
      return fail(n, "TIMESTAMP",
                  "not seconds or a timestamp like 2023-11-16 18:15:46.680 ('" + f[col["TIMESTAMP"]] + "')");
    if (out.empty()) t0 = t;
    r.arrival = t - t0;
    if (!out.empty() && r.arrival < out.back().arrival)
      return fail(n, "TIMESTAMP", "goes back in time (rows must be in arrival order)");
    for (auto [name, dst] :
         {std::pair<const char*, int64_t*>{"ContextTokens", &r.prompt}, {"GeneratedTokens", &r.output}}) {
      if (!detail::parse_whole(f[col[name]], dst)) return fail(n, name, "not a whole number ('" + f[col[name]] + "')");
      if (*dst < 1) return fail(n, name, "must be >= 1");
    }
    if (col.count("DocumentId") && !f[col["DocumentId"]].empty()) {
      r.document = f[col["DocumentId"]];
      if (!detail::parse_whole(f[col["DocumentTokens"]], &r.document_tokens) || r.document_tokens < 1)
        return fail(n, "DocumentTokens", "not a whole number >= 1 ('" + f[col["DocumentTokens"]] + "')");
      if (r.document_tokens >= r.prompt)
        return fail(n, "DocumentTokens", "must be below ContextTokens (the prompt goes on after it)");
      auto [it, fresh] = docs.emplace(r.document, r.document_tokens);
      if (!fresh && it->second != r.document_tokens)
        return fail(n, "DocumentTokens",
                    "document '" + r.document + "' has " + std::to_string(it->second) + " tokens on an earlier line");
    }
    out.push_back(std::move(r));
  }
  if (out.empty()) return fail(2, "", "no requests after the header");
  return out;
}

}  // namespace yoco::bench
