// Builds a KV store from a spec string (the services' --kv_store flag). A comma-separated list
// of tiers, fastest first; more than one makes a TieredStore:
//   memory[:SIZE]                      e.g. memory:256MiB (default 256MiB)
//   dir:PATH[?max_bytes=SIZE&fsync=0|1&low_watermark=0.9]   e.g. dir:///var/cache/yoco?max_bytes=10GiB
//   redis://[user:password@]host[:port][/db][?...]          see parse_redis_url (redis_store.h)
//   redis-cluster://[user:password@]host:port[,host:port...][?...]   Redis Cluster (its seeds' commas
//                                      do not split tiers: a tier ends where a part starts a new one)
// Remote tiers get a CircuitBreaker unless their URL says breaker=0 (a cluster: one per node). Errors are
// INVALID_ARGUMENT naming the tier ("kv store spec, tier 2 'foo': ...").
#pragma once

#include <memory>
#include <string>

#include "kv_store/store.h"

namespace yoco {

Result<std::unique_ptr<KvStore>> make_kv_store(const std::string& spec);

}  // namespace yoco
