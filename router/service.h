// yoco-router's public service (yoco.v1.Yoco, SPEC 3.2-3.3): tokenizes, validates, admits,
// then drives each Generate through a decode worker (which reserves KV blocks) and a prefill
// worker (which fills them over UCX), streaming tokens back. A prefill or transfer failure is
// retried with another prefill worker; a decode worker lost mid-stream is replaced by
// re-prefilling prompt + the tokens already streamed on another one (migration), so the client
// sees one uninterrupted stream with no lost or duplicated tokens.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>

#include "common/metrics.h"
#include "model/config.h"
#include "router/policy.h"
#include "router/workers.h"
#include "tokenizer/tokenizer.h"
#include "yoco/internal/v1/worker.grpc.pb.h"
#include "yoco/v1/yoco.grpc.pb.h"

namespace yoco {

using Clock = std::chrono::steady_clock;

struct RouterLimits {
  int max_in_flight = 256;                 // admitted requests; beyond: RESOURCE_EXHAUSTED
  int64_t max_queued_tokens = 1 << 20;     // prompt tokens of admitted requests
  int prefill_attempts = 3;                // tries per request across prefill workers
  int migrations = 3;                      // decode workers a stream may move across
  uint32_t lease_ms = 30000;               // how long a reservation waits for its commit
  int max_stop_strings = 16;
  int max_logprobs = 20;
  // Prefix affinity for prefill choice (0: off): prompts whose first `affinity_tokens` tokens
  // match go to the same prefill worker unless its queue is longer than the balanced pick's by
  // more than `affinity_max_extra_tokens`.
  int affinity_tokens = 64;
  int64_t affinity_max_extra_tokens = 4096;
};

struct RouterMetrics {
  explicit RouterMetrics(MetricsRegistry& r);
  Histogram &ttft, &itl, &e2e, &queue, &prefill, &transfer;
  Counter &prompt_tokens, &generation_tokens, &cached_tokens;
  Family<Counter>& requests;
  Family<Counter>& retries;
  Gauge &running, &waiting;
  Family<Gauge>& healthy_workers;
};

class RouterService final : public v1::Yoco::Service {
 public:
  RouterService(ModelConfig config, const Tokenizer* tokenizer, WorkerGroup& prefill, WorkerGroup& decode,
                RouterLimits limits, RouterMetrics& metrics);

  grpc::Status Generate(grpc::ServerContext* ctx, const v1::GenerateRequest* req,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override;
  grpc::Status Score(grpc::ServerContext* ctx, const v1::ScoreRequest* req, v1::ScoreResponse* resp) override;
  grpc::Status Tokenize(grpc::ServerContext* ctx, const v1::TokenizeRequest* req, v1::TokenizeResponse* resp) override;
  grpc::Status Detokenize(grpc::ServerContext* ctx, const v1::DetokenizeRequest* req,
                          v1::DetokenizeResponse* resp) override;
  grpc::Status GetModelInfo(grpc::ServerContext* ctx, const v1::GetModelInfoRequest* req, v1::ModelInfo* info) override;
  grpc::Status CacheDocument(grpc::ServerContext* ctx, const v1::CacheDocumentRequest* req, v1::Document* doc) override;
  grpc::Status GetDocument(grpc::ServerContext* ctx, const v1::GetDocumentRequest* req, v1::Document* doc) override;
  grpc::Status ListDocuments(grpc::ServerContext* ctx, const v1::ListDocumentsRequest* req,
                             v1::ListDocumentsResponse* resp) override;
  grpc::Status DeleteDocument(grpc::ServerContext* ctx, const v1::DeleteDocumentRequest* req,
                              v1::DeleteDocumentResponse* resp) override;

  void set_serving(bool serving) { serving_ = serving; }
  int in_flight() const;

 private:
  grpc::Status generate(grpc::ServerContext* ctx, const v1::GenerateRequest* req,
                        grpc::ServerWriter<v1::GenerateResponse>* writer);
  // Any healthy decode worker, for the RPCs it answers itself (Score, GetModelInfo).
  std::shared_ptr<grpc::Channel> any_decode_channel();
  // A prefill worker: by prefix affinity when a hash is given, else the balanced pick.
  std::shared_ptr<grpc::Channel> any_prefill_channel(std::optional<uint64_t> prefix_hash = std::nullopt);
  uint64_t prefix_hash(std::span<const int32_t> tokens) const;
  grpc::Status fetch_document(grpc::ServerContext* ctx, const std::string& id, internal::v1::DocumentRecord* rec);
  template <class Req, class Resp, class Call>
  grpc::Status call_prefill_worker(grpc::ServerContext* ctx, const Req& req, Resp* resp, Call call,
                                   std::optional<uint64_t> affinity = std::nullopt);
  // call_prefill_worker, counted in the request metrics.
  template <class Req, class Resp, class Call>
  grpc::Status on_prefill_worker(grpc::ServerContext* ctx, const Req& req, Resp* resp, Call call,
                                 std::optional<uint64_t> affinity = std::nullopt);

  const ModelConfig config_;
  const Tokenizer* tok_;
  WorkerGroup& prefill_;
  WorkerGroup& decode_;
  const RouterLimits limits_;
  RouterMetrics& m_;
  std::atomic<bool> serving_{true};
  mutable std::mutex mu_;
  Admission admission_;
  PrefillPicker picker_;
  std::mt19937_64 seeds_;
};

}  // namespace yoco
