// Worker discovery for the router: a static list ("10.0.0.5:7001,10.0.0.6:7001") or a DNS
// name ("dns:prefill.yoco.svc.cluster.local:7001") that resolves to every pod of a Kubernetes
// headless Service; DNS targets are re-resolved by refresh() (the router calls it on a timer).
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"

namespace yoco {

struct Target {
  std::string host;  // a name for DNS targets, a literal address otherwise
  uint16_t port = 0;
  bool dns = false;
};

// Parses a comma-separated target list; errors name the bad entry.
Result<std::vector<Target>> parse_targets(const std::string& spec);

// "host:port" for IPv4 and names, "[addr]:port" for IPv6.
std::string format_address(const std::string& host, uint16_t port);

// Resolves a name to addresses (getaddrinfo by default; tests inject their own).
using Resolver = std::function<Result<std::vector<std::string>>(const std::string& host)>;
Result<std::vector<std::string>> resolve_with_getaddrinfo(const std::string& host);

class Discovery {
 public:
  explicit Discovery(std::vector<Target> targets, Resolver resolver = resolve_with_getaddrinfo)
      : targets_(std::move(targets)), resolver_(std::move(resolver)) {}
  // Resolves every target; a DNS name that fails to resolve keeps its previous addresses
  // (a DNS hiccup must not empty the worker set). Returns the first resolution error, if any.
  Status refresh();
  // The current address set, sorted and de-duplicated.
  std::vector<std::string> addresses() const;

 private:
  std::vector<Target> targets_;
  Resolver resolver_;
  mutable std::mutex mu_;
  std::vector<std::vector<std::string>> resolved_;  // per target
};

}  // namespace yoco
