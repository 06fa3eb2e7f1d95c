// An HTTP/1.1 server for long requests and streamed answers (Boost.Beast; docs/design.md, OpenAI
// HTTP API): the router's OpenAI-compatible listener. Connections are served asynchronously by a
// small fixed pool of I/O threads (accept, TLS handshake, reading, keep-alive waits), so an idle
// connection costs one descriptor and no thread; a whole request is handed to the handler on a
// thread of its own, so a handler may block for a whole generation and write server-sent events
// as tokens arrive: a write blocks only its own handler while the client is slow
// (back-pressure), never the listener or another client. Connections are capped below the
// process's descriptor limit (over it: a fast 503), every read and write has a timeout, bodies a
// size limit, connections are kept alive between requests, and TLS (PEM files, re-read when they
// change) is on when a certificate is given. What the request parser refuses: server/http_request.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
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

using HttpStreamHandler = std::function<void(HttpExchange&)>;

struct HttpStreamServerOptions {
  std::chrono::milliseconds read_timeout{30000};   // a request's header and body; the keep-alive wait
  std::chrono::milliseconds write_timeout{60000};  // one write to a client that takes nothing
  size_t max_body_bytes = 8u << 20;                // larger: 413
  // Open at once, and below the descriptor limit (serve() reads RLIMIT_NOFILE and keeps a quarter
  // of it, at least 128, for the rest of the process); more get a 503 and are closed.
  int max_connections = 1024;
  int io_threads = 2;             // every connection's I/O (handlers: a thread each)
  std::string tls_cert, tls_key;  // PEM files; empty: plain HTTP
  std::string tls_client_ca;      // non-empty: client certificates required (mTLS)
};

class HttpStreamServer {
 public:
  ~HttpStreamServer();
  // Binds host:port (0: any free port) and checks the TLS files; nothing is served before serve().
  static Result<std::unique_ptr<HttpStreamServer>> bind(const std::string& host, uint16_t port,
                                                        HttpStreamServerOptions options = {});
  uint16_t port() const;
  bool tls() const;
  int max_connections() const;  // the cap in force: options.max_connections or less (above)
  // Starts the I/O threads; each request is handled by `handler` on a thread of its own.
  void serve(HttpStreamHandler handler);
  // Closes the listener and every connection, then waits (at most 5 s) for the handlers.
  void stop();

 private:
  struct Impl;
  explicit HttpStreamServer(std::unique_ptr<Impl> impl);
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
