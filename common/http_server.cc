#include "common/http_server.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <thread>

namespace yoco {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

// Declared before the io_context in Impl so it outlives the sessions the io_context destroys.
struct Shared {
  std::map<std::string, HttpServer::Handler> routes;
  HttpServerOptions options;
  int open = 0;  // connections being served (touched on the I/O thread only)
};

http::response<http::string_body> answer(const Shared& shared, const http::request<http::string_body>& req) {
  http::response<http::string_body> res;
  res.version(req.version());
  res.keep_alive(false);
  res.set(http::field::server, "yoco");
  std::string target(req.target());
  if (auto q = target.find('?'); q != std::string::npos) target.resize(q);
  auto it = shared.routes.find(target);
  if (req.method() != http::verb::get && req.method() != http::verb::head) {
    res.result(http::status::method_not_allowed);
    res.set(http::field::content_type, "text/plain");
    res.body() = "only GET\n";
  } else if (it == shared.routes.end()) {
    res.result(http::status::not_found);
    res.set(http::field::content_type, "text/plain");
    res.body() = "not found\n";
  } else {
    HttpResponse r = it->second();
    res.result(static_cast<http::status>(r.status));
    res.set(http::field::content_type, r.content_type);
    if (req.method() == http::verb::get) res.body() = std::move(r.body);
  }
  res.prepare_payload();
  return res;
}

// One connection, one request, all asynchronous: a client that sends nothing (or half a request)
// waits on its own timer and holds no one else up; when the timer fires its socket is closed.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, Shared& shared) : stream_(std::move(socket)), shared_(shared) { ++shared_.open; }
  ~Session() { --shared_.open; }

  void start() {
    stream_.expires_after(shared_.options.timeout);
    http::async_read(stream_, buffer_, req_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->close();
      self->res_ = answer(self->shared_, self->req_);
      self->stream_.expires_after(self->shared_.options.timeout);
      http::async_write(self->stream_, self->res_, [self](beast::error_code, size_t) { self->close(); });
    });
  }

 private:
  void close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
  }

  beast::tcp_stream stream_;
  Shared& shared_;
  beast::flat_buffer buffer_;
  http::request<http::string_body> req_;
  http::response<http::string_body> res_;
};

}  // namespace

struct HttpServer::Impl {
  Shared shared;
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::thread thread;
  uint16_t port = 0;

  void accept() {
    acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
      if (ec) return;  // acceptor closed
      if (shared.open >= shared.options.max_connections) {
        socket.close(ec);  // over the cap: refused at once rather than queued behind the others
      } else {
        std::make_shared<Session>(std::move(socket), shared)->start();
      }
      accept();
    });
  }
};

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { stop(); }

Result<std::unique_ptr<HttpServer>> HttpServer::start(const std::string& host, uint16_t port,
                                                      std::map<std::string, Handler> routes,
                                                      HttpServerOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->shared.routes = std::move(routes);
  impl->shared.options = options;
  beast::error_code ec;
  const auto addr = asio::ip::make_address(host, ec);
  if (ec) return invalid_argument("metrics address \"" + host + "\": " + ec.message());
  const tcp::endpoint ep(addr, port);
  impl->acceptor.open(ep.protocol(), ec);
  if (!ec) impl->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(ep, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    return Status(StatusCode::kUnavailable,
                  "http server: cannot listen on " + host + ":" + std::to_string(port) + ": " + ec.message());
  impl->port = impl->acceptor.local_endpoint(ec).port();
  impl->accept();
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->io.run(); });
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

uint16_t HttpServer::port() const { return impl_->port; }

void HttpServer::stop() {
  if (!impl_ || !impl_->thread.joinable()) return;
  asio::post(impl_->io, [this] {
    beast::error_code ec;
    impl_->acceptor.close(ec);
  });
  impl_->io.stop();
  impl_->thread.join();
}

}  // namespace yoco
