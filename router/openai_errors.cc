#include "router/openai_errors.h"

#include <cctype>

#include "tokenizer/utf8.h"

namespace yoco {

std::string valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    // Well-formed per Unicode (no overlongs, surrogates or code points past U+10FFFF), which is
    // what JSON parsers and protobuf accept; each other byte becomes one U+FFFD.
    if (const size_t n = utf8::char_len(s, i); n > 0) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

Json ApiError::json() const {
  Json::Object e{{"message", valid_utf8(message)},
                 {"type", type},
                 {"param", param.empty() ? Json() : Json(valid_utf8(param))},
                 {"code", code.empty() ? Json() : Json(code)}};
  return Json::Object{{"error", std::move(e)}};
}

ApiError bad_param(const std::string& param, const std::string& message) {
  return {400, param + ": " + message, "invalid_request_error", param, ""};
}

ApiError not_found_error(const std::string& message, const std::string& param, const std::string& code) {
  return {404, message, "not_found_error", param, code};
}

int http_status_of(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return 200;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::OUT_OF_RANGE:
      return 400;
    case grpc::StatusCode::UNAUTHENTICATED:
      return 401;
    case grpc::StatusCode::PERMISSION_DENIED:
      return 403;
    case grpc::StatusCode::NOT_FOUND:
      return 404;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return 429;
    case grpc::StatusCode::CANCELLED:
      return 499;
    case grpc::StatusCode::UNAVAILABLE:
      return 503;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return 504;
    default:
      return 500;
  }
}

namespace {

const char* type_of(int http) {
  switch (http) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 429:
      return "rate_limit_error";
    case 503:
      return "service_unavailable";
    default:
      return "server_error";
  }
}

const char* code_of(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::UNAUTHENTICATED:
      return "invalid_api_key";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "rate_limit_exceeded";
    default:
      return "";
  }
}

}  // namespace

std::string param_of_message(const std::string& message) {
  const size_t colon = message.find(": ");
  if (colon == std::string::npos || colon == 0) return "";
  std::string path = message.substr(0, colon);
  for (char c : path)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '[' && c != ']') return "";
  if (path.rfind("sampling.", 0) == 0) path = path.substr(9);
  if (path.rfind("input", 0) == 0) return "prompt";  // Score's fields: an echo request's prompt
  return path.substr(0, path.find_first_of(".["));
}

ApiError from_grpc(const grpc::Status& st) {
  // gRPC's own message-size limit is not a rate limit: a client must not retry it as a 429.
  if (st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED &&
      st.error_message().find("message larger than max") != std::string::npos)
    return {413, "the request is too large: " + st.error_message(), "invalid_request_error", "", "request_too_large"};
  ApiError e;
  e.http_status = http_status_of(st.error_code());
  e.message = st.error_message();
  e.type = type_of(e.http_status);
  e.code = code_of(st.error_code());
  if (e.http_status == 400 || e.http_status == 404) e.param = param_of_message(st.error_message());
  return e;
}

}  // namespace yoco
