// Counters of one KV store backend (docs/design.md §6: the services export them as
// yoco_kv_store_{hits,misses,errors}_total and friends). Lock-free; snapshot() for export.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace yoco {

struct KvStoreStatsSnapshot {
  uint64_t hits = 0;
  uint64_t misses = 0;         // includes corrupt, expired and dropped reads
  uint64_t errors = 0;         // failed calls (backend down, timeouts, I/O)
  uint64_t corrupt = 0;        // values that failed validation (deleted, reported as misses)
  uint64_t bytes_read = 0;     // value bytes returned by hits
  uint64_t bytes_written = 0;  // value bytes accepted by puts
  uint64_t dropped = 0;        // calls skipped while a circuit breaker was open
  uint64_t breaker_trips = 0;  // closed → open transitions
  uint64_t breaker_open = 0;   // breakers open now (a gauge)

  KvStoreStatsSnapshot& operator+=(const KvStoreStatsSnapshot& o);
};

class KvStoreStats {
 public:
  void hit(uint64_t bytes) {
    hits_.fetch_add(1, kRelaxed);
    bytes_read_.fetch_add(bytes, kRelaxed);
  }
  void miss() { misses_.fetch_add(1, kRelaxed); }
  void error() { errors_.fetch_add(1, kRelaxed); }
  void corrupt() { corrupt_.fetch_add(1, kRelaxed); }
  void written(uint64_t bytes) { bytes_written_.fetch_add(bytes, kRelaxed); }
  void dropped() { dropped_.fetch_add(1, kRelaxed); }
  void breaker_tripped() { breaker_trips_.fetch_add(1, kRelaxed); }
  void set_breaker_open(bool open) { breaker_open_.store(open ? 1 : 0, kRelaxed); }

  KvStoreStatsSnapshot snapshot() const;

 private:
  static constexpr auto kRelaxed = std::memory_order_relaxed;
  std::atomic<uint64_t> hits_{0}, misses_{0}, errors_{0}, corrupt_{0}, bytes_read_{0}, bytes_written_{0}, dropped_{0},
      breaker_trips_{0}, breaker_open_{0};
};

}  // namespace yoco
