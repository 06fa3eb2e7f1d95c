// A circuit breaker around a remote backend (docs/design.md §5: the store being down or slow never fails
// or stalls a request). `failure_threshold` consecutive failures, or one call slower than
// `slow_call`, open it. While open, gets are misses and puts, deletes and set changes are
// dropped with UNAVAILABLE, at once and counted. After the cool-down the next caller runs a
// probe: put a random key with random bytes, read it back; only identical bytes close the
// breaker, anything else doubles the cool-down (up to max_cooldown). One probe at a time; the
// probe is bounded by the backend's own timeouts.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>

#include "kv_store/store.h"

namespace yoco {

struct CircuitBreakerOptions {
  int failure_threshold = 3;
  std::chrono::milliseconds slow_call{1000};
  std::chrono::milliseconds cooldown{1000};
  std::chrono::milliseconds max_cooldown{30000};
};

class CircuitBreaker final : public KvStore {
 public:
  CircuitBreaker(std::unique_ptr<KvStore> inner, CircuitBreakerOptions opt = {});

  KvGetResult get(std::string_view key) override;
  std::vector<KvGetResult> get_many(std::span<const std::string> keys) override;
  Status put(std::string_view key, std::string_view value, std::chrono::seconds ttl) override;
  Status del(std::string_view key) override;
  Status set_add(std::string_view set, std::string_view member) override;
  Status set_remove(std::string_view set, std::string_view member) override;
  Result<std::vector<std::string>> set_members(std::string_view set) override;
  std::string name() const override { return inner_->name(); }
  // The backend's counters plus this breaker's (dropped, trips, open).
  KvStoreStatsSnapshot stats() const override;

  bool is_open() const;
  KvStore& inner() { return *inner_; }

 private:
  using Clock = std::chrono::steady_clock;
  enum class State { kClosed, kOpen, kProbing };

  // True: the call may go to the backend (closed, or this caller ran a successful probe).
  bool admit();
  void record(const Status& st, Clock::duration elapsed);
  void trip_locked(Clock::time_point now);
  bool probe();
  static bool is_failure(const Status& st);

  std::unique_ptr<KvStore> inner_;
  const CircuitBreakerOptions opt_;
  mutable std::mutex mu_;
  State state_ = State::kClosed;
  int consecutive_failures_ = 0;
  Clock::time_point retry_at_{};
  std::chrono::milliseconds cooldown_;
};

}  // namespace yoco
