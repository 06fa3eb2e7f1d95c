// The server kit (server/): flag ranges and errors naming the flag, the common server flags, the
// deadline conversion and the cancellable wait, the TLS flags, /healthz, the open-file limit.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "common/log.h"
#include "server/call.h"
#include "server/flags.h"
#include "server/server.h"
#include "server/tls.h"
#include "tests/unit/http_get.h"

namespace yoco {
namespace {

// The test binary's own flags: n in [0, n_hi], x in [0, 1], a model directory, an absent one.
FlagTable test_flags(int64_t n_hi = 10) {
  return {flag::integer("n", "a count", 1, 0, n_hi), flag::number("x", "a fraction", 1.0, 0.0, 1.0),
          flag::str("model", "a directory"), flag::integer("absent", "never given", 3, 0, 10)};
}

ServerFlags parse(std::vector<std::string> args, FlagTable table = test_flags()) {
  args.insert(args.begin(), "prog");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return ServerFlags("yoco-test", "the server kit's test", static_cast<int>(argv.size()), argv.data(),
                     std::move(table));
}

TEST(ServerFlags, RangesAndTheFirstErrorNamingTheFlag) {
  auto f = parse({"--n", "7", "--x=0.5"});
  EXPECT_EQ(f.integer("n"), 7);
  EXPECT_DOUBLE_EQ(f.number("x"), 0.5);
  EXPECT_EQ(f.integer("absent"), 3);  // the declared default
  EXPECT_TRUE(f.ok());
  auto out = parse({"--n", "7", "--x=0.5"}, test_flags(/*n_hi=*/5));
  EXPECT_EQ(out.integer("n"), 7);  // out of range: an error (the value is never used)
  EXPECT_FALSE(out.ok());
  EXPECT_EQ(out.error(), "--n: must be in [0, 5], got 7");
  out.required("model");  // a later error does not replace the first
  EXPECT_EQ(out.error(), "--n: must be in [0, 5], got 7");
  EXPECT_EQ(out.usage_error(), 2);
  EXPECT_EQ(parse({"--x", "1.5"}).error(), "--x: must be in [0, 1], got 1.5");
}

// --help lists every flag, the program's and the common ones, each with its type, range, default
// and help text under a "  --name" (or "  --name (boolean)") line: deployment checks read those.
TEST(ServerFlags, HelpListsEveryFlagWithItsTypeDefaultAndHelp) {
  FlagTable table = test_flags();
  table.push_back(flag::boolean("fast", "go fast"));
  for (FlagSpec& s : ServerFlags::common_flags()) table.push_back(std::move(s));
  const std::string help = Flags("yoco-test", "the server kit's test", table).help_text();
  EXPECT_NE(help.find("\n  --n\n      integer in [0, 10], default 1: a count\n"), std::string::npos) << help;
  EXPECT_NE(help.find("\n  --fast (boolean)\n      boolean (absent: false): go fast\n"), std::string::npos) << help;
  for (const FlagSpec& s : table)
    EXPECT_NE(help.find("\n  --" + s.name + (s.type == FlagType::kBool ? " (boolean)\n" : "\n")), std::string::npos)
        << s.name;
  EXPECT_NE(help.find("  --log-level\n      text, default info: debug"), std::string::npos) << help;
}

TEST(ServerFlags, LogLevelIsOffDebugByDefaultAndSetByTheFlag) {
  // A hop line (docs/design.md §3.1, --log-level) as a process would write it.
  auto hop = [] {
    testing::internal::CaptureStderr();
    YOCO_HOP("router.admit", "req-9", .kv("reservation", 42));
    return testing::internal::GetCapturedStderr();
  };
  EXPECT_EQ(log_level(), LogLevel::kInfo);
  EXPECT_EQ(hop(), "");
  auto f = parse({"--log-level", "debug"});
  EXPECT_TRUE(f.ok()) << f.error();
  EXPECT_EQ(log_level(), LogLevel::kDebug);
  EXPECT_NE(hop().find("level=debug msg=\"hop\" hop=router.admit request_id=req-9 reservation=42\n"),
            std::string::npos);
  auto bad = parse({"--log-level=loud"});
  EXPECT_EQ(bad.error(), "--log-level: log level \"loud\": expected debug, info, warn or error");
  set_log_level(LogLevel::kInfo);
}

TEST(ServerFlags, ParseErrorsRequiredAndMalformed) {
  EXPECT_EQ(parse({"--bogus", "1"}).error(), "unknown flag --bogus");
  EXPECT_EQ(parse({"--bogus=1"}).error(), "unknown flag --bogus");
  auto f = parse({"--n", "x"});
  EXPECT_EQ(f.error(), "--n: not an integer: x");
  auto g = parse({});
  EXPECT_EQ(g.required("model"), "");
  EXPECT_EQ(g.error(), "--model: required (a directory)");
}

// yoco-cli's cluster commands read their flags with the same kit: from argv[first], only the
// names given (no listener flags), no positional arguments, and lists of ranged integers.
TEST(ServerFlags, ClientFlagsAndIntegerLists) {
  auto client = [](std::vector<std::string> args, int64_t hi = 10) {
    args.insert(args.begin(), {"yoco-cli", "generate"});
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    return ServerFlags::client("yoco-cli", "a client", static_cast<int>(argv.size()), argv.data(), 2,
                               {flag::int_list("tokens", "ids", 0, hi), flag::int_list("absent", "ids", 0, hi),
                                flag::str("router", "HOST:PORT"), flag::repeated("stop", "a stop string")});
  };
  auto f = client({"--router", "h:1", "--tokens", "1, 2,3", "--stop", "a", "--stop=b c"});
  ASSERT_TRUE(f.ok()) << f.error();
  EXPECT_EQ(f.int_list("tokens"), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_TRUE(f.int_list("absent").empty());
  EXPECT_EQ(f.all("stop"), (std::vector<std::string>{"a", "b c"}));
  EXPECT_TRUE(f.ok());
  auto narrow = client({"--router", "h:1", "--tokens", "1, 2,3"}, /*hi=*/2);
  EXPECT_TRUE(narrow.int_list("tokens").empty());
  EXPECT_EQ(narrow.error(), "--tokens[2]: must be in [0, 2], got 3");
  EXPECT_EQ(client({"--listen", "127.0.0.1:0"}).error(), "unknown flag --listen");
  EXPECT_EQ(client({"--router", "h:1", "extra"}).error(), "unexpected argument \"extra\"");
  auto bad = client({"--tokens", "1,x"});
  EXPECT_TRUE(bad.int_list("tokens").empty());
  EXPECT_NE(bad.error().find("--tokens"), std::string::npos) << bad.error();
}

TEST(ServerFlags, CommonServerOptions) {
  auto f =
      parse({"--listen", "0.0.0.0:7000", "--metrics-listen", "[::1]:9090", "--drain-seconds", "5", "--port-file", "p"});
  const ServerOptions o = server_options(f);
  ASSERT_TRUE(f.ok()) << f.error();
  EXPECT_EQ(o.program, "yoco-test");
  EXPECT_EQ(o.listen, "0.0.0.0:7000");
  EXPECT_EQ(o.metrics_listen.host, "::1");
  EXPECT_EQ(o.metrics_listen.port, 9090);
  EXPECT_EQ(o.drain, std::chrono::seconds(5));
  EXPECT_EQ(o.port_file, "p");
  auto bad = parse({"--listen", "nohost"});
  server_options(bad);
  EXPECT_NE(bad.error().find("--listen"), std::string::npos) << bad.error();
  auto neg = parse({"--drain-seconds", "-1"});
  server_options(neg);
  EXPECT_NE(neg.error().find("--drain-seconds"), std::string::npos) << neg.error();
}

TEST(ServerTls, FlagsBothOrNeitherFilesReadableWorkersRequireClientCa) {
  auto none = parse({});
  EXPECT_FALSE(server_options(none).tls.enabled());
  EXPECT_TRUE(none.ok());
  const std::string f = testing::TempDir() + "/server_kit_test.pem";
  std::ofstream(f) << "x";
  auto both = parse({"--tls-cert", f, "--tls-key", f, "--tls-reload-seconds", "1"});
  const ServerOptions o = server_options(both);
  ASSERT_TRUE(both.ok()) << both.error();
  EXPECT_TRUE(o.tls.enabled());
  EXPECT_EQ(o.tls.reload_seconds, 1);
  require_client_ca(both, o.tls);  // a worker: TLS without client certificates is refused
  EXPECT_NE(both.error().find("--tls-client-ca: required"), std::string::npos) << both.error();
  auto mtls = parse({"--tls-cert", f, "--tls-key", f, "--tls-client-ca", f});
  require_client_ca(mtls, server_options(mtls).tls);
  EXPECT_TRUE(mtls.ok()) << mtls.error();
  auto cert_only = parse({"--tls-cert", f});
  server_options(cert_only);
  EXPECT_NE(cert_only.error().find("--tls-key"), std::string::npos) << cert_only.error();
  auto missing = parse({"--tls-cert", f, "--tls-key", f + ".missing"});
  server_options(missing);
  EXPECT_NE(missing.error().find("--tls-key: cannot read"), std::string::npos) << missing.error();
  auto channel = parse({"--worker-tls-cert", f, "--worker-tls-key", f}, channel_tls_flags("worker-", "the workers"));
  read_channel_tls(channel, "worker-");
  EXPECT_NE(channel.error().find("--worker-tls-ca: required"), std::string::npos) << channel.error();
}

TEST(ServerCall, DeadlineConversionAndCancellableWait) {
  grpc::ServerContext ctx;  // no client deadline
  EXPECT_FALSE(steady_deadline(ctx).has_value());
  EXPECT_FALSE(deadline_passed(ctx));
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::lock_guard<std::mutex> lock(mu);
    done = true;
    cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(mu);
  int cancels = 0;
  wait_cancellable(
      ctx, lock, cv, [&] { return done; }, [&] { ++cancels; });
  EXPECT_TRUE(done);
  EXPECT_EQ(cancels, 0);
  lock.unlock();
  t.join();
}

TEST(Server, StartsWritesThePortFileAndDrainsInOrder) {
  ServerOptions o;
  o.program = "yoco-test";
  o.port_file = testing::TempDir() + "/server_kit_test.port";
  o.drain = std::chrono::seconds(0);
  MetricsRegistry registry;
  int refreshed = 0;
  testing::internal::CaptureStderr();
  auto s = Server::start(o, {}, registry, [&] { ++refreshed; }, {{"extra", Json("x")}});
  const std::string log = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(s.ok()) << s.status().message();
  // No TLS flags: plaintext, said exactly once.
  size_t said = 0;
  for (size_t at = 0; (at = log.find("plaintext listener", at)) != std::string::npos; ++at) ++said;
  EXPECT_EQ(said, 1u) << log;
  EXPECT_GT((*s)->grpc_port(), 0);
  EXPECT_GT((*s)->metrics_port(), 0);
  std::ifstream in(o.port_file);
  std::stringstream ss;
  ss << in.rdbuf();
  auto j = Json::parse(ss.str());
  ASSERT_TRUE(j.ok()) << ss.str();
  EXPECT_EQ(j->as_object().at("grpc_port").as_int(), (*s)->grpc_port());
  EXPECT_EQ(j->as_object().at("metrics_port").as_int(), (*s)->metrics_port());
  EXPECT_EQ(j->as_object().at("extra").as_string(), "x");
  EXPECT_NE(test::http_get((*s)->metrics_port(), "/healthz").find("200"), std::string::npos);
  std::vector<std::string> order;
  (*s)->drain({.refuse =
                   [&] {
                     order.push_back("refuse");  // NOT_SERVING already: probes see it while in-flight work drains
                     EXPECT_NE(test::http_get((*s)->metrics_port(), "/healthz").find("503"), std::string::npos);
                   },
               .finish =
                   [&](auto until) {
                     EXPECT_LE(until, std::chrono::steady_clock::now());  // --drain-seconds 0
                     order.push_back("finish");
                   }});
  EXPECT_EQ(order, (std::vector<std::string>{"refuse", "finish"}));
  ServerOptions bad = o;
  bad.listen = "256.0.0.1:1";
  bad.port_file.clear();
  auto busy = Server::start(bad, {}, registry);
  ASSERT_FALSE(busy.ok());
  EXPECT_NE(busy.status().message().find("--listen"), std::string::npos) << busy.status().message();
}

// Every server process lifts its soft RLIMIT_NOFILE to the hard limit at start and says so.
TEST(Server, RaisesTheOpenFileLimit) {
  rlimit rl{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
  if (rl.rlim_max < 64 || rl.rlim_max == RLIM_INFINITY) GTEST_SKIP() << "hard limit " << rl.rlim_max;
  rl.rlim_cur = rl.rlim_max / 2;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &rl), 0);
  ServerOptions o;
  o.program = "yoco-test";
  MetricsRegistry registry;
  testing::internal::CaptureStderr();
  auto s = Server::start(o, {}, registry);
  ASSERT_TRUE(s.ok()) << s.status().message();
  (*s)->log_serving(LogFields());
  const std::string log = testing::internal::GetCapturedStderr();
  rlimit now{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &now), 0);
  EXPECT_EQ(now.rlim_cur, rl.rlim_max);
  EXPECT_NE(log.find("open_files=" + std::to_string(rl.rlim_max)), std::string::npos) << log;
  EXPECT_EQ(raise_open_file_limit(), static_cast<long>(rl.rlim_max));  // already there: unchanged
}

}  // namespace
}  // namespace yoco
