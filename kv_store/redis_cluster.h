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

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kv_store/circuit_breaker.h"
#include "kv_store/redis_exec.h"
#include "kv_store/redis_slot.h"

namespace yoco::redis {

// breaker: the per-node breaker's options; nullopt: no breaker (a down node fails its calls).
std::unique_ptr<Executor> make_cluster_executor(std::vector<std::pair<std::string, int>> seeds,
                                                const ConnectOptions& opt,
                                                std::optional<CircuitBreakerOptions> breaker);

}  // namespace yoco::redis
