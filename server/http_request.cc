#include "server/http_request.h"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http.hpp>
#include <cstdio>

namespace yoco {

namespace beast = boost::beast;
namespace http = beast::http;

struct HttpRequestReader::Impl {
  http::request_parser<http::string_body> parser;
};

HttpRequestReader::HttpRequestReader(size_t max_body_bytes, size_t max_header_bytes)
    : impl_(std::make_unique<Impl>()), max_body_bytes_(max_body_bytes), max_header_bytes_(max_header_bytes) {
  impl_->parser.header_limit(static_cast<uint32_t>(max_header_bytes));
  impl_->parser.body_limit(max_body_bytes);
  // Not eager: put() stops after the header, so its bytes are known (check_header) and
  // `Expect: 100-continue` is answered before the body is waited for.
  impl_->parser.eager(false);
}

HttpRequestReader::~HttpRequestReader() = default;

size_t HttpRequestReader::put(std::string_view bytes) {
  auto& p = impl_->parser;
  if (error_status_ != 0 || p.is_done()) return 0;
  if (header_checked_) p.eager(true);
  beast::error_code ec;
  const size_t n = p.put(boost::asio::buffer(bytes.data(), bytes.size()), ec);
  if (ec == http::error::need_more) ec = {};
  if (ec == http::error::body_limit)
    refuse(413, "request body larger than " + std::to_string(max_body_bytes_) + " bytes");
  else if (ec == http::error::header_limit)
    refuse(431, "request header larger than " + std::to_string(max_header_bytes_) + " bytes");
  else if (ec) refuse(400, "malformed HTTP request: " + ec.message());
  else if (!header_checked_) check_header(bytes.substr(0, n), bytes.size() - n);
  return n;
}

// What Beast accepts and we do not. Called with each run of header bytes the parser used (whole
// lines: a field is used only once the byte after its CRLF shows it is not folded) and the
// unused rest of the input.
void HttpRequestReader::check_header(std::string_view used, size_t unused) {
  // Obsolete line folding (RFC 7230 §3.2.4): Beast joins the lines; a proxy in front may not, and
  // two readings of one header are how requests get smuggled.
  const bool after_line = header_bytes_ > 0 && !used.empty() && (used[0] == ' ' || used[0] == '\t');
  header_bytes_ += used.size();
  if (after_line) return refuse(400, "obsolete line folding in a header (obs-fold)");
  for (size_t i = used.find('\n'); i != std::string_view::npos && i + 1 < used.size(); i = used.find('\n', i + 1))
    if (used[i + 1] == ' ' || used[i + 1] == '\t') return refuse(400, "obsolete line folding in a header (obs-fold)");
  // Beast bounds the header bytes of one put(), not of the header: a header used a few fields at a
  // time could grow past it.
  const bool done = impl_->parser.is_header_done();
  if (done ? header_bytes_ > max_header_bytes_ : header_bytes_ + unused >= max_header_bytes_)
    return refuse(431, "request header larger than " + std::to_string(max_header_bytes_) + " bytes");
  if (!done) return;
  header_checked_ = true;
  const auto& h = impl_->parser.get();
  if (h.version() != 10 && h.version() != 11) return refuse(505, "HTTP version not supported: only HTTP/1.0 and 1.1");
  // Only `chunked` alone: with another coding before it (gzip, chunked) the body we would hand on
  // is still encoded, and one after it (chunked, gzip) leaves the body's end to a guess.
  std::string codings;
  int fields = 0;
  for (const auto& f : h) {
    if (f.name() != http::field::transfer_encoding) continue;
    codings += (fields++ ? ", " : "") + std::string(f.value());
  }
  if (fields > 0 && (fields > 1 || !beast::iequals(codings, "chunked")))
    return refuse(400, "Transfer-Encoding \"" + codings + "\" is not supported: only chunked");
}

void HttpRequestReader::refuse(int status, std::string message) {
  error_status_ = status;
  error_message_ = std::move(message);
}

bool HttpRequestReader::got_some() const { return impl_->parser.got_some(); }
bool HttpRequestReader::header_done() const { return header_checked_ && error_status_ == 0; }
bool HttpRequestReader::done() const { return header_done() && impl_->parser.is_done(); }
unsigned HttpRequestReader::version() const { return impl_->parser.get().version(); }
bool HttpRequestReader::keep_alive() const { return impl_->parser.get().keep_alive(); }

bool HttpRequestReader::expects_continue() const {
  return version() >= 11 && beast::iequals(impl_->parser.get()[http::field::expect], "100-continue");
}

HttpRequest HttpRequestReader::take() {
  http::request<http::string_body> raw = impl_->parser.release();
  HttpRequest req;
  req.method = std::string(raw.method_string());
  req.path = std::string(raw.target());
  if (auto q = req.path.find('?'); q != std::string::npos) req.path.resize(q);
  for (const auto& f : raw) {
    std::string name(f.name_string());
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    req.headers[name] = std::string(f.value());
  }
  req.body = std::move(raw.body());
  return req;
}

namespace {

// The length of the well-formed UTF-8 sequence at s[i] (RFC 3629: no overlong forms, no
// surrogates, nothing past U+10FFFF), or 0.
size_t utf8_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0u; };
  const auto cont = [&](size_t k) { return (b(k) & 0xC0) == 0x80; };
  const unsigned c = b(0);
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    const unsigned lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    return b(1) >= lo && b(1) <= hi && cont(2) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    const unsigned lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    return b(1) >= lo && b(1) <= hi && cont(2) && cont(3) ? 4 : 0;
  }
  return 0;
}

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = utf8_length(s, i);
    if (n == 0) {
      out += "\\ufffd";
      ++i;
      continue;
    }
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out.append(s.substr(i, n));
    }
    i += n;
  }
  return out + "\"";
}

}  // namespace

std::string http_error_json(int status, std::string_view message) {
  // What the client sent is at fault unless the server failed (500) or is full (503).
  const char* type = status == 503 ? "service_unavailable" : status == 500 ? "server_error" : "invalid_request_error";
  return "{\"error\":{\"message\":" + json_string(message) + ",\"type\":\"" + type +
         "\",\"param\":null,\"code\":null}}";
}

}  // namespace yoco
