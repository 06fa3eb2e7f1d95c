// server/http_stream_server.h: whole answers and keep-alive, chunked streams, the body limit (413),
// the read timeout, a dropped client seen by ClientWatch, and one blocked handler never holding up
// another connection.
#include "server/http_stream_server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "tests/unit/http_get.h"
#include "tests/unit/test_pki.h"
#include "tests/unit/test_util.h"

namespace yoco {
namespace {

std::unique_ptr<HttpStreamServer> serve(HttpStreamHandler handler, HttpStreamServerOptions o = {}) {
  auto s = HttpStreamServer::bind("127.0.0.1", 0, o);
  EXPECT_TRUE(s.ok()) << s.status().message();
  (*s)->serve(std::move(handler));
  return std::move(s).value();
}

// Sends `request` and closes the connection without reading anything.
void send_and_hang_up(int port, const std::string& request) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    EXPECT_GT(write(fd, request.data(), request.size()), 0);
  }
  close(fd);
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

TEST(HttpStreamServer, AnswersAndKeepsConnectionsAlive) {
  auto s = serve([](HttpExchange& ex) {
    ex.respond(200, "application/json",
               "{\"path\":\"" + ex.request().path + "\",\"body\":\"" + ex.request().body + "\"}",
               {{"X-Test", ex.request().header("x-test")}});
  });
  const std::string r = test::http_post(s->port(), "/v1/x?q=1", "hi", "X-Test: yes\r\n");
  EXPECT_EQ(test::http_status(r), 200) << r;
  EXPECT_EQ(test::http_body(r), "{\"path\":\"/v1/x\",\"body\":\"hi\"}");
  EXPECT_NE(r.find("X-Test: yes"), std::string::npos) << r;
  // Two requests on one connection: the first keeps it open, the second closes it.
  const std::string two = test::http_raw(s->port(),
                                         "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
                                         "GET /b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(count(two, "HTTP/1.1 200"), 2) << two;
  s->stop();
}

TEST(HttpStreamServer, StreamsChunks) {
  auto s = serve([](HttpExchange& ex) {
    ASSERT_TRUE(ex.start_stream(200, "text/event-stream", {}));
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(ex.write("data: " + std::to_string(i) + "\n\n"));
  });
  const std::string r = test::http_post(s->port(), "/s", "{}");
  EXPECT_EQ(test::http_status(r), 200) << r;
  EXPECT_NE(r.find("text/event-stream"), std::string::npos);
  EXPECT_EQ(test::http_body(r), "data: 0\n\ndata: 1\n\ndata: 2\n\n");
}

TEST(HttpStreamServer, BodyLimitAndReadTimeout) {
  HttpStreamServerOptions o;
  o.max_body_bytes = 100;
  o.read_timeout = std::chrono::milliseconds(300);
  std::atomic<int> handled{0};
  auto s = serve([&](HttpExchange& ex) { ++handled, ex.respond(200, "text/plain", "ok", {}); }, o);
  const std::string big = test::http_post(s->port(), "/x", std::string(1000, 'a'));
  EXPECT_EQ(test::http_status(big), 413) << big;
  EXPECT_NE(big.find("\"error\""), std::string::npos);
  // Half a request: closed when the read timeout passes, never handed to the handler.
  const std::string half = test::http_raw(s->port(), "POST /x HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc", 10);
  EXPECT_EQ(half, "");
  EXPECT_EQ(handled.load(), 0);
}

TEST(HttpStreamServer, ClientWatchSeesADroppedConnection) {
  std::atomic<bool> gone{false};
  auto s = serve([&](HttpExchange& ex) {
    std::mutex mu;
    std::condition_variable cv;
    ClientWatch w(ex, [&] {
      std::lock_guard<std::mutex> lk(mu);
      gone = true;
      cv.notify_all();
    });
    std::unique_lock<std::mutex> lk(mu);
    cv.wait_for(lk, std::chrono::seconds(10), [&] { return gone.load(); });
  });
  // A client that sends its request and hangs up without reading.
  send_and_hang_up(s->port(), "POST /x HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
  for (int i = 0; i < 500 && !gone; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(gone.load());
}

TEST(HttpStreamServer, ABlockedHandlerHoldsUpNoOtherConnection) {
  std::mutex mu;
  std::condition_variable cv;
  bool fast_done = false;
  auto s = serve([&](HttpExchange& ex) {
    if (ex.request().path == "/slow") {  // waits until /fast, on another connection, was answered
      std::unique_lock<std::mutex> lk(mu);
      cv.wait_for(lk, std::chrono::seconds(20), [&] { return fast_done; });
      ex.respond(fast_done ? 200 : 500, "text/plain", "slow", {});
      return;
    }
    ex.respond(200, "text/plain", "fast", {});
  });
  std::string slow;
  std::thread t([&] { slow = test::http_post(s->port(), "/slow", ""); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const std::string fast = test::http_post(s->port(), "/fast", "");
  {
    std::lock_guard<std::mutex> lk(mu);
    fast_done = test::http_status(fast) == 200;
  }
  cv.notify_all();
  t.join();
  EXPECT_EQ(test::http_status(slow), 200) << slow;
}

// `curl` (its exit code: 0 fetched, 35/56/60 TLS failures) over HTTPS with `args`.
int curl(const std::string& args) {
  return WEXITSTATUS(std::system(("curl -s -o /dev/null --max-time 10 " + args + " 2>/dev/null").c_str()));
}

TEST(HttpStreamServer, TlsAndClientCertificates) {
  if (std::system("command -v curl >/dev/null 2>&1") != 0) GTEST_SKIP() << "no curl";
  test::TempDir dir;
  auto pki = test::TestPki::make(dir.path());
  if (!pki) GTEST_SKIP() << "no openssl";
  HttpStreamServerOptions o;
  o.tls_cert = pki->server_cert;
  o.tls_key = pki->server_key;
  auto s = serve([](HttpExchange& ex) { ex.respond(200, "text/plain", "ok", {}); }, o);
  EXPECT_TRUE(s->tls());
  const std::string url = " https://127.0.0.1:" + std::to_string(s->port()) + "/x";
  EXPECT_EQ(curl("--cacert " + pki->ca + url), 0);
  EXPECT_NE(curl("--cacert " + pki->rogue_ca + url), 0);  // a client that trusts another CA refuses it
  EXPECT_NE(curl("http://127.0.0.1:" + std::to_string(s->port()) + "/x"), 0);  // no plaintext on a TLS port
  s->stop();

  o.tls_client_ca = pki->ca;  // mTLS: a client certificate from the CA is required
  auto m = serve([](HttpExchange& ex) { ex.respond(200, "text/plain", "ok", {}); }, o);
  const std::string murl = " https://127.0.0.1:" + std::to_string(m->port()) + "/x";
  EXPECT_NE(curl("--cacert " + pki->ca + murl), 0);
  EXPECT_EQ(curl("--cacert " + pki->ca + " --cert " + pki->client_cert + " --key " + pki->client_key + murl), 0);

  o.tls_cert = dir.path() + "/missing.pem";
  auto bad = HttpStreamServer::bind("127.0.0.1", 0, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--tls-cert"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace yoco
