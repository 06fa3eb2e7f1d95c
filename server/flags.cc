#include "server/flags.h"

#include <cstdio>
#include <utility>

#include "common/log.h"
#include "server/tls.h"

namespace yoco {

FlagTable ServerFlags::common_flags() {
  FlagTable t = flag::grouped(
      "Every server",
      {flag::str("listen", "the gRPC listener, host:port (port 0: any free port; see --port-file)", "127.0.0.1:0"),
       flag::str("metrics-listen", "the HTTP listener of /metrics and /healthz, host:port", "127.0.0.1:0"),
       flag::str("port-file", "write {\"grpc_port\", \"metrics_port\", ...} as JSON to this file once listening"),
       flag::integer("drain-seconds", "after SIGTERM, the longest in-flight work may take before the server stops", 30,
                     0, 24 * 3600),
       flag::str("config", "a JSON object of flag values ({\"max-running\": 64, ...}); the command line wins"),
       flag::str("log-level", "debug, info, warn or error (debug: one line per hop of a request)", "info")});
  for (FlagSpec& s : flag::grouped("Every server", server_tls_flags())) t.push_back(std::move(s));
  return t;
}

ServerFlags::ServerFlags(std::string program, std::string about, FlagTable table)
    : program_(program), flags_(std::move(program), std::move(about), std::move(table)) {}

ServerFlags::ServerFlags(std::string program, std::string about, int argc, char** argv, FlagTable table)
    : ServerFlags(std::move(program), std::move(about), [&] {
        for (FlagSpec& s : common_flags()) table.push_back(std::move(s));
        return std::move(table);
      }()) {
  if (Status st = flags_.parse(argc, argv, 1); !st.ok()) fail(st.message());
  // Every server's log level, set here so each main gets it with its flags (default info).
  if (flags_.has("log-level")) {
    auto level = parse_log_level(flags_.str("log-level"));
    if (level.ok()) set_log_level(*level);
    else fail("--log-level: " + level.status().message());
  }
}

ServerFlags ServerFlags::client(std::string program, std::string about, int argc, char** argv, int first,
                                FlagTable table) {
  ServerFlags f(std::move(program), std::move(about), std::move(table));
  if (Status st = f.flags_.parse(argc, argv, first); !st.ok()) f.fail(st.message());
  return f;
}

bool ServerFlags::declares(const std::string& name) const { return flags_.declares(name); }

void ServerFlags::fail(const std::string& message) {
  if (error_.empty()) error_ = message;
}

std::string ServerFlags::required(const std::string& name) {
  if (!has(name)) fail("--" + name + ": required (" + flags_.spec(name).help + ")");
  return str(name);
}

ListenAddress ServerFlags::listen_address(const std::string& name) {
  auto hp = parse_listen_address(str(name), name);
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
