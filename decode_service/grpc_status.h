// The edge of the error policy: library Status → grpc::Status (STYLE item 6).
#pragma once

#include <grpcpp/grpcpp.h>

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

}  // namespace yoco
