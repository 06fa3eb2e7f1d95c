// The gRPC edge shared by the three servers (docs/architecture.md, rule 6): library Status → grpc::Status, the
// status label metrics use, and a server started the way every one of them starts (gRPC health
// service SERVING, server reflection for grpcurl-style tools).
#pragma once

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <initializer_list>
#include <memory>
#include <string>

#include "common/status.h"

namespace yoco {

inline grpc::Status to_grpc(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk: return grpc::Status::OK;
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange: return {grpc::StatusCode::INVALID_ARGUMENT, s.message()};
    case StatusCode::kNotFound: return {grpc::StatusCode::NOT_FOUND, s.message()};
    case StatusCode::kResourceExhausted: return {grpc::StatusCode::RESOURCE_EXHAUSTED, s.message()};
    case StatusCode::kUnavailable: return {grpc::StatusCode::UNAVAILABLE, s.message()};
    case StatusCode::kDeadlineExceeded: return {grpc::StatusCode::DEADLINE_EXCEEDED, s.message()};
    case StatusCode::kCancelled: return {grpc::StatusCode::CANCELLED, s.message()};
    case StatusCode::kFailedPrecondition: return {grpc::StatusCode::FAILED_PRECONDITION, s.message()};
    case StatusCode::kUnimplemented: return {grpc::StatusCode::UNIMPLEMENTED, s.message()};
    case StatusCode::kDataLoss: return {grpc::StatusCode::DATA_LOSS, s.message()};
    default: return {grpc::StatusCode::INTERNAL, s.message()};
  }
}

// The `status` label of yoco_requests_total.
inline const char* grpc_code_label(grpc::StatusCode c) {
  switch (c) {
    case grpc::StatusCode::OK: return "ok";
    case grpc::StatusCode::INVALID_ARGUMENT: return "invalid_argument";
    case grpc::StatusCode::NOT_FOUND: return "not_found";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "resource_exhausted";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "deadline_exceeded";
    case grpc::StatusCode::CANCELLED: return "cancelled";
    case grpc::StatusCode::UNAVAILABLE: return "unavailable";
    case grpc::StatusCode::FAILED_PRECONDITION: return "failed_precondition";
    case grpc::StatusCode::UNIMPLEMENTED: return "unimplemented";
    default: return "error";
  }
}

// Listens on `listen` ("host:port", port 0: any free one), registers `services`, turns on the
// health service (SERVING) and reflection. nullptr when it cannot listen; *port is the bound port.
inline std::unique_ptr<grpc::Server> start_grpc_server(const std::string& listen,
                                                       std::initializer_list<grpc::Service*> services, int* port) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  *port = 0;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), port);
  for (grpc::Service* s : services) builder.RegisterService(s);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || *port == 0) return nullptr;
  server->GetHealthCheckService()->SetServingStatus(true);
  return server;
}

}  // namespace yoco
