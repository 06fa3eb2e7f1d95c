#include "server/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/support/server_interceptor.h>

#include <thread>

#include "server/call.h"  // compiled here once so the header stays self-contained

namespace yoco {

namespace {

namespace gx = grpc::experimental;

// gRPC answers a request it cannot parse (a proto3 string that is not UTF-8, truncated bytes)
// with INTERNAL and no message, which a client reads as a server fault. It is the client's: the
// call's status becomes INVALID_ARGUMENT saying so (docs/design.md, errors).
class ParseErrorInterceptor final : public gx::Interceptor {
 public:
  explicit ParseErrorInterceptor(const char* method) : method_(method ? method : "the call") {}

  void Intercept(gx::InterceptorBatchMethods* m) override {
    if (m->QueryInterceptionHookPoint(gx::InterceptionHookPoints::POST_RECV_MESSAGE) && m->GetRecvMessage() == nullptr)
      unparsed_ = true;
    if (unparsed_ && m->QueryInterceptionHookPoint(gx::InterceptionHookPoints::PRE_SEND_STATUS) &&
        m->GetSendStatus().error_code() == grpc::StatusCode::INTERNAL)
      m->ModifySendStatus({grpc::StatusCode::INVALID_ARGUMENT,
                           "request: not a valid message for " + method_ +
                               " (a string field holds bytes that are not UTF-8, or the protobuf is malformed)"});
    m->Proceed();
  }

 private:
  const std::string method_;
  bool unparsed_ = false;
};

class ParseErrorInterceptorFactory final : public gx::ServerInterceptorFactoryInterface {
 public:
  gx::Interceptor* CreateServerInterceptor(gx::ServerRpcInfo* info) override {
    return new ParseErrorInterceptor(info->method());
  }
};

}  // namespace

ServerOptions server_options(ServerFlags& flags) {
  ServerOptions o;
  o.program = flags.program();
  o.listen = flags.str("listen");
  flags.listen_address("listen");  // checked here; gRPC takes the string as given
  o.metrics_listen = flags.listen_address("metrics-listen");
  if (flags.has("port-file") && flags.str("port-file").empty()) flags.fail("--port-file: empty path");
  o.port_file = flags.str("port-file");
  o.drain = std::chrono::seconds(flags.integer("drain-seconds"));
  o.tls = read_server_tls(flags);
  return o;
}

Server::~Server() {
  if (grpc_) grpc_->Shutdown(std::chrono::system_clock::now());
  if (http_) http_->stop();
}

Result<std::unique_ptr<Server>> Server::start(const ServerOptions& options, std::vector<grpc::Service*> services,
                                              MetricsRegistry& registry, std::function<void()> refresh,
                                              Json::Object port_fields) {
  std::unique_ptr<Server> s(new Server());
  s->opt_ = options;
  s->open_files_ = raise_open_file_limit();  // a descriptor per client connection (common/process.h)
  // /healthz mirrors gRPC health for probes that cannot speak TLS (kubelet's gRPC probe is plaintext).
  Server* self = s.get();
  // The services' one HTTP listener (server/http_listener.h), small: scrapes and probes only.
  HttpListenerOptions ho;
  ho.read_timeout = ho.write_timeout = std::chrono::seconds(5);
  ho.max_connections = 64;
  ho.io_threads = 1;
  ho.flag = "--metrics-listen";
  auto http = HttpListener::bind(options.metrics_listen.host, static_cast<uint16_t>(options.metrics_listen.port), ho);
  if (!http.ok()) return Status(StatusCode::kUnavailable, http.status().message());
  s->http_ = std::move(http).value();
  s->http_->serve(HttpRoutes()
                      .get("/metrics",
                           [&registry, refresh] {
                             if (refresh) refresh();
                             return HttpResponse{200, kPrometheusContentType, registry.expose()};
                           })
                      .get("/healthz", [self] {
                        return self->serving_ ? HttpResponse{200, "text/plain", "SERVING\n"}
                                              : HttpResponse{503, "text/plain", "NOT_SERVING\n"};
                      }));

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, server_credentials(options.tls, options.listen), &s->grpc_port_);
  for (grpc::Service* svc : services) builder.RegisterService(svc);
  builder.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  std::vector<std::unique_ptr<gx::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<ParseErrorInterceptorFactory>());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  s->grpc_ = builder.BuildAndStart();
  if (!s->grpc_ || s->grpc_port_ == 0)
    return Status(StatusCode::kUnavailable, "--listen: cannot listen on " + options.listen);
  s->grpc_->GetHealthCheckService()->SetServingStatus(true);
  s->serving_ = true;

  if (!options.port_file.empty()) {
    port_fields["grpc_port"] = Json(s->grpc_port_);
    port_fields["metrics_port"] = Json(s->metrics_port());
    if (Status st = write_port_file(options.port_file, Json(std::move(port_fields))); !st.ok()) return st;
  }
  return s;
}

int Server::metrics_port() const { return http_ ? http_->port() : 0; }

void Server::log_serving(const LogFields& extra) const {
  LogFields f;
  f.kv("grpc_port", grpc_port_).kv("metrics_port", metrics_port()).kv("open_files", open_files_);
  const std::string tail = extra.str().empty() ? f.str() : f.str() + " " + extra.str();
  log_line(LogLevel::kInfo, opt_.program + " serving", tail);
}

void Server::wait_and_drain(const DrainSteps& steps) {
  wait_for_shutdown_signal();
  drain(steps);
}

void Server::drain(const DrainSteps& steps) {
  YOCO_LOG(LogLevel::kInfo, "draining", LogFields().kv("drain_seconds", opt_.drain.count()));
  grpc_->GetHealthCheckService()->SetServingStatus(false);  // load balancers stop sending at once
  serving_ = false;
  if (steps.refuse) steps.refuse();
  if (steps.finish) steps.finish(std::chrono::steady_clock::now() + opt_.drain);
  grpc_->Shutdown(std::chrono::system_clock::now() + opt_.shutdown_grace);
  http_->stop();
  YOCO_LOG(LogLevel::kInfo, "stopped", LogFields());
}

void wait_until_idle(const std::function<bool()>& idle, std::chrono::steady_clock::time_point until) {
  while (!idle() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

}  // namespace yoco
