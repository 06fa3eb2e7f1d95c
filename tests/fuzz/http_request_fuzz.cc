// libFuzzer target: arbitrary bytes as what one connection sends, through the router's HTTP
// request reader (server/http_request.h: Beast's parser plus our checks), requests in turn until
// one is refused or the bytes end. The bytes arrive once whole and once in small pieces, as a
// socket may split them: both readings must agree (a request read two ways is how requests get
// smuggled), and every refusal's body must be valid JSON. Built with clang
// -fsanitize=fuzzer,address,undefined when YOCO_FUZZ=ON; the same entry point is replayed over
// tests/fuzz/corpus/http_request by a ctest in every build.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/json.h"
#include "server/http_request.h"

namespace {

constexpr size_t kMaxBody = 64 * 1024, kMaxHeader = 8 * 1024;

// The requests a connection reads from the bytes, until one is refused or the bytes end. How the
// last one ends may differ between the two readings (a request cut short, refused early from
// half its header, or refused for its size before a bad field is seen), the requests may not.
std::string read_all(std::string_view input, size_t piece) {
  std::string requests, pending;
  auto reader = std::make_unique<yoco::HttpRequestReader>(kMaxBody, kMaxHeader);
  size_t fed = 0;
  while (true) {
    const size_t used = reader->put(pending);
    pending.erase(0, used);
    if (reader->error_status() != 0) {
      const std::string body = yoco::http_error_json(reader->error_status(), reader->error_message());
      if (!yoco::Json::parse(body).ok()) __builtin_trap();
      return requests;
    }
    if (reader->done()) {
      const yoco::HttpRequest req = reader->take();
      if (req.body.size() > kMaxBody) __builtin_trap();
      requests += req.method + " " + req.path + " " + std::to_string(req.headers.size()) + " " +
                  std::to_string(std::hash<std::string>()(req.body)) + "\n";
      reader = std::make_unique<yoco::HttpRequestReader>(kMaxBody, kMaxHeader);
      continue;
    }
    if (used > 0 && !pending.empty()) continue;
    if (fed == input.size()) return requests;
    const size_t n = std::min(piece, input.size() - fed);
    pending.append(input.substr(fed, n));
    fed += n;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::string whole = read_all(input, input.size() + 1);
  const std::string pieces = read_all(input, 1 + size % 7);
  if (whole != pieces) __builtin_trap();
  return 0;
}
