#include "decode_service/worker_service.h"

#include <cmath>
#include <cstdio>

#include "common/checksum.h"
#include "common/log.h"
#include "decode_service/stream_pump.h"
#include "handoff/prefix_chain.h"
#include "proto/grpc_util.h"
#include "proto/structured_convert.h"
#include "server/call.h"

namespace yoco {

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

grpc::Status DecodeWorkerService::Decode(grpc::ServerContext* ctx, const internal::v1::DecodeRequest* req,
                                         grpc::ServerWriter<internal::v1::DecodeEvent>* writer) {
  const auto t0 = Clock::now();
  grpc::Status st = decode(ctx, req, writer);
  m_.requests.with({grpc_code_label(st.error_code())}).inc();
  m_.e2e.observe(seconds_since(t0));
  if (!st.ok())
    YOCO_LOG(LogLevel::kInfo, "decode request ended",
             LogFields()
                 .kv("request_id", req->request_id())
                 .kv("code", grpc_code_label(st.error_code()))
                 .kv("message", st.error_message()));
  return st;
}

grpc::Status DecodeWorkerService::decode(grpc::ServerContext* ctx, const internal::v1::DecodeRequest* req,
                                         grpc::ServerWriter<internal::v1::DecodeEvent>* writer) {
  const auto t0 = Clock::now();
  if (!serving_) return {grpc::StatusCode::UNAVAILABLE, "decode worker is draining"};
  auto dr = to_request(*ctx, *req);
  if (!dr.ok()) return to_grpc(dr.status());
  if (!dr->generated_before.empty()) m_.migrated_in.inc();
  if (!req->local_prefill()) {  // else the batcher prefills the prompt itself (colocated mode)
    grpc::Status st = receive_state(ctx, *req, *dr, writer, t0);
    if (!st.ok()) return st;
  }
  m_.prompt_tokens.inc(static_cast<double>(dr->prompt.size()));
  if (req->local_prefill()) YOCO_HOP("decode.admit", req->request_id(), .kv("local_prefill", true));
  return stream_tokens(ctx, req->request_id(), std::move(dr).value(), writer, t0);
}

Result<DecodeRequest> DecodeWorkerService::to_request(const grpc::ServerContext& ctx,
                                                      const internal::v1::DecodeRequest& req) const {
  DecodeRequest dr;
  dr.prompt.assign(req.prompt().begin(), req.prompt().end());
  dr.generated_before.assign(req.generated().begin(), req.generated().end());
  YOCO_ASSIGN_OR_RETURN(dr.sampling, sampling_from_proto(req.sampling()));
  dr.max_tokens = req.max_tokens() == 0 ? 16 : static_cast<int>(std::min<uint32_t>(req.max_tokens(), 1u << 30));
  dr.stop_token_ids.assign(req.stop_token_ids().begin(), req.stop_token_ids().end());
  dr.logprobs = static_cast<int>(std::min<uint32_t>(req.logprobs(), 1000));
  dr.priority = req.priority();
  dr.fork_group = req.fork_group();
  dr.fork_siblings = static_cast<int>(std::min<uint32_t>(req.fork_siblings(), 64));  // the router's n limit
  dr.deadline = steady_deadline(ctx).value_or(Clock::time_point::max());
  if (req.has_structured_output()) {  // compiled here, on the handler's thread, never in the batcher's
    YOCO_ASSIGN_OR_RETURN(StructuredOutput so, structured_from_proto(req.structured_output()));
    const std::string field = std::string("structured_output.") + so.kind_name();
    if (so.constrained() && !compiler_)
      return Status(StatusCode::kUnimplemented, field + ": this decode worker has no vocabulary to compile it against");
    if (so.constrained()) {
      YOCO_ASSIGN_OR_RETURN(dr.constraint, compiler_->compile(so, field));
    }
  }
  YOCO_RETURN_IF_ERROR(batcher_.validate(dr));
  return dr;
}

grpc::Status DecodeWorkerService::receive_state(grpc::ServerContext* ctx, const internal::v1::DecodeRequest& req,
                                                DecodeRequest& dr,
                                                grpc::ServerWriter<internal::v1::DecodeEvent>* writer,
                                                Clock::time_point t0) {
  // 1. Reserve: the lease bounds how long the blocks wait for a commit, never outlives the
  //    request's own deadline, and never exceeds this worker's maximum whatever the caller asks
  //    (docs/design.md §9b: held reservations).
  const int64_t rows = static_cast<int64_t>(dr.prompt.size() + dr.generated_before.size());
  const auto asked = std::chrono::milliseconds(req.lease_ms() == 0 ? max_lease_.count() : req.lease_ms());
  const auto lease_ms = std::min(asked, max_lease_);
  const auto lease = std::min(Clock::now() + lease_ms, dr.deadline);
  //    Leading blocks this pool already holds are pinned now and never shipped: an eviction
  //    between here and the commit cannot take them.
  std::vector<int32_t> resident = claim_resident(dr);
  const auto resident_blocks = static_cast<int64_t>(resident.size());
  auto desc = receiver_.reserve_over(req.request_id(), rows, lease, resident);
  if (!desc.ok()) {
    pool_.release_blocks(resident);
    return to_grpc(desc.status());
  }
  const uint64_t rid = desc->reservation_id;
  internal::v1::DecodeEvent ev;
  auto* r = ev.mutable_reservation();
  r->set_reservation_id(rid);
  const auto bytes = desc->serialize();
  r->set_transfer_descriptor(bytes.data(), bytes.size());
  r->set_rows(rows);
  if (!writer->Write(ev)) {
    receiver_.cancel(rid);
    return {grpc::StatusCode::CANCELLED, "the router went away before the transfer"};
  }
  // 2. The validated commit.
  CommittedSequence committed;
  if (grpc::Status st = wait_committed(ctx, rid, lease, dr.deadline, committed); !st.ok()) return st;
  const double transfer_wait = seconds_since(t0);
  m_.transfer.observe(transfer_wait);
  m_.request_transfer_bytes.observe(
      static_cast<double>((rows - desc->resident_rows) * kv_row_bytes(desc->kv_dim, desc->kv_dtype) +
                          static_cast<int64_t>(committed.state_blob.size())));
  m_.resident_blocks.inc(static_cast<double>(resident_blocks));
  m_.shared_blocks.inc(static_cast<double>(resident_blocks));
  auto admitted = admit(committed);
  if (!admitted.ok()) return to_grpc(admitted.status());
  dr.state = std::move(admitted).value();
  YOCO_HOP("decode.admit", req.request_id(),
           .kv("reservation", rid).kv("rows", rows).kv("resident_blocks", resident_blocks));
  if (share_prefixes_ && dr.state->pages) share_prefix(dr);
  ev.Clear();
  ev.mutable_committed()->set_transfer_wait_seconds(transfer_wait);
  if (!writer->Write(ev)) {
    if (dr.state->pages) pool_.release(*dr.state->pages);
    return {grpc::StatusCode::CANCELLED, "the router went away after the transfer"};
  }
  return grpc::Status::OK;
}

grpc::Status DecodeWorkerService::wait_committed(grpc::ServerContext* ctx, uint64_t rid, Clock::time_point lease,
                                                 Clock::time_point deadline, CommittedSequence& out) {
  // A cancelled call or a passed deadline drops the reservation (its blocks go back at once).
  Result<CommittedSequence> committed = Status(StatusCode::kInternal, "not waited");
  while (true) {
    committed = receiver_.wait_committed(rid, std::min(Clock::now() + kCancelPollInterval, lease));
    if (committed.ok() || transfer_error_of(committed.status()) != TransferError::kTimeout) break;
    if (ctx->IsCancelled()) {
      receiver_.cancel(rid);
      return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled while waiting for the KV transfer");
    }
    if (Clock::now() >= lease) {
      receiver_.cancel(rid);
      if (Clock::now() >= deadline)
        return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline exceeded while waiting for the KV transfer");
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "[lease_expired] no commit within the lease");
    }
  }
  if (committed.ok()) {
    out = std::move(committed).value();
    return grpc::Status::OK;
  }
  // The prefill side failed, aborted, or sent something invalid: retriable elsewhere.
  if (Clock::now() >= deadline)
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline exceeded during the KV transfer");
  if (ctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled during the KV transfer");
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, "KV transfer failed: " + committed.status().message());
}

std::vector<BlockKey> DecodeWorkerService::prefix_hashes(const DecodeRequest& dr) const {
  std::vector<int32_t> consumed = dr.prompt;
  consumed.insert(consumed.end(), dr.generated_before.begin(), dr.generated_before.end());
  return chain_keys(consumed, pool_.block_size(), model_.fingerprint());
}

void DecodeWorkerService::share_prefix(DecodeRequest& dr) {
  // Whole blocks of the shipped rows are final: identical ones (same tokens, same model, same
  // bytes) are held once in the pool.
  m_.shared_blocks.inc(pool_.share_prefix(*dr.state->pages, prefix_hashes(dr)));
}

std::vector<int32_t> DecodeWorkerService::claim_resident(const DecodeRequest& dr) {
  if (!share_prefixes_) return {};
  const std::vector<BlockKey> hashes = prefix_hashes(dr);
  // What KV-aware routing bet on, measured: the hits are the claimed blocks (docs/design.md §6).
  m_.residency_blocks.inc(static_cast<double>(hashes.size()));
  return pool_.claim_prefix(hashes, hashes.size());
}

grpc::Status DecodeWorkerService::stream_tokens(grpc::ServerContext* ctx, const std::string& request_id,
                                                DecodeRequest dr, grpc::ServerWriter<internal::v1::DecodeEvent>* writer,
                                                Clock::time_point t0) {
  // 3. Decode in the continuous batcher; stream tokens as they are sampled.
  std::optional<Clock::time_point> last;
  auto pumped = pump_tokens(ctx, batcher_, std::move(dr),
                            [&](const std::vector<int32_t>& ids, const std::vector<TokenLogprobs>& lps) {
                              const auto now = Clock::now();
                              if (!last) {
                                m_.ttft.observe(std::chrono::duration<double>(now - t0).count());
                                YOCO_HOP("decode.first_token", request_id, .kv("ids", ids.size()));
                              } else m_.itl.observe(std::chrono::duration<double>(now - *last).count() / ids.size());
                              last = now;
                              m_.generation_tokens.inc(static_cast<double>(ids.size()));
                              internal::v1::DecodeEvent ev;
                              auto* t = ev.mutable_tokens();
                              for (int32_t id : ids) t->add_ids(id);
                              for (const auto& lp : lps) fill_logprobs(lp, t->add_logprobs());
                              return writer->Write(ev);
                            });
  if (!pumped.ok()) return to_grpc(pumped.status());
  const FinishInfo& f = pumped->info;
  m_.queue.observe(f.queue_seconds);
  YOCO_HOP("decode.finish", request_id,
           .kv("reason", f.reason).kv("tokens", f.completion_tokens).kv("ok", f.status.ok() && !pumped->client_gone));
  if (!f.status.ok()) return to_grpc(f.status);
  if (pumped->client_gone) return {grpc::StatusCode::CANCELLED, "the router went away"};
  internal::v1::DecodeEvent ev;
  auto* fin = ev.mutable_finished();
  fin->set_reason(f.reason);
  fin->set_completion_tokens(static_cast<uint32_t>(f.completion_tokens));
  fin->set_preemptions(f.preemptions);
  fin->set_queue_seconds(f.queue_seconds);
  writer->Write(ev);
  return grpc::Status::OK;
}

void DecodeWorkerService::refresh_metrics() {
  const TransferMetricsSnapshot t = receiver_.metrics().snapshot();
  m_.transfer_bytes.inc(std::max(0.0, static_cast<double>(t.bytes) - m_.transfer_bytes.value()));
  m_.transfer_failures.inc(std::max(0.0, static_cast<double>(t.failures) - m_.transfer_failures.value()));
  m_.transfer_in_flight.set(static_cast<double>(receiver_.in_flight()));
  for (int i = 0; i < static_cast<int>(TransferRefusal::kCount); ++i) {
    Counter& c = m_.transfer_refused.with({transfer_refusal_name(static_cast<TransferRefusal>(i))});
    c.inc(std::max(0.0, static_cast<double>(t.refused[i]) - c.value()));
  }
  m_.kv_shared.set(pool_.shared_blocks());
  m_.forks.inc(std::max(0.0, static_cast<double>(batcher_.forks()) - m_.forks.value()));
  m_.kv_kept.set(pool_.kept_blocks());
  m_.running.set(batcher_.running());
  m_.waiting.set(batcher_.waiting());
  const double free = pool_.free_blocks();
  m_.kv_free.set(free);
  m_.kv_usage.set(1.0 - free / pool_.total_blocks());
}

Result<SequenceState> DecodeWorkerService::admit(CommittedSequence& c) {
  // The receiver checked the blob against this model, so this restores; the blocks go back
  // to the pool if it does not.
  SequenceState st;
  auto info = deserialize_state(c.state_blob, model_.config(), model_.fingerprint(), st);
  if (!info.ok()) {
    pool_.release_blocks(c.blocks);
    return Status(StatusCode::kInternal, "committed state does not restore: " + info.status().message());
  }
  st.pages = pool_.new_pages(std::move(c.blocks));
  return st;
}

grpc::Status DecodeWorkerService::GetLoad(grpc::ServerContext*, const internal::v1::LoadRequest*,
                                          internal::v1::DecodeLoad* load) {
  load->set_free_kv_blocks(pool_.free_blocks());
  load->set_kept_kv_blocks(pool_.kept_blocks());
  load->set_total_kv_blocks(pool_.total_blocks());
  load->set_block_size(pool_.block_size());
  load->set_running(batcher_.running());
  load->set_waiting(batcher_.waiting());
  load->set_reservations(receiver_.in_flight());
  load->set_fingerprint(hex64(model_.fingerprint()));
  load->set_serving(serving_);
  for (uint64_t k : pool_.resident_keys(residency_keys_)) load->add_resident_blocks(k);
  return grpc::Status::OK;
}

grpc::Status DecodeWorkerService::Score(grpc::ServerContext* ctx, const v1::ScoreRequest* req,
                                        v1::ScoreResponse* resp) {
  if (!serving_) return {grpc::StatusCode::UNAVAILABLE, "decode worker is draining"};
  if (req->input_case() != v1::ScoreRequest::kTokens)
    return {grpc::StatusCode::INVALID_ARGUMENT, "input.tokens: required (the router tokenizes)"};
  const std::vector<int32_t> ids(req->tokens().ids().begin(), req->tokens().ids().end());
  if (ids.size() < 2) return {grpc::StatusCode::INVALID_ARGUMENT, "tokens: scoring needs at least 2 tokens"};
  if (Status v = model_.validate_tokens(ids, 0, "tokens"); !v.ok()) return to_grpc(v);
  DecodeRequest dr;
  dr.prompt.assign(ids.begin(), ids.begin() + 1);
  dr.forced.assign(ids.begin() + 1, ids.end());
  dr.max_tokens = static_cast<int>(dr.forced.size());
  dr.sampling.temperature = 0;  // never used: every token is forced
  dr.logprobs = static_cast<int>(std::min<uint32_t>(req->top_logprobs(), 20));
  dr.deadline = steady_deadline(*ctx).value_or(Clock::time_point::max());
  std::vector<TokenLogprobs> lps;
  auto pumped = pump_tokens(ctx, batcher_, std::move(dr),
                            [&](const std::vector<int32_t>&, const std::vector<TokenLogprobs>& batch) {
                              lps.insert(lps.end(), batch.begin(), batch.end());
                              return true;
                            });
  if (!pumped.ok()) return to_grpc(pumped.status());
  if (!pumped->info.status.ok()) return to_grpc(pumped->info.status);
  if (pumped->client_gone) return {grpc::StatusCode::CANCELLED, "the router went away"};
  if (lps.size() + 1 != ids.size()) return {grpc::StatusCode::INTERNAL, "score: a position's log-prob is missing"};
  double sum = 0;
  for (int32_t t : ids) resp->add_token_ids(t);
  for (const TokenLogprobs& lp : lps) {
    resp->add_token_logprobs(lp.logprob);
    sum += lp.logprob;
    if (req->top_logprobs() > 0) fill_logprobs(lp, resp->add_top());
  }
  resp->set_sum_logprob(sum);
  resp->set_perplexity(std::exp(-sum / static_cast<double>(lps.size())));
  return grpc::Status::OK;
}

grpc::Status DecodeWorkerService::Describe(grpc::ServerContext*, const internal::v1::DescribeRequest*,
                                           v1::ModelInfo* info) {
  // The tokenizer's fields (bos_id, eos_id) are the router's: it holds the tokenizer.
  const ModelConfig& c = model_.config();
  info->set_fingerprint(hex64(model_.fingerprint()));
  info->set_arch(c.arch == Arch::kYoco ? "yoco" : "transformer");
  info->set_params_json(c.to_json().dump());
  info->set_vocab_size(c.vocab_size);
  info->set_max_seq_len(c.max_seq_len);
  info->set_n_layers(c.n_layers);
  info->set_n_self_layers(c.n_self_layers);
  info->set_n_loops(c.n_loops);
  info->set_sliding_window(c.sliding_window);
  info->set_kv_bytes_per_token(c.kv_bytes_per_token());
  return grpc::Status::OK;
}

}  // namespace yoco
