// The one HTTP/1.1 listener of the services (Boost.Beast; docs/architecture.md, the HTTP
// listener): every process's /metrics and /healthz (server/server.h) and the router's
// OpenAI-compatible API (docs/design.md, OpenAI HTTP API) are route tables served by it. A route
// is a method and a path with its handler (HttpRoutes); an unrouted path goes to the table's
// fallback (none: 404), a routed path asked with another method gets 405. Connections are served
// asynchronously by a small fixed pool of I/O threads (accept, TLS handshake, reading, keep-alive
// waits), so an idle connection costs one descriptor and no thread; a whole request is handed to
// its handler on a thread of its own, so a handler may block for a whole generation and write
// server-sent events as tokens arrive: a write blocks only its own handler while the client is
// slow (back-pressure), never the listener or another client. Connections are capped below the
// process's descriptor limit (over it: a fast 503), every read and write has a timeout, bodies a
// size limit, connections are kept alive between requests, and TLS (PEM files, re-read when they
// change) is on when a certificate is given. What the request parser refuses: server/http_request.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/status.h"
#include "server/http_request.h"

namespace yoco {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

// One request's answer: respond() once, or start_stream() then write() pieces (chunked transfer;
// to an HTTP/1.0 client, which cannot read chunks, the bytes as they are, the close ending them).
// A false return means the client is gone (the handler stops and frees what it holds).
class HttpExchange {
 public:
  virtual ~HttpExchange() = default;
  virtual const HttpRequest& request() const = 0;
  virtual bool respond(int status, std::string_view content_type, std::string body, const HttpHeaders& extra = {}) = 0;
  virtual bool start_stream(int status, std::string_view content_type, const HttpHeaders& extra = {}) = 0;
  virtual bool write(std::string_view data) = 0;
  virtual bool started() const = 0;  // headers sent (respond or start_stream)
  // Whether the client closed its end; cheap (a poll of the socket), safe from any thread.
  virtual bool client_gone() const = 0;
};

using HttpHandler = std::function<void(HttpExchange&)>;

// A short answer computed without blocking (/metrics, /healthz).
struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// The Prometheus text format's content type.
inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

// Method + path → handler (the query string is not part of the path).
class HttpRoutes {
 public:
  HttpRoutes() = default;
  // Every request to `fallback` (a table of no routes): serve([](HttpExchange& ex) {...}).
  template <class F, class = std::enable_if_t<std::is_invocable_v<F&, HttpExchange&>>>
  HttpRoutes(F fallback) : fallback_(std::move(fallback)) {}  // NOLINT(google-explicit-constructor)

  // `handler` for `method` requests to `path`; it runs on a thread of its own and may stream.
  HttpRoutes& on(const std::string& method, const std::string& path, HttpHandler handler);
  // GET `path` answered with what `answer` returns; HEAD too, without the body.
  HttpRoutes& get(const std::string& path, std::function<HttpResponse()> answer);
  // Requests to paths no route names (none: 404, text).
  HttpRoutes& fallback(HttpHandler handler);

  // Runs the request's handler; a path routed only for other methods gets 405 naming them (Allow).
  void dispatch(HttpExchange& ex) const;

 private:
  std::map<std::string, std::map<std::string, HttpHandler>> routes_;  // path → method → handler
  HttpHandler fallback_;
};

struct HttpListenerOptions {
  std::chrono::milliseconds read_timeout{30000};   // a request's header and body; the keep-alive wait
  std::chrono::milliseconds write_timeout{60000};  // one write to a client that takes nothing
  size_t max_body_bytes = 8u << 20;                // larger: 413
  // Open at once, and below the descriptor limit (serve() reads RLIMIT_NOFILE and keeps a quarter
  // of it, at least 128, for the rest of the process); more get a 503 and are closed.
  int max_connections = 1024;
  int io_threads = 2;                // every connection's I/O (handlers: a thread each)
  std::string tls_cert, tls_key;     // PEM files; empty: plain HTTP
  std::string tls_client_ca;         // non-empty: client certificates required (mTLS)
  std::string flag = "--http-port";  // the flag that gave the address: bind's errors name it
};

class HttpListener {
 public:
  ~HttpListener();
  // Binds host:port (0: any free port) and checks the TLS files; nothing is served before serve().
  static Result<std::unique_ptr<HttpListener>> bind(const std::string& host, uint16_t port,
                                                    HttpListenerOptions options = {});
  uint16_t port() const;
  bool tls() const;
  int max_connections() const;  // the cap in force: options.max_connections or less (above)
  // Starts the I/O threads; each request is handled by its route's handler on a thread of its own.
  void serve(HttpRoutes routes);
  // Closes the listener and every connection, then waits (at most 5 s) for the handlers.
  void stop();

 private:
  struct Impl;
  explicit HttpListener(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Calls `on_gone` once if the exchange's client goes away while this object lives (polled every
// 20 ms on a thread of its own): a blocking handler learns of a dropped connection without writing.
class ClientWatch {
 public:
  ClientWatch(const HttpExchange& ex, std::function<void()> on_gone);
  ~ClientWatch();
  ClientWatch(const ClientWatch&) = delete;
  ClientWatch& operator=(const ClientWatch&) = delete;
  bool fired() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace yoco
