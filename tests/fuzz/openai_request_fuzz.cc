// libFuzzer target: the OpenAI-compatible API's request decoding on arbitrary bytes, as the
// router's HTTP handler runs it (router/openai_request.h): the body's JSON, then the completions
// and the chat parsers (tools included) and the message checks. Whatever is accepted must become
// a GenerateRequest that protobuf serializes and parses back (every string UTF-8), and every
// refusal must be an error body that is valid JSON. Built with clang -fsanitize=fuzzer,address,undefined when
// YOCO_FUZZ=ON; the same entry point is replayed over tests/fuzz/corpus/openai_request by a ctest
// in every build.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <variant>

#include "common/json.h"
#include "router/openai_request.h"
#include "tokenizer/utf8.h"

namespace {

void check_error(const yoco::ApiError& e) {
  const std::string body = e.body();
  if (!yoco::utf8::is_valid(body) || !yoco::Json::parse(body).ok()) std::abort();  // error bodies are JSON
  if (e.http_status < 400 || e.http_status > 499) std::abort();                    // a bad request is the client's
}

void check_request(const yoco::OpenAiRequest& r) {
  std::string wire;
  if (!r.base.SerializeToString(&wire)) std::abort();
  yoco::v1::GenerateRequest back;
  if (!back.ParseFromString(wire)) std::abort();  // fails on a string that is not UTF-8
  for (const auto& p : r.prompts)
    if (p.text && !yoco::utf8::is_valid(*p.text)) std::abort();
}

template <class Parse>
void run(const yoco::Json& body, Parse parse) {
  auto r = parse(body);
  if (auto* e = std::get_if<yoco::ApiError>(&r)) return check_error(*e);
  check_request(std::get<yoco::OpenAiRequest>(r));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto body = yoco::parse_body(text);
  if (auto* e = std::get_if<yoco::ApiError>(&body)) {
    check_error(*e);
    return 0;
  }
  const yoco::Json& j = std::get<yoco::Json>(body);
  run(j, yoco::parse_completion_request);
  run(j, [&](const yoco::Json& b) { return yoco::parse_chat_request(b, text); });
  if (const yoco::Json* m = j.find("messages")) {
    auto msgs = yoco::normalize_messages(*m);
    if (auto* e = std::get_if<yoco::ApiError>(&msgs)) check_error(*e);
  }
  auto extra = yoco::template_extra(j);
  if (auto* e = std::get_if<yoco::ApiError>(&extra)) check_error(*e);
  return 0;
}
