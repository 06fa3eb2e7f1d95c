#include "router/service.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/checksum.h"
#include "common/log.h"
#include "proto/grpc_util.h"
#include "proto/sampling_convert.h"
#include "router/stop_strings.h"
#include "yoco/internal/v1/worker.grpc.pb.h"

namespace yoco {

RouterMetrics::RouterMetrics(MetricsRegistry& r)
    : ttft(r.histogram("yoco_time_to_first_token_seconds", "Time from request to first streamed token.",
                       Histogram::latency_buckets())),
      itl(r.histogram("yoco_inter_token_latency_seconds", "Time between streamed tokens.", Histogram::latency_buckets())),
      e2e(r.histogram("yoco_e2e_request_latency_seconds", "Request latency, first byte in to last out.",
                      Histogram::latency_buckets())),
      queue(r.histogram("yoco_request_queue_seconds", "Time a request waited in a prefill worker's queue.",
                        Histogram::latency_buckets())),
      prefill(r.histogram("yoco_prefill_seconds", "Prefill compute time per request.", Histogram::latency_buckets())),
      transfer(r.histogram("yoco_kv_transfer_seconds", "KV transfer time not hidden behind prefill compute.",
                           Histogram::latency_buckets())),
      prompt_tokens(r.counter("yoco_prompt_tokens_total", "Prompt tokens of admitted requests.")),
      generation_tokens(r.counter("yoco_generation_tokens_total", "Tokens streamed to clients.")),
      cached_tokens(r.counter("yoco_cached_prompt_tokens_total", "Prompt tokens served from the KV store.")),
      requests(*r.counter_family("yoco_requests_total", "Finished requests by gRPC status.", {"status"}).value()),
      retries(*r.counter_family("yoco_router_retries_total",
                                "Prefill retries and decode migrations after a worker failure.", {"kind"})
                   .value()),
      running(r.gauge("yoco_requests_running", "Admitted requests in flight.")),
      waiting(r.gauge("yoco_requests_waiting", "Admitted requests that have not streamed a token yet.")),
      healthy_workers(*r.gauge_family("yoco_router_healthy_workers", "Workers passing health checks, by role.", {"role"})
                           .value()) {}

namespace {

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

grpc::Status invalid(const std::string& msg) { return {grpc::StatusCode::INVALID_ARGUMENT, msg}; }

bool past(const grpc::ServerContext* ctx) { return std::chrono::system_clock::now() >= ctx->deadline(); }

// The client's own end of the call: its deadline passed or it cancelled.
std::optional<grpc::Status> client_end(const grpc::ServerContext* ctx) {
  if (past(ctx)) return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline exceeded");
  if (ctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client");
  return std::nullopt;
}

// Errors a worker returns that no other worker would answer differently.
bool final_error(grpc::StatusCode c) {
  return c == grpc::StatusCode::INVALID_ARGUMENT || c == grpc::StatusCode::NOT_FOUND ||
         c == grpc::StatusCode::DEADLINE_EXCEEDED || c == grpc::StatusCode::CANCELLED;
}

std::optional<size_t> pick_excluding(const std::vector<std::string>& excluded,
                                     const std::function<std::optional<size_t>(const std::vector<std::string>&)>& pick) {
  // Prefer a worker that has not failed this request; fall back to any healthy one (a
  // transient failure must not make a request unservable).
  if (auto i = pick(excluded)) return i;
  return pick({});
}

}  // namespace

RouterService::RouterService(ModelConfig config, const Tokenizer* tokenizer, WorkerGroup& prefill, WorkerGroup& decode,
                             RouterLimits limits, RouterMetrics& metrics)
    : config_(std::move(config)),
      tok_(tokenizer),
      prefill_(prefill),
      decode_(decode),
      limits_(limits),
      m_(metrics),
      admission_(limits.max_in_flight, limits.max_queued_tokens),
      picker_(std::random_device{}()),
      seeds_(std::random_device{}()) {}

int RouterService::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return admission_.in_flight();
}

grpc::Status RouterService::Generate(grpc::ServerContext* ctx, const v1::GenerateRequest* req,
                                     grpc::ServerWriter<v1::GenerateResponse>* writer) {
  const auto t0 = Clock::now();
  grpc::Status st = generate(ctx, req, writer);
  m_.requests.with({grpc_code_label(st.error_code())}).inc();
  m_.e2e.observe(since(t0));
  if (!st.ok())
    YOCO_LOG(LogLevel::kInfo, "generate failed",
             LogFields().kv("request_id", req->request_id()).kv("code", grpc_code_label(st.error_code())).kv("message", st.error_message()));
  return st;
}

grpc::Status RouterService::generate(grpc::ServerContext* ctx, const v1::GenerateRequest* req,
                                     grpc::ServerWriter<v1::GenerateResponse>* writer) {
  const auto t0 = Clock::now();
  if (!serving_) return {grpc::StatusCode::UNAVAILABLE, "router is draining"};

  // --- Validate everything before anything is reserved (SPEC 9: the field is named). ---
  std::vector<int32_t> prompt;
  if (req->prompt_case() == v1::GenerateRequest::kText) {
    if (!tok_) return {grpc::StatusCode::FAILED_PRECONDITION, "prompt.text: the router has no tokenizer; send tokens"};
    prompt = tok_->encode(req->text(), false, tok_->add_bos_token());
  } else {
    prompt.assign(req->tokens().ids().begin(), req->tokens().ids().end());
  }
  if (prompt.empty()) return invalid("prompt: empty (give text or at least one token id)");
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= config_.vocab_size)
      return invalid("prompt.tokens[" + std::to_string(i) + "]: token id " + std::to_string(prompt[i]) +
                     " outside [0, " + std::to_string(config_.vocab_size) + ")");
  // Cached documents go first, in order; their ends are where a prefill worker may resume
  // from the KV store instead of computing (SPEC 3.3 "generate with documents").
  std::vector<int64_t> cached_candidates;
  if (req->document_ids_size() > 0) {
    if (req->document_ids_size() > 64) return invalid("document_ids: at most 64 documents");
    std::vector<int32_t> full;
    for (int i = 0; i < req->document_ids_size(); ++i) {
      internal::v1::DocumentRecord rec;
      grpc::Status st = fetch_document(ctx, req->document_ids(i), &rec);
      if (st.error_code() == grpc::StatusCode::NOT_FOUND)
        return {grpc::StatusCode::NOT_FOUND, "document_ids[" + std::to_string(i) + "]: unknown document \"" +
                                                 req->document_ids(i) + "\""};
      if (!st.ok()) return st;
      full.insert(full.end(), rec.tokens().begin(), rec.tokens().end());
      cached_candidates.push_back(static_cast<int64_t>(full.size()));
    }
    full.insert(full.end(), prompt.begin(), prompt.end());
    prompt = std::move(full);
  }
  const int64_t max_tokens = req->max_tokens() == 0 ? 16 : req->max_tokens();
  if (static_cast<int64_t>(prompt.size()) + max_tokens > config_.max_seq_len)
    return invalid("max_tokens: prompt (" + std::to_string(prompt.size()) + " tokens) + max_tokens (" +
                   std::to_string(max_tokens) + ") exceeds the model's max_seq_len " + std::to_string(config_.max_seq_len));
  auto sampling = sampling_from_proto(req->sampling());
  if (!sampling.ok()) return invalid(sampling.status().message());
  if (req->stop_size() > limits_.max_stop_strings)
    return invalid("stop: at most " + std::to_string(limits_.max_stop_strings) + " stop strings");
  for (int i = 0; i < req->stop_size(); ++i) {
    if (req->stop(i).empty()) return invalid("stop[" + std::to_string(i) + "]: empty");
    if (req->stop(i).size() > 256) return invalid("stop[" + std::to_string(i) + "]: longer than 256 bytes");
  }
  if (req->stop_size() > 0 && !tok_) return invalid("stop: stop strings need the router's tokenizer");
  for (int i = 0; i < req->stop_token_ids_size(); ++i)
    if (req->stop_token_ids(i) < 0 || req->stop_token_ids(i) >= config_.vocab_size)
      return invalid("stop_token_ids[" + std::to_string(i) + "]: token id " + std::to_string(req->stop_token_ids(i)) +
                     " outside [0, " + std::to_string(config_.vocab_size) + ")");
  if (req->logprobs() > static_cast<uint32_t>(limits_.max_logprobs))
    return invalid("logprobs: at most " + std::to_string(limits_.max_logprobs));

  // The seed is fixed here, so a stream that migrates continues with the same draws.
  v1::SamplingParams fwd_sampling = req->sampling();
  std::string request_id = req->request_id();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!fwd_sampling.has_seed()) fwd_sampling.set_seed(seeds_());
    if (request_id.empty()) {
      request_id = "req-" + hex64(seeds_());
    }
    if (Status a = admission_.try_admit(static_cast<int64_t>(prompt.size())); !a.ok())
      return {grpc::StatusCode::RESOURCE_EXHAUSTED, a.message()};
  }
  struct Release {
    RouterService* self;
    int64_t n;
    bool waiting = true;
    ~Release() {
      std::lock_guard<std::mutex> lock(self->mu_);
      self->admission_.release(n);
      self->m_.running.dec();
      if (waiting) self->m_.waiting.dec();
    }
  } release{this, static_cast<int64_t>(prompt.size())};
  m_.running.inc();
  m_.waiting.inc();
  m_.prompt_tokens.inc(static_cast<double>(prompt.size()));

  // The prompt's first tokens pick its preferred prefill worker (KV store memory tier warm).
  const uint64_t prefix_hash = this->prefix_hash(prompt);
  std::vector<int32_t> stop_ids(req->stop_token_ids().begin(), req->stop_token_ids().end());
  const std::optional<int32_t> eos = tok_ ? tok_->eos_id() : std::nullopt;
  if (eos && !req->ignore_eos()) stop_ids.push_back(*eos);
  StopStringMatcher stops({req->stop().begin(), req->stop().end()});
  std::unique_ptr<StreamDecoder> text;
  if (tok_) text = std::make_unique<StreamDecoder>(*tok_, /*skip_special=*/true);

  std::vector<int32_t> generated;
  std::vector<std::string> bad_prefill, bad_decode;
  int prefill_failures = 0, migrations = 0;
  std::string last_error;
  v1::Timings timings;
  std::optional<Clock::time_point> first_token, last_token;
  std::string finish_reason;  // "length", "stop" (token id), "stop_string"
  int64_t cached_tokens = 0;

  auto send_final = [&](const std::string& reason) {
    v1::GenerateResponse resp;
    if (text) {  // what the text decoder and the stop matcher still hold
      std::string rest = stops.push(text->flush());
      rest += stops.flush();
      if (!rest.empty()) {
        resp.mutable_delta()->set_text(rest);
        writer->Write(resp);
        resp.Clear();
      }
    }
    auto* fin = resp.mutable_final();
    fin->set_request_id(request_id);
    const bool eos_hit = reason == "stop" && eos && !generated.empty() && generated.back() == *eos;
    fin->set_finish_reason(reason == "length" ? v1::FINISH_REASON_LENGTH
                           : eos_hit          ? v1::FINISH_REASON_EOS
                                              : v1::FINISH_REASON_STOP);
    fin->mutable_usage()->set_prompt_tokens(static_cast<uint32_t>(prompt.size()));
    fin->mutable_usage()->set_cached_tokens(static_cast<uint32_t>(cached_tokens));
    fin->mutable_usage()->set_completion_tokens(static_cast<uint32_t>(generated.size()));
    *fin->mutable_timings() = timings;
    if (first_token) fin->mutable_timings()->set_first_token_seconds(std::chrono::duration<double>(*first_token - t0).count());
    fin->mutable_timings()->set_total_seconds(since(t0));
    writer->Write(resp);
    return grpc::Status::OK;
  };

  while (true) {
    if (auto end = client_end(ctx)) return *end;
    if (static_cast<int64_t>(generated.size()) >= max_tokens) return send_final("length");

    // 1. A decode worker reserves blocks for everything the state will cover.
    const int64_t rows = static_cast<int64_t>(prompt.size() + generated.size());
    const int64_t rows_needed = static_cast<int64_t>(prompt.size()) + max_tokens;
    auto decode_snap = decode_.snapshot();
    auto di = pick_excluding(bad_decode, [&](const std::vector<std::string>& ex) { return pick_decode(decode_snap, rows_needed, ex); });
    if (!di) {  // the load reports may predate requests that just finished: ask again once
      decode_.refresh_now();
      decode_snap = decode_.snapshot();
      di = pick_excluding(bad_decode, [&](const std::vector<std::string>& ex) { return pick_decode(decode_snap, rows_needed, ex); });
    }
    if (!di) {
      if (decode_.healthy_count() > 0)
        return {grpc::StatusCode::RESOURCE_EXHAUSTED, "no decode worker has KV room for " + std::to_string(rows_needed) + " rows"};
      return {grpc::StatusCode::UNAVAILABLE, "no healthy decode worker" + (last_error.empty() ? "" : " (last error: " + last_error + ")")};
    }
    const std::string daddr = decode_snap[*di].address;
    const int64_t block_rows = std::max<int64_t>(1, decode_snap[*di].kv_block_rows);
    // Counted against the worker's free blocks until its next load report or this attempt's end.
    struct PendingBlocks {
      WorkerGroup& g;
      std::string addr;
      int64_t n;
      ~PendingBlocks() { g.add_pending(addr, -n); }
    } pending{decode_, daddr, (rows_needed + block_rows - 1) / block_rows};
    decode_.add_pending(daddr, pending.n);
    std::unique_ptr<grpc::ClientContext> dctx = grpc::ClientContext::FromServerContext(*ctx);
    internal::v1::DecodeRequest dreq;
    dreq.set_request_id(request_id);
    dreq.mutable_prompt()->Add(prompt.begin(), prompt.end());
    dreq.mutable_generated()->Add(generated.begin(), generated.end());
    *dreq.mutable_sampling() = fwd_sampling;
    dreq.set_max_tokens(static_cast<uint32_t>(max_tokens));
    dreq.mutable_stop_token_ids()->Add(stop_ids.begin(), stop_ids.end());
    dreq.set_logprobs(req->logprobs());
    dreq.set_lease_ms(limits_.lease_ms);
    dreq.set_priority(req->priority());
    auto dstub = internal::v1::DecodeWorker::NewStub(decode_.channel(daddr));
    auto reader = dstub->Decode(dctx.get(), dreq);
    internal::v1::DecodeEvent ev;
    auto decode_failed = [&](const grpc::Status& st) -> std::optional<grpc::Status> {
      if (auto end = client_end(ctx)) return end;
      if (final_error(st.error_code())) return st;
      last_error = "decode " + daddr + ": " + st.error_message();
      if (st.error_code() == grpc::StatusCode::UNAVAILABLE) decode_.mark_failed(daddr);
      bad_decode.push_back(daddr);
      m_.retries.with({"migration"}).inc();
      if (++migrations > limits_.migrations)
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "decode failed " + std::to_string(migrations) + " times; " + last_error);
      YOCO_LOG(LogLevel::kWarn, "moving request to another decode worker",
               LogFields().kv("request_id", request_id).kv("from", daddr).kv("generated", static_cast<int64_t>(generated.size())).kv("error", st.error_message()));
      return std::nullopt;
    };
    if (!reader->Read(&ev) || ev.kind_case() != internal::v1::DecodeEvent::kReservation) {
      const grpc::Status st = reader->Finish();
      if (auto r = decode_failed(st.ok() ? grpc::Status(grpc::StatusCode::INTERNAL, "no reservation") : st)) return *r;
      continue;
    }

    // 2. A prefill worker fills the blocks over UCX and returns once the decode worker admitted.
    const std::string dfp = decode_snap[*di].fingerprint;
    auto prefill_snap = prefill_.snapshot();
    for (auto& w : prefill_snap)  // never pair workers of different models (llm-d #2433)
      if (!dfp.empty() && w.fingerprint != dfp) w.healthy = false;
    std::optional<size_t> pi;
    {
      std::lock_guard<std::mutex> lock(mu_);
      pi = pick_excluding(bad_prefill, [&](const std::vector<std::string>& ex) {
        if (limits_.affinity_tokens <= 0) return picker_.pick(prefill_snap, ex);
        return picker_.pick_affine(prefill_snap, prefix_hash, limits_.affinity_max_extra_tokens, ex);
      });
    }
    if (!pi) {
      dctx->TryCancel();
      reader->Finish();
      return {grpc::StatusCode::UNAVAILABLE, "no healthy prefill worker for model " + dfp +
                                                 (last_error.empty() ? "" : " (last error: " + last_error + ")")};
    }
    const std::string paddr = prefill_snap[*pi].address;
    internal::v1::PrefillRequest preq;
    preq.set_request_id(request_id);
    preq.mutable_tokens()->Add(prompt.begin(), prompt.end());
    preq.mutable_tokens()->Add(generated.begin(), generated.end());
    preq.set_reservation(ev.reservation().transfer_descriptor());
    preq.set_priority(req->priority());
    preq.mutable_cached_prefix_candidates()->Add(cached_candidates.begin(), cached_candidates.end());
    internal::v1::PrefillResponse presp;
    prefill_.add_pending(paddr, rows);
    grpc::Status pst;
    {
      std::unique_ptr<grpc::ClientContext> pctx = grpc::ClientContext::FromServerContext(*ctx);
      pst = internal::v1::PrefillWorker::NewStub(prefill_.channel(paddr))->Prefill(pctx.get(), preq, &presp);
    }
    prefill_.add_pending(paddr, -rows);
    if (!pst.ok()) {
      dctx->TryCancel();
      while (reader->Read(&ev)) {
      }
      reader->Finish();
      if (auto end = client_end(ctx)) return *end;
      if (pst.error_code() == grpc::StatusCode::INVALID_ARGUMENT) return pst;
      last_error = "prefill " + paddr + ": " + pst.error_message();
      if (pst.error_code() == grpc::StatusCode::UNAVAILABLE) prefill_.mark_failed(paddr);
      bad_prefill.push_back(paddr);
      m_.retries.with({"prefill"}).inc();
      YOCO_LOG(LogLevel::kWarn, "prefill failed; retrying",
               LogFields().kv("request_id", request_id).kv("worker", paddr).kv("error", pst.error_message()));
      if (++prefill_failures >= limits_.prefill_attempts)
        return {grpc::StatusCode::UNAVAILABLE,
                "prefill failed on " + std::to_string(prefill_failures) + " attempts; " + last_error};
      continue;
    }
    if (generated.empty()) {
      timings.set_queue_seconds(presp.queue_seconds());
      timings.set_prefill_seconds(presp.prefill_seconds());
      timings.set_transfer_seconds(presp.transfer_seconds());
      cached_tokens = presp.cached_tokens();
      m_.cached_tokens.inc(static_cast<double>(presp.cached_tokens()));
      m_.queue.observe(presp.queue_seconds());
      m_.prefill.observe(presp.prefill_seconds());
      m_.transfer.observe(presp.transfer_seconds());
    }

    // 3. Stream the decode worker's tokens to the client.
    bool finished = false, stop_hit = false, client_gone = false;
    while (reader->Read(&ev)) {
      if (ev.kind_case() == internal::v1::DecodeEvent::kFinished) {
        finished = true;
        finish_reason = ev.finished().reason();
        continue;
      }
      if (ev.kind_case() != internal::v1::DecodeEvent::kTokens || stop_hit || client_gone) continue;
      v1::GenerateResponse resp;
      auto* delta = resp.mutable_delta();
      const auto& ids = ev.tokens().ids();
      for (int i = 0; i < ids.size() && !stop_hit; ++i) {
        if (static_cast<int64_t>(generated.size()) >= max_tokens) break;  // never more than asked
        generated.push_back(ids[i]);
        delta->add_token_ids(ids[i]);
        if (i < ev.tokens().logprobs_size()) {
          auto* e = delta->add_logprobs();
          *e = ev.tokens().logprobs(i);
          if (tok_) {
            e->mutable_chosen()->set_text(tok_->decode(std::span<const int32_t>(&ids[i], 1)));
            for (auto& t : *e->mutable_top()) {
              const int32_t id = t.id();
              t.set_text(tok_->decode(std::span<const int32_t>(&id, 1)));
            }
          }
        }
        if (text) *delta->mutable_text() += stops.push(text->push(ids[i]));
        stop_hit = stops.stopped();
      }
      const auto now = Clock::now();
      if (!first_token) {
        first_token = now;
        m_.ttft.observe(std::chrono::duration<double>(now - t0).count());
        std::lock_guard<std::mutex> lock(mu_);
        m_.waiting.dec();
        release.waiting = false;
      } else if (delta->token_ids_size() > 0) {
        m_.itl.observe(std::chrono::duration<double>(now - *last_token).count() / delta->token_ids_size());
      }
      last_token = now;
      m_.generation_tokens.inc(delta->token_ids_size());
      if (!writer->Write(resp)) client_gone = true;
      if (stop_hit || client_gone) dctx->TryCancel();
    }
    const grpc::Status dst = reader->Finish();
    if (client_gone) return {grpc::StatusCode::CANCELLED, "the client went away"};
    if (stop_hit) return send_final("stop_string");
    if (finished && dst.ok()) return send_final(finish_reason);
    if (static_cast<int64_t>(generated.size()) >= max_tokens) return send_final("length");
    // The decode worker was lost (or failed) mid-stream: continue the same stream elsewhere.
    if (auto r = decode_failed(dst.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "stream ended early") : dst)) return *r;
  }
}

std::shared_ptr<grpc::Channel> RouterService::any_prefill_channel(std::optional<uint64_t> prefix_hash) {
  auto snap = prefill_.snapshot();
  std::optional<size_t> i;
  {
    std::lock_guard<std::mutex> lock(mu_);
    i = prefix_hash && limits_.affinity_tokens > 0
            ? picker_.pick_affine(snap, *prefix_hash, limits_.affinity_max_extra_tokens)
            : picker_.pick(snap);
  }
  return i ? prefill_.channel(snap[*i].address) : nullptr;
}

uint64_t RouterService::prefix_hash(std::span<const int32_t> tokens) const {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < tokens.size() && i < static_cast<size_t>(std::max(0, limits_.affinity_tokens)); ++i)
    h = mix64(h, static_cast<uint64_t>(static_cast<uint32_t>(tokens[i])));
  return h;
}

grpc::Status RouterService::fetch_document(grpc::ServerContext* ctx, const std::string& id,
                                           internal::v1::DocumentRecord* rec) {
  v1::GetDocumentRequest req;
  req.set_id(id);
  return call_prefill_worker(ctx, req, rec, [](auto& stub, grpc::ClientContext* c, const auto& r, auto* out) {
    return stub.GetDocument(c, r, out);
  });
}

// The document RPCs run on a prefill worker: it owns the KV store client. Up to three workers
// are tried; answers no other worker would change end the loop.
template <class Req, class Resp, class Call>
grpc::Status RouterService::call_prefill_worker(grpc::ServerContext* ctx, const Req& req, Resp* resp, Call call,
                                                std::optional<uint64_t> affinity) {
  grpc::Status st;
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto ch = any_prefill_channel(attempt == 0 ? affinity : std::nullopt);
    if (!ch) {
      st = {grpc::StatusCode::UNAVAILABLE, "no healthy prefill worker"};
      break;
    }
    auto cctx = grpc::ClientContext::FromServerContext(*ctx);
    resp->Clear();
    auto stub = internal::v1::PrefillWorker::NewStub(ch);
    st = call(*stub, cctx.get(), req, resp);
    if (st.ok() || final_error(st.error_code()) || st.error_code() == grpc::StatusCode::FAILED_PRECONDITION ||
        st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED || client_end(ctx))
      break;
  }
  return st;
}

template <class Req, class Resp, class Call>
grpc::Status RouterService::on_prefill_worker(grpc::ServerContext* ctx, const Req& req, Resp* resp, Call call,
                                              std::optional<uint64_t> affinity) {
  const auto t0 = Clock::now();
  const grpc::Status st = call_prefill_worker(ctx, req, resp, call, affinity);
  m_.requests.with({grpc_code_label(st.error_code())}).inc();
  m_.e2e.observe(since(t0));
  return st;
}

grpc::Status RouterService::CacheDocument(grpc::ServerContext* ctx, const v1::CacheDocumentRequest* req,
                                          v1::Document* doc) {
  v1::CacheDocumentRequest fwd;
  fwd.set_ttl_seconds(req->ttl_seconds());
  std::vector<int32_t> ids;
  if (req->content_case() == v1::CacheDocumentRequest::kText) {
    if (!tok_) return {grpc::StatusCode::FAILED_PRECONDITION, "content.text: the router has no tokenizer; send tokens"};
    ids = tok_->encode(req->text(), false, false);
  } else {
    ids.assign(req->tokens().ids().begin(), req->tokens().ids().end());
  }
  if (ids.empty()) return invalid("content: empty document (give text or at least one token id)");
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= config_.vocab_size)
      return invalid("content.tokens[" + std::to_string(i) + "]: token id " + std::to_string(ids[i]) + " outside [0, " +
                     std::to_string(config_.vocab_size) + ")");
  if (static_cast<int64_t>(ids.size()) >= config_.max_seq_len)
    return invalid("content: " + std::to_string(ids.size()) + " tokens; a document must leave room in max_seq_len " +
                   std::to_string(config_.max_seq_len));
  fwd.mutable_tokens()->mutable_ids()->Add(ids.begin(), ids.end());
  // Computed where later prompts starting with this document will go (its memory tier).
  return on_prefill_worker(
      ctx, fwd, doc,
      [](auto& stub, grpc::ClientContext* c, const auto& r, auto* out) { return stub.CacheDocument(c, r, out); },
      prefix_hash(ids));
}

grpc::Status RouterService::GetDocument(grpc::ServerContext* ctx, const v1::GetDocumentRequest* req, v1::Document* doc) {
  if (req->id().empty()) return invalid("id: empty");
  internal::v1::DocumentRecord rec;
  grpc::Status st = on_prefill_worker(ctx, *req, &rec, [](auto& stub, grpc::ClientContext* c, const auto& r, auto* out) {
    return stub.GetDocument(c, r, out);
  });
  if (st.ok()) *doc = rec.document();
  return st;
}

grpc::Status RouterService::ListDocuments(grpc::ServerContext* ctx, const v1::ListDocumentsRequest* req,
                                          v1::ListDocumentsResponse* resp) {
  return on_prefill_worker(ctx, *req, resp, [](auto& stub, grpc::ClientContext* c, const auto& r, auto* out) {
    return stub.ListDocuments(c, r, out);
  });
}

grpc::Status RouterService::DeleteDocument(grpc::ServerContext* ctx, const v1::DeleteDocumentRequest* req,
                                           v1::DeleteDocumentResponse* resp) {
  if (req->id().empty()) return invalid("id: empty");
  return on_prefill_worker(ctx, *req, resp, [](auto& stub, grpc::ClientContext* c, const auto& r, auto* out) {
    return stub.DeleteDocument(c, r, out);
  });
}

std::shared_ptr<grpc::Channel> RouterService::any_decode_channel() {
  const auto snap = decode_.snapshot();
  for (const auto& w : snap)
    if (w.healthy) return decode_.channel(w.address);
  return nullptr;
}

grpc::Status RouterService::Score(grpc::ServerContext* ctx, const v1::ScoreRequest* req, v1::ScoreResponse* resp) {
  const auto t0 = Clock::now();
  auto run = [&]() -> grpc::Status {
    v1::ScoreRequest fwd = *req;
    if (req->input_case() == v1::ScoreRequest::kText) {
      if (!tok_) return {grpc::StatusCode::FAILED_PRECONDITION, "input.text: the router has no tokenizer; send tokens"};
      fwd.mutable_tokens()->Clear();
      for (int32_t t : tok_->encode(req->text(), false, tok_->add_bos_token())) fwd.mutable_tokens()->add_ids(t);
    }
    if (fwd.tokens().ids_size() < 2) return invalid("input: needs at least two tokens to score");
    for (int i = 0; i < fwd.tokens().ids_size(); ++i)
      if (fwd.tokens().ids(i) < 0 || fwd.tokens().ids(i) >= config_.vocab_size)
        return invalid("input.tokens[" + std::to_string(i) + "]: token id " + std::to_string(fwd.tokens().ids(i)) +
                       " outside [0, " + std::to_string(config_.vocab_size) + ")");
    if (fwd.tokens().ids_size() > config_.max_seq_len)
      return invalid("input: longer than max_seq_len " + std::to_string(config_.max_seq_len));
    for (int attempt = 0; attempt < 3; ++attempt) {
      auto ch = any_decode_channel();
      if (!ch) return {grpc::StatusCode::UNAVAILABLE, "no healthy decode worker"};
      auto cctx = grpc::ClientContext::FromServerContext(*ctx);
      resp->Clear();
      grpc::Status st = v1::Yoco::NewStub(ch)->Score(cctx.get(), fwd, resp);
      if (st.ok() || final_error(st.error_code()) || client_end(ctx)) return st;
    }
    return {grpc::StatusCode::UNAVAILABLE, "score failed on 3 attempts"};
  };
  grpc::Status st = run();
  m_.requests.with({grpc_code_label(st.error_code())}).inc();
  m_.e2e.observe(since(t0));
  return st;
}

grpc::Status RouterService::Tokenize(grpc::ServerContext*, const v1::TokenizeRequest* req, v1::TokenizeResponse* resp) {
  if (!tok_) return {grpc::StatusCode::FAILED_PRECONDITION, "the router's model directory has no tokenizer"};
  for (int32_t t : tok_->encode(req->text(), req->allow_special(), req->add_bos())) resp->add_ids(t);
  return grpc::Status::OK;
}

grpc::Status RouterService::Detokenize(grpc::ServerContext*, const v1::DetokenizeRequest* req,
                                       v1::DetokenizeResponse* resp) {
  if (!tok_) return {grpc::StatusCode::FAILED_PRECONDITION, "the router's model directory has no tokenizer"};
  std::vector<int32_t> ids(req->ids().begin(), req->ids().end());
  auto text = tok_->decode_checked(ids, req->skip_special());
  if (!text.ok()) return invalid(text.status().message());
  resp->set_text(text.value());
  return grpc::Status::OK;
}

grpc::Status RouterService::GetModelInfo(grpc::ServerContext* ctx, const v1::GetModelInfoRequest* req,
                                         v1::ModelInfo* info) {
  // The decode workers hold the weights (and so the fingerprint); ask one.
  if (auto ch = any_decode_channel()) {
    auto cctx = grpc::ClientContext::FromServerContext(*ctx);
    if (v1::Yoco::NewStub(ch)->GetModelInfo(cctx.get(), *req, info).ok()) return grpc::Status::OK;
  }
  return {grpc::StatusCode::UNAVAILABLE, "no healthy decode worker to describe the model"};
}

}  // namespace yoco
