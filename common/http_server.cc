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

struct HttpServer::Impl {
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::map<std::string, Handler> routes;
  std::thread thread;
  uint16_t port = 0;

  void accept() {
    acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
      if (ec) return;  // acceptor closed
      serve(std::move(socket));
      accept();
    });
  }

  // One request per connection, answered in the I/O thread; a slow client is cut off by the
  // stream's timeout so it cannot hold the server.
  void serve(tcp::socket socket) {
    beast::tcp_stream stream(std::move(socket));
    stream.expires_after(std::chrono::seconds(5));
    beast::flat_buffer buffer;
    http::request<http::string_body> req;
    beast::error_code ec;
    http::read(stream, buffer, req, ec);
    if (ec) return;
    http::response<http::string_body> res;
    res.version(req.version());
    res.keep_alive(false);
    res.set(http::field::server, "yoco");
    std::string target(req.target());
    if (auto q = target.find('?'); q != std::string::npos) target.resize(q);
    auto it = routes.find(target);
    if (req.method() != http::verb::get && req.method() != http::verb::head) {
      res.result(http::status::method_not_allowed);
      res.set(http::field::content_type, "text/plain");
      res.body() = "only GET\n";
    } else if (it == routes.end()) {
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
    http::write(stream, res, ec);
    stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  }
};

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { stop(); }

Result<std::unique_ptr<HttpServer>> HttpServer::start(const std::string& host, uint16_t port,
                                                      std::map<std::string, Handler> routes) {
  auto impl = std::make_unique<Impl>();
  impl->routes = std::move(routes);
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
