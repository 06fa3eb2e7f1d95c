// The prefill worker's service (proto/yoco/internal/v1/worker.proto): Prefill computes a prompt in
// the scheduler and ships it into a decode worker's reserved blocks; the documents live in the KV
// store every prefill worker shares (docs/design.md §5), and CacheDocument computes one in the same
// scheduler, under the same limits, on the same engine.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <functional>

#include "kv_store/cache.h"
#include "model/model.h"
#include "prefill_service/metrics.h"
#include "prefill_service/scheduler.h"
#include "yoco/internal/v1/worker.grpc.pb.h"

namespace yoco {

class PrefillService final : public internal::v1::PrefillWorker::Service {
 public:
  // `cache` null: no KV store (the document calls answer FAILED_PRECONDITION).
  PrefillService(const Model& model, PrefillScheduler& scheduler, PrefillMetrics& m, KvCache* cache)
      : model_(model), scheduler_(scheduler), m_(m), cache_(cache) {}

  grpc::Status Prefill(grpc::ServerContext* ctx, const internal::v1::PrefillRequest* req,
                       internal::v1::PrefillResponse* resp) override;
  grpc::Status GetLoad(grpc::ServerContext* ctx, const internal::v1::LoadRequest* req,
                       internal::v1::PrefillLoad* load) override;
  grpc::Status CacheDocument(grpc::ServerContext* ctx, const v1::CacheDocumentRequest* req, v1::Document* doc) override;
  grpc::Status GetDocument(grpc::ServerContext* ctx, const v1::GetDocumentRequest* req,
                           internal::v1::DocumentRecord* out) override;
  grpc::Status ListDocuments(grpc::ServerContext* ctx, const v1::ListDocumentsRequest* req,
                             v1::ListDocumentsResponse* out) override;
  grpc::Status DeleteDocument(grpc::ServerContext* ctx, const v1::DeleteDocumentRequest* req,
                              v1::DeleteDocumentResponse* out) override;

  // New calls get UNAVAILABLE from here on (the router retries elsewhere).
  void drain() { draining_ = true; }

 private:
  grpc::Status prefill(grpc::ServerContext* ctx, const internal::v1::PrefillRequest* req,
                       internal::v1::PrefillResponse* resp);
  grpc::Status cache_document(grpc::ServerContext* ctx, const v1::CacheDocumentRequest* req, v1::Document* doc);
  // Submits the job and waits for its outcome on this handler thread (the scheduler completes it
  // on its own threads); a caller that goes away cancels it. `accepted` runs once the scheduler
  // took the job. The error: the scheduler refused it.
  Result<PrefillOutcome> run_job(grpc::ServerContext* ctx, PrefillJob job, const std::function<void()>& accepted = {});

  const Model& model_;
  PrefillScheduler& scheduler_;
  PrefillMetrics& m_;
  KvCache* const cache_;
  std::atomic<bool> draining_{false};
};

}  // namespace yoco
