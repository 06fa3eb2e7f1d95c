#include "kv_store/redis_conn.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#if YOCO_REDIS_TLS
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#endif

#include "kv_store/store.h"

namespace yoco::redis {

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kKeepOutputBytes = size_t{4} << 20;

std::string errno_text(int e) { return std::strerror(e); }

bool is_ip_literal(const std::string& host) {
  in6_addr a6;
  in_addr a4;
  return inet_pton(AF_INET, host.c_str(), &a4) == 1 || inet_pton(AF_INET6, host.c_str(), &a6) == 1;
}

#if YOCO_REDIS_TLS
// The OpenSSL error queue as text (and cleared), for messages.
std::string ssl_errors() {
  std::string s;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!s.empty()) s += "; ";
    s += buf;
  }
  return s.empty() ? "no detail" : s;
}
#endif

// Connects one address within `deadline`; returns the fd (non-blocking) or -1 with errno set.
int connect_one(const addrinfo* ai, Clock::time_point deadline, std::string& err) {
  const int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
  if (fd < 0) {
    err = "socket: " + errno_text(errno);
    return -1;
  }
  if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) {
      err = errno_text(errno);
      close(fd);
      return -1;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd p{fd, POLLOUT, 0};
    const int n = left > 0 ? poll(&p, 1, static_cast<int>(left)) : 0;
    if (n <= 0) {
      err = n == 0 ? "connect timed out" : "poll: " + errno_text(errno);
      close(fd);
      return -1;
    }
    int so = 0;
    socklen_t len = sizeof so;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &len) != 0 || so != 0) {
      err = errno_text(so != 0 ? so : errno);
      close(fd);
      return -1;
    }
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  return fd;
}

}  // namespace

// --- TLS context ---------------------------------------------------------------------------

#if YOCO_REDIS_TLS

bool tls_available() { return true; }

Result<std::shared_ptr<TlsContext>> TlsContext::create(const TlsOptions& opt) {
  if (opt.cert_file.empty() != opt.key_file.empty())
    return invalid_argument(std::string("redis url: tls_") + (opt.cert_file.empty() ? "cert" : "key") +
                            " missing: a client certificate needs both tls_cert and tls_key");
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ctx == nullptr) return internal_error("redis tls: SSL_CTX_new failed: " + ssl_errors());
  auto fail = [&](const std::string& m) {
    SSL_CTX_free(ctx);
    return invalid_argument(m + ": " + ssl_errors());
  };
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (!opt.ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(ctx, opt.ca_file.c_str(), nullptr) != 1)
      return fail("redis url: tls_ca: cannot load CA file '" + opt.ca_file + "'");
  } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
    return fail("redis tls: cannot load the system's trusted CAs (give tls_ca)");
  }
  if (!opt.cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx, opt.cert_file.c_str()) != 1)
      return fail("redis url: tls_cert: cannot load certificate '" + opt.cert_file + "'");
    if (SSL_CTX_use_PrivateKey_file(ctx, opt.key_file.c_str(), SSL_FILETYPE_PEM) != 1)
      return fail("redis url: tls_key: cannot load private key '" + opt.key_file + "'");
    if (SSL_CTX_check_private_key(ctx) != 1)
      return fail("redis url: tls_key: '" + opt.key_file + "' does not match tls_cert '" + opt.cert_file + "'");
  }
  SSL_CTX_set_verify(ctx, opt.verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, nullptr);
  return std::shared_ptr<TlsContext>(new TlsContext(opt, ctx));
}

TlsContext::~TlsContext() { SSL_CTX_free(static_cast<SSL_CTX*>(ctx_)); }

#else

bool tls_available() { return false; }

Result<std::shared_ptr<TlsContext>> TlsContext::create(const TlsOptions&) {
  return kv_unimplemented(
      "redis kv store: tls requested, but this build has no OpenSSL (install libssl-dev and rebuild)");
}

TlsContext::~TlsContext() = default;

#endif

// --- Connection ------------------------------------------------------------------------------

Connection::Connection(int fd, std::chrono::milliseconds command_timeout)
    : fd_(fd), command_timeout_(command_timeout), reader_(redisReaderCreate()) {}

Connection::~Connection() {
#if YOCO_REDIS_TLS
  if (ssl_) {
    SSL* ssl = static_cast<SSL*>(ssl_);
    // A clean close_notify when the connection is healthy; never wait for the peer's.
    if (!broken_) SSL_shutdown(ssl);
    SSL_free(ssl);
  }
#endif
  if (fd_ >= 0) close(fd_);
  if (reader_) redisReaderFree(reader_);
}

Result<std::unique_ptr<Connection>> Connection::open(const std::string& host, int port,
                                                     std::chrono::milliseconds connect_timeout,
                                                     std::chrono::milliseconds command_timeout,
                                                     std::shared_ptr<TlsContext> tls) {
  const auto deadline = Clock::now() + connect_timeout;
  const std::string where = host + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &res); rc != 0)
    return kv_unavailable("redis connect to " + where + ": cannot resolve: " + gai_strerror(rc));
  int fd = -1;
  std::string err;
  for (const addrinfo* ai = res; ai != nullptr && fd < 0; ai = ai->ai_next) fd = connect_one(ai, deadline, err);
  freeaddrinfo(res);
  if (fd < 0) {
    if (err == "connect timed out") return kv_deadline_exceeded("redis connect to " + where + ": timed out");
    return kv_unavailable("redis connect to " + where + ": " + err);
  }
  std::unique_ptr<Connection> c(new Connection(fd, command_timeout));
  if (c->reader_ == nullptr) return kv_unavailable("redis: out of memory");
  if (!tls) return c;
#if YOCO_REDIS_TLS
  SSL* ssl = SSL_new(static_cast<SSL_CTX*>(tls->ssl_ctx()));
  if (ssl == nullptr) return kv_unavailable("redis tls: SSL_new failed: " + ssl_errors());
  c->ssl_ = ssl;
  SSL_set_fd(ssl, fd);
  const TlsOptions& o = tls->options();
  const std::string name = o.server_name.empty() ? host : o.server_name;
  if (!is_ip_literal(name)) SSL_set_tlsext_host_name(ssl, name.c_str());
  if (o.verify) {
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
    const int ok = is_ip_literal(name) ? X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str())
                                       : X509_VERIFY_PARAM_set1_host(param, name.c_str(), name.size());
    if (ok != 1) return kv_unavailable("redis tls: cannot set the name to verify ('" + name + "')");
  }
  ERR_clear_error();
  for (;;) {
    const int rc = SSL_connect(ssl);
    if (rc == 1) break;
    const int e = SSL_get_error(ssl, rc);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if ((e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) && left.count() > 0) {
      Status st = c->wait(e == SSL_ERROR_WANT_WRITE, left, "tls handshake with " + where);
      if (!st.ok()) return st;
      continue;
    }
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
      return kv_deadline_exceeded("redis tls handshake with " + where + ": timed out");
    c->broken_ = true;
    const long v = SSL_get_verify_result(ssl);
    if (v != X509_V_OK)
      return kv_unavailable("redis tls handshake with " + where + ": certificate verification failed: " +
                            X509_verify_cert_error_string(v) + " (expected name '" + name + "')");
    std::string detail = ssl_errors();
    if (e == SSL_ERROR_SYSCALL || e == SSL_ERROR_ZERO_RETURN)
      detail =
          "connection closed by the server during the handshake (is it a TLS port? does it require a "
          "client certificate, tls_cert/tls_key?)" +
          (detail == "no detail" ? "" : ": " + detail);
    return kv_unavailable("redis tls handshake with " + where + ": " + detail);
  }
  return c;
#else
  return kv_unimplemented("redis kv store: tls requested, but this build has no OpenSSL");
#endif
}

Status Connection::fail(Status st) {
  broken_ = true;
  return st;
}

Status Connection::wait(bool want_write, std::chrono::milliseconds timeout, const std::string& what) {
  pollfd p{fd_, static_cast<short>(want_write ? POLLOUT : POLLIN), 0};
  for (;;) {
    const int n = poll(&p, 1, static_cast<int>(timeout.count()));
    if (n > 0) return Status::Ok();  // ready, or an error/hangup the next call reports
    if (n == 0)
      return fail(
          kv_deadline_exceeded("redis " + what + ": timed out after " + std::to_string(timeout.count()) + " ms"));
    if (errno != EINTR) return fail(kv_unavailable("redis " + what + ": poll: " + errno_text(errno)));
  }
}

void Connection::append(const std::vector<std::string_view>& args) {
  size_t bytes = 16;
  for (auto a : args) bytes += a.size() + 24;
  out_.reserve(out_.size() + bytes);
  out_ += '*';
  out_ += std::to_string(args.size());
  out_ += "\r\n";
  for (auto a : args) {
    out_ += '$';
    out_ += std::to_string(a.size());
    out_ += "\r\n";
    out_.append(a.data(), a.size());
    out_ += "\r\n";
  }
  ++pending_;
}

Status Connection::write_all(const std::string& what) {
  size_t off = 0;
  while (off < out_.size()) {
    const size_t n = out_.size() - off;
#if YOCO_REDIS_TLS
    if (ssl_) {
      SSL* ssl = static_cast<SSL*>(ssl_);
      ERR_clear_error();
      const int w = SSL_write(ssl, out_.data() + off, static_cast<int>(std::min<size_t>(n, 1 << 30)));
      if (w > 0) {
        off += static_cast<size_t>(w);
        continue;
      }
      const int e = SSL_get_error(ssl, w);
      if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        YOCO_RETURN_IF_ERROR(wait(e == SSL_ERROR_WANT_WRITE, command_timeout_, what));
        continue;
      }
      return fail(kv_unavailable("redis " + what +
                                 ": tls write: " + (e == SSL_ERROR_SYSCALL ? errno_text(errno) : ssl_errors())));
    }
#endif
    const ssize_t w = send(fd_, out_.data() + off, n, MSG_NOSIGNAL);
    if (w >= 0) {
      off += static_cast<size_t>(w);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      YOCO_RETURN_IF_ERROR(wait(true, command_timeout_, what));
      continue;
    }
    return fail(kv_unavailable("redis " + what + ": write: " + errno_text(errno)));
  }
  out_.clear();
  // A pooled connection keeps its buffer, but not one a single large put grew.
  if (out_.capacity() > kKeepOutputBytes) std::string().swap(out_);
  return Status::Ok();
}

Status Connection::read_more(const std::string& what) {
  char buf[64 * 1024];
  for (;;) {
#if YOCO_REDIS_TLS
    if (ssl_) {
      SSL* ssl = static_cast<SSL*>(ssl_);
      ERR_clear_error();
      const int r = SSL_read(ssl, buf, sizeof buf);
      if (r > 0) {
        if (redisReaderFeed(reader_, buf, static_cast<size_t>(r)) != REDIS_OK)
          return fail(kv_unavailable("redis " + what + ": out of memory"));
        return Status::Ok();
      }
      const int e = SSL_get_error(ssl, r);
      if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        YOCO_RETURN_IF_ERROR(wait(e == SSL_ERROR_WANT_WRITE, command_timeout_, what));
        continue;
      }
      if (e == SSL_ERROR_ZERO_RETURN) return fail(kv_unavailable("redis " + what + ": server closed the connection"));
      return fail(kv_unavailable(
          "redis " + what + ": tls read: " +
          (e == SSL_ERROR_SYSCALL ? (r == 0 ? std::string("connection closed") : errno_text(errno)) : ssl_errors())));
    }
#endif
    const ssize_t r = recv(fd_, buf, sizeof buf, 0);
    if (r > 0) {
      if (redisReaderFeed(reader_, buf, static_cast<size_t>(r)) != REDIS_OK)
        return fail(kv_unavailable("redis " + what + ": out of memory"));
      return Status::Ok();
    }
    if (r == 0) return fail(kv_unavailable("redis " + what + ": server closed the connection"));
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      YOCO_RETURN_IF_ERROR(wait(false, command_timeout_, what));
      continue;
    }
    return fail(kv_unavailable("redis " + what + ": read: " + errno_text(errno)));
  }
}

Result<std::vector<ReplyPtr>> Connection::run(const std::string& what) {
  if (broken_) return kv_unavailable("redis " + what + ": connection already broken");
  const size_t n = pending_;
  pending_ = 0;
  YOCO_RETURN_IF_ERROR(write_all(what));
  std::vector<ReplyPtr> out;
  out.reserve(n);
  while (out.size() < n) {
    void* reply = nullptr;
    if (redisReaderGetReply(reader_, &reply) != REDIS_OK)
      return fail(kv_unavailable("redis " + what + ": protocol error: " + std::string(reader_->errstr)));
    if (reply != nullptr) {
      out.emplace_back(static_cast<redisReply*>(reply));
      continue;
    }
    YOCO_RETURN_IF_ERROR(read_more(what));
  }
  return out;
}

}  // namespace yoco::redis
