#include "router/discovery.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <charconv>
#include <set>

namespace yoco {

namespace {

Result<Target> parse_one(std::string item) {
  Target t;
  if (item.rfind("dns:", 0) == 0) {
    t.dns = true;
    item = item.substr(4);
    while (item.rfind("/", 0) == 0) item = item.substr(1);  // accept dns:/// as gRPC writes it
  }
  size_t colon;
  if (!item.empty() && item[0] == '[') {
    const size_t close = item.find(']');
    if (close == std::string::npos || close + 1 >= item.size() || item[close + 1] != ':')
      return invalid_argument("target \"" + item + "\": expected [ipv6]:port");
    t.host = item.substr(1, close - 1);
    colon = close + 1;
  } else {
    colon = item.rfind(':');
    if (colon == std::string::npos || colon == 0)
      return invalid_argument("target \"" + item + "\": expected host:port");
    t.host = item.substr(0, colon);
  }
  const std::string port = item.substr(colon + 1);
  int p = 0;
  auto r = std::from_chars(port.data(), port.data() + port.size(), p);
  if (port.empty() || r.ec != std::errc() || r.ptr != port.data() + port.size() || p <= 0 || p > 65535)
    return invalid_argument("target \"" + item + "\": bad port \"" + port + "\"");
  t.port = static_cast<uint16_t>(p);
  return t;
}

}  // namespace

Result<std::vector<Target>> parse_targets(const std::string& spec) {
  std::vector<Target> out;
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t end = spec.find(',', pos);
    if (end == std::string::npos) end = spec.size();
    std::string item = spec.substr(pos, end - pos);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) {
      YOCO_ASSIGN_OR_RETURN(Target t, parse_one(item));
      out.push_back(std::move(t));
    }
    pos = end + 1;
  }
  if (out.empty()) return invalid_argument("no worker targets given");
  return out;
}

std::string format_address(const std::string& host, uint16_t port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

Result<std::vector<std::string>> resolve_with_getaddrinfo(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0) return Status(StatusCode::kUnavailable, "resolving \"" + host + "\": " + gai_strerror(rc));
  std::set<std::string> addrs;
  for (addrinfo* a = res; a; a = a->ai_next) {
    char buf[INET6_ADDRSTRLEN] = {};
    const void* src = a->ai_family == AF_INET
                          ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr)
                          : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr);
    if (inet_ntop(a->ai_family, src, buf, sizeof buf)) addrs.insert(buf);
  }
  freeaddrinfo(res);
  return std::vector<std::string>(addrs.begin(), addrs.end());
}

Status Discovery::refresh() {
  std::vector<std::vector<std::string>> fresh(targets_.size());
  Status first_error;
  for (size_t i = 0; i < targets_.size(); ++i) {
    const Target& t = targets_[i];
    if (!t.dns) {
      fresh[i].push_back(format_address(t.host, t.port));
      continue;
    }
    auto hosts = resolver_(t.host);
    if (!hosts.ok()) {
      if (first_error.ok()) first_error = hosts.status();
      std::lock_guard<std::mutex> lock(mu_);
      if (i < resolved_.size()) fresh[i] = resolved_[i];  // keep the last good answer
      continue;
    }
    for (const auto& h : hosts.value()) fresh[i].push_back(format_address(h, t.port));
  }
  std::lock_guard<std::mutex> lock(mu_);
  resolved_ = std::move(fresh);
  return first_error;
}

std::vector<std::string> Discovery::addresses() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::string> all;
  for (const auto& r : resolved_) all.insert(r.begin(), r.end());
  return {all.begin(), all.end()};
}

}  // namespace yoco
