// A small HTTP/1.1 server for /metrics and health endpoints (Boost.Beast). One I/O thread serves
// every connection asynchronously, each on its own timeout: a silent or slow client is closed
// when its timer fires and never delays another scrape (docs/design.md §3.1).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "common/status.h"

namespace yoco {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

struct HttpServerOptions {
  // How long a connection may take to send its request, and then to take the answer; a
  // connection still open after it is closed.
  std::chrono::milliseconds timeout{5000};
  int max_connections = 64;  // open at once; more are closed on accept
};

class HttpServer {
 public:
  using Handler = std::function<HttpResponse()>;
  ~HttpServer();

  // Binds host:port (port 0: any free port) and serves GET `routes` until stop().
  static Result<std::unique_ptr<HttpServer>> start(const std::string& host, uint16_t port,
                                                   std::map<std::string, Handler> routes,
                                                   HttpServerOptions options = {});
  uint16_t port() const;
  void stop();

 private:
  struct Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The Prometheus text format's content type.
inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace yoco
