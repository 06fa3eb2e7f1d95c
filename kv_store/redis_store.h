// Redis backend (hiredis). Values are split into chunks far below Redis's 512 MB value limit:
//   PREFIX KEY                          manifest: magic "YKVRMAN1", u32 version, u32 chunk count,
//                                       u64 value bytes, u64 chunk bytes, u64 writer id,
//                                       u32 CRC32C of the value, u32 CRC32C of the manifest
//   PREFIX KEY ":" WRITER ":" i         chunk i, WRITER = the writer id in 16 hex chars
// A put pipelines every chunk and then the manifest (SET ... PX ttl on each part), so a reader
// that sees a manifest finds its chunks; the chunks of the value it replaced are deleted
// afterwards (SET ... GET names them atomically; before Redis 6.2 they are left to their TTL). A read checks every chunk's length and
// the whole value's CRC: a damaged or missing chunk, or chunks of two writers mixed, is a miss,
// counted as corrupt, and the object is deleted (only if its manifest is still the one read).
// get_many pipelines all manifests, then all chunks. A small pool of connections with connect
// and command timeouts; AUTH (user + password) and SELECT.
//
// Redis Cluster (redis-cluster://, kv_store/redis_cluster.h): the same objects, but the key
// is a hash tag, PREFIX "{" KEY "}" (chunks: PREFIX "{" KEY "}:" WRITER ":" i), so a value's
// manifest and chunks live in one slot. One server keeps the untagged names, so existing stores
// stay valid.
//
// TLS (rediss://) is OpenSSL on our own socket layer (kv_store/redis_conn.h): hiredis, 0.14 on
// Debian 12, has no TLS and only parses the replies. The server's certificate is verified against
// tls_ca (or the system's trust store) and the host name (or tls_server_name); tls_cert + tls_key
// give a client certificate for servers that require one (Redis's default tls-auth-clients yes).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kv_store/circuit_breaker.h"
#include "kv_store/store.h"

namespace yoco {

struct RedisTlsOptions {
  std::string ca_file;      // PEM bundle of trusted CAs; empty: the system's default trust store
  std::string cert_file;    // client certificate chain (PEM), for servers with tls-auth-clients
  std::string key_file;     // its private key (PEM, unencrypted)
  std::string server_name;  // the name the certificate must carry, also sent as SNI; empty: host
  bool verify = true;       // false: encrypt without checking the server's certificate
};

struct RedisOptions {
  std::string host = "127.0.0.1";
  int port = 6379;
  // redis-cluster:// (docs/design.md §5, Redis Cluster): the seed nodes (host, port); the slot map
  // comes from the cluster. Keys carry a hash tag; the breaker is per node (breaker_options).
  bool cluster = false;
  std::vector<std::pair<std::string, int>> seeds;
  std::string user;      // ACL user (Redis 6+): AUTH user password; empty: AUTH password
  std::string password;  // empty: no AUTH
  int db = 0;
  std::chrono::milliseconds connect_timeout{500};
  std::chrono::milliseconds command_timeout{500};  // per socket read/write, and pool waits
  int pool_size = 4;
  int64_t chunk_bytes = int64_t{1} << 20;
  int64_t max_value_bytes = int64_t{1} << 30;  // larger puts are refused, larger manifests ignored
  std::string key_prefix = "yoco:";
  bool tls = false;
  RedisTlsOptions tls_options;  // used only with tls
  // make_kv_store wraps the store in a CircuitBreaker with these options unless breaker = false;
  // a cluster store (make_redis_store too) keeps one such breaker per node inside instead.
  bool breaker = true;
  CircuitBreakerOptions breaker_options;
};

// redis://[user:password@]host[:port][/db][?key=value&...]  (rediss:// sets tls)
// Query keys: timeout_ms, connect_timeout_ms, pool, chunk_bytes (a size: 1MiB), max_value_bytes,
// prefix, tls (0/1), tls_ca, tls_cert, tls_key (file paths), tls_server_name, tls_verify (0/1),
// breaker (0/1), breaker_failures, breaker_slow_ms, breaker_cooldown_ms, breaker_max_cooldown_ms. User and password are %-decoded. INVALID_ARGUMENT names the part.
// redis-cluster://[user:password@]host:port[,host:port...][?...] (rediss-cluster:// sets tls): the
// same parameters; the hosts are seeds, any one reachable node is enough to load the slot map.
Result<RedisOptions> parse_redis_url(std::string_view url);

// A Redis backend without a breaker (a cluster: with its per-node breakers unless breaker =
// false). Connects lazily: a Redis that is down makes calls fail with UNAVAILABLE (a cluster's
// gets: misses), not the construction; TLS files are read here (INVALID_ARGUMENT naming the
// parameter). UNIMPLEMENTED when built without hiredis (or, for tls, without OpenSSL). A cluster
// has only database 0 and its prefix may not contain '{' or '}'.
// Ignores SIGPIPE process-wide if it still has its default action (OpenSSL writes with
// write(2), and a peer that vanished must not kill the process).
Result<std::unique_ptr<KvStore>> make_redis_store(const RedisOptions& opt);

}  // namespace yoco
