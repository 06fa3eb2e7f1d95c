#include "server/flags.h"

#include <cstdio>
#include <sstream>
#include <utility>

#include "common/log.h"

namespace yoco {

const std::set<std::string>& ServerFlags::common_names() {
  static const std::set<std::string> names = {
      "listen",   "metrics-listen", "port-file",     "drain-seconds",      "config",
      "tls-cert", "tls-key",        "tls-client-ca", "tls-reload-seconds", "log-level"};
  return names;
}

ServerFlags::ServerFlags(std::string program, int argc, char** argv, std::set<std::string> known,
                         const std::set<std::string>& booleans)
    : program_(std::move(program)) {
  known.insert(common_names().begin(), common_names().end());
  auto f = Flags::parse(argc, argv, 1, known, booleans);
  if (f.ok()) flags_ = std::move(f).value();
  else fail(f.status().message());
  // Every server's log level, set here so each main gets it with its flags (default info).
  if (flags_.has("log-level")) {
    auto level = parse_log_level(flags_.get("log-level"));
    if (level.ok()) set_log_level(*level);
    else fail("--log-level: " + level.status().message());
  }
}

ServerFlags::ServerFlags(std::string program, Result<Flags> parsed) : program_(std::move(program)) {
  if (parsed.ok()) flags_ = std::move(parsed).value();
  else fail(parsed.status().message());
}

ServerFlags ServerFlags::client(std::string program, int argc, char** argv, int first,
                                const std::set<std::string>& known, const std::set<std::string>& booleans) {
  ServerFlags f(std::move(program), Flags::parse(argc, argv, first, known, booleans));
  if (f.ok() && !f.flags_.positional().empty()) f.fail("unexpected argument \"" + f.flags_.positional()[0] + "\"");
  return f;
}

void ServerFlags::fail(const std::string& message) {
  if (error_.empty()) error_ = message;
}

std::string ServerFlags::required(const std::string& name, const std::string& what) {
  if (!has(name)) fail("--" + name + ": required (" + what + ")");
  return str(name);
}

int64_t ServerFlags::int_in(const std::string& name, int64_t def, int64_t lo, int64_t hi) {
  auto v = flags_.get_int(name, def);
  if (!v.ok()) {
    fail(v.status().message());
    return def;
  }
  if (*v < lo || *v > hi) {
    fail("--" + name + ": must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
         std::to_string(*v));
    return def;
  }
  return *v;
}

double ServerFlags::double_in(const std::string& name, double def, double lo, double hi) {
  auto v = flags_.get_double(name, def);
  if (!v.ok()) {
    fail(v.status().message());
    return def;
  }
  if (*v < lo || *v > hi) {
    std::ostringstream os;
    os << "--" << name << ": must be in [" << lo << ", " << hi << "], got " << *v;
    fail(os.str());
    return def;
  }
  return *v;
}

std::vector<int64_t> ServerFlags::int_list(const std::string& name, int64_t lo, int64_t hi) {
  if (!has(name)) return {};
  auto v = flags_.get_int_list(name);
  if (!v.ok()) {
    fail(v.status().message());
    return {};
  }
  for (size_t i = 0; i < v->size(); ++i) {
    if ((*v)[i] < lo || (*v)[i] > hi) {
      fail("--" + name + "[" + std::to_string(i) + "]: must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
           "], got " + std::to_string((*v)[i]));
      return {};
    }
  }
  return std::move(v).value();
}

ListenAddress ServerFlags::listen_address(const std::string& name, const std::string& def) {
  auto hp = parse_listen_address(str(name, def), name);
  if (!hp.ok()) {
    fail(hp.status().message());
    return {};
  }
  return {hp->first, hp->second};
}

int ServerFlags::usage_error() const { return exit_with(program_, error_.empty() ? "bad flags" : error_, 2); }

int exit_with(const std::string& program, const std::string& message, int code) {
  std::fprintf(stderr, "%s: %s\n", program.c_str(), message.c_str());
  return code;
}

}  // namespace yoco
