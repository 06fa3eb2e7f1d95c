// The document RPCs run on a prefill worker: it owns the KV store client. The router forwards
// them (and a Generate's document lookups) here; a colocated router (no prefill workers) has no
// store and answers FAILED_PRECONDITION.
#pragma once

#include <grpcpp/grpcpp.h>

#include <optional>
#include <string>

#include "router/call_util.h"
#include "router/core.h"
#include "router/worker_calls.h"
#include "yoco/internal/v1/worker.grpc.pb.h"

namespace yoco {

// One PrefillWorker RPC, tried on up to three prefill workers (the first by prefix affinity
// when `affinity` is given); answers no other worker would change end the loop.
template <class Req, class Resp, class Call>
grpc::Status call_prefill_worker(RouterCore& core, const CallParent& parent, const Req& req, Resp* resp, Call call,
                                 std::optional<uint64_t> affinity = std::nullopt);

// The document owner a key acts as (docs/design.md §9b): its name for a non-admin key; none (every
// document) for an admin key or without keys.
std::optional<std::string> document_owner(const KeyLease* key);
// Sends the owner to the prefill worker ("yoco-owner" metadata, worker.proto).
void add_owner(grpc::ClientContext* c, const std::optional<std::string>& owner);

// A stored document's record (tokens included), by id, as `owner` sees it.
grpc::Status fetch_document(RouterCore& core, const CallParent& parent, const std::string& id,
                            internal::v1::DocumentRecord* rec, const std::optional<std::string>& owner = std::nullopt);

grpc::Status no_documents_when_colocated();

template <class Req, class Resp, class Call>
grpc::Status call_prefill_worker(RouterCore& core, const CallParent& parent, const Req& req, Resp* resp, Call call,
                                 std::optional<uint64_t> affinity) {
  if (core.colocated()) return no_documents_when_colocated();
  grpc::Status st;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const auto snap = core.prefill().snapshot();
    const auto i = core.pick_prefill(snap, attempt == 0 ? affinity : std::nullopt);
    if (!i) {
      st = {grpc::StatusCode::UNAVAILABLE, "no healthy prefill worker"};
      break;
    }
    auto cctx = parent.child();
    resp->Clear();
    auto stub = internal::v1::PrefillWorker::NewStub(core.prefill().channel(snap[*i].address));
    st = call(*stub, cctx.get(), req, resp);
    if (st.ok() || final_error(st.error_code()) || st.error_code() == grpc::StatusCode::FAILED_PRECONDITION ||
        st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED || parent.end())
      break;
  }
  return st;
}

}  // namespace yoco
