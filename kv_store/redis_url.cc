// parse_redis_url: plain parsing, built with or without hiredis.
#include "kv_store/redis_store.h"
#include "kv_store/util.h"

namespace yoco {

namespace {

Result<int64_t> ranged(const std::string& v, const std::string& key, int64_t lo, int64_t hi) {
  YOCO_ASSIGN_OR_RETURN(int64_t n, kv::parse_int(v, "redis url: " + key));
  if (n < lo || n > hi)
    return invalid_argument("redis url: " + key + "=" + v + " not in [" + std::to_string(lo) + ", " +
                            std::to_string(hi) + "]");
  return n;
}

// host[:port] or [v6]:port; the port defaults to 6379.
Result<std::pair<std::string, int>> parse_host_port(std::string_view rest) {
  std::string_view host = rest, port;
  if (!rest.empty() && rest.front() == '[') {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos) return invalid_argument("redis url: unterminated [ in host");
    host = rest.substr(1, close - 1);
    std::string_view after = rest.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return invalid_argument("redis url: junk after ] in host");
      port = after.substr(1);
    }
  } else if (size_t colon = rest.rfind(':'); colon != std::string_view::npos) {
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
  }
  if (host.empty()) return invalid_argument("redis url: missing host");
  int p = 6379;
  if (!port.empty()) {
    YOCO_ASSIGN_OR_RETURN(int64_t v, ranged(std::string(port), "port", 1, 65535));
    p = static_cast<int>(v);
  }
  return std::make_pair(std::string(host), p);
}

}  // namespace

Result<RedisOptions> parse_redis_url(std::string_view url) {
  RedisOptions o;
  std::string_view rest;
  if (url.rfind("redis://", 0) == 0) {
    rest = url.substr(8);
  } else if (url.rfind("rediss://", 0) == 0) {
    rest = url.substr(9);
    o.tls = true;
  } else if (url.rfind("redis-cluster://", 0) == 0) {
    rest = url.substr(16);
    o.cluster = true;
  } else if (url.rfind("rediss-cluster://", 0) == 0) {
    rest = url.substr(17);
    o.cluster = true;
    o.tls = true;
  } else {
    return invalid_argument("redis url: must start with redis://, rediss://, redis-cluster:// or rediss-cluster://");
  }
  std::string_view query;
  if (size_t q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  std::string_view path;
  if (size_t slash = rest.find('/'); slash != std::string_view::npos) {
    path = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
  }
  if (size_t at = rest.rfind('@'); at != std::string_view::npos) {
    std::string_view userinfo = rest.substr(0, at);
    rest = rest.substr(at + 1);
    const size_t colon = userinfo.find(':');
    auto user = kv::percent_decode(userinfo.substr(0, colon));
    if (!user.ok()) return invalid_argument("redis url: user: " + user.status().message());
    o.user = *user;
    if (colon != std::string_view::npos) {
      auto pass = kv::percent_decode(userinfo.substr(colon + 1));
      if (!pass.ok()) return invalid_argument("redis url: password: bad %-escape");
      o.password = *pass;
    } else if (!o.user.empty()) {
      // redis://secret@host: a lone userinfo is the password, as redis-cli reads it.
      o.password = std::move(o.user);
      o.user.clear();
    }
  }
  if (o.cluster) {
    // host:port[,host:port...]: the seeds.
    while (true) {
      const size_t comma = rest.find(',');
      YOCO_ASSIGN_OR_RETURN(auto hp, parse_host_port(rest.substr(0, comma)));
      o.seeds.push_back(std::move(hp));
      if (comma == std::string_view::npos) break;
      rest = rest.substr(comma + 1);
    }
    o.host = o.seeds[0].first;
    o.port = o.seeds[0].second;
  } else {
    YOCO_ASSIGN_OR_RETURN(auto hp, parse_host_port(rest));
    o.host = std::move(hp.first);
    o.port = hp.second;
  }
  if (!path.empty()) {
    YOCO_ASSIGN_OR_RETURN(int64_t db, ranged(std::string(path), "database (/db)", 0, 1 << 20));
    o.db = static_cast<int>(db);
  }
  YOCO_ASSIGN_OR_RETURN(auto params, kv::parse_query(query));
  for (const auto& [key, value] : params) {
    if (key == "timeout_ms") {
      YOCO_ASSIGN_OR_RETURN(int64_t v, ranged(value, key, 1, 600000));
      o.command_timeout = std::chrono::milliseconds(v);
    } else if (key == "connect_timeout_ms") {
      YOCO_ASSIGN_OR_RETURN(int64_t v, ranged(value, key, 1, 600000));
      o.connect_timeout = std::chrono::milliseconds(v);
    } else if (key == "pool") {
      YOCO_ASSIGN_OR_RETURN(int64_t v, ranged(value, key, 1, 256));
      o.pool_size = static_cast<int>(v);
    } else if (key == "chunk_bytes" || key == "max_value_bytes") {
      auto v = kv::parse_byte_size(value);
      if (!v.ok()) return invalid_argument("redis url: " + key + ": " + v.status().message());
      const int64_t lo = key == "chunk_bytes" ? 1024 : 1,
                    hi = key == "chunk_bytes" ? (int64_t{256} << 20) : (int64_t{1} << 40);
      if (*v < lo || *v > hi)
        return invalid_argument("redis url: " + key + "=" + value + " not in [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "] bytes");
      (key == "chunk_bytes" ? o.chunk_bytes : o.max_value_bytes) = *v;
    } else if (key == "prefix") {
      o.key_prefix = value;
    } else if (key == "tls") {
      auto v = kv::parse_bool(value, "redis url: tls");
      if (!v.ok()) return v.status();
      o.tls = o.tls || *v;
    } else if (key == "tls_ca" || key == "tls_cert" || key == "tls_key" || key == "tls_server_name") {
      if (value.empty()) return invalid_argument("redis url: " + key + " is empty");
      (key == "tls_ca"     ? o.tls_options.ca_file
       : key == "tls_cert" ? o.tls_options.cert_file
       : key == "tls_key"  ? o.tls_options.key_file
                           : o.tls_options.server_name) = value;
    } else if (key == "tls_verify") {
      auto v = kv::parse_bool(value, "redis url: tls_verify");
      if (!v.ok()) return v.status();
      o.tls_options.verify = *v;
    } else if (key == "breaker") {
      auto v = kv::parse_bool(value, "redis url: breaker");
      if (!v.ok()) return v.status();
      o.breaker = *v;
    } else if (key == "breaker_failures") {
      YOCO_ASSIGN_OR_RETURN(int64_t v, ranged(value, key, 1, 1000));
      o.breaker_options.failure_threshold = static_cast<int>(v);
    } else if (key == "breaker_slow_ms") {
      YOCO_ASSIGN_OR_RETURN(int64_t v, ranged(value, key, 1, 600000));
      o.breaker_options.slow_call = std::chrono::milliseconds(v);
    } else if (key == "breaker_cooldown_ms") {
      YOCO_ASSIGN_OR_RETURN(int64_t v, ranged(value, key, 1, 3600000));
      o.breaker_options.cooldown = std::chrono::milliseconds(v);
    } else if (key == "breaker_max_cooldown_ms") {
      YOCO_ASSIGN_OR_RETURN(int64_t v, ranged(value, key, 1, 3600000));
      o.breaker_options.max_cooldown = std::chrono::milliseconds(v);
    } else {
      return invalid_argument("redis url: unknown parameter '" + key + "'");
    }
  }
  if (o.breaker_options.max_cooldown < o.breaker_options.cooldown)
    o.breaker_options.max_cooldown = o.breaker_options.cooldown;
  return o;
}

}  // namespace yoco
