// Redis Cluster for the redis backend (docs/design.md §5, Redis Cluster). The executor keeps the
// slot map (CLUSTER SLOTS: masters only, so replicas are never written or read), one connection
// pool per node, and runs a batch grouped per node, pipelined. MOVED updates the map and retries
// at the named node (the whole map is reloaded before the next batch); ASK retries once at the
// named node after ASKING, without touching the map; TRYAGAIN retries after a short pause.
//
// Fail-over costs no request: each node has its own breaker (the store's breaker_* options).
// Failures or one slow call open it; while open, that node's gets are misses at once and its
// writes are dropped with UNAVAILABLE, the other nodes serve as usual. Every failure, and every
// call dropped by an open breaker, marks the map stale: it is reloaded (at most every 100 ms) from
// any reachable node, so once a replica is promoted its slots route to it and hits resume. After
// the cool-down one call probes the node (success closes its breaker).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kv_store/circuit_breaker.h"
#include "kv_store/redis_exec.h"

namespace yoco::redis {

constexpr int kClusterSlots = 16384;

// CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), as Redis Cluster defines it.
uint16_t crc16_xmodem(std::string_view data);
// The key's hash slot: CRC16 of the hash tag (the text between the first '{' and the next '}',
// if non-empty) or of the whole key, modulo 16384.
int key_slot(std::string_view key);

// breaker: the per-node breaker's options; nullopt: no breaker (a down node fails its calls).
std::unique_ptr<Executor> make_cluster_executor(std::vector<std::pair<std::string, int>> seeds,
                                                const ConnectOptions& opt,
                                                std::optional<CircuitBreakerOptions> breaker);

}  // namespace yoco::redis
