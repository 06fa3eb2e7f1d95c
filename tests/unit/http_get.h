// A plain-socket HTTP GET for tests that read /metrics or a Prometheus API on 127.0.0.1.
#pragma once

#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <string>

namespace yoco::test {

// GET to 127.0.0.1:port; the whole response, status line and headers included ("" on failure).
inline std::string http_get(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    const std::string req = "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if (write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[4096];
      ssize_t n;
      while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, n);
    }
  }
  close(fd);
  return out;
}

// Only the body of http_get's answer ("" on failure).
inline std::string http_get_body(int port, const std::string& path) {
  const std::string out = http_get(port, path);
  const auto body = out.find("\r\n\r\n");
  return body == std::string::npos ? "" : out.substr(body + 4);
}

// Any request as raw bytes (method, headers, body) to 127.0.0.1:port; the whole response until the
// server closes ("" on failure). `timeout_s` bounds each read.
inline std::string http_raw(int port, const std::string& request, int timeout_s = 30) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  timeval tv{timeout_s, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, n);
  }
  close(fd);
  return out;
}

// A POST of `body` (JSON) with `headers` ("Name: value\r\n" lines), Connection: close.
inline std::string http_post(int port, const std::string& path, const std::string& body,
                             const std::string& headers = "") {
  return http_raw(port, "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" +
                            "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                            "\r\n" + headers + "\r\n" + body);
}

// The status code of a raw response (0 if none).
inline int http_status(const std::string& response) {
  if (response.rfind("HTTP/1.", 0) != 0 || response.size() < 12) return 0;
  return std::stoi(response.substr(9, 3));
}

// The body of a raw response, chunked transfer decoded.
inline std::string http_body(const std::string& response) {
  const auto head_end = response.find("\r\n\r\n");
  if (head_end == std::string::npos) return "";
  std::string head = response.substr(0, head_end), body = response.substr(head_end + 4);
  for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (head.find("transfer-encoding: chunked") == std::string::npos) return body;
  std::string out;
  size_t pos = 0;
  while (pos < body.size()) {
    const auto eol = body.find("\r\n", pos);
    if (eol == std::string::npos) break;
    const size_t n = std::stoul(body.substr(pos, eol - pos), nullptr, 16);
    if (n == 0) break;
    out += body.substr(eol + 2, n);
    pos = eol + 2 + n + 2;
  }
  return out;
}

}  // namespace yoco::test
