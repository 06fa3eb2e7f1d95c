#include "prefill_service/worker_service.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>

#include "common/checksum.h"
#include "common/document_id.h"
#include "common/log.h"
#include "kv_store/format.h"
#include "proto/grpc_util.h"
#include "server/call.h"

namespace yoco {

namespace {

grpc::Status no_store() {
  return {grpc::StatusCode::FAILED_PRECONDITION, "this prefill worker has no KV store (start it with --kv-store)"};
}

// The caller's document owner (docs/design.md §9b): set by the router for a non-admin API key;
// absent, the caller sees every document.
std::optional<std::string> owner_of(const grpc::ServerContext& ctx) {
  const auto& md = ctx.client_metadata();
  auto it = md.find("yoco-owner");
  if (it == md.end()) return std::nullopt;
  return std::string(it->second.data(), it->second.size());
}

bool visible(const DocumentRecord& r, const std::optional<std::string>& owner) { return !owner || r.owner == *owner; }

grpc::Status unknown_document(const std::string& id) {
  return {grpc::StatusCode::NOT_FOUND, "id: unknown document \"" + id + "\""};
}

void fill(const DocumentRecord& r, v1::Document* d, bool already_cached) {
  d->set_id(r.id);
  d->set_token_count(static_cast<uint32_t>(r.tokens.size()));
  d->set_stored_bytes(static_cast<uint64_t>(r.stored_bytes));
  d->set_created_unix_ms(r.created_ms);
  d->set_ttl_seconds(static_cast<uint32_t>(r.ttl_s));
  d->set_already_cached(already_cached);
}

TransferClock::time_point job_deadline(const grpc::ServerContext& ctx) {
  return steady_deadline<TransferClock>(ctx).value_or(TransferClock::time_point::max());
}

}  // namespace

grpc::Status PrefillService::Prefill(grpc::ServerContext* ctx, const internal::v1::PrefillRequest* req,
                                     internal::v1::PrefillResponse* resp) {
  grpc::Status st = prefill(ctx, req, resp);
  m_.observe_finished(st.error_code());
  if (!st.ok())
    YOCO_LOG(LogLevel::kInfo, "prefill failed",
             LogFields()
                 .kv("request", req->request_id())
                 .kv("code", static_cast<int>(st.error_code()))
                 .kv("error", st.error_message()));
  return st;
}

grpc::Status PrefillService::GetLoad(grpc::ServerContext*, const internal::v1::LoadRequest*,
                                     internal::v1::PrefillLoad* load) {
  const PrefillSchedulerLoad l = scheduler_.load();
  load->set_queued_tokens(l.queued_tokens);
  load->set_queued_requests(l.waiting + l.active + l.committing);
  load->set_fingerprint(hex64(model_.fingerprint()));
  load->set_serving(!draining_);
  return grpc::Status::OK;
}

// ---- documents (docs/design.md §5): computed here, kept in the KV store every prefill worker shares ----

grpc::Status PrefillService::CacheDocument(grpc::ServerContext* ctx, const v1::CacheDocumentRequest* req,
                                           v1::Document* doc) {
  grpc::Status st = cache_document(ctx, req, doc);
  m_.observe_finished(st.error_code());
  return st;
}

grpc::Status PrefillService::GetDocument(grpc::ServerContext* ctx, const v1::GetDocumentRequest* req,
                                         internal::v1::DocumentRecord* out) {
  if (!cache_) return no_store();
  if (!is_document_id(req->id())) return {grpc::StatusCode::INVALID_ARGUMENT, not_a_document_id("id", req->id())};
  auto rec = cache_->get_document(req->id());
  if (!rec.ok()) return {grpc::StatusCode::UNAVAILABLE, "KV store: " + rec.status().message()};
  if (!rec->has_value() || !visible(**rec, owner_of(*ctx))) return unknown_document(req->id());
  fill(**rec, out->mutable_document(), false);
  out->set_owner((*rec)->owner);
  out->mutable_tokens()->Add((*rec)->tokens.begin(), (*rec)->tokens.end());
  return grpc::Status::OK;
}

grpc::Status PrefillService::ListDocuments(grpc::ServerContext* ctx, const v1::ListDocumentsRequest*,
                                           v1::ListDocumentsResponse* out) {
  const auto owner = owner_of(*ctx);
  if (!cache_) return no_store();
  auto ids = cache_->list_documents();
  if (!ids.ok()) return {grpc::StatusCode::UNAVAILABLE, "KV store: " + ids.status().message()};
  for (const auto& id : *ids) {
    auto rec = cache_->get_document(id);
    if (rec.ok() && rec->has_value() && visible(**rec, owner)) fill(**rec, out->add_documents(), false);
  }
  return grpc::Status::OK;
}

grpc::Status PrefillService::DeleteDocument(grpc::ServerContext* ctx, const v1::DeleteDocumentRequest* req,
                                            v1::DeleteDocumentResponse* out) {
  if (!cache_) return no_store();
  if (!is_document_id(req->id())) return {grpc::StatusCode::INVALID_ARGUMENT, not_a_document_id("id", req->id())};
  auto rec = cache_->get_document(req->id());
  if (!rec.ok()) return {grpc::StatusCode::UNAVAILABLE, "KV store: " + rec.status().message()};
  // Not stored, or another key's (which must look the same): nothing to delete, which the answer
  // says (deleted: false); not an error.
  if (!rec->has_value() || !visible(**rec, owner_of(*ctx))) return grpc::Status::OK;
  if (Status d = cache_->delete_document(req->id()); !d.ok())
    return {grpc::StatusCode::UNAVAILABLE, "KV store: " + d.message()};
  out->set_deleted(true);
  return grpc::Status::OK;
}

grpc::Status PrefillService::cache_document(grpc::ServerContext* ctx, const v1::CacheDocumentRequest* req,
                                            v1::Document* doc) {
  if (draining_) return {grpc::StatusCode::UNAVAILABLE, "this prefill worker is draining"};
  if (!cache_) return no_store();
  const std::vector<int32_t> tokens(req->tokens().ids().begin(), req->tokens().ids().end());
  if (tokens.empty()) return {grpc::StatusCode::INVALID_ARGUMENT, "content: empty document"};
  if (Status v = model_.validate_tokens(tokens, 0, "content.tokens"); !v.ok()) return to_grpc(v);
  // Content-addressed (per owner): a document already stored whole is not computed again.
  const std::string owner = owner_of(*ctx).value_or("");
  const std::string id = document_id(tokens, model_.fingerprint(), owner);
  if (auto have = cache_->load_document(id); have.ok() && have->has_value() && (*have)->cached) {
    fill((*have)->record, doc, true);
    return grpc::Status::OK;
  }
  if (ctx->IsCancelled()) return {grpc::StatusCode::CANCELLED, "cancelled"};
  // Computed by the scheduler on the worker's engine, under its queue bound, like a prompt.
  PrefillJob job;
  job.tokens = tokens;
  job.document = true;
  job.document_ttl = std::chrono::seconds(req->ttl_seconds());
  job.document_owner = owner;
  job.deadline = job_deadline(*ctx);
  auto out = run_job(ctx, std::move(job));
  if (!out.ok()) return to_grpc(out.status());
  if (!out->status.ok()) return to_grpc(out->status);
  const DocumentRecord& rec = out->document;
  fill(rec, doc, false);
  YOCO_LOG(
      LogLevel::kInfo, "document cached",
      LogFields().kv("id", rec.id).kv("tokens", static_cast<int64_t>(tokens.size())).kv("bytes", rec.stored_bytes));
  return grpc::Status::OK;
}

grpc::Status PrefillService::prefill(grpc::ServerContext* ctx, const internal::v1::PrefillRequest* req,
                                     internal::v1::PrefillResponse* resp) {
  if (draining_) return {grpc::StatusCode::UNAVAILABLE, "this prefill worker is draining"};
  const std::string& bytes = req->reservation();
  auto d = ReservationDescriptor::parse(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  if (!d.ok()) return {grpc::StatusCode::INVALID_ARGUMENT, "reservation: " + d.status().message()};
  PrefillJob job;
  job.request_id = req->request_id();
  job.priority = req->priority();
  job.tokens.assign(req->tokens().begin(), req->tokens().end());
  job.cached_prefix_candidates.assign(req->cached_prefix_candidates().begin(), req->cached_prefix_candidates().end());
  job.reservation = std::move(d).value();
  job.deadline = job_deadline(*ctx);
  const int64_t n_tokens = static_cast<int64_t>(job.tokens.size());
  auto done = run_job(ctx, std::move(job), [&] { m_.observe_accepted(n_tokens); });
  if (!done.ok()) return to_grpc(done.status());
  const PrefillOutcome& out = done.value();
  m_.observe_outcome(out);
  if (!out.status.ok()) return to_grpc(out.status);
  resp->set_rows(out.stats.rows);
  resp->set_bytes(out.stats.bytes);
  resp->set_queue_seconds(out.stats.queue_seconds);
  resp->set_prefill_seconds(out.stats.prefill_seconds);
  resp->set_transfer_seconds(out.stats.transfer_seconds);
  resp->set_cached_tokens(out.stats.cached_tokens);
  m_.observe_cached(out.stats.cached_tokens);
  YOCO_LOG(LogLevel::kDebug, "prefill done",
           LogFields()
               .kv("request", req->request_id())
               .kv("rows", out.stats.rows)
               .kv("queue_s", out.stats.queue_seconds)
               .kv("prefill_s", out.stats.prefill_seconds)
               .kv("transfer_s", out.stats.transfer_seconds));
  return grpc::Status::OK;
}

Result<PrefillOutcome> PrefillService::run_job(grpc::ServerContext* ctx, PrefillJob job,
                                               const std::function<void()>& accepted) {
  struct Channel {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<PrefillOutcome> done;
  };
  auto ch = std::make_shared<Channel>();
  YOCO_ASSIGN_OR_RETURN(const uint64_t id, scheduler_.submit(std::move(job), [ch](const PrefillOutcome& o) {
    std::lock_guard<std::mutex> lock(ch->mu);
    ch->done = o;
    ch->cv.notify_all();
  }));
  if (accepted) accepted();
  std::unique_lock<std::mutex> lock(ch->mu);
  // The router gave up: the cancel frees the decode worker's blocks now; the job still completes.
  const auto done = [&] { return ch->done.has_value(); };
  wait_cancellable(*ctx, lock, ch->cv, done, [&] { scheduler_.cancel(id); });
  return std::move(*ch->done);
}

}  // namespace yoco
