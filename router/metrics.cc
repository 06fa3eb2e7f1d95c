#include "router/metrics.h"

#include "proto/grpc_util.h"

namespace yoco {

namespace {
// Token counts per request: powers of two from 1 to 256 Ki (docs/design.md §6).
std::vector<double> token_buckets() {
  std::vector<double> b;
  for (double x = 1; x <= 262144; x *= 2) b.push_back(x);
  return b;
}
}  // namespace

RouterMetrics::RouterMetrics(MetricsRegistry& r)
    : ttft_(r.histogram(metric_name("yoco_time_to_first_token_seconds"), "Time from request to first streamed token.",
                        Histogram::latency_buckets())),
      itl_(r.histogram(metric_name("yoco_inter_token_latency_seconds"), "Time between streamed tokens.",
                       Histogram::latency_buckets())),
      e2e_(r.histogram(metric_name("yoco_e2e_request_latency_seconds"), "Request latency, first byte in to last out.",
                       Histogram::latency_buckets())),
      queue_(r.histogram(metric_name("yoco_request_queue_seconds"),
                         "Time a request waited in a prefill worker's queue.", Histogram::latency_buckets())),
      prefill_(r.histogram(metric_name("yoco_prefill_seconds"), "Prefill compute time per request.",
                           Histogram::latency_buckets())),
      transfer_(r.histogram(metric_name("yoco_kv_transfer_seconds"),
                            "KV transfer time not hidden behind prefill compute.", Histogram::latency_buckets())),
      request_prompt_(r.histogram(metric_name("yoco_request_prompt_tokens"),
                                  "Prompt tokens per admitted Generate (its count: the arrivals).", token_buckets())),
      request_generated_(r.histogram(metric_name("yoco_request_generation_tokens"),
                                     "Tokens streamed per admitted Generate, observed when it ends.", token_buckets())),
      prompt_tokens_(r.counter(metric_name("yoco_prompt_tokens_total"), "Prompt tokens of admitted requests.")),
      generation_tokens_(r.counter(metric_name("yoco_generation_tokens_total"), "Tokens streamed to clients.")),
      cached_tokens_(
          r.counter(metric_name("yoco_cached_prompt_tokens_total"), "Prompt tokens served from the KV store.")),
      stalls_(r.counter(metric_name("yoco_router_stalled_streams_total"),
                        "Decode streams moved off a worker that went silent while failing health polls.")),
      residency_blocks_(r.counter(metric_name("yoco_router_residency_blocks_total"),
                                  "Whole prompt blocks of requests sent to decode workers.")),
      residency_predicted_(r.counter(metric_name("yoco_router_residency_predicted_hits_total"),
                                     "Of them, the leading blocks the chosen decode worker was predicted to hold.")),
      requests_(*r.counter_family(metric_name("yoco_requests_total"), "Finished requests by gRPC status.", {"status"})
                     .value()),
      retries_(*r.counter_family(metric_name("yoco_router_retries_total"),
                                 "Prefill retries and decode migrations after a worker failure.", {"kind"})
                    .value()),
      key_requests_(*r.counter_family(metric_name("yoco_key_requests_total"),
                                      "Finished public calls under API keys, by key name and gRPC status.",
                                      {"key", "code"})
                         .value()),
      http_requests_(
          *r.counter_family(metric_name("yoco_http_requests_total"),
                            "Finished requests of the OpenAI-compatible HTTP API, by endpoint and HTTP status.",
                            {"endpoint", "code"})
               .value()),
      running_(r.gauge(metric_name("yoco_requests_running"), "Admitted requests in flight.")),
      waiting_(r.gauge(metric_name("yoco_requests_waiting"), "Admitted requests that have not streamed a token yet.")),
      healthy_workers_(*r.gauge_family(metric_name("yoco_router_healthy_workers"),
                                       "Workers passing health checks, by role.", {"role"})
                            .value()) {}

void RouterMetrics::observe_finished(grpc::StatusCode code, double seconds) {
  requests_.with({grpc_code_label(code)}).inc();
  e2e_.observe(seconds);
}

void RouterMetrics::observe_key_request(const std::string& key, grpc::StatusCode code) {
  key_requests_.with({key, grpc_code_label(code)}).inc();
}

void RouterMetrics::observe_http(const std::string& endpoint, int status) {
  http_requests_.with({endpoint, std::to_string(status)}).inc();
}

void RouterMetrics::observe_admitted(int64_t prompt_tokens) {
  running_.inc();
  waiting_.inc();
  prompt_tokens_.inc(static_cast<double>(prompt_tokens));
  request_prompt_.observe(static_cast<double>(prompt_tokens));
}

void RouterMetrics::observe_ttft(double seconds) {
  ttft_.observe(seconds);
  waiting_.dec();
}

void RouterMetrics::observe_itl(double seconds_per_token) { itl_.observe(seconds_per_token); }

void RouterMetrics::observe_generated(int64_t tokens) { generation_tokens_.inc(static_cast<double>(tokens)); }

void RouterMetrics::observe_released(bool still_waiting, int64_t generated_tokens) {
  request_generated_.observe(static_cast<double>(generated_tokens));
  running_.dec();
  if (still_waiting) waiting_.dec();
}

void RouterMetrics::observe_prefill(const internal::v1::PrefillResponse& p) {
  cached_tokens_.inc(static_cast<double>(p.cached_tokens()));
  queue_.observe(p.queue_seconds());
  prefill_.observe(p.prefill_seconds());
  transfer_.observe(p.transfer_seconds());
}

void RouterMetrics::observe_retry(const char* kind) { retries_.with({kind}).inc(); }

void RouterMetrics::set_healthy_workers(const char* role, int n) { healthy_workers_.with({role}).set(n); }

}  // namespace yoco
