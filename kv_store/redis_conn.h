// One connection to a Redis server, plain TCP or TLS (OpenSSL), for the redis backend.
//
// hiredis (0.14 on Debian 12) is used only for what it is good at: parsing RESP replies into
// redisReply objects. The socket, the timeouts and TLS are ours, because hiredis 0.14 has no TLS
// and reads its socket directly. Commands are appended to an output buffer and sent together
// (pipelining); replies are read back in order. Every I/O waits at most the command timeout for
// progress (poll on a non-blocking socket), so a stopped or silent server costs one timeout, never
// a hang. Any error marks the connection broken: a pooled connection is then dropped, never reused
// out of step with its replies.
#pragma once

#include <hiredis/hiredis.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "kv_store/redis_store.h"

namespace yoco::redis {

struct ReplyFree {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyFree>;

using TlsOptions = RedisTlsOptions;  // kv_store/redis_store.h

// The TLS client configuration shared by a store's connections (an SSL_CTX). Files are read
// once, at creation: a missing or bad file is INVALID_ARGUMENT naming the URL parameter.
class TlsContext {
 public:
  static Result<std::shared_ptr<TlsContext>> create(const TlsOptions& opt);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  const TlsOptions& options() const { return opt_; }
  void* ssl_ctx() const { return ctx_; }  // SSL_CTX*

 private:
  TlsContext(TlsOptions opt, void* ctx) : opt_(std::move(opt)), ctx_(ctx) {}
  TlsOptions opt_;
  void* ctx_;
};

// Whether this build has TLS (OpenSSL was found).
bool tls_available();

class Connection {
 public:
  // Resolves and connects (each address in turn), then the TLS handshake when tls is set, all
  // within connect_timeout. UNAVAILABLE or DEADLINE_EXCEEDED with the reason.
  static Result<std::unique_ptr<Connection>> open(const std::string& host, int port,
                                                  std::chrono::milliseconds connect_timeout,
                                                  std::chrono::milliseconds command_timeout,
                                                  std::shared_ptr<TlsContext> tls);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Appends one command (RESP array of bulk strings) to the output buffer.
  void append(const std::vector<std::string_view>& args);
  size_t pending() const { return pending_; }
  // Sends the buffer, then reads one reply per appended command, in order. On failure the
  // connection is broken and the status says why ("redis WHAT: ...").
  Result<std::vector<ReplyPtr>> run(const std::string& what);

  bool broken() const { return broken_; }
  bool is_tls() const { return ssl_ != nullptr; }

 private:
  Connection(int fd, std::chrono::milliseconds command_timeout);
  Status fail(Status st);
  Status write_all(const std::string& what);
  Status read_more(const std::string& what);
  // Waits until the socket is readable (want_write = false) or writable, up to `timeout`.
  Status wait(bool want_write, std::chrono::milliseconds timeout, const std::string& what);

  int fd_;
  void* ssl_ = nullptr;  // SSL*
  std::chrono::milliseconds command_timeout_;
  redisReader* reader_;
  std::string out_;
  size_t pending_ = 0;
  bool broken_ = false;
};

}  // namespace yoco::redis
