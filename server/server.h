// The gRPC edge every server binary shares (docs/architecture.md, services): one object that
// raises the open-file limit to the hard limit, listens (TLS or plaintext, server/tls.h; gRPC
// health SERVING + reflection), serves /metrics and /healthz over HTTP, writes --port-file, logs
// the "serving" line, and on SIGTERM runs the drain sequence:
//   health NOT_SERVING -> services refuse new work -> in-flight work finishes (at most
//   --drain-seconds) -> gRPC Shutdown with a grace deadline -> /metrics stops.
//
//   ServerFlags flags("yoco-x", "what it is", argc, argv, {flag::integer(...), ...});
//   ServerOptions so = server_options(flags);        // listen, metrics-listen, port-file, drain-seconds
//   ... read the service's own flags ...; if (!flags.ok()) return flags.usage_error();
//   install_shutdown_signal_handlers();               // before slow start-up work
//   auto server = Server::start(so, {&svc}, registry, refresh);  if (!server.ok()) return exit_with(...);
//   (*server)->log_serving(LogFields().kv(...));
//   (*server)->wait_and_drain({.refuse = ..., .finish = ...});
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/json.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/process.h"
#include "common/status.h"
#include "server/flags.h"
#include "server/http_listener.h"
#include "server/tls.h"

namespace yoco {

struct ServerOptions {
  std::string program;                           // "yoco-router": the log line and error prefix
  std::string listen = "127.0.0.1:0";            // gRPC; port 0: any free port
  ListenAddress metrics_listen{"127.0.0.1", 0};  // /metrics over HTTP
  std::string port_file;                         // empty: none; else {"grpc_port", "metrics_port", extra...} JSON
  std::chrono::seconds drain{30};                // the most in-flight work may take after SIGTERM
  std::chrono::seconds shutdown_grace{1};        // gRPC Shutdown deadline after the drain
  ServerTls tls;                                 // none: plaintext (one warn line)
  int max_receive_message_bytes = 4 << 20;       // a larger request is refused (gRPC's default)
};

// Reads the common flags (ServerFlags::common_flags()); errors go into `flags`.
ServerOptions server_options(ServerFlags& flags);

// What a service does during the drain, in order (both optional).
struct DrainSteps {
  std::function<void()> refuse;  // after NOT_SERVING: new calls get UNAVAILABLE
  // Lets in-flight work finish by `until` (e.g. a scheduler's stop(drain)); returns early when idle.
  std::function<void(std::chrono::steady_clock::time_point until)> finish;
};

class Server {
 public:
  ~Server();
  // Listens, registers `services` (plus health and reflection), starts /metrics (each scrape runs
  // `refresh` first, then exposes `registry`), writes the port file with `port_fields` added.
  // Errors name the flag (--listen, --metrics-listen, --port-file).
  static Result<std::unique_ptr<Server>> start(const ServerOptions& options, std::vector<grpc::Service*> services,
                                               MetricsRegistry& registry, std::function<void()> refresh = {},
                                               Json::Object port_fields = {});

  int grpc_port() const { return grpc_port_; }
  int metrics_port() const;
  grpc::Server& grpc() { return *grpc_; }

  // "<program> serving grpc_port=... metrics_port=... open_files=... <extra>".
  void log_serving(const LogFields& extra) const;
  // Blocks until SIGTERM/SIGINT, then runs the drain sequence (header comment) and returns.
  void wait_and_drain(const DrainSteps& steps);
  // The drain sequence alone (tests, or a caller with its own signal handling).
  void drain(const DrainSteps& steps);

 private:
  Server() = default;
  ServerOptions opt_;
  std::unique_ptr<grpc::Server> grpc_;
  std::unique_ptr<HttpListener> http_;
  int grpc_port_ = 0;
  long open_files_ = 0;               // the soft RLIMIT_NOFILE, raised to the hard limit at start
  std::atomic<bool> serving_{false};  // what /healthz answers: gRPC health, for plaintext HTTP probes
};

// Polls `idle` every 20 ms until it is true or `until` passes (a router's in-flight count).
void wait_until_idle(const std::function<bool()>& idle, std::chrono::steady_clock::time_point until);

}  // namespace yoco
