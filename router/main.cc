// yoco-router: the cluster's front door. Serves the public yoco.v1 API, finds prefill and
// decode workers (static lists or DNS names of Kubernetes headless Services), checks their
// health and load, and drives every request through them (router/service.h).
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include "common/flags.h"
#include "common/http_server.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/process.h"
#include "model/config.h"
#include "proto/grpc_util.h"
#include "router/service.h"
#include "router/workers.h"
#include "tokenizer/tokenizer.h"

namespace yoco {
namespace {


int fail(const std::string& msg, int code) {
  std::fprintf(stderr, "yoco-router: %s\n", msg.c_str());
  return code;
}

int run(int argc, char** argv) {
  auto f = Flags::parse(argc, argv, 1,
                        {"model", "prefill", "decode", "listen", "metrics-listen", "port-file", "max-in-flight",
                         "max-queued-tokens", "prefill-attempts", "migrations", "lease-ms", "health-interval-ms",
                         "dns-refresh-seconds", "drain-seconds", "config", "threads", "affinity-tokens",
                         "affinity-max-extra-tokens"});
  if (!f.ok()) return fail(f.status().message(), 2);
  auto num = [&](const char* name, int64_t def, int64_t lo, int64_t hi) -> int64_t {
    auto v = f->get_int(name, def);
    if (!v.ok()) std::exit(fail(v.status().message(), 2));
    if (*v < lo || *v > hi)
      std::exit(fail("--" + std::string(name) + ": must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", 2));
    return *v;
  };
  if (!f->has("model")) return fail("--model: required (a model directory: params.json and the tokenizer)", 2);
  if (!f->has("prefill")) return fail("--prefill: required (host:port,... or dns:name:port)", 2);
  if (!f->has("decode")) return fail("--decode: required (host:port,... or dns:name:port)", 2);
  auto config = load_model_config(f->get("model") + "/params.json");
  if (!config.ok()) return fail("--model: " + config.status().message(), 2);
  std::unique_ptr<Tokenizer> tok;
  if (auto t = Tokenizer::load(f->get("model")); t.ok()) tok = std::move(t).value();
  auto ptargets = parse_targets(f->get("prefill"));
  if (!ptargets.ok()) return fail("--prefill: " + ptargets.status().message(), 2);
  auto dtargets = parse_targets(f->get("decode"));
  if (!dtargets.ok()) return fail("--decode: " + dtargets.status().message(), 2);
  auto listen = parse_listen_address(f->get("listen", "127.0.0.1:0"), "listen");
  if (!listen.ok()) return fail(listen.status().message(), 2);
  auto mlisten = parse_listen_address(f->get("metrics-listen", "127.0.0.1:0"), "metrics-listen");
  if (!mlisten.ok()) return fail(mlisten.status().message(), 2);

  RouterLimits lim;
  lim.max_in_flight = static_cast<int>(num("max-in-flight", 256, 1, 1 << 20));
  lim.max_queued_tokens = num("max-queued-tokens", 1 << 20, 1, int64_t{1} << 40);
  lim.prefill_attempts = static_cast<int>(num("prefill-attempts", 3, 1, 100));
  lim.migrations = static_cast<int>(num("migrations", 3, 0, 100));
  lim.lease_ms = static_cast<uint32_t>(num("lease-ms", 30000, 100, 3600000));
  lim.affinity_tokens = static_cast<int>(num("affinity-tokens", 64, 0, 1 << 20));
  lim.affinity_max_extra_tokens = num("affinity-max-extra-tokens", 4096, 0, int64_t{1} << 40);
  WorkerGroupOptions wopt;
  wopt.poll_interval = std::chrono::milliseconds(num("health-interval-ms", 500, 10, 600000));
  wopt.dns_refresh = std::chrono::milliseconds(1000 * num("dns-refresh-seconds", 5, 1, 86400));
  const int64_t drain_seconds = num("drain-seconds", 30, 0, 3600);

  WorkerGroup prefill(WorkerRole::kPrefill, ptargets.value(), wopt);
  WorkerGroup decode(WorkerRole::kDecode, dtargets.value(), wopt);
  prefill.start();
  decode.start();

  MetricsRegistry registry;
  RouterMetrics metrics(registry);
  auto http = HttpServer::start(mlisten->first, static_cast<uint16_t>(mlisten->second),
                                {{"/metrics", [&] {
                                    metrics.healthy_workers.with({"prefill"}).set(prefill.healthy_count());
                                    metrics.healthy_workers.with({"decode"}).set(decode.healthy_count());
                                    return HttpResponse{200, kPrometheusContentType, registry.expose()};
                                  }}});
  if (!http.ok()) return fail(http.status().message(), 1);

  RouterService service(config.value(), tok.get(), prefill, decode, lim, metrics);
  int port = 0;
  std::unique_ptr<grpc::Server> server = start_grpc_server(f->get("listen", "127.0.0.1:0"), {&service}, &port);
  if (!server) return fail("cannot listen on " + f->get("listen", "127.0.0.1:0"), 1);
  YOCO_LOG(LogLevel::kInfo, "yoco-router serving",
           LogFields().kv("grpc_port", port).kv("metrics_port", (*http)->port()).kv("prefill_healthy", prefill.healthy_count())
               .kv("decode_healthy", decode.healthy_count()));
  if (f->has("port-file")) {
    Status st = write_port_file(f->get("port-file"),
                                Json(Json::Object{{"grpc_port", Json(port)}, {"metrics_port", Json((*http)->port())}}));
    if (!st.ok()) return fail(st.message(), 1);
  }

  wait_for_shutdown_signal();
  // Graceful: NOT_SERVING at once (load balancers stop sending), new requests are refused,
  // in-flight streams finish, then exit.
  YOCO_LOG(LogLevel::kInfo, "draining", LogFields().kv("in_flight", service.in_flight()));
  server->GetHealthCheckService()->SetServingStatus(false);
  service.set_serving(false);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(drain_seconds);
  while (service.in_flight() > 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  (*http)->stop();
  prefill.stop();
  decode.stop();
  YOCO_LOG(LogLevel::kInfo, "stopped", LogFields());
  return 0;
}

}  // namespace
}  // namespace yoco

int main(int argc, char** argv) { return yoco::run(argc, argv); }
