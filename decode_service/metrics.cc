#include "decode_service/metrics.h"

namespace yoco {

namespace {

// 4 KiB .. 16 GiB, ×4 per bucket.
std::vector<double> byte_buckets() {
  std::vector<double> b;
  for (double x = 4096; x <= 17179869184.0; x *= 4) b.push_back(x);
  return b;
}

}  // namespace

DecodeMetrics::DecodeMetrics(MetricsRegistry& r)
    : ttft(r.histogram(metric_name("yoco_time_to_first_token_seconds"), "Time from request to first token.",
                       Histogram::latency_buckets())),
      itl(r.histogram(metric_name("yoco_inter_token_latency_seconds"), "Time between streamed tokens.",
                      Histogram::latency_buckets())),
      e2e(r.histogram(metric_name("yoco_e2e_request_latency_seconds"), "Request latency, first byte in to last out.",
                      Histogram::latency_buckets())),
      queue(r.histogram(metric_name("yoco_request_queue_seconds"),
                        "Time a request waited for admission into the running batch.", Histogram::latency_buckets())),
      transfer(r.histogram(metric_name("yoco_kv_transfer_seconds"),
                           "Reservation to admitted commit of a shipped sequence.", Histogram::latency_buckets())),
      prompt_tokens(r.counter(metric_name("yoco_prompt_tokens_total"), "Prompt tokens processed.")),
      generation_tokens(r.counter(metric_name("yoco_generation_tokens_total"), "Tokens generated.")),
      cached_tokens(
          r.counter(metric_name("yoco_cached_prompt_tokens_total"), "Prompt tokens served from the KV store.")),
      transfer_bytes(r.counter(metric_name("yoco_kv_transfer_bytes_total"),
                               "K/V row and state bytes received from prefill workers.")),
      transfer_failures(r.counter(metric_name("yoco_kv_transfer_failures_total"),
                                  "Reservations that failed: expired, aborted, rejected, cancelled, peer lost.")),
      migrated_in(r.counter(metric_name("yoco_migrated_requests_total"),
                            "Requests resumed here after another decode worker was lost.")),
      shared_blocks(r.counter(metric_name("yoco_kv_blocks_shared_total"),
                              "Prompt KV blocks held once: replaced after arrival by an identical pool block, or "
                              "mapped from the pool instead of shipped (resident).")),
      residency_blocks(r.counter(metric_name("yoco_kv_residency_blocks_total"),
                                 "Leading whole blocks of arriving sequences looked up in the pool (the hits are "
                                 "yoco_kv_resident_blocks_total).")),
      forks(r.counter(metric_name("yoco_decode_forks_total"),
                      "Requests admitted by forking another choice's prefilled state (n choices).")),
      requests(*r.counter_family(metric_name("yoco_requests_total"), "Finished requests by gRPC status.", {"status"})
                    .value()),
      transfer_refused(*r.counter_family(metric_name("yoco_transfer_refused_total"),
                                         "UCX control messages refused: bad_secret, replay (a commit for a "
                                         "reservation not open), out_of_range (rows outside the reservation).",
                                         {"reason"})
                            .value()),
      running(r.gauge(metric_name("yoco_requests_running"), "Sequences in the running batch.")),
      waiting(r.gauge(metric_name("yoco_requests_waiting"), "Requests waiting for admission.")),
      kv_usage(r.gauge(metric_name("yoco_kv_cache_usage_ratio"), "Share of KV pool blocks in use.")),
      kv_free(r.gauge(metric_name("yoco_kv_cache_blocks_free"), "Free KV pool blocks.")),
      transfer_in_flight(r.gauge(metric_name("yoco_kv_transfer_in_flight"), "Reservations waiting for their commit.")),
      kv_shared(r.gauge(metric_name("yoco_kv_cache_shared_blocks"), "Pool blocks held by more than one sequence.")),
      request_transfer_bytes(r.histogram(metric_name("yoco_kv_transfer_request_bytes"),
                                         "K/V row and state bytes received per shipped request (resident rows "
                                         "excluded).",
                                         byte_buckets())),
      resident_blocks(r.counter(metric_name("yoco_kv_resident_blocks_total"),
                                "Prompt KV blocks mapped from this worker's pool instead of shipped.")),
      kv_kept(r.gauge(metric_name("yoco_kv_cache_blocks_kept"),
                      "Free pool blocks still holding a prompt prefix's rows (reusable until evicted).")) {}

}  // namespace yoco
