#include "router/documents.h"

namespace yoco {

grpc::Status no_documents_when_colocated() {
  return {grpc::StatusCode::FAILED_PRECONDITION,
          "documents need prefill workers (they own the KV store); this router runs colocated, with no --prefill"};
}

grpc::Status fetch_document(RouterCore& core, grpc::ServerContext* ctx, const std::string& id,
                            internal::v1::DocumentRecord* rec) {
  v1::GetDocumentRequest req;
  req.set_id(id);
  return call_prefill_worker(core, ctx, req, rec, [](auto& stub, grpc::ClientContext* c, const auto& r, auto* out) {
    return stub.GetDocument(c, r, out);
  });
}

}  // namespace yoco
