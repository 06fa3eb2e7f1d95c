// Typed metrics of a prefill worker (docs/architecture.md, rule 9; docs/design.md §6 names): what its /metrics shows.
#pragma once

#include <grpcpp/grpcpp.h>

#include <algorithm>

#include "common/metrics.h"
#include "kv_store/stats.h"
#include "prefill_service/scheduler.h"
#include "proto/grpc_util.h"

namespace yoco {

class PrefillMetrics {
 public:
  explicit PrefillMetrics(MetricsRegistry& r);

  void observe_cached(int64_t tokens) { cached_tokens_.inc(static_cast<double>(tokens)); }
  // Counters follow the store's own (monotonic) totals.
  void refresh_store(const KvStoreStatsSnapshot& objects, const KvStoreStatsSnapshot& backend) {
    auto follow = [](Counter& c, uint64_t total) { c.inc(std::max(0.0, static_cast<double>(total) - c.value())); };
    follow(store_hits_, objects.hits);
    follow(store_misses_, objects.misses);
    follow(store_errors_, backend.errors);
    follow(store_corrupt_,
           objects.corrupt + backend.corrupt);  // caught by a backend (its own framing) or by the object check
    follow(store_read_bytes_, backend.bytes_read);
    follow(store_written_bytes_, backend.bytes_written);
    store_breaker_open_.set(static_cast<double>(backend.breaker_open));
  }

  void observe_accepted(int64_t tokens) { prompt_tokens_.inc(static_cast<double>(tokens)); }
  void observe_finished(grpc::StatusCode code) { requests_.with({grpc_code_label(code)}).inc(); }
  void observe_outcome(const PrefillOutcome& o) {
    if (o.stats.started) queue_.observe(o.stats.queue_seconds);
    if (o.status.ok()) {
      transfer_bytes_.inc(static_cast<double>(o.stats.bytes));
      transfer_seconds_.observe(o.stats.transfer_seconds);
    }
    if (o.stats.transfer_failed) transfer_failures_.inc();
  }
  void refresh(const PrefillSchedulerLoad& load, double tokens_per_second, int64_t in_flight) {
    waiting_.set(load.waiting);
    running_.set(load.active + load.committing);
    queued_tokens_.set(static_cast<double>(load.queued_tokens));
    tokens_per_second_.set(tokens_per_second);
    transfer_in_flight_.set(static_cast<double>(in_flight));
  }

 private:
  Counter& prompt_tokens_;
  Family<Counter>& requests_;
  Gauge &waiting_, &running_;
  Histogram& queue_;
  Gauge &tokens_per_second_, &queued_tokens_;
  Counter& transfer_bytes_;
  Histogram& transfer_seconds_;
  Counter& transfer_failures_;
  Gauge& transfer_in_flight_;
  Counter &cached_tokens_, &store_hits_, &store_misses_, &store_errors_, &store_corrupt_, &store_read_bytes_,
      &store_written_bytes_;
  Gauge& store_breaker_open_;
};

}  // namespace yoco
