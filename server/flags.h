// Flags of a server binary, read once through one helper family: every number has a range, every
// error names its flag, and a main turns the first error into exit code 2 (usage_error()).
// Parsing itself (--name value, --name=value, booleans, --config FILE, --help) is common/flags.h.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "common/flags.h"

namespace yoco {

// A parsed "host:port" for a listening socket (port 0: any free port).
struct ListenAddress {
  std::string host;
  int port = 0;
  std::string str() const {
    return host.find(':') == std::string::npos ? host + ":" + std::to_string(port)
                                               : "[" + host + "]:" + std::to_string(port);
  }
};

class ServerFlags {
 public:
  // The flags every server takes (read by server_options(), server/server.h): listen,
  // metrics-listen, port-file, drain-seconds, config, and the listener's TLS (server/tls.h:
  // tls-cert, tls-key, tls-client-ca, tls-reload-seconds), and log-level (common/log.h; set here).
  static const std::set<std::string>& common_names();

  // Parses argv[1..]; `known` (plus common_names()) are the accepted names, `booleans` those that
  // take no value. A parse error is kept like any later flag error: see ok() and usage_error().
  ServerFlags(std::string program, int argc, char** argv, std::set<std::string> known,
              const std::set<std::string>& booleans = {});
  // A client's flags (yoco-cli's cluster commands): argv[first..] with only `known` accepted (no
  // listener flags) and no positional arguments; the same helpers and errors.
  static ServerFlags client(std::string program, int argc, char** argv, int first, const std::set<std::string>& known,
                            const std::set<std::string>& booleans = {});

  bool has(const std::string& name) const { return flags_.has(name); }
  std::string str(const std::string& name, const std::string& def = "") const { return flags_.get(name, def); }
  bool boolean(const std::string& name) const { return flags_.get_bool(name); }
  // The value; when missing, records "--name: required (what)" and returns "".
  std::string required(const std::string& name, const std::string& what);
  // An integer in [lo, hi] (def when absent); out of range or malformed records an error and returns def.
  int64_t int_in(const std::string& name, int64_t def, int64_t lo, int64_t hi);
  double double_in(const std::string& name, double def, double lo, double hi);
  // Comma-separated integers, each in [lo, hi] ({} when absent); a bad one records an error naming
  // the flag and its index.
  std::vector<int64_t> int_list(const std::string& name, int64_t lo, int64_t hi);
  // "host:port" (def when absent); malformed records an error naming the flag.
  ListenAddress listen_address(const std::string& name, const std::string& def = "127.0.0.1:0");

  // Records a flag error found by the caller; the message names the flag ("--model: ...").
  // Only the first error is kept: it is the one a user fixes first.
  void fail(const std::string& message);
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  // Prints "program: <first error>" to stderr and returns 2, the exit code of every flag error.
  int usage_error() const;
  const std::string& program() const { return program_; }

 private:
  ServerFlags(std::string program, Result<Flags> parsed);

  std::string program_;
  Flags flags_;
  std::string error_;
};

// Prints "program: message" to stderr and returns `code`: 1 for a failure at start-up (cannot
// listen, cannot load), 2 for a flag error. Mains end with `return exit_with(...)`.
int exit_with(const std::string& program, const std::string& message, int code);

}  // namespace yoco
