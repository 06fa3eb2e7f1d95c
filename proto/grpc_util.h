// The gRPC edge shared by the three servers and yoco-cli's cluster client (docs/architecture.md,
// rule 6): library Status → grpc::Status, a code's name and the status label metrics use.
// Starting a server is server/server.h's.
#pragma once

#include <grpcpp/grpcpp.h>

#include <string>

#include "common/status.h"

namespace yoco {

inline grpc::Status to_grpc(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk:
      return grpc::Status::OK;
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
      return {grpc::StatusCode::INVALID_ARGUMENT, s.message()};
    case StatusCode::kNotFound:
      return {grpc::StatusCode::NOT_FOUND, s.message()};
    case StatusCode::kResourceExhausted:
      return {grpc::StatusCode::RESOURCE_EXHAUSTED, s.message()};
    case StatusCode::kUnavailable:
      return {grpc::StatusCode::UNAVAILABLE, s.message()};
    case StatusCode::kDeadlineExceeded:
      return {grpc::StatusCode::DEADLINE_EXCEEDED, s.message()};
    case StatusCode::kCancelled:
      return {grpc::StatusCode::CANCELLED, s.message()};
    case StatusCode::kFailedPrecondition:
      return {grpc::StatusCode::FAILED_PRECONDITION, s.message()};
    case StatusCode::kUnimplemented:
      return {grpc::StatusCode::UNIMPLEMENTED, s.message()};
    case StatusCode::kDataLoss:
      return {grpc::StatusCode::DATA_LOSS, s.message()};
    default:
      return {grpc::StatusCode::INTERNAL, s.message()};
  }
}

// The code's canonical name ("INVALID_ARGUMENT"), as clients print it: `error: CODE: message`.
inline const char* grpc_code_name(grpc::StatusCode c) {
  switch (c) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "UNKNOWN";
  }
}

// The `status` label of yoco_requests_total.
inline const char* grpc_code_label(grpc::StatusCode c) {
  switch (c) {
    case grpc::StatusCode::OK:
      return "ok";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "invalid_argument";
    case grpc::StatusCode::NOT_FOUND:
      return "not_found";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "resource_exhausted";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "deadline_exceeded";
    case grpc::StatusCode::CANCELLED:
      return "cancelled";
    case grpc::StatusCode::UNAVAILABLE:
      return "unavailable";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "failed_precondition";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "unimplemented";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "unauthenticated";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "permission_denied";
    default:
      return "error";
  }
}

}  // namespace yoco
