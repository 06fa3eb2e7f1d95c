#include "server/flags.h"

#include <cstdio>
#include <sstream>
#include <utility>

namespace yoco {

const std::set<std::string>& ServerFlags::common_names() {
  static const std::set<std::string> names = {"listen",        "metrics-listen", "port-file",
                                              "drain-seconds", "config",         "tls-cert",
                                              "tls-key",       "tls-client-ca",  "tls-reload-seconds"};
  return names;
}

ServerFlags::ServerFlags(std::string program, int argc, char** argv, std::set<std::string> known,
                         const std::set<std::string>& booleans)
    : program_(std::move(program)) {
  known.insert(common_names().begin(), common_names().end());
  auto f = Flags::parse(argc, argv, 1, known, booleans);
  if (f.ok()) flags_ = std::move(f).value();
  else fail(f.status().message());
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
