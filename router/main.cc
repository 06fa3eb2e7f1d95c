// yoco-router: the cluster's front door. Serves the public yoco.v1 API, finds prefill and
// decode workers (static lists or DNS names of Kubernetes headless Services), checks their
// health and load, learns the model from the decode workers (DecodeWorker.Describe), and drives
// every request through them (router/service.h). With no --prefill it runs colocated: decode
// workers prefill locally. With --http-port it also serves the OpenAI-compatible HTTP API
// (router/openai_server.h) over the same service.
#include <filesystem>

#include "common/log.h"
#include "router/core.h"
#include "router/openai_chat.h"
#include "router/openai_server.h"
#include "router/service.h"
#include "router/workers.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"

namespace yoco {
namespace {

constexpr const char* kProgram = "yoco-router";

// The OpenAI API's calls into this router: room for any body the HTTP server takes (8 MiB of
// JSON is at most ~20 MiB of token ids as protobuf), so a large prompt meets the router's own
// validation (a 400 naming it) rather than gRPC's size limit.
constexpr int kInProcessMessageBytes = 64 << 20;

grpc::ChannelArguments in_process_args() {
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(kInProcessMessageBytes);
  args.SetMaxReceiveMessageSize(kInProcessMessageBytes);
  return args;
}

RouterLimits read_limits(ServerFlags& f) {
  RouterLimits lim;
  lim.max_in_flight = static_cast<int>(f.int_in("max-in-flight", 256, 1, 1 << 20));
  lim.max_queued_tokens = f.int_in("max-queued-tokens", 1 << 20, 1, int64_t{1} << 40);
  lim.prefill_attempts = static_cast<int>(f.int_in("prefill-attempts", 3, 1, 100));
  lim.migrations = static_cast<int>(f.int_in("migrations", 3, 0, 100));
  lim.lease_ms = static_cast<uint32_t>(f.int_in("lease-ms", 30000, 100, 3600000));
  lim.stall_timeout_ms = f.int_in("stall-timeout-ms", 3000, 100, 3600000);
  lim.affinity_tokens = static_cast<int>(f.int_in("affinity-tokens", 64, 0, 1 << 20));
  lim.affinity_max_extra_tokens = f.int_in("affinity-max-extra-tokens", 4096, 0, int64_t{1} << 40);
  // Decode choice (docs/design.md §3.3): kv (residency traded against load) or free-blocks.
  const std::string routing = f.str("decode-routing", "kv");
  if (routing != "kv" && routing != "free-blocks")
    f.fail("--decode-routing: \"kv\" or \"free-blocks\", not \"" + routing + "\"");
  lim.kv_aware_decode = routing == "kv";
  lim.decode_cost.ship_weight = f.double_in("decode-ship-weight", 1.0, 0.0, 1e6);
  lim.decode_cost.load_weight = f.double_in("decode-load-weight", 1.0, 0.0, 1e6);
  return lim;
}

WorkerGroupOptions read_worker_options(ServerFlags& f) {
  WorkerGroupOptions o;
  o.poll_interval = std::chrono::milliseconds(f.int_in("health-interval-ms", 500, 10, 600000));
  o.dns_refresh = std::chrono::milliseconds(1000 * f.int_in("dns-refresh-seconds", 5, 1, 86400));
  // TLS to the workers (their names are checked against their certificates: docs/design.md §9b).
  const ChannelTls tls = read_channel_tls(f, "worker-");
  if (f.ok()) o.credentials = channel_credentials(tls);
  o.tls_server_name = tls.server_name;
  return o;
}

// host:port,... or dns:name:port; an absent (or empty) optional list is no workers.
std::vector<Target> read_targets(ServerFlags& f, const std::string& name, bool required) {
  const std::string value = required ? f.required(name, "host:port,... or dns:name:port") : f.str(name);
  if (value.empty()) return {};
  auto t = parse_targets(value);
  if (!t.ok()) f.fail("--" + name + ": " + t.status().message());
  return t.ok() ? std::move(t).value() : std::vector<Target>{};
}

// The name clients put in "model" (vLLM's --served-model-name): the flag, else the model
// directory's name.
std::string served_model_name(ServerFlags& f, const std::string& model_dir) {
  std::string name = f.str("served-model-name");
  if (f.has("served-model-name") && name.empty()) f.fail("--served-model-name: empty");
  if (!name.empty()) return name;
  std::filesystem::path p = std::filesystem::path(model_dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();  // "models/kjv-yoco/"
  return p.filename().empty() ? model_dir : p.filename().string();
}

// The HTTP listener is bound before the gRPC server starts, so its port goes into --port-file;
// it serves once the router's service is up. Its host is --listen's; TLS is the router's.
Result<std::unique_ptr<HttpStreamServer>> bind_http(ServerFlags& f, const ServerOptions& so, int port) {
  HttpStreamServerOptions o;
  o.tls_cert = so.tls.cert;
  o.tls_key = so.tls.key;
  o.tls_client_ca = so.tls.client_ca;
  return HttpStreamServer::bind(f.listen_address("listen").host, static_cast<uint16_t>(port), o);
}

int run(int argc, char** argv) {
  ServerFlags f(kProgram, argc, argv,
                {"model",
                 "prefill",
                 "decode",
                 "max-in-flight",
                 "max-queued-tokens",
                 "prefill-attempts",
                 "migrations",
                 "lease-ms",
                 "stall-timeout-ms",
                 "health-interval-ms",
                 "dns-refresh-seconds",
                 "affinity-tokens",
                 "affinity-max-extra-tokens",
                 "decode-routing",
                 "decode-ship-weight",
                 "decode-load-weight",
                 "worker-tls-ca",
                 "worker-tls-cert",
                 "worker-tls-key",
                 "worker-tls-server-name",
                 "api-keys",
                 "http-port",
                 "chat-template",
                 "served-model-name"});
  ServerOptions so = server_options(f);
  so.max_receive_message_bytes = kInProcessMessageBytes;
  const std::string model_dir = f.required("model", "a model directory: the router reads its tokenizer");
  const std::vector<Target> ptargets = read_targets(f, "prefill", /*required=*/false);
  const std::vector<Target> dtargets = read_targets(f, "decode", /*required=*/true);
  const RouterLimits lim = read_limits(f);
  const WorkerGroupOptions wopt = read_worker_options(f);
  const std::string keys_path = f.str("api-keys");  // docs/design.md §9b
  const int http_port = f.has("http-port") ? static_cast<int>(f.int_in("http-port", 0, 0, 65535)) : -1;
  const std::string template_path = f.str("chat-template");
  OpenAiConfig openai;
  openai.served_model_name = served_model_name(f, model_dir);
  if (!f.ok()) return f.usage_error();
  std::unique_ptr<ApiKeys> keys;
  if (!keys_path.empty()) {
    auto k = ApiKeys::open(keys_path);
    if (!k.ok()) return exit_with(kProgram, k.status().message(), 2);
    keys = std::move(k).value();
  } else {
    YOCO_LOG(LogLevel::kWarn, "no --api-keys: the public API is open to every client (no authentication)", LogFields());
  }
  std::unique_ptr<Tokenizer> tok;  // optional: without one, requests carry token ids
  if (auto t = Tokenizer::load(model_dir); t.ok()) tok = std::move(t).value();
  std::unique_ptr<HttpStreamServer> http;
  Json::Object port_fields;
  if (http_port >= 0) {
    auto tmpl = load_chat_renderer(template_path, model_dir, tok.get());
    if (!tmpl.ok()) return exit_with(kProgram, tmpl.status().message(), 2);
    openai.chat_template = std::move(tmpl).value();
    openai.tokenizer_config = load_tokenizer_config(model_dir);
    auto h = bind_http(f, so, http_port);
    if (!h.ok()) return exit_with(kProgram, h.status().message(), 1);
    http = std::move(h).value();
    port_fields["http_port"] = Json(static_cast<int64_t>(http->port()));
  }
  install_shutdown_signal_handlers();

  WorkerGroup prefill(WorkerRole::kPrefill, ptargets, wopt);
  WorkerGroup decode(WorkerRole::kDecode, dtargets, wopt);
  GrpcWorkerCalls calls(prefill, decode);
  ModelInfoCache model(decode, calls);
  decode.set_on_poll([&] { model.refresh(); });  // the first poll (in start) describes the model
  prefill.start(calls);
  decode.start(calls);

  MetricsRegistry registry;
  RouterMetrics metrics(registry);
  RouterCore core(tok.get(), prefill, decode, model, calls, lim, metrics, /*colocated=*/ptargets.empty());
  core.set_keys(keys.get());
  RouterService service(core);
  auto server = Server::start(
      so, {&service}, registry,
      [&] {
        metrics.set_healthy_workers("prefill", prefill.healthy_count());
        metrics.set_healthy_workers("decode", decode.healthy_count());
      },
      port_fields);
  if (!server.ok()) return exit_with(kProgram, server.status().message(), 1);
  std::unique_ptr<OpenAiServer> api;
  if (http) {
    api = std::make_unique<OpenAiServer>((*server)->grpc().InProcessChannel(in_process_args()), tok.get(),
                                         std::move(openai), [&core] { return core.serving(); }, metrics);
    http->serve([&api](HttpExchange& ex) { api->handle(ex); });
  }
  (*server)->log_serving(LogFields()
                             .kv("http_port", http ? static_cast<int64_t>(http->port()) : int64_t{-1})
                             .kv("http_tls", http && http->tls())
                             .kv("http_max_connections", http ? http->max_connections() : -1)
                             .kv("prefill_healthy", prefill.healthy_count())
                             .kv("decode_healthy", decode.healthy_count())
                             .kv("colocated", ptargets.empty())
                             .kv("api_keys", keys ? static_cast<int64_t>(keys->size()) : int64_t{-1}));

  // In-flight streams finish; new requests are refused (the router has no queue of its own).
  const auto idle = [&] { return core.in_flight() == 0; };
  (*server)->wait_and_drain(
      {.refuse = [&] { core.set_serving(false); }, .finish = [&](auto until) { wait_until_idle(idle, until); }});
  if (http) http->stop();
  prefill.stop();
  decode.stop();
  return 0;
}

}  // namespace
}  // namespace yoco

int main(int argc, char** argv) { return yoco::run(argc, argv); }
