// yoco-router's metrics as one typed object: each event a call reports is a method, so the
// metric names and their units live here only (docs/design.md, metric names).
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <string>

#include "common/metrics.h"
#include "yoco/internal/v1/worker.pb.h"

namespace yoco {

class RouterMetrics {
 public:
  explicit RouterMetrics(MetricsRegistry& r);

  // A finished public call (every RPC but Tokenize/Detokenize/GetModelInfo): status and latency.
  void observe_finished(grpc::StatusCode code, double seconds);
  // A Generate admitted: running and waiting until its first token; its prompt length joins the
  // arrivals' length distribution (the SLA planner's input, docs/design.md §6).
  void observe_admitted(int64_t prompt_tokens);
  void observe_ttft(double seconds);           // the first token streamed (leaves waiting)
  void observe_itl(double seconds_per_token);  // later tokens
  void observe_generated(int64_t tokens);
  // The end of an admitted Generate; `still_waiting` when it never streamed a token; the tokens it
  // streamed join the output length distribution.
  void observe_released(bool still_waiting, int64_t generated_tokens);
  // A first prefill's timings and the prompt tokens it loaded from the KV store.
  void observe_prefill(const internal::v1::PrefillResponse& p);
  // A retry after a worker failure: "prefill" (another prefill worker) or "migration".
  void observe_retry(const char* kind);
  // A Decode stream cancelled because its worker went silent while unhealthy (then migrated).
  void observe_stall() { stalls_.inc(); }
  // A decode worker picked: the prompt's whole blocks and the leading run of them the router
  // predicted the worker holds (docs/design.md §6, decode residency).
  void observe_decode_residency(int64_t prompt_blocks, int64_t predicted_resident) {
    residency_blocks_.inc(static_cast<double>(prompt_blocks));
    residency_predicted_.inc(static_cast<double>(predicted_resident));
  }
  // Workers passing health checks, by role ("prefill", "decode"); set before each scrape.
  void set_healthy_workers(const char* role, int n);
  // A finished public call under API keys, by key name ("" when no key was recognised).
  void observe_key_request(const std::string& key, grpc::StatusCode code);
  // A finished HTTP request of the OpenAI-compatible API, by endpoint ("/v1/completions") and
  // HTTP status; the generation inside it is counted by the calls above like any gRPC one.
  void observe_http(const std::string& endpoint, int status);

 private:
  Histogram &ttft_, &itl_, &e2e_, &queue_, &prefill_, &transfer_, &request_prompt_, &request_generated_;
  Counter &prompt_tokens_, &generation_tokens_, &cached_tokens_, &stalls_, &residency_blocks_, &residency_predicted_;
  Family<Counter>& requests_;
  Family<Counter>& retries_;
  Family<Counter>& key_requests_;
  Family<Counter>& http_requests_;
  Gauge &running_, &waiting_;
  Family<Gauge>& healthy_workers_;
};

}  // namespace yoco
