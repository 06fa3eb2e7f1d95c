#include "server/http_listener.h"

#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <condition_variable>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "common/log.h"

namespace yoco {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;

namespace {

constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

int64_t mtime_ns(const std::string& path) {
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

// The TLS context, rebuilt for new connections when a PEM file changes (a rotated Secret);
// a broken new file is logged and the old context stays.
class TlsFiles {
 public:
  explicit TlsFiles(const HttpListenerOptions& o) : cert_(o.tls_cert), key_(o.tls_key), ca_(o.tls_client_ca) {}

  Status load() {
    auto ctx = build();
    if (!ctx.ok()) return ctx.status();
    std::lock_guard<std::mutex> lk(mu_);
    ctx_ = std::move(ctx).value();
    stamp_ = stamp();
    return Status::Ok();
  }

  std::shared_ptr<ssl::context> current() {
    const uint64_t now = stamp();
    std::lock_guard<std::mutex> lk(mu_);
    if (now != stamp_) {
      stamp_ = now;
      if (auto ctx = build(); ctx.ok()) ctx_ = std::move(ctx).value();
      else
        YOCO_LOG(LogLevel::kWarn, "http tls: keeping the old certificate",
                 LogFields().kv("error", ctx.status().message()));
    }
    return ctx_;
  }

 private:
  // The three files' mtimes mixed (unsigned: wrapping is intended).
  uint64_t stamp() const {
    return static_cast<uint64_t>(mtime_ns(cert_)) ^ (static_cast<uint64_t>(mtime_ns(key_)) * 3) ^
           (static_cast<uint64_t>(mtime_ns(ca_)) * 7);
  }

  Result<std::shared_ptr<ssl::context>> build() const {
    auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
    beast::error_code ec;
    ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                         ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1,
                     ec);
    ctx->use_certificate_chain_file(cert_, ec);
    if (ec) return invalid_argument("--tls-cert: " + cert_ + ": " + ec.message());
    ctx->use_private_key_file(key_, ssl::context::pem, ec);
    if (ec) return invalid_argument("--tls-key: " + key_ + ": " + ec.message());
    if (!ca_.empty()) {
      ctx->load_verify_file(ca_, ec);
      if (ec) return invalid_argument("--tls-client-ca: " + ca_ + ": " + ec.message());
      ctx->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
    }
    return ctx;
  }

  const std::string cert_, key_, ca_;
  std::mutex mu_;
  std::shared_ptr<ssl::context> ctx_;
  uint64_t stamp_ = 0;
};

// A connection the server answers itself and closes (over the cap, a malformed request) holds its
// descriptor at most this long, and at most kMaxLingering such at once wait for the client's end
// (linger()); past kMaxRefusing refused TLS connections at once (each needs its handshake before
// its 503), the next are closed without an answer.
constexpr auto kRefusalTime = std::chrono::seconds(1);
constexpr int kMaxLingering = 64;
constexpr int kMaxRefusing = 64;
// How long accept() waits after failing for want of descriptors (EMFILE, ENFILE) before retrying.
constexpr auto kAcceptBackoff = std::chrono::milliseconds(50);

class ConnectionBase {
 public:
  virtual ~ConnectionBase() = default;
  virtual void start() = 0;  // on the connection's strand
  virtual void shut() = 0;   // from any thread: ends the connection's I/O (stop())
};

// What the I/O threads, the handler threads and every connection share; it outlives them all
// (each holds a shared_ptr), so a handler stuck past stop() still finds it.
struct Shared {
  HttpListenerOptions options;
  HttpRoutes routes;
  std::unique_ptr<TlsFiles> tls;
  std::atomic<bool> stopping{false};
  std::atomic<int> cap{0};  // connections served at once (effective_cap)

  std::mutex mu;  // guards what follows, up to `io`
  std::condition_variable cv;
  std::unordered_map<uint64_t, std::weak_ptr<ConnectionBase>> open;  // served and refused
  uint64_t next_id = 0;
  int served = 0, refusing = 0, lingering = 0;
  std::chrono::steady_clock::time_point refusal_logged{};

  // Declared after the bookkeeping: a connection destroyed with the io_context still finds it.
  asio::io_context io;
  asio::strand<asio::io_context::executor_type> accept_strand{io.get_executor()};
  tcp::acceptor acceptor{accept_strand};
  asio::steady_timer backoff{accept_strand};
  bool accept_failing = false;  // (accept strand) this burst of accept errors is logged
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::vector<std::thread> threads;
};

// The most connections served at once: options.max_connections, and below the descriptor limit
// by a reserve for the rest of the process (gRPC channels, files, refusals in progress): a
// quarter of the limit, at least 128. Over it a connection gets 503, so running out of
// descriptors never takes the listener (or anything else in the process) down.
int effective_cap(int max_connections) {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return std::max(1, max_connections);
  const long soft = static_cast<long>(std::min<rlim_t>(rl.rlim_cur, 1 << 30));
  const long reserve = std::max<long>(128, soft / 4);
  return static_cast<int>(std::max<long>(1, std::min<long>(max_connections, soft - reserve)));
}

// One connection: requests in turn (keep-alive). Reading is asynchronous on the connection's
// strand, so an idle connection holds no thread; a whole request goes to the handler on a thread
// of its own, whose writes run on the strand while it waits for them.
template <class Stream>
class Connection final : public HttpExchange,
                         public ConnectionBase,
                         public std::enable_shared_from_this<Connection<Stream>> {
  static constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;

 public:
  Connection(std::shared_ptr<Shared> shared, tcp::socket socket, std::shared_ptr<ssl::context> ctx, uint64_t id,
             bool refused)
      : shared_(std::move(shared)),
        opt_(shared_->options),
        ctx_(std::move(ctx)),
        fd_(socket.native_handle()),
        stream_(open_stream(std::move(socket), ctx_.get())),
        id_(id),
        refused_(refused),
        work_(shared_->io.get_executor()) {}

  ~Connection() override {
    std::lock_guard<std::mutex> lk(shared_->mu);
    shared_->open.erase(id_);
    --(refused_ ? shared_->refusing : shared_->served);
    if (lingering_) --shared_->lingering;
    shared_->cv.notify_all();
  }

  // On the strand: the TLS handshake if any, then requests (or the 503 of a refused connection).
  void start() override {
    if constexpr (kTls) {
      lowest().expires_after(refused_ ? std::chrono::milliseconds(kRefusalTime) : opt_.read_timeout);
      stream_.async_handshake(ssl::stream_base::server, [self = this->shared_from_this()](beast::error_code ec) {
        if (ec) return self->close_now();
        self->first_request();
      });
    } else {
      first_request();
    }
  }

  void shut() override {
    gone_ = true;
    asio::post(stream_.get_executor(), [self = this->shared_from_this()] { self->close_now(); });
  }

  const HttpRequest& request() const override { return req_; }
  bool started() const override { return started_; }

  bool respond(int status, std::string_view content_type, std::string body, const HttpHeaders& extra) override {
    if (started_ || gone_) return false;
    started_ = true;
    http::response<http::string_body> res{static_cast<http::status>(status), version_};
    headers(res, content_type, extra);
    res.keep_alive(keep_alive_);
    res.body() = std::move(body);
    res.prepare_payload();
    return done(blocking([&](auto h) { http::async_write(stream_, res, std::move(h)); }));
  }

  // HTTP/1.1: chunked. HTTP/1.0 has no chunked coding, so its stream is close-delimited: no
  // length, the connection's close ends the body.
  bool start_stream(int status, std::string_view content_type, const HttpHeaders& extra) override {
    if (started_ || gone_) return false;
    started_ = true;
    http::response<http::empty_body> res{static_cast<http::status>(status), version_};
    headers(res, content_type, extra);
    res.set(http::field::cache_control, "no-cache");
    if (version_ >= 11) {
      chunked_ = true;
      res.keep_alive(keep_alive_);
      res.chunked(true);
    } else {
      close_delimited_ = true;
      keep_alive_ = false;
      res.set(http::field::connection, "close");
    }
    http::response_serializer<http::empty_body> sr{res};
    return done(blocking([&](auto h) { http::async_write_header(stream_, sr, std::move(h)); }));
  }

  bool write(std::string_view data) override {
    if (!(chunked_ || close_delimited_) || gone_) return false;
    if (data.empty()) return true;  // an empty chunk would end the body
    const auto bytes = asio::buffer(data.data(), data.size());
    if (close_delimited_) return done(blocking([&](auto h) { asio::async_write(stream_, bytes, std::move(h)); }));
    return done(blocking([&](auto h) { asio::async_write(stream_, http::make_chunk(bytes), std::move(h)); }));
  }

  bool client_gone() const override {
    if (gone_) return true;
    pollfd p{fd_, POLLRDHUP, 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
  }

 private:
  static Stream open_stream(tcp::socket socket, ssl::context* ctx) {
    if constexpr (kTls) {
      return Stream(std::move(socket), *ctx);
    } else {
      return Stream(std::move(socket));
    }
  }

  beast::tcp_stream& lowest() { return beast::get_lowest_layer(stream_); }

  void first_request() {
    if (refused_) return refuse(503, "too many connections: try again later");
    read_request();
  }

  // ---- the strand's side: reading, refusing, closing ----

  // The next request, header and body within one read timeout (the keep-alive wait included).
  void read_request() {
    reader_.emplace(opt_.max_body_bytes);
    started_ = chunked_ = close_delimited_ = continue_sent_ = false;
    lowest().expires_after(opt_.read_timeout);
    parse();
  }

  void parse() {
    try {
      while (buffer_.size() > 0) {
        const auto in = buffer_.data();
        const size_t used = reader_->put(std::string_view(static_cast<const char*>(in.data()), in.size()));
        buffer_.consume(used);
        if (reader_->error_status() != 0) return refuse(reader_->error_status(), reader_->error_message());
        if (reader_->done()) return dispatch();
        if (reader_->header_done() && !continue_sent_ && reader_->expects_continue()) return send_continue();
        if (used == 0) break;
      }
      stream_.async_read_some(buffer_.prepare(16 * 1024),
                              [self = this->shared_from_this()](beast::error_code ec, size_t n) {
                                self->buffer_.commit(n);
                                if (ec) return self->close_now();  // closed, timed out, cut short: no answer
                                self->parse();
                              });
    } catch (const std::exception& e) {
      YOCO_LOG(LogLevel::kWarn, "http: reading a request failed", LogFields().kv("error", e.what()));
      close_now();
    }
  }

  void send_continue() {
    continue_sent_ = true;
    asio::async_write(stream_, asio::buffer(kContinue),
                      [self = this->shared_from_this()](beast::error_code ec, size_t) {
                        if (ec) return self->close_now();
                        self->parse();
                      });
  }

  // A whole request: the handler runs on a thread of its own (it may block for a generation).
  void dispatch() {
    version_ = reader_->version();
    keep_alive_ = reader_->keep_alive();
    req_ = reader_->take();
    reader_.reset();
    lowest().expires_never();
    try {
      std::thread([self = this->shared_from_this()]() mutable { run_handler(std::move(self)); }).detach();
    } catch (const std::system_error& e) {
      YOCO_LOG(LogLevel::kWarn, "http: no thread for a request", LogFields().kv("error", e.what()));
      refuse(503, "server overloaded: try again later");
    }
  }

  // After the handler: the end of the body, then the next request or the close.
  void after_handler() {
    if (gone_ || !keep_alive_ || close_delimited_ || shared_->stopping) return end();
    read_request();
  }

  // An answer of the server's own (a malformed request, over the cap), then the close: the
  // request's framing cannot be trusted, or the connection was never served.
  void refuse(int status, std::string_view message) {
    keep_alive_ = false;
    auto res = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(status), 11);
    res->set(http::field::server, "yoco");
    res->set(http::field::content_type, "application/json");
    res->set(http::field::connection, "close");
    if (status == 503) res->set(http::field::retry_after, "1");
    res->body() = http_error_json(status, message);
    res->prepare_payload();
    lowest().expires_after(refused_ ? std::chrono::milliseconds(kRefusalTime) : opt_.write_timeout);
    http::async_write(stream_, *res, [self = this->shared_from_this(), res](beast::error_code ec, size_t) {
      if (ec) return self->close_now();
      self->linger();
    });
  }

  // Closing a socket with unread input resets it, and a reset can destroy the answer before the
  // client reads it: send our end's FIN, then drop what the client still sends for a moment.
  void linger() {
    {
      std::lock_guard<std::mutex> lk(shared_->mu);
      if (shared_->lingering >= kMaxLingering) return close_now();
      ++shared_->lingering;
      lingering_ = true;
    }
    beast::error_code ec;
    lowest().socket().shutdown(tcp::socket::shutdown_send, ec);
    lowest().expires_after(kRefusalTime);
    drain();
  }

  void drain() {
    buffer_.clear();
    lowest().async_read_some(buffer_.prepare(4096), [self = this->shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->close_now();
      self->drain();
    });
  }

  // A close-delimited body over TLS ends with the TLS close_notify, so a client can tell the end
  // from a cut connection.
  void end() {
    if constexpr (kTls) {
      if (close_delimited_ && !gone_) {
        lowest().expires_after(kRefusalTime);
        return stream_.async_shutdown([self = this->shared_from_this()](beast::error_code) { self->close_now(); });
      }
    }
    close_now();
  }

  // Pending operations end; the descriptor closes with the last reference to the connection, so a
  // handler still polling it (client_gone) never polls a reused number.
  void close_now() {
    beast::error_code ec;
    lowest().socket().shutdown(tcp::socket::shutdown_both, ec);
    lowest().socket().cancel(ec);
  }

  // ---- the handler thread's side ----

  static void run_handler(std::shared_ptr<Connection> self) {
    Connection& c = *self;
    try {
      c.shared_->routes.dispatch(c);
    } catch (const std::exception& e) {
      YOCO_LOG(LogLevel::kError, "http: the handler threw", LogFields().kv("path", c.req_.path).kv("error", e.what()));
    } catch (...) {
      YOCO_LOG(LogLevel::kError, "http: the handler threw", LogFields().kv("path", c.req_.path));
    }
    try {
      if (!c.started_) c.respond(500, "application/json", http_error_json(500, "the server gave no answer"), {});
      if (c.chunked_ && !c.gone_)
        c.done(c.blocking([&c](auto h) { asio::async_write(c.stream_, http::make_chunk_last(), std::move(h)); }));
    } catch (const std::exception&) {
      c.gone_ = true;
    }
    // Once `self` is posted the connection may end (and the server with it) before post()
    // returns, but the executor it copies must not outlive the io_context: `keep` holds it.
    const std::shared_ptr<Shared> keep = c.shared_;
    auto executor = c.stream_.get_executor();
    asio::post(executor, [self = std::move(self)] { self->after_handler(); });
  }

  // Starts an operation on the strand and waits for it: only the handler's thread blocks, never
  // an I/O thread. `start` may refer to the caller's locals: they live until it completes.
  template <class Start>
  beast::error_code blocking(Start start) {
    auto result = std::make_shared<std::promise<beast::error_code>>();
    auto future = result->get_future();
    asio::post(stream_.get_executor(), [this, &start, result] {
      try {
        lowest().expires_after(opt_.write_timeout);
        start([result](beast::error_code ec, size_t) { result->set_value(ec); });
      } catch (const std::exception&) {
        result->set_value(asio::error::operation_aborted);
      }
    });
    try {
      return future.get();
    } catch (const std::future_error&) {  // the io_context went away with the operation
      return asio::error::operation_aborted;
    }
  }

  template <class Res>
  void headers(Res& res, std::string_view content_type, const HttpHeaders& extra) {
    res.set(http::field::server, "yoco");
    res.set(http::field::content_type, std::string(content_type));
    for (const auto& [k, v] : extra) res.set(std::string(k), std::string(v));
  }

  bool done(beast::error_code ec) {
    if (ec) gone_ = true;
    return !gone_;
  }

  const std::shared_ptr<Shared> shared_;
  const HttpListenerOptions& opt_;
  const std::shared_ptr<ssl::context> ctx_;  // outlives the stream
  const int fd_;
  Stream stream_;
  const uint64_t id_;
  const bool refused_;
  // io.run() returns only once every connection is gone: a handler finishing after stop() still
  // has its writes run.
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  beast::flat_buffer buffer_;
  std::optional<HttpRequestReader> reader_;
  bool continue_sent_ = false, lingering_ = false;
  // Set on the strand before the handler's thread starts and read there after it posts back.
  HttpRequest req_;
  unsigned version_ = 11;
  bool keep_alive_ = false, started_ = false, chunked_ = false, close_delimited_ = false;
  std::atomic<bool> gone_{false};
};

void log_refusal(Shared& s) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lk(s.mu);
  if (now - s.refusal_logged < std::chrono::seconds(10)) return;
  s.refusal_logged = now;
  YOCO_LOG(LogLevel::kWarn, "http: connections over the cap get 503",
           LogFields().kv("max_connections", s.cap.load()).kv("open", static_cast<int64_t>(s.open.size())));
}

// A new connection: served, refused with a 503 (over the cap), or closed at once when it needs a
// TLS handshake before its 503 and too many such are in progress.
void admit(const std::shared_ptr<Shared>& s, tcp::socket socket) {
  beast::error_code ec;
  socket.set_option(tcp::no_delay(true), ec);  // an event is sent when written, not batched
  std::unique_lock<std::mutex> lk(s->mu);
  const bool refused = s->served >= s->cap;
  if (refused && s->tls && s->refusing >= kMaxRefusing) {
    lk.unlock();
    socket.close(ec);
    return log_refusal(*s);
  }
  const uint64_t id = ++s->next_id;
  ++(refused ? s->refusing : s->served);
  lk.unlock();
  if (refused) log_refusal(*s);
  std::shared_ptr<ConnectionBase> conn;
  auto executor = socket.get_executor();
  try {
    if (s->tls)
      conn = std::make_shared<Connection<beast::ssl_stream<beast::tcp_stream>>>(s, std::move(socket), s->tls->current(),
                                                                                id, refused);
    else conn = std::make_shared<Connection<beast::tcp_stream>>(s, std::move(socket), nullptr, id, refused);
  } catch (...) {  // no connection was made, so no destructor gives its place back
    lk.lock();
    --(refused ? s->refusing : s->served);
    throw;
  }
  lk.lock();
  s->open.emplace(id, conn);
  const bool late = s->stopping;  // stop() may have listed the open connections before this one
  lk.unlock();
  asio::dispatch(executor, [conn] { conn->start(); });
  if (late) conn->shut();
}

void accept_next(const std::shared_ptr<Shared>& s);

// accept() fails when the process is out of descriptors (EMFILE, ENFILE) or memory; the pending
// connection stays queued, so retrying at once would spin: wait a moment, log once per burst.
void accept_failed(const std::shared_ptr<Shared>& s, beast::error_code ec) {
  if (ec == asio::error::connection_aborted) return accept_next(s);  // the client left first
  if (!s->accept_failing)
    YOCO_LOG(LogLevel::kWarn, "http: accept failing, retrying", LogFields().kv("error", ec.message()));
  s->accept_failing = true;
  s->backoff.expires_after(kAcceptBackoff);
  s->backoff.async_wait([s](beast::error_code) {
    if (!s->stopping) accept_next(s);
  });
}

// Each accepted socket gets a strand of its own: its completions never run at once on two I/O
// threads.
void accept_next(const std::shared_ptr<Shared>& s) {
  s->acceptor.async_accept(asio::make_strand(s->io), [s](beast::error_code ec, tcp::socket socket) {
    if (s->stopping) return;
    if (ec) return accept_failed(s, ec);
    s->accept_failing = false;
    try {
      admit(s, std::move(socket));
    } catch (const std::exception& e) {
      YOCO_LOG(LogLevel::kWarn, "http: a connection could not start", LogFields().kv("error", e.what()));
    }
    accept_next(s);
  });
}

}  // namespace

struct HttpListener::Impl {
  std::shared_ptr<Shared> shared = std::make_shared<Shared>();
  uint16_t port = 0;
};

HttpListener::HttpListener(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpListener::~HttpListener() { stop(); }

Result<std::unique_ptr<HttpListener>> HttpListener::bind(const std::string& host, uint16_t port,
                                                         HttpListenerOptions options) {
  auto impl = std::make_unique<Impl>();
  Shared& s = *impl->shared;
  if (!options.tls_cert.empty()) {
    s.tls = std::make_unique<TlsFiles>(options);
    if (Status st = s.tls->load(); !st.ok()) return st;
  }
  s.options = std::move(options);
  s.cap = effective_cap(s.options.max_connections);
  beast::error_code ec;
  const auto addr = asio::ip::make_address(host, ec);
  if (ec) return invalid_argument(s.options.flag + ": listen address \"" + host + "\": " + ec.message());
  const tcp::endpoint ep(addr, port);
  s.acceptor.open(ep.protocol(), ec);
  if (!ec) s.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(ep, ec);
  if (!ec) s.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    return Status(StatusCode::kUnavailable,
                  s.options.flag + ": cannot listen on " + host + ":" + std::to_string(port) + ": " + ec.message());
  impl->port = s.acceptor.local_endpoint(ec).port();
  return std::unique_ptr<HttpListener>(new HttpListener(std::move(impl)));
}

uint16_t HttpListener::port() const { return impl_->port; }
bool HttpListener::tls() const { return impl_->shared->tls != nullptr; }
int HttpListener::max_connections() const { return impl_->shared->cap; }

void HttpListener::serve(HttpRoutes routes) {
  const std::shared_ptr<Shared>& s = impl_->shared;
  s->routes = std::move(routes);
  s->cap = effective_cap(s->options.max_connections);  // the limit may have been raised since bind
  s->work.emplace(s->io.get_executor());
  asio::post(s->accept_strand, [s] { accept_next(s); });
  for (int i = 0; i < std::max(1, s->options.io_threads); ++i)
    s->threads.emplace_back([s] {
      while (true) {  // an exception out of a completion must not end the thread (nor the process)
        try {
          s->io.run();
          return;
        } catch (const std::exception& e) {
          YOCO_LOG(LogLevel::kError, "http: I/O thread caught", LogFields().kv("error", e.what()));
        }
      }
    });
  YOCO_LOG(LogLevel::kDebug, "http listener",
           LogFields().kv("port", static_cast<int64_t>(impl_->port)).kv("max_connections", s->cap.load()));
}

void HttpListener::stop() {
  if (!impl_) return;
  const std::shared_ptr<Shared>& s = impl_->shared;
  if (s->stopping.exchange(true)) return;
  const auto close_acceptor = [s] {
    beast::error_code ec;
    s->acceptor.close(ec);
    s->backoff.cancel();
  };
  if (s->threads.empty()) {
    close_acceptor();  // never served: nothing runs on the strand
  } else {
    asio::post(s->accept_strand, close_acceptor);
  }
  std::vector<std::shared_ptr<ConnectionBase>> open;
  {
    std::lock_guard<std::mutex> lk(s->mu);
    for (auto& [id, weak] : s->open)
      if (auto c = weak.lock()) open.push_back(std::move(c));
  }
  for (auto& c : open) c->shut();  // blocked writes fail, handlers see client_gone()
  open.clear();
  // Handlers end once their gRPC calls do; a stuck one is not waited for past 5 s (it holds
  // `shared`, and so the I/O threads, alive).
  bool closed;
  {
    std::unique_lock<std::mutex> lk(s->mu);
    closed = s->cv.wait_for(lk, std::chrono::seconds(5), [&] { return s->open.empty(); });
  }
  s->work.reset();
  for (std::thread& t : s->threads) closed ? t.join() : t.detach();
  s->threads.clear();
}

// ---- HttpRoutes ----

HttpRoutes& HttpRoutes::on(const std::string& method, const std::string& path, HttpHandler handler) {
  routes_[path][method] = std::move(handler);
  return *this;
}

HttpRoutes& HttpRoutes::get(const std::string& path, std::function<HttpResponse()> answer) {
  auto handler = [answer = std::move(answer)](HttpExchange& ex) {
    HttpResponse r = answer();
    if (ex.request().method == "HEAD") r.body.clear();
    ex.respond(r.status, r.content_type, std::move(r.body));
  };
  on("HEAD", path, handler);
  return on("GET", path, std::move(handler));
}

HttpRoutes& HttpRoutes::fallback(HttpHandler handler) {
  fallback_ = std::move(handler);
  return *this;
}

void HttpRoutes::dispatch(HttpExchange& ex) const {
  const HttpRequest& req = ex.request();
  const auto path = routes_.find(req.path);
  if (path == routes_.end()) {
    if (fallback_) return fallback_(ex);
    ex.respond(404, "text/plain", "not found\n");
    return;
  }
  if (const auto m = path->second.find(req.method); m != path->second.end()) return m->second(ex);
  std::string allow;
  for (const auto& [method, handler] : path->second) allow += (allow.empty() ? "" : ", ") + method;
  ex.respond(405, "text/plain", "method " + req.method + " not allowed on " + req.path + " (use " + allow + ")\n",
             {{"Allow", allow}});
}

// ---- ClientWatch ----

struct ClientWatch::State {
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::atomic<bool> fired{false};
  std::thread thread;
};

ClientWatch::ClientWatch(const HttpExchange& ex, std::function<void()> on_gone) : state_(std::make_shared<State>()) {
  state_->thread = std::thread([s = state_.get(), &ex, on_gone = std::move(on_gone)] {
    std::unique_lock<std::mutex> lk(s->mu);
    while (!s->cv.wait_for(lk, std::chrono::milliseconds(20), [s] { return s->stop; })) {
      if (!ex.client_gone()) continue;
      s->fired = true;
      lk.unlock();
      on_gone();
      return;
    }
  });
}

ClientWatch::~ClientWatch() {
  {
    std::lock_guard<std::mutex> lk(state_->mu);
    state_->stop = true;
  }
  state_->cv.notify_all();
  state_->thread.join();
}

bool ClientWatch::fired() const { return state_->fired; }

}  // namespace yoco
