// yoco-router: the cluster's front door. Serves the public yoco.v1 API, finds prefill and
// decode workers (static lists or DNS names of Kubernetes headless Services), checks their
// health and load, and drives every request through them (router/service.h).
#include "common/log.h"
#include "model/config.h"
#include "router/service.h"
#include "router/workers.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"

namespace yoco {
namespace {

constexpr const char* kProgram = "yoco-router";

RouterLimits read_limits(ServerFlags& f) {
  RouterLimits lim;
  lim.max_in_flight = static_cast<int>(f.int_in("max-in-flight", 256, 1, 1 << 20));
  lim.max_queued_tokens = f.int_in("max-queued-tokens", 1 << 20, 1, int64_t{1} << 40);
  lim.prefill_attempts = static_cast<int>(f.int_in("prefill-attempts", 3, 1, 100));
  lim.migrations = static_cast<int>(f.int_in("migrations", 3, 0, 100));
  lim.lease_ms = static_cast<uint32_t>(f.int_in("lease-ms", 30000, 100, 3600000));
  lim.affinity_tokens = static_cast<int>(f.int_in("affinity-tokens", 64, 0, 1 << 20));
  lim.affinity_max_extra_tokens = f.int_in("affinity-max-extra-tokens", 4096, 0, int64_t{1} << 40);
  return lim;
}

WorkerGroupOptions read_worker_options(ServerFlags& f) {
  WorkerGroupOptions o;
  o.poll_interval = std::chrono::milliseconds(f.int_in("health-interval-ms", 500, 10, 600000));
  o.dns_refresh = std::chrono::milliseconds(1000 * f.int_in("dns-refresh-seconds", 5, 1, 86400));
  return o;
}

std::vector<Target> read_targets(ServerFlags& f, const std::string& name) {
  auto t = parse_targets(f.required(name, "host:port,... or dns:name:port"));
  if (!t.ok()) f.fail("--" + name + ": " + t.status().message());
  return t.ok() ? std::move(t).value() : std::vector<Target>{};
}

int run(int argc, char** argv) {
  ServerFlags f(kProgram, argc, argv,
                {"model", "prefill", "decode", "max-in-flight", "max-queued-tokens", "prefill-attempts", "migrations",
                 "lease-ms", "health-interval-ms", "dns-refresh-seconds", "affinity-tokens", "affinity-max-extra-tokens"});
  const ServerOptions so = server_options(f);
  const std::string model_dir = f.required("model", "a model directory: params.json and the tokenizer");
  const std::vector<Target> ptargets = read_targets(f, "prefill");
  const std::vector<Target> dtargets = read_targets(f, "decode");
  const RouterLimits lim = read_limits(f);
  const WorkerGroupOptions wopt = read_worker_options(f);
  if (!f.ok()) return f.usage_error();
  auto config = load_model_config(model_dir + "/params.json");
  if (!config.ok()) return exit_with(kProgram, "--model: " + config.status().message(), 2);
  std::unique_ptr<Tokenizer> tok;
  if (auto t = Tokenizer::load(model_dir); t.ok()) tok = std::move(t).value();
  install_shutdown_signal_handlers();

  WorkerGroup prefill(WorkerRole::kPrefill, ptargets, wopt);
  WorkerGroup decode(WorkerRole::kDecode, dtargets, wopt);
  prefill.start();
  decode.start();

  MetricsRegistry registry;
  RouterMetrics metrics(registry);
  RouterService service(config.value(), tok.get(), prefill, decode, lim, metrics);
  auto server = Server::start(so, {&service}, registry, [&] {
    metrics.healthy_workers.with({"prefill"}).set(prefill.healthy_count());
    metrics.healthy_workers.with({"decode"}).set(decode.healthy_count());
  });
  if (!server.ok()) return exit_with(kProgram, server.status().message(), 1);
  (*server)->log_serving(
      LogFields().kv("prefill_healthy", prefill.healthy_count()).kv("decode_healthy", decode.healthy_count()));

  // In-flight streams finish; new requests are refused (the router has no queue of its own).
  (*server)->wait_and_drain({.refuse = [&] { service.set_serving(false); },
                             .finish = [&](auto until) { wait_until_idle([&] { return service.in_flight() == 0; }, until); }});
  prefill.stop();
  decode.stop();
  return 0;
}

}  // namespace
}  // namespace yoco

int main(int argc, char** argv) { return yoco::run(argc, argv); }
