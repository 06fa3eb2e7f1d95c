// An HTTP/1.1 server for long requests and streamed answers (Boost.Beast; docs/design.md, OpenAI
// HTTP API): the router's OpenAI-compatible listener. Unlike common/http_server.h (one I/O thread,
// short GET answers), each connection gets its own thread, so a handler may block for a whole
// generation and write server-sent events as tokens arrive: a write blocks only its own
// connection while the client is slow (back-pressure), never the listener or another client.
// Every read and write has a timeout, bodies a size limit, connections are kept alive between
// requests, and TLS (PEM files, re-read when they change) is on when a certificate is given.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace yoco {

struct HttpRequest {
  std::string method;                                       // "GET", "POST", ...
  std::string path;                                         // the target without its query
  std::map<std::string, std::string, std::less<>> headers;  // names lower-cased
  std::string body;
  std::string header(std::string_view name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
  }
};

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

// One request's answer: respond() once, or start_stream() then write() pieces (chunked transfer).
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
  int max_connections = 1024;                      // open at once; more are closed on accept
  std::string tls_cert, tls_key;                   // PEM files; empty: plain HTTP
  std::string tls_client_ca;                       // non-empty: client certificates required (mTLS)
};

class HttpStreamServer {
 public:
  ~HttpStreamServer();
  // Binds host:port (0: any free port) and checks the TLS files; nothing is served before serve().
  static Result<std::unique_ptr<HttpStreamServer>> bind(const std::string& host, uint16_t port,
                                                        HttpStreamServerOptions options = {});
  uint16_t port() const;
  bool tls() const;
  // Accepts connections on a thread of its own, each request handled by `handler` on its
  // connection's thread.
  void serve(HttpStreamHandler handler);
  // Closes the listener and every connection, then waits for their threads.
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
