#include "router/documents.h"

namespace yoco {

grpc::Status no_documents_when_colocated() {
  return {grpc::StatusCode::FAILED_PRECONDITION,
          "documents need prefill workers (they own the KV store); this router runs colocated, with no --prefill"};
}

std::optional<std::string> document_owner(const KeyLease* key) {
  if (!key || key->admin()) return std::nullopt;
  return key->name();
}

void add_owner(grpc::ClientContext* c, const std::optional<std::string>& owner) {
  if (owner) c->AddMetadata("yoco-owner", *owner);
}

grpc::Status fetch_document(RouterCore& core, const CallParent& parent, const std::string& id,
                            internal::v1::DocumentRecord* rec, const std::optional<std::string>& owner) {
  v1::GetDocumentRequest req;
  req.set_id(id);
  return call_prefill_worker(core, parent, req, rec,
                             [&owner](auto& stub, grpc::ClientContext* c, const auto& r, auto* out) {
                               add_owner(c, owner);
                               return stub.GetDocument(c, r, out);
                             });
}

}  // namespace yoco
