// Errors of the OpenAI-compatible HTTP API (docs/design.md, OpenAI HTTP API): the body OpenAI
// clients parse ({"error": {"message", "type", "param", "code"}}) and the one mapping from the
// router's gRPC status codes to HTTP statuses, so every endpoint answers a failure the same way.
#pragma once

#include <grpcpp/grpcpp.h>

#include <string>
#include <string_view>

#include "common/json.h"

namespace yoco {

// Text for a JSON answer (an error's message, a token, a log-prob's text): every byte that does not
// start a well-formed UTF-8 character becomes one U+FFFD (a token may end inside a character).
std::string valid_utf8(std::string_view bytes);

struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the request field to blame; empty: null
  std::string code;   // empty: null
  Json json() const;  // {"error": {...}}
  std::string body() const { return json().dump(); }
};

// 400 naming the request field `param` ("max_tokens: must be an integer >= 0").
ApiError bad_param(const std::string& param, const std::string& message);
ApiError not_found_error(const std::string& message, const std::string& param = "", const std::string& code = "");

// The HTTP status of a gRPC code: INVALID_ARGUMENT/FAILED_PRECONDITION/OUT_OF_RANGE 400,
// UNAUTHENTICATED 401, PERMISSION_DENIED 403, NOT_FOUND 404, RESOURCE_EXHAUSTED 429,
// UNAVAILABLE 503, DEADLINE_EXCEEDED 504, CANCELLED 499 (the client went away), others 500.
int http_status_of(grpc::StatusCode code);
// The error of a failed router call; param is the OpenAI field the message starts with
// ("sampling.top_p: ..." -> "top_p", "prompt.tokens[3]: ..." -> "prompt").
ApiError from_grpc(const grpc::Status& st);
// The OpenAI parameter a router field path names ("" when the message names none).
std::string param_of_message(const std::string& message);

}  // namespace yoco
