#include "server/http_stream_server.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "common/log.h"

namespace yoco {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;

namespace {

// Runs one asynchronous operation on the connection's own io_context to its end: a blocking call
// whose timeout is the stream's timer (tcp_stream::expires_after), which plain blocking sockets lack.
template <class Start>
beast::error_code run_op(asio::io_context& io, Start&& start) {
  beast::error_code result = asio::error::would_block;
  start([&result](beast::error_code ec, auto&&...) { result = ec; });
  io.restart();
  io.run();
  return result;
}

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
  explicit TlsFiles(const HttpStreamServerOptions& o) : cert_(o.tls_cert), key_(o.tls_key), ca_(o.tls_client_ca) {}

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

// What the accept thread and every connection thread share; it outlives them all.
struct Shared {
  HttpStreamServerOptions options;
  HttpStreamHandler handler;
  std::unique_ptr<TlsFiles> tls;
  std::mutex mu;
  std::condition_variable cv;
  std::set<int> open;  // connections' sockets, shut down by stop()
  bool stopping = false;
};

std::string plain_error(int status, std::string_view message) {
  return "{\"error\":{\"message\":\"" + std::string(message) + "\",\"type\":\"" +
         (status == 413 ? "invalid_request_error" : "server_error") + "\",\"param\":null,\"code\":null}}";
}

// One connection: requests in turn (keep-alive), each answered by the handler on this thread.
template <class Stream>
class Connection final : public HttpExchange {
 public:
  Connection(asio::io_context& io, Stream& stream, int fd, const HttpStreamServerOptions& opt)
      : io_(io), stream_(stream), fd_(fd), opt_(opt) {}

  void serve(const HttpStreamHandler& handler) {
    while (!gone_) {
      if (!read_request()) return;
      handler(*this);
      if (!started_) respond(500, "application/json", plain_error(500, "the handler gave no answer"), {});
      if (chunked_ && !gone_) finish_chunks();
      if (!keep_alive_) return;
    }
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
    return done(run_op(io_, [&](auto h) {
      timed_write();
      http::async_write(stream_, res, std::move(h));
    }));
  }

  bool start_stream(int status, std::string_view content_type, const HttpHeaders& extra) override {
    if (started_ || gone_) return false;
    started_ = chunked_ = true;
    http::response<http::empty_body> res{static_cast<http::status>(status), version_};
    headers(res, content_type, extra);
    res.set(http::field::cache_control, "no-cache");
    res.keep_alive(keep_alive_);
    res.chunked(true);
    http::response_serializer<http::empty_body> sr{res};
    return done(run_op(io_, [&](auto h) {
      timed_write();
      http::async_write_header(stream_, sr, std::move(h));
    }));
  }

  bool write(std::string_view data) override {
    if (!chunked_ || gone_) return false;
    if (data.empty()) return true;  // an empty chunk would end the body
    return done(run_op(io_, [&](auto h) {
      timed_write();
      asio::async_write(stream_, http::make_chunk(asio::buffer(data.data(), data.size())), std::move(h));
    }));
  }

  bool client_gone() const override {
    if (gone_) return true;
    pollfd p{fd_, POLLRDHUP, 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
  }

 private:
  template <class Res>
  void headers(Res& res, std::string_view content_type, const HttpHeaders& extra) {
    res.set(http::field::server, "yoco");
    res.set(http::field::content_type, std::string(content_type));
    for (const auto& [k, v] : extra) res.set(std::string(k), std::string(v));
  }

  void timed_write() { beast::get_lowest_layer(stream_).expires_after(opt_.write_timeout); }

  bool done(beast::error_code ec) {
    if (ec) gone_ = true;
    return !gone_;
  }

  void finish_chunks() {
    done(run_op(io_, [&](auto h) {
      timed_write();
      asio::async_write(stream_, http::make_chunk_last(), std::move(h));
    }));
  }

  // A request whose header and body arrive within the read timeout; answers 413 / 400 itself.
  bool read_request() {
    started_ = chunked_ = false;
    http::request_parser<http::string_body> parser;
    parser.header_limit(64 * 1024);
    parser.body_limit(opt_.max_body_bytes);
    beast::get_lowest_layer(stream_).expires_after(opt_.read_timeout);
    beast::error_code ec =
        run_op(io_, [&](auto h) { http::async_read_header(stream_, buffer_, parser, std::move(h)); });
    if (ec) return reject(ec);
    version_ = parser.get().version();
    keep_alive_ = parser.get().keep_alive();
    if (beast::iequals(parser.get()[http::field::expect], "100-continue")) {
      ec = run_op(io_, [&](auto h) { asio::async_write(stream_, asio::buffer(kContinue), std::move(h)); });
      if (ec) return false;
    }
    if (!parser.is_done()) ec = run_op(io_, [&](auto h) { http::async_read(stream_, buffer_, parser, std::move(h)); });
    if (ec) return reject(ec);
    http::request<http::string_body> raw = parser.release();
    req_ = HttpRequest{};
    req_.method = std::string(raw.method_string());
    req_.path = std::string(raw.target());
    if (auto q = req_.path.find('?'); q != std::string::npos) req_.path.resize(q);
    for (const auto& f : raw) {
      std::string name(f.name_string());
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      req_.headers[name] = std::string(f.value());
    }
    req_.body = std::move(raw.body());
    return true;
  }

  // A request that cannot be read: too large (413) or malformed (400) gets an answer; a timeout
  // or a closed connection none.
  bool reject(beast::error_code ec) {
    keep_alive_ = false;
    if (ec == http::error::body_limit)
      respond(413, "application/json",
              plain_error(413, "request body larger than " + std::to_string(opt_.max_body_bytes) + " bytes"), {});
    else if (ec == http::error::header_limit)
      respond(431, "application/json", plain_error(431, "request header too large"), {});
    else if (ec.category() == beast::error_code(http::error::bad_method).category() &&
             ec != http::error::end_of_stream && ec != http::error::partial_message)
      respond(400, "application/json", plain_error(400, "malformed HTTP request: " + ec.message()), {});
    return false;
  }

  asio::io_context& io_;
  Stream& stream_;
  const int fd_;
  const HttpStreamServerOptions& opt_;
  beast::flat_buffer buffer_;
  HttpRequest req_;
  unsigned version_ = 11;
  bool keep_alive_ = true, started_ = false, chunked_ = false;
  std::atomic<bool> gone_{false};
};

void close_socket(tcp::socket& s) {
  beast::error_code ec;
  s.shutdown(tcp::socket::shutdown_both, ec);
  s.close(ec);
}

// A connection's thread: TLS handshake if configured, then its requests.
void run_connection(std::shared_ptr<Shared> shared, std::unique_ptr<asio::io_context> io, tcp::socket socket) {
  const int fd = socket.native_handle();
  const HttpStreamServerOptions& opt = shared->options;
  beast::error_code ec;
  socket.set_option(tcp::no_delay(true), ec);  // an event is sent when written, not batched
  if (shared->tls) {
    const std::shared_ptr<ssl::context> ctx = shared->tls->current();  // outlives the stream
    beast::ssl_stream<beast::tcp_stream> stream(std::move(socket), *ctx);
    beast::get_lowest_layer(stream).expires_after(opt.read_timeout);
    ec = run_op(*io, [&](auto h) { stream.async_handshake(ssl::stream_base::server, std::move(h)); });
    if (!ec) Connection<decltype(stream)>(*io, stream, fd, opt).serve(shared->handler);
    close_socket(beast::get_lowest_layer(stream).socket());
  } else {
    beast::tcp_stream stream(std::move(socket));
    Connection<beast::tcp_stream>(*io, stream, fd, opt).serve(shared->handler);
    close_socket(stream.socket());
  }
  std::lock_guard<std::mutex> lk(shared->mu);
  shared->open.erase(fd);
  shared->cv.notify_all();
}

}  // namespace

struct HttpStreamServer::Impl {
  std::shared_ptr<Shared> shared = std::make_shared<Shared>();
  asio::io_context io;  // the acceptor's; never run: accept() blocks on the accept thread
  tcp::acceptor acceptor{io};
  std::thread thread;
  uint16_t port = 0;

  void accept_loop() {
    while (true) {
      auto conn_io = std::make_unique<asio::io_context>(1);
      tcp::socket socket(*conn_io);
      beast::error_code ec;
      acceptor.accept(socket, ec);
      std::unique_lock<std::mutex> lk(shared->mu);
      if (shared->stopping) return;
      if (ec) continue;
      if (static_cast<int>(shared->open.size()) >= shared->options.max_connections) {
        close_socket(socket);  // over the cap: refused at once rather than queued behind the others
        continue;
      }
      shared->open.insert(socket.native_handle());
      lk.unlock();
      std::thread(run_connection, shared, std::move(conn_io), std::move(socket)).detach();
    }
  }
};

HttpStreamServer::HttpStreamServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpStreamServer::~HttpStreamServer() { stop(); }

Result<std::unique_ptr<HttpStreamServer>> HttpStreamServer::bind(const std::string& host, uint16_t port,
                                                                 HttpStreamServerOptions options) {
  auto impl = std::make_unique<Impl>();
  if (!options.tls_cert.empty()) {
    impl->shared->tls = std::make_unique<TlsFiles>(options);
    if (Status st = impl->shared->tls->load(); !st.ok()) return st;
  }
  impl->shared->options = std::move(options);
  beast::error_code ec;
  const auto addr = asio::ip::make_address(host, ec);
  if (ec) return invalid_argument("--http-port: listen address \"" + host + "\": " + ec.message());
  const tcp::endpoint ep(addr, port);
  impl->acceptor.open(ep.protocol(), ec);
  if (!ec) impl->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(ep, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    return Status(StatusCode::kUnavailable,
                  "--http-port: cannot listen on " + host + ":" + std::to_string(port) + ": " + ec.message());
  impl->port = impl->acceptor.local_endpoint(ec).port();
  return std::unique_ptr<HttpStreamServer>(new HttpStreamServer(std::move(impl)));
}

uint16_t HttpStreamServer::port() const { return impl_->port; }
bool HttpStreamServer::tls() const { return impl_->shared->tls != nullptr; }

void HttpStreamServer::serve(HttpStreamHandler handler) {
  impl_->shared->handler = std::move(handler);
  impl_->thread = std::thread([impl = impl_.get()] { impl->accept_loop(); });
}

void HttpStreamServer::stop() {
  if (!impl_) return;
  Shared& s = *impl_->shared;
  {
    std::lock_guard<std::mutex> lk(s.mu);
    if (s.stopping) return;
    s.stopping = true;
    for (int fd : s.open) ::shutdown(fd, SHUT_RDWR);  // blocked reads and writes return
  }
  ::shutdown(impl_->acceptor.native_handle(), SHUT_RDWR);  // wakes the blocking accept
  if (impl_->thread.joinable()) impl_->thread.join();
  beast::error_code ec;
  impl_->acceptor.close(ec);
  // Handlers end once their gRPC calls do; a stuck one is not waited for past 5 s (its thread
  // holds `shared` alive).
  std::unique_lock<std::mutex> lk(s.mu);
  s.cv.wait_for(lk, std::chrono::seconds(5), [&] { return s.open.empty(); });
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
