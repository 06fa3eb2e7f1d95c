// Small rules every router handler applies to a call: the client's own end, which worker errors
// are final, field-naming INVALID_ARGUMENT, token-id ranges, and retrying on other workers.
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "server/call.h"

namespace yoco {

inline grpc::Status invalid(const std::string& msg) { return {grpc::StatusCode::INVALID_ARGUMENT, msg}; }

// The client's own end of the call: its deadline passed or it cancelled.
inline std::optional<grpc::Status> client_end(const grpc::ServerContext* ctx) {
  if (deadline_passed(*ctx)) return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline exceeded");
  if (ctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client");
  return std::nullopt;
}

// Errors a worker returns that no other worker would answer differently.
inline bool final_error(grpc::StatusCode c) {
  return c == grpc::StatusCode::INVALID_ARGUMENT || c == grpc::StatusCode::NOT_FOUND ||
         c == grpc::StatusCode::DEADLINE_EXCEEDED || c == grpc::StatusCode::CANCELLED;
}

// Every id in [0, vocab_size); the error names `field`[i].
inline grpc::Status check_token_ids(std::span<const int32_t> ids, int64_t vocab_size, const std::string& field) {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab_size)
      return invalid(field + "[" + std::to_string(i) + "]: token id " + std::to_string(ids[i]) + " outside [0, " +
                     std::to_string(vocab_size) + ")");
  return grpc::Status::OK;
}

// Prefers a worker that has not failed this request; falls back to any healthy one (a transient
// failure must not make a request unservable).
inline std::optional<size_t> pick_excluding(
    const std::vector<std::string>& excluded,
    const std::function<std::optional<size_t>(const std::vector<std::string>&)>& pick) {
  if (auto i = pick(excluded)) return i;
  return pick({});
}

}  // namespace yoco
