// One HTTP/1.x request read from bytes as they arrive: Beast's parser plus the checks it lacks
// (docs/design.md, "OpenAI HTTP API": what the listener refuses). No sockets here, so the server
// (server/http_listener.cc) and the fuzz target (tests/fuzz/http_request_fuzz.cc) run the
// same code.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

namespace yoco {

struct HttpRequest {
  std::string method;                                       // "GET", "POST", ...
  std::string path;                                         // the target without its query
  std::map<std::string, std::string, std::less<>> headers;  // names lower-cased
  std::string body;
  std::string header(std::string_view name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
  }
};

class HttpRequestReader {
 public:
  explicit HttpRequestReader(size_t max_body_bytes, size_t max_header_bytes = 64 * 1024);
  ~HttpRequestReader();
  HttpRequestReader(const HttpRequestReader&) = delete;
  HttpRequestReader& operator=(const HttpRequestReader&) = delete;

  // Parses a prefix of `bytes` (the connection's unread input) and returns its length: the caller
  // drops that many bytes, and reads more when nothing was used and the request is not done. The
  // header is taken whole before any of the body, so the caller can answer `Expect: 100-continue`
  // between the two.
  size_t put(std::string_view bytes);

  bool got_some() const;     // part of a request has arrived (the end of input then cuts it short)
  bool header_done() const;  // the header is read and passed our checks
  bool done() const;         // a whole request: take() it
  // Non-zero once the request is refused: answer `status` with http_error_json(status, message())
  // and close the connection (its framing can no longer be trusted).
  int error_status() const { return error_status_; }
  const std::string& error_message() const { return error_message_; }

  // Valid once header_done().
  unsigned version() const;  // 10 or 11
  bool keep_alive() const;
  bool expects_continue() const;
  HttpRequest take();  // once done()

 private:
  void refuse(int status, std::string message);
  void check_header(std::string_view used, size_t unused);

  struct Impl;
  std::unique_ptr<Impl> impl_;
  size_t max_body_bytes_, max_header_bytes_;
  size_t header_bytes_ = 0;  // used by the parser so far
  bool header_checked_ = false;
  int error_status_ = 0;
  std::string error_message_;
};

// An error body in OpenAI's shape, {"error": {"message", "type", "param": null, "code": null}},
// valid JSON whatever `message` quotes (bytes that are not UTF-8 become U+FFFD).
std::string http_error_json(int status, std::string_view message);

}  // namespace yoco
