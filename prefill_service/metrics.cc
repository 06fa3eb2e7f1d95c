#include "prefill_service/metrics.h"

namespace yoco {

PrefillMetrics::PrefillMetrics(MetricsRegistry& r)
    : prompt_tokens_(r.counter(metric_name("yoco_prompt_tokens_total"), "Prompt tokens accepted for prefill.")),
      requests_(
          *r.counter_family(metric_name("yoco_requests_total"), "Finished Prefill calls by gRPC status.", {"status"})
               .value()),
      waiting_(r.gauge(metric_name("yoco_requests_waiting"), "Prefill jobs queued, not yet computing.")),
      running_(r.gauge(metric_name("yoco_requests_running"),
                       "Prefill jobs computing or waiting for the decode worker's commit acknowledgement.")),
      queue_(r.histogram(metric_name("yoco_request_queue_seconds"),
                         "Time from a Prefill call to its first computed chunk.", Histogram::latency_buckets())),
      tokens_per_second_(r.gauge(metric_name("yoco_prefill_tokens_per_second"),
                                 "Prompt tokens computed per second of compute over the last few seconds of work.")),
      queued_tokens_(
          r.gauge(metric_name("yoco_prefill_queued_tokens"), "Prompt tokens queued or computing, not yet computed.")),
      transfer_bytes_(
          r.counter(metric_name("yoco_kv_transfer_bytes_total"), "K/V row and state bytes of acknowledged transfers.")),
      transfer_seconds_(r.histogram(metric_name("yoco_kv_transfer_seconds"),
                                    "Time from a prompt's last computed chunk to the decode worker's acknowledgement "
                                    "(the part of the transfer not hidden behind compute).",
                                    Histogram::latency_buckets())),
      transfer_failures_(
          r.counter(metric_name("yoco_kv_transfer_failures_total"),
                    "Prefill jobs whose KV transfer failed (peer lost, rejected, lease expired, timeout).")),
      transfer_in_flight_(
          r.gauge(metric_name("yoco_kv_transfer_in_flight"), "Transfers open in this worker's KV sender.")),
      cached_tokens_(r.counter(metric_name("yoco_cached_prompt_tokens_total"),
                               "Prompt tokens loaded from the KV store instead of computed.")),
      store_hits_(r.counter(metric_name("yoco_kv_store_hits_total"),
                            "KV store objects (blocks, states, records) found and valid.")),
      store_misses_(r.counter(metric_name("yoco_kv_store_misses_total"),
                              "KV store lookups that found nothing usable (incl. corrupt).")),
      store_errors_(r.counter(metric_name("yoco_kv_store_errors_total"),
                              "KV store calls that failed (backend down, timeout, I/O).")),
      store_corrupt_(
          r.counter(metric_name("yoco_kv_store_corrupt_total"), "KV store objects that failed validation (deleted).")),
      store_read_bytes_(r.counter(metric_name("yoco_kv_store_read_bytes_total"), "Bytes read from the KV store.")),
      store_written_bytes_(
          r.counter(metric_name("yoco_kv_store_written_bytes_total"), "Bytes written to the KV store.")),
      store_breaker_open_(
          r.gauge(metric_name("yoco_kv_store_breaker_open"), "Remote KV store tiers whose circuit breaker is open.")) {}

}  // namespace yoco
