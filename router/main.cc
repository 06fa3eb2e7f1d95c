// yoco-router: the cluster's front door. Serves the public yoco.v1 API, finds prefill and
// decode workers (static lists or DNS names of Kubernetes headless Services), checks their
// health and load, learns the model from the decode workers (DecodeWorker.Describe), and drives
// every request through them (router/service.h). With no --prefill it runs colocated: decode
// workers prefill locally. With --http-port it also serves the OpenAI-compatible HTTP API
// (router/openai_server.h) over the same service.
#include "common/log.h"
#include "router/core.h"
#include "router/flags.h"
#include "router/openai_chat.h"
#include "router/openai_server.h"
#include "router/service.h"
#include "router/tool_calls.h"
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

// The HTTP listener is bound before the gRPC server starts, so its port goes into --port-file;
// it serves once the router's service is up. Its host is --listen's; TLS is the router's.
Result<std::unique_ptr<HttpListener>> bind_http(ServerFlags& f, const ServerOptions& so, int port) {
  HttpListenerOptions o;
  o.tls_cert = so.tls.cert;
  o.tls_key = so.tls.key;
  o.tls_client_ca = so.tls.client_ca;
  return HttpListener::bind(f.listen_address("listen").host, static_cast<uint16_t>(port), o);
}

int run(int argc, char** argv) {
  ServerFlags f(kProgram, "the cluster's front door (yoco.v1 over gRPC; the OpenAI API with --http-port)", argc, argv,
                router_flags());
  ServerOptions so = server_options(f);
  so.max_receive_message_bytes = kInProcessMessageBytes;
  RouterFlags rf = read_router_flags(f);
  OpenAiConfig openai;
  openai.served_model_name = rf.served_model_name;
  const std::optional<ToolCallFormat> tool_format = tool_call_format_named(rf.tool_call_parser);
  if (rf.tool_call_parser != "auto" && !tool_format)
    f.fail("--tool-call-parser: auto, hermes, llama3_json, mistral, mistral_args or none, not \"" +
           rf.tool_call_parser + "\"");
  if (!f.ok()) return f.usage_error();
  std::unique_ptr<ApiKeys> keys;
  if (!rf.api_keys.empty()) {
    auto k = ApiKeys::open(rf.api_keys);
    if (!k.ok()) return exit_with(kProgram, k.status().message(), 2);
    keys = std::move(k).value();
  } else {
    YOCO_LOG(LogLevel::kWarn, "no --api-keys: the public API is open to every client (no authentication)", LogFields());
  }
  std::unique_ptr<Tokenizer> tok;  // optional: without one, requests carry token ids
  if (auto t = Tokenizer::load(rf.model_dir); t.ok()) tok = std::move(t).value();
  std::unique_ptr<HttpListener> http;
  Json::Object port_fields;
  if (rf.http_port >= 0) {
    std::string template_text;
    auto tmpl = load_chat_renderer(rf.chat_template, rf.model_dir, tok.get(), &template_text);
    if (!tmpl.ok()) return exit_with(kProgram, tmpl.status().message(), 2);
    openai.chat_template = std::move(tmpl).value();
    // Tool calls (docs/design.md §3.2d): the flag's syntax, else the one the template writes.
    openai.tool_format = tool_format ? *tool_format : detect_tool_call_format(template_text);
    YOCO_LOG(LogLevel::kInfo, "chat tool calls",
             LogFields()
                 .kv("tool_call_parser", tool_call_format_name(openai.tool_format))
                 .kv("from", tool_format ? "--tool-call-parser" : "the chat template"));
    openai.tokenizer_config = load_tokenizer_config(rf.model_dir);
    auto h = bind_http(f, so, rf.http_port);
    if (!h.ok()) return exit_with(kProgram, h.status().message(), 1);
    http = std::move(h).value();
    port_fields["http_port"] = Json(static_cast<int64_t>(http->port()));
  }
  install_shutdown_signal_handlers();

  WorkerGroup prefill(WorkerRole::kPrefill, rf.prefill, rf.workers);
  WorkerGroup decode(WorkerRole::kDecode, rf.decode, rf.workers);
  GrpcWorkerCalls calls(prefill, decode);
  ModelInfoCache model(decode, calls);
  decode.set_on_poll([&] { model.refresh(); });  // the first poll (in start) describes the model
  prefill.start(calls);
  decode.start(calls);

  MetricsRegistry registry;
  RouterMetrics metrics(registry);
  RouterCore core(tok.get(), prefill, decode, model, calls, rf.limits, metrics, /*colocated=*/rf.prefill.empty());
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
    // The OpenAI server answers every path itself (its routes, 404 and 405 in OpenAI's error shape).
    http->serve(HttpRoutes().fallback([&api](HttpExchange& ex) { api->handle(ex); }));
  }
  (*server)->log_serving(LogFields()
                             .kv("http_port", http ? static_cast<int64_t>(http->port()) : int64_t{-1})
                             .kv("http_tls", http && http->tls())
                             .kv("http_max_connections", http ? http->max_connections() : -1)
                             .kv("prefill_healthy", prefill.healthy_count())
                             .kv("decode_healthy", decode.healthy_count())
                             .kv("colocated", rf.prefill.empty())
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
