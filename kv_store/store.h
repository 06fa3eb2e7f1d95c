// The KV store backend interface (docs/design.md §5, docs/architecture.md, rule 7): binary-safe values under string keys,
// plus named sets of short strings for the document index. Implementations: memory_store.h,
// dir_store.h, redis_store.h, tiered_store.h, and the circuit_breaker.h decorator;
// make_kv_store (factory.h) builds a stack from a spec string.
//
// Contract: a miss is OK(nullopt); a non-OK Status is a failure of the backend (UNAVAILABLE or
// DEADLINE_EXCEEDED for remote ones). A backend that finds a value damaged deletes it, counts it
// as corrupt and reports a miss. Implementations are thread-safe and never throw.
#pragma once

#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "kv_store/stats.h"

namespace yoco {

using KvValue = std::optional<std::string>;
using KvGetResult = Result<KvValue>;

inline KvGetResult kv_miss() { return KvValue(); }

struct KvTierStats {
  std::string name;
  KvStoreStatsSnapshot stats;
};

class KvStore {
 public:
  virtual ~KvStore() = default;

  virtual KvGetResult get(std::string_view key) = 0;
  // One result per key, in order. The default loops over get; remote backends batch.
  virtual std::vector<KvGetResult> get_many(std::span<const std::string> keys);
  // ttl 0: no expiry (the backend's eviction still applies).
  virtual Status put(std::string_view key, std::string_view value, std::chrono::seconds ttl) = 0;
  // Deleting an absent key is OK.
  virtual Status del(std::string_view key) = 0;

  // Named sets (the document index): add and remove are idempotent.
  virtual Status set_add(std::string_view set, std::string_view member) = 0;
  virtual Status set_remove(std::string_view set, std::string_view member) = 0;
  virtual Result<std::vector<std::string>> set_members(std::string_view set) = 0;

  virtual std::string name() const = 0;
  // This store's counters (a stack: what its callers saw).
  virtual KvStoreStatsSnapshot stats() const { return stats_.snapshot(); }
  // Per backend (a stack lists its tiers; a single backend itself).
  virtual std::vector<KvTierStats> tier_stats() const { return {{name(), stats()}}; }

 protected:
  KvStoreStats stats_;
};

// Status helpers for the codes status.h has no shorthand for.
inline Status kv_unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status kv_deadline_exceeded(std::string m) { return {StatusCode::kDeadlineExceeded, std::move(m)}; }
inline Status kv_unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status kv_resource_exhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }

}  // namespace yoco
