// Flags of a server binary (and of yoco-cli's cluster commands): each declared once in a
// FlagTable (common/flags.h: type, range, default, help; parsed by CLI11), the server's common
// flags added by the kit. Every error names its flag, only the first is kept, and a main turns
// it into exit code 2 (usage_error()).
//
//   ServerFlags f("yoco-decode", "a decode worker", argc, argv,
//                 {flag::integer("max-running", "sequences decoded at once", 32, 1, 1 << 16), ...});
//   const int max_running = static_cast<int>(f.integer("max-running"));
//   if (!f.ok()) return f.usage_error();
#pragma once

#include <cstdint>
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
  // The flags every server takes, declared here once (read by server_options(), server/server.h):
  // listen, metrics-listen, port-file, drain-seconds, config, the listener's TLS (server/tls.h:
  // server_tls_flags()), and log-level (common/log.h; set by the constructor).
  static FlagTable common_flags();

  // Parses argv[1..] against `table` plus common_flags(). A parse error is kept like any later
  // flag error: see ok() and usage_error(). `--help` prints every flag and exits 0.
  ServerFlags(std::string program, std::string about, int argc, char** argv, FlagTable table);
  // A client's flags (yoco-cli's cluster commands): argv[first..] against `table` alone (no
  // listener flags); the same readers and errors.
  static ServerFlags client(std::string program, std::string about, int argc, char** argv, int first, FlagTable table);

  bool has(const std::string& name) const { return flags_.has(name); }
  bool declares(const std::string& name) const;
  // The values (given, else the declared default), checked against their declared type and range
  // when parsed. Reading an undeclared name aborts (YOCO_CHECK): declare before reading.
  std::string str(const std::string& name) const { return flags_.str(name); }
  bool boolean(const std::string& name) const { return flags_.boolean(name); }
  int64_t integer(const std::string& name) const { return flags_.integer(name); }
  double number(const std::string& name) const { return flags_.number(name); }
  std::vector<int64_t> int_list(const std::string& name) const { return flags_.int_list(name); }
  std::vector<std::string> all(const std::string& name) const { return flags_.all(name); }
  // The value; when missing, records "--name: required (<its help text>)" and returns "".
  std::string required(const std::string& name);
  // "host:port" (the declared default when absent); malformed records an error naming the flag.
  ListenAddress listen_address(const std::string& name);

  // Records a flag error found by the caller; the message names the flag ("--model: ...").
  // Only the first error is kept: it is the one a user fixes first.
  void fail(const std::string& message);
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  // Prints "program: <first error>" to stderr and returns 2, the exit code of every flag error.
  int usage_error() const;
  const std::string& program() const { return program_; }

 private:
  ServerFlags(std::string program, std::string about, FlagTable table);

  std::string program_;
  Flags flags_;
  std::string error_;
};

// Prints "program: message" to stderr and returns `code`: 1 for a failure at start-up (cannot
// listen, cannot load), 2 for a flag error. Mains end with `return exit_with(...)`.
int exit_with(const std::string& program, const std::string& message, int code);

}  // namespace yoco
