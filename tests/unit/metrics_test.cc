// The metrics registry and /metrics endpoint: exact exposition text, validation, HTTP routes
// (the services' one listener, server/http_listener.h, as server/server.cc sets it up),
// `promtool check metrics`, and a real Prometheus server scraping the endpoint.
#include "common/metrics.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <thread>

#include "server/http_listener.h"
#include "tests/unit/http_get.h"
#include "tests/unit/test_util.h"

namespace yoco {
namespace {

using test::http_get;

// /metrics of `r` on 127.0.0.1, any free port.
Result<std::unique_ptr<HttpListener>> serve_metrics(MetricsRegistry& r, std::string host = "127.0.0.1",
                                                    std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  HttpListenerOptions o;
  o.read_timeout = o.write_timeout = timeout;
  o.max_connections = 64;
  o.io_threads = 1;
  auto s = HttpListener::bind(host, 0, o);
  if (s.ok())
    (*s)->serve(HttpRoutes().get("/metrics", [&r] { return HttpResponse{200, kPrometheusContentType, r.expose()}; }));
  return s;
}

uint16_t free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

bool have(const char* tool) {
  return std::system((std::string("command -v ") + tool + " >/dev/null 2>&1").c_str()) == 0;
}

void fill(MetricsRegistry& r) {
  r.counter("yoco_prompt_tokens_total", "Prompt tokens processed.").inc(42);
  auto* status = r.counter_family("yoco_requests_total", "Requests by final status.", {"status"}).value();
  status->with({"ok"}).inc(3);
  status->with({"invalid_argument"}).inc();
  r.gauge("yoco_requests_running", "Requests in the running batch.").set(2);
  auto& ttft = r.histogram("yoco_time_to_first_token_seconds", "Time to first token.", {0.1, 1});
  ttft.observe(0.05);
  ttft.observe(0.5);
  ttft.observe(7);
}

TEST(Metrics, ExpositionText) {
  MetricsRegistry r;
  fill(r);
  EXPECT_EQ(r.expose(),
            "# HELP yoco_prompt_tokens_total Prompt tokens processed.\n"
            "# TYPE yoco_prompt_tokens_total counter\n"
            "yoco_prompt_tokens_total 42\n"
            "# HELP yoco_requests_running Requests in the running batch.\n"
            "# TYPE yoco_requests_running gauge\n"
            "yoco_requests_running 2\n"
            "# HELP yoco_requests_total Requests by final status.\n"
            "# TYPE yoco_requests_total counter\n"
            "yoco_requests_total{status=\"invalid_argument\"} 1\n"
            "yoco_requests_total{status=\"ok\"} 3\n"
            "# HELP yoco_time_to_first_token_seconds Time to first token.\n"
            "# TYPE yoco_time_to_first_token_seconds histogram\n"
            "yoco_time_to_first_token_seconds_bucket{le=\"0.1\"} 1\n"
            "yoco_time_to_first_token_seconds_bucket{le=\"1\"} 2\n"
            "yoco_time_to_first_token_seconds_bucket{le=\"+Inf\"} 3\n"
            "yoco_time_to_first_token_seconds_sum 7.55\n"
            "yoco_time_to_first_token_seconds_count 3\n");
}

TEST(Metrics, ValidationAndEscaping) {
  MetricsRegistry r;
  EXPECT_FALSE(r.counter_family("yoco_requests", "no _total").ok());
  EXPECT_FALSE(r.gauge_family("9bad", "x").ok());
  EXPECT_FALSE(r.gauge_family("yoco_x", "x", {"__reserved"}).ok());
  EXPECT_FALSE(r.histogram_family("yoco_h", "x", {1, 0.5}).ok());
  EXPECT_FALSE(r.histogram_family("yoco_h2", "x", {1}, {"le"}).ok());
  auto* g = r.gauge_family("yoco_g", "Help with \\ and\nnewline.", {"path"}).value();
  g->with({"a\"b\\c\nd"}).set(1);
  const std::string text = r.expose();
  EXPECT_NE(text.find("# HELP yoco_g Help with \\\\ and\\nnewline."), std::string::npos) << text;
  EXPECT_NE(text.find("yoco_g{path=\"a\\\"b\\\\c\\nd\"} 1"), std::string::npos) << text;
  Counter c;
  c.inc(-5);  // ignored: counters only go up
  EXPECT_EQ(c.value(), 0);
}

TEST(Metrics, ServedOverHttp) {
  MetricsRegistry r;
  fill(r);
  auto server = serve_metrics(r);
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  const std::string ok = http_get((*server)->port(), "/metrics");
  EXPECT_NE(ok.find("HTTP/1.1 200"), std::string::npos) << ok;
  EXPECT_NE(ok.find("text/plain; version=0.0.4"), std::string::npos);
  EXPECT_NE(ok.find("yoco_prompt_tokens_total 42"), std::string::npos);
  EXPECT_NE(http_get((*server)->port(), "/nope").find("HTTP/1.1 404"), std::string::npos);
  EXPECT_FALSE(serve_metrics(r, "not-an-address").ok());
  (*server)->stop();
  EXPECT_EQ(http_get((*server)->port(), "/metrics"), "");  // stopped: nothing answers
}

// A connected socket to 127.0.0.1:port that has sent `sent` (closed by the destructor).
struct RawClient {
  int fd = -1;
  RawClient(uint16_t port, const std::string& sent) {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    timeval tv{6, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    if (!sent.empty()) EXPECT_EQ(write(fd, sent.data(), sent.size()), static_cast<ssize_t>(sent.size()));
  }
  ~RawClient() { close(fd); }
  // Seconds until the server closes the connection (EOF or reset), or -1 if it is still open
  // after the 6 s receive timeout.
  double seconds_until_closed() const {
    const auto t0 = std::chrono::steady_clock::now();
    char buf[256];
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))) return -1;
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
};

// Slow clients hold nothing: a connection that sends nothing and one that sends half a request
// never delay a scrape, and both are closed when their timeout passes.
TEST(Metrics, ASilentConnectionNeverBlocksAScrape) {
  MetricsRegistry r;
  fill(r);
  auto server = serve_metrics(r, "127.0.0.1", std::chrono::milliseconds(1500));
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  const uint16_t port = (*server)->port();
  RawClient silent(port, "");
  RawClient half(port, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // both accepted before the scrape
  for (int i = 0; i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::string ok = http_get(port, "/metrics");
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_NE(ok.find("yoco_prompt_tokens_total 42"), std::string::npos) << "scrape " << i << ": " << ok;
    EXPECT_LT(took, 1.0) << "scrape " << i << " waited behind the silent connections";
  }
  const double silent_closed = silent.seconds_until_closed();
  const double half_closed = half.seconds_until_closed();
  EXPECT_GE(silent_closed, 0) << "the silent connection is still open 6 s later";
  EXPECT_GE(half_closed, 0) << "the half-request connection is still open 6 s later";
  EXPECT_LT(silent_closed, 4.0);
  EXPECT_LT(half_closed, 4.0);
  EXPECT_NE(http_get(port, "/metrics").find("HTTP/1.1 200"), std::string::npos);
}

TEST(Metrics, PromtoolAcceptsTheExposition) {
  if (!have("promtool")) GTEST_SKIP() << "promtool not installed (scripts/setup.sh installs prometheus)";
  MetricsRegistry r;
  fill(r);
  test::TempDir dir;
  test::write_file(dir.sub("m.txt"), r.expose());
  const std::string cmd = "promtool check metrics < " + dir.sub("m.txt") + " > " + dir.sub("out.txt") + " 2>&1";
  const int rc = std::system(cmd.c_str());
  EXPECT_EQ(rc, 0) << test::read_file(dir.sub("out.txt"));
}

TEST(Metrics, RealPrometheusScrapesTheEndpoint) {
  if (!have("prometheus")) GTEST_SKIP() << "prometheus not installed (scripts/setup.sh installs it)";
  MetricsRegistry r;
  fill(r);
  auto server = serve_metrics(r);
  ASSERT_TRUE(server.ok());
  test::TempDir dir;
  const uint16_t prom_port = free_port();
  test::write_file(dir.sub("prometheus.yml"),
                   "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: yoco\n    static_configs:\n"
                   "      - targets: ['127.0.0.1:" +
                       std::to_string((*server)->port()) + "']\n");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string cfg = "--config.file=" + dir.sub("prometheus.yml");
    const std::string listen = "--web.listen-address=127.0.0.1:" + std::to_string(prom_port);
    const std::string data = "--storage.tsdb.path=" + dir.sub("data");
    freopen((dir.sub("prometheus.log")).c_str(), "w", stderr);
    execlp("prometheus", "prometheus", cfg.c_str(), listen.c_str(), data.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait (bounded) for the target to be up and the sample to be queryable.
  bool up = false;
  std::string last;
  for (int i = 0; i < 120 && !up; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    last = http_get(prom_port, "/api/v1/query?query=yoco_prompt_tokens_total");
    up = last.find("\"value\":[") != std::string::npos && last.find("\"42\"") != std::string::npos;
  }
  const std::string targets = http_get(prom_port, "/api/v1/targets");
  kill(pid, SIGTERM);
  int status = 0;
  for (int i = 0; i < 50 && waitpid(pid, &status, WNOHANG) == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  if (waitpid(pid, &status, WNOHANG) == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  EXPECT_TRUE(up) << "last query answer: " << last << "\nprometheus log:\n"
                  << test::read_file(dir.sub("prometheus.log"));
  EXPECT_NE(targets.find("\"health\":\"up\""), std::string::npos) << targets;
}

}  // namespace
}  // namespace yoco
