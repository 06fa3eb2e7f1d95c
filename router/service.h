// yoco-router's public service (yoco.v1.Yoco; docs/architecture.md, the router): tokenizes,
// validates against the model the decode workers describe, admits, then drives each Generate
// through a decode worker (which reserves KV blocks) and a prefill worker (which fills them over
// UCX), streaming tokens back (router/generate_call.h). With no prefill workers (colocated) the
// decode worker prefills locally. Score runs on a decode worker; the document RPCs on a prefill
// worker (router/documents.h).
#pragma once

#include "router/core.h"
#include "yoco/v1/yoco.grpc.pb.h"

namespace yoco {

class RouterService final : public v1::Yoco::Service {
 public:
  explicit RouterService(RouterCore& core) : core_(core) {}

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

 private:
  // Runs `fn(key)` for an authenticated call (docs/design.md §9b): with keys on, the request's
  // "authorization: Bearer <key>" must name a key with a free max_concurrent slot (held until the
  // call ends); the outcome is counted and logged under the key's name. Without keys, key is null.
  template <class Fn>
  grpc::Status keyed(grpc::ServerContext* ctx, const char* rpc, const std::string& request_id, Fn fn);
  grpc::Status score(grpc::ServerContext* ctx, const v1::ScoreRequest* req, v1::ScoreResponse* resp, KeyLease* key);
  grpc::Status cache_document(grpc::ServerContext* ctx, const v1::CacheDocumentRequest* req, v1::Document* doc,
                              KeyLease* key);
  // call_prefill_worker (router/documents.h), counted in the request metrics.
  template <class Req, class Resp, class Call>
  grpc::Status on_prefill_worker(grpc::ServerContext* ctx, const Req& req, Resp* resp, Call call,
                                 std::optional<uint64_t> affinity = std::nullopt);

  RouterCore& core_;
};

}  // namespace yoco
