#include "router/generate_call.h"

#include <algorithm>

#include "common/checksum.h"
#include "common/document_id.h"
#include "common/log.h"
#include "proto/grpc_util.h"
#include "proto/sampling_convert.h"
#include "proto/structured_convert.h"
#include "router/call_util.h"
#include "router/documents.h"
#include "router/stall_watch.h"
#include "structured/check.h"
#include "tokenizer/utf8.h"

namespace yoco {

GenerateCall::GenerateCall(RouterCore& core, GenerateSink& client, const v1::GenerateRequest& req, KeyLease* key,
                           ForkMember fork)
    : core_(core), client_(client), req_(req), tok_(core.tokenizer()), key_(key), fork_(std::move(fork)) {
  if (fork_.n > 1) {
    core_.forks().join(fork_.group);
    fork_joined_ = true;
  }
}

GenerateCall::~GenerateCall() {
  if (fork_joined_) {
    if (fork_.index == 0) core_.forks().publish(fork_.group, std::nullopt);  // if it never did
    core_.forks().leave(fork_.group);
  }
  if (!admitted_) return;
  core_.release(static_cast<int64_t>(prompt_.size()));
  core_.metrics().observe_released(/*still_waiting=*/!first_token_, static_cast<int64_t>(generated_.size()));
}

grpc::Status GenerateCall::run() {
  if (!core_.serving()) return {grpc::StatusCode::UNAVAILABLE, "router is draining"};
  if (grpc::Status st = validate(); !st.ok()) return st;
  if (grpc::Status st = admit(); !st.ok()) return st;
  prepare_stream();
  while (true) {
    Step s = attempt();
    // A group's leader answers its followers after its first attempt: its worker (published at
    // its first token, in relay) or nothing, and they run alone.
    if (fork_joined_ && fork_.index == 0 && !fork_published_) {
      core_.forks().publish(fork_.group, std::nullopt);
      fork_published_ = true;
    }
    if (s.kind == Step::kEnd) return s.status;
  }
}

// ---- validate: everything before anything is reserved; errors name the field ----

grpc::Status GenerateCall::validate() {
  auto model = core_.model();
  if (!model.ok()) return to_grpc(model.status());
  if (grpc::Status st = validate_prompt(**model); !st.ok()) return st;
  if (grpc::Status st = resolve_documents(); !st.ok()) return st;
  return validate_options(**model);
}

grpc::Status GenerateCall::validate_prompt(const v1::ModelInfo& model) {
  if (req_.prompt_case() == v1::GenerateRequest::kText) {
    if (!tok_) return {grpc::StatusCode::FAILED_PRECONDITION, "prompt.text: the router has no tokenizer; send tokens"};
    prompt_ = tok_->encode(req_.text(), /*allow_special=*/!req_.split_special_tokens(), tok_->add_bos_token());
  } else {
    prompt_.assign(req_.tokens().ids().begin(), req_.tokens().ids().end());
  }
  if (prompt_.empty()) return invalid("prompt: empty (give text or at least one token id)");
  return check_token_ids(prompt_, model.vocab_size(), "prompt.tokens");
}

// Cached documents go first, in order; their ends are where a prefill worker may resume from the
// KV store instead of computing (docs/design.md, generate with documents).
grpc::Status GenerateCall::resolve_documents() {
  if (req_.document_ids_size() == 0) return grpc::Status::OK;
  if (req_.document_ids_size() > 64) return invalid("document_ids: at most 64 documents");
  std::vector<int32_t> full;
  for (int i = 0; i < req_.document_ids_size(); ++i)
    if (!is_document_id(req_.document_ids(i)))
      return invalid(not_a_document_id("document_ids[" + std::to_string(i) + "]", req_.document_ids(i)));
  for (int i = 0; i < req_.document_ids_size(); ++i) {
    internal::v1::DocumentRecord rec;
    grpc::Status st = fetch_document(core_, client_, req_.document_ids(i), &rec, document_owner(key_));
    if (st.error_code() == grpc::StatusCode::NOT_FOUND)
      return {grpc::StatusCode::NOT_FOUND,
              "document_ids[" + std::to_string(i) + "]: unknown document \"" + req_.document_ids(i) + "\""};
    if (!st.ok()) return st;
    full.insert(full.end(), rec.tokens().begin(), rec.tokens().end());
    cached_candidates_.push_back(static_cast<int64_t>(full.size()));
  }
  full.insert(full.end(), prompt_.begin(), prompt_.end());
  prompt_ = std::move(full);
  return grpc::Status::OK;
}

grpc::Status GenerateCall::validate_options(const v1::ModelInfo& model) {
  const RouterLimits& lim = core_.limits();
  max_tokens_ = req_.max_tokens() == 0 ? 16 : req_.max_tokens();
  // The prompt is to blame when it alone leaves no room for a token; max_tokens only otherwise.
  if (const int64_t n = static_cast<int64_t>(prompt_.size()), max = model.max_seq_len(); n >= max)
    return invalid("prompt: " + std::to_string(n) + " tokens " + (n > max ? "exceed" : "fill") +
                   " the model's max_seq_len " + std::to_string(max) + " (no room left for max_tokens)");
  if (static_cast<int64_t>(prompt_.size()) + max_tokens_ > model.max_seq_len())
    return invalid("max_tokens: prompt (" + std::to_string(prompt_.size()) + " tokens) + max_tokens (" +
                   std::to_string(max_tokens_) + ") exceeds the model's max_seq_len " +
                   std::to_string(model.max_seq_len()));
  if (auto sampling = sampling_from_proto(req_.sampling()); !sampling.ok()) return invalid(sampling.status().message());
  if (req_.stop_size() > lim.max_stop_strings)
    return invalid("stop: at most " + std::to_string(lim.max_stop_strings) + " stop strings");
  for (int i = 0; i < req_.stop_size(); ++i) {
    if (req_.stop(i).empty()) return invalid("stop[" + std::to_string(i) + "]: empty");
    if (req_.stop(i).size() > 256) return invalid("stop[" + std::to_string(i) + "]: longer than 256 bytes");
  }
  if (req_.stop_size() > 0 && !tok_) return invalid("stop: stop strings need the router's tokenizer");
  const std::vector<int32_t> stop_ids(req_.stop_token_ids().begin(), req_.stop_token_ids().end());
  if (grpc::Status st = check_token_ids(stop_ids, model.vocab_size(), "stop_token_ids"); !st.ok()) return st;
  if (req_.logprobs() > static_cast<uint32_t>(lim.max_logprobs))
    return invalid("logprobs: at most " + std::to_string(lim.max_logprobs));
  return validate_structured_output();
}

// Parsed here, compiled on the decode worker: a schema, regex or grammar that cannot work is
// refused before anything is reserved (docs/design.md §3.2c).
grpc::Status GenerateCall::validate_structured_output() const {
  if (!req_.has_structured_output()) return grpc::Status::OK;
  auto so = structured_from_proto(req_.structured_output());
  if (!so.ok()) return to_grpc(so.status());
  return to_grpc(check_structured_output(*so, std::string("structured_output.") + so->kind_name()));
}

// ---- admit: the request holds a place from here until the destructor ----

grpc::Status GenerateCall::admit() {
  sampling_ = req_.sampling();
  if (!sampling_.has_seed()) sampling_.set_seed(core_.next_seed());
  request_id_ = req_.request_id().empty() ? "req-" + hex64(core_.next_seed()) : req_.request_id();
  if (key_) {  // the key's max_context and tokens_per_minute, before the router's own admission
    if (Status k = key_->charge(static_cast<int64_t>(prompt_.size()), max_tokens_); !k.ok())
      return {grpc::StatusCode::RESOURCE_EXHAUSTED, k.message()};
  }
  if (Status a = core_.try_admit(static_cast<int64_t>(prompt_.size())); !a.ok())
    return {grpc::StatusCode::RESOURCE_EXHAUSTED, a.message()};
  admitted_ = true;
  YOCO_HOP("router.admit", request_id_, .kv("prompt_tokens", prompt_.size()).kv("max_tokens", max_tokens_));
  core_.metrics().observe_admitted(static_cast<int64_t>(prompt_.size()));
  return grpc::Status::OK;
}

void GenerateCall::prepare_stream() {
  // The prompt's first tokens pick its preferred prefill worker (KV store memory tier warm).
  prefix_hash_ = core_.prefix_hash(prompt_);
  stop_ids_.assign(req_.stop_token_ids().begin(), req_.stop_token_ids().end());
  eos_ = tok_ ? tok_->eos_id() : std::nullopt;
  if (eos_ && !req_.ignore_eos()) stop_ids_.push_back(*eos_);
  stops_ = std::make_unique<StopStringMatcher>(std::vector<std::string>(req_.stop().begin(), req_.stop().end()));
  if (tok_)
    text_ = std::make_unique<StreamDecoder>(
        *tok_, /*skip_special=*/!req_.has_skip_special_tokens() || req_.skip_special_tokens());
}

std::optional<grpc::Status> GenerateCall::client_end() const { return client_.end(); }

// ---- attempt: one decode worker (and one prefill worker), until the stream ends or moves ----

GenerateCall::Step GenerateCall::attempt() {
  if (auto end = client_end()) return Step::end(*end);
  if (static_cast<int64_t>(generated_.size()) >= max_tokens_) return finish("length");
  DecodePick pick;
  // A follower's first attempt goes to its leader's worker, which forks the leader's state.
  bool follow = false;
  if (fork_joined_ && fork_.index > 0 && !fork_tried_ && generated_.empty()) {
    fork_tried_ = true;
    // At most a lease for the leader, in slices, so that the client's end is heard.
    std::optional<std::string> address;
    const auto until = Clock::now() + std::chrono::milliseconds(core_.limits().lease_ms);
    while (!core_.forks().wait(fork_.group, std::chrono::milliseconds(100), &address) && Clock::now() < until)
      if (auto end = client_end()) return Step::end(*end);
    if (address) {
      pick = {*address, "", 1};
      follow = true;
    }
  }
  if (!follow)
    if (Step s = pick_decode(&pick); s.kind != Step::kNext) return s;
  WorkerGroup& decode = core_.decode();
  decode.add_pending(pick.address, pick.blocks);
  struct Pending {  // released when this attempt ends, whatever way
    WorkerGroup& g;
    const DecodePick& p;
    ~Pending() { g.add_pending(p.address, -p.blocks); }
  } pending{decode, pick};

  const std::unique_ptr<DecodeCall> stream = open_decode(pick, follow);
  // One watch for everything this worker must answer, from the call's start to its end: the
  // reservation, the prefill (whose transfer and commit wait on it), the admission, the tokens.
  // Destroyed before the stream, so it never touches a finished call.
  const std::unique_ptr<StallWatch> stall = watch(*stream, pick.address);
  if (!core_.colocated() && !follow) {
    internal::v1::DecodeEvent ev;
    if (!stream->read(&ev) || ev.kind_case() != internal::v1::DecodeEvent::kReservation) {
      const grpc::Status st = stream->finish();
      if (stall->fired()) return decode_stalled(pick.address);
      return decode_failed(pick.address, st.ok() ? grpc::Status(grpc::StatusCode::INTERNAL, "no reservation") : st);
    }
    stall->heard();
    if (Step s = prefill(pick, ev.reservation().transfer_descriptor(), *stream, *stall); s.kind != Step::kNext)
      return s;
  }
  return relay(*stream, pick.address, *stall);
}

// A decode worker that reserves blocks for everything the state will cover.
GenerateCall::Step GenerateCall::pick_decode(DecodePick* pick) {
  const int64_t rows_needed = static_cast<int64_t>(prompt_.size()) + max_tokens_;
  auto snap = core_.decode_snapshot();
  auto choose = [&](const std::vector<std::string>& ex) { return choose_decode(snap, rows_needed, ex); };
  auto di = pick_excluding(bad_decode_, choose);
  if (!di) {  // the load reports may predate requests that just finished: ask again once
    core_.decode().refresh_now();
    snap = core_.decode_snapshot();
    di = pick_excluding(bad_decode_, choose);
  }
  if (!di) {
    if (core_.decode().healthy_count() > 0)
      return Step::end({grpc::StatusCode::RESOURCE_EXHAUSTED,
                        "no decode worker has KV room for " + std::to_string(rows_needed) + " rows"});
    return Step::end({grpc::StatusCode::UNAVAILABLE,
                      "no healthy decode worker" + (last_error_.empty() ? "" : " (last error: " + last_error_ + ")")});
  }
  const int64_t block_rows = std::max<int64_t>(1, snap[*di].kv_block_rows);
  // Pending load: the blocks this request adds there (resident ones are shared, not added), so
  // requests in flight for a prefix a worker holds do not make it look full.
  const int64_t blocks = (rows_needed + block_rows - 1) / block_rows;
  *pick = {snap[*di].address, snap[*di].fingerprint, std::max<int64_t>(1, blocks - chosen_resident_blocks_)};
  YOCO_HOP("router.pick_decode", request_id_, .kv("decode", pick->address).kv("migrations", migrations_));
  return Step::next();
}

// KV-aware (the worker holding most of this sequence's leading blocks, traded against load) or
// the most free blocks alone (docs/design.md §3.3). Either way the prediction is counted, and the
// chosen worker is assumed to hold the sequence's blocks until its next load report says.
std::optional<size_t> GenerateCall::choose_decode(const std::vector<WorkerSnapshot>& snap, int64_t rows_needed,
                                                  const std::vector<std::string>& exclude) {
  std::vector<int32_t> consumed = prompt_;
  consumed.insert(consumed.end(), generated_.begin(), generated_.end());
  const std::vector<PromptChain> chains = RouterCore::decode_chains(consumed, snap);
  const RouterLimits& lim = core_.limits();
  std::optional<size_t> i;
  if (!lim.kv_aware_decode) i = yoco::pick_decode(snap, rows_needed, exclude);
  else if (auto kv = pick_decode_kv(snap, rows_needed, chains, lim.decode_cost, exclude)) i = kv->index;
  if (!i) return i;
  const DecodeChoice c = residency(snap[*i], *i, chains);
  chosen_resident_blocks_ = c.resident_blocks;
  core_.metrics().observe_decode_residency(c.prompt_blocks, c.resident_blocks);
  for (const PromptChain& p : chains)  // colocated workers prefill locally and index nothing
    if (p.block_rows == snap[*i].kv_block_rows && !core_.colocated())
      core_.decode().add_resident(snap[*i].address, p.keys);
  return i;
}

std::unique_ptr<DecodeCall> GenerateCall::open_decode(const DecodePick& pick, bool follow) {
  internal::v1::DecodeRequest dreq;
  dreq.set_request_id(request_id_);
  dreq.mutable_prompt()->Add(prompt_.begin(), prompt_.end());
  dreq.mutable_generated()->Add(generated_.begin(), generated_.end());
  *dreq.mutable_sampling() = sampling_;
  dreq.set_max_tokens(static_cast<uint32_t>(max_tokens_));
  dreq.mutable_stop_token_ids()->Add(stop_ids_.begin(), stop_ids_.end());
  dreq.set_logprobs(req_.logprobs());
  dreq.set_lease_ms(core_.limits().lease_ms);
  dreq.set_priority(req_.priority());
  dreq.set_local_prefill(core_.colocated() || follow);  // no prefill workers: the decode worker prefills itself
  if (follow) dreq.set_fork_group(fork_.group);
  if (fork_joined_ && fork_.index == 0 && !fork_published_ && generated_.empty()) {
    dreq.set_fork_group(fork_.group);
    dreq.set_fork_siblings(static_cast<uint32_t>(fork_.n - 1));
  }
  if (req_.has_structured_output()) *dreq.mutable_structured_output() = req_.structured_output();
  return core_.calls().open_decode(pick.address, dreq, client_);
}

// The stream's call is cancelled if its worker hangs (router/stall_watch.h).
std::unique_ptr<StallWatch> GenerateCall::watch(DecodeCall& stream, const std::string& address) {
  return std::make_unique<StallWatch>(
      std::chrono::milliseconds(core_.limits().stall_timeout_ms),
      [this, address] { return !core_.decode().answering(address); }, [s = &stream] { s->cancel(); });
}

// A prefill worker of the same model fills the reservation over UCX and returns once the decode
// worker admitted the sequence; a failure is retried on another prefill worker. The call waits on
// the decode worker too (its transfer, its commit acknowledgement): if that one hangs, the stall
// watch cancels both calls and the request is prefilled again on another decode worker.
GenerateCall::Step GenerateCall::prefill(const DecodePick& pick, const std::string& reservation, DecodeCall& stream,
                                         StallWatch& stall) {
  auto snap = core_.prefill().snapshot();
  for (auto& w : snap)  // never pair workers of different models (llm-d #2433)
    if (!pick.fingerprint.empty() && w.fingerprint != pick.fingerprint) w.healthy = false;
  auto choose = [&](const std::vector<std::string>& ex) { return core_.pick_prefill(snap, prefix_hash_, ex); };
  const auto pi = pick_excluding(bad_prefill_, choose);
  if (!pi) {
    stream.cancel();
    stream.finish();
    return Step::end(
        {grpc::StatusCode::UNAVAILABLE, "no healthy prefill worker for model " + pick.fingerprint +
                                            (last_error_.empty() ? "" : " (last error: " + last_error_ + ")")});
  }
  const std::string paddr = snap[*pi].address;
  YOCO_HOP("router.pick_prefill", request_id_, .kv("prefill", paddr).kv("decode", pick.address));
  internal::v1::PrefillRequest preq;
  preq.set_request_id(request_id_);
  preq.mutable_tokens()->Add(prompt_.begin(), prompt_.end());
  preq.mutable_tokens()->Add(generated_.begin(), generated_.end());
  preq.set_reservation(reservation);
  preq.set_priority(req_.priority());
  preq.mutable_cached_prefix_candidates()->Add(cached_candidates_.begin(), cached_candidates_.end());
  const int64_t rows = static_cast<int64_t>(prompt_.size() + generated_.size());
  internal::v1::PrefillResponse presp;
  core_.prefill().add_pending(paddr, rows);
  grpc::Status pst;
  {
    const std::unique_ptr<PrefillCall> call = core_.calls().prefill(paddr, preq, client_);
    const StallWatch::Link link = stall.link([c = call.get()] { c->cancel(); });
    pst = call->wait(&presp);
  }
  core_.prefill().add_pending(paddr, -rows);
  // Not the prefill worker's fault: it let go of the job when its call was cancelled (and it
  // aborted the transfer the hung worker reads when it wakes).
  if (stall.fired()) {
    stream.cancel_and_drain();
    return decode_stalled(pick.address);
  }
  if (!pst.ok()) {
    stream.cancel_and_drain();
    return prefill_failed(paddr, pst);
  }
  // The decode worker acknowledged the commit: it was heard from.
  stall.heard();
  if (generated_.empty()) {  // the first prefill's timings are the request's
    timings_.set_queue_seconds(presp.queue_seconds());
    timings_.set_prefill_seconds(presp.prefill_seconds());
    timings_.set_transfer_seconds(presp.transfer_seconds());
    cached_tokens_ = presp.cached_tokens();
    core_.metrics().observe_prefill(presp);
  }
  return Step::next();
}

GenerateCall::Step GenerateCall::prefill_failed(const std::string& address, const grpc::Status& st) {
  if (auto end = client_end()) return Step::end(*end);
  if (st.error_code() == grpc::StatusCode::INVALID_ARGUMENT) return Step::end(st);
  last_error_ = "prefill " + address + ": " + st.error_message();
  if (st.error_code() == grpc::StatusCode::UNAVAILABLE) core_.prefill().mark_failed(address);
  bad_prefill_.push_back(address);
  core_.metrics().observe_retry("prefill");
  YOCO_LOG(LogLevel::kWarn, "prefill failed; retrying",
           LogFields().kv("request_id", request_id_).kv("worker", address).kv("error", st.error_message()));
  if (++prefill_failures_ >= core_.limits().prefill_attempts)
    return Step::end({grpc::StatusCode::UNAVAILABLE,
                      "prefill failed on " + std::to_string(prefill_failures_) + " attempts; " + last_error_});
  return Step::retry();
}

// ---- relay: the decode worker's tokens to the client ----

GenerateCall::Step GenerateCall::relay(DecodeCall& stream, const std::string& address, StallWatch& stall) {
  internal::v1::DecodeEvent ev;
  bool finished = false;
  std::string reason;
  while (stream.read(&ev)) {
    stall.heard();
    // Cancelled as stalled: whatever the old worker still sends is dropped; the stream goes on
    // from the tokens already relayed.
    if (stall.fired()) break;
    if (fork_joined_ && fork_.index == 0 && !fork_published_ &&
        (ev.kind_case() == internal::v1::DecodeEvent::kTokens ||
         ev.kind_case() == internal::v1::DecodeEvent::kFinished)) {
      core_.forks().publish(fork_.group, address);  // admitted there: the followers fork it
      fork_published_ = true;
    }
    if (ev.kind_case() == internal::v1::DecodeEvent::kFinished) {
      finished = true;
      reason = ev.finished().reason();
      // Colocated: no prefill worker reported a queue time; the decode worker's is the request's.
      if (core_.colocated() && migrations_ == 0) timings_.set_queue_seconds(ev.finished().queue_seconds());
      continue;
    }
    if (ev.kind_case() != internal::v1::DecodeEvent::kTokens || stop_hit_ || client_gone_) continue;
    if (!relay_tokens(ev.tokens())) client_gone_ = true;
    if (stop_hit_ || client_gone_) stream.cancel();
  }
  const grpc::Status st = stream.finish();
  if (client_gone_) return Step::end({grpc::StatusCode::CANCELLED, "the client went away"});
  if (stop_hit_) return finish("stop_string");
  if (finished && st.ok()) return finish(reason);
  if (static_cast<int64_t>(generated_.size()) >= max_tokens_) return finish("length");
  if (stall.fired()) {  // the worker may have hung right after the stream's stop token
    if (!generated_.empty() && std::count(stop_ids_.begin(), stop_ids_.end(), generated_.back())) return finish("stop");
    return decode_stalled(address);
  }
  // The decode worker was lost (or failed) mid-stream: continue the same stream elsewhere.
  return decode_failed(address, st.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "stream ended early") : st);
}

bool GenerateCall::relay_tokens(const internal::v1::Tokens& tokens) {
  v1::GenerateResponse resp;
  auto* delta = resp.mutable_delta();
  const auto& ids = tokens.ids();
  for (int i = 0; i < ids.size() && !stop_hit_; ++i) {
    if (static_cast<int64_t>(generated_.size()) >= max_tokens_) break;  // never more than asked
    generated_.push_back(ids[i]);
    delta->add_token_ids(ids[i]);
    if (i < tokens.logprobs_size()) {
      auto* e = delta->add_logprobs();
      *e = tokens.logprobs(i);
      fill_logprob_text(e, ids[i]);
    }
    if (text_) *delta->mutable_text() += stops_->push(text_->push(ids[i]));
    stop_hit_ = stops_->stopped();
  }
  const auto now = Clock::now();
  if (!first_token_) {
    first_token_ = now;
    core_.metrics().observe_ttft(std::chrono::duration<double>(now - t0_).count());
  } else if (delta->token_ids_size() > 0) {
    core_.metrics().observe_itl(std::chrono::duration<double>(now - *last_token_).count() / delta->token_ids_size());
  }
  last_token_ = now;
  core_.metrics().observe_generated(delta->token_ids_size());
  return client_.write(resp);
}

// One token's text; a byte-level token that is part of a character has no UTF-8 of its own, and a
// protobuf string must be UTF-8, so its bytes show as U+FFFD (as Hugging Face's decode does).
void GenerateCall::fill_logprob_text(v1::LogprobEntry* e, int32_t chosen) const {
  if (!tok_) return;
  auto text = [this](int32_t id) {
    std::string out;
    utf8::append_lossy(out, tok_->decode(std::span<const int32_t>(&id, 1)));
    return out;
  };
  e->mutable_chosen()->set_text(text(chosen));
  for (auto& t : *e->mutable_top()) t.set_text(text(t.id()));
}

// ---- migrate: a decode worker failed; the stream moves to another (prompt + tokens so far) ----

GenerateCall::Step GenerateCall::decode_failed(const std::string& address, const grpc::Status& st) {
  if (auto end = client_end()) return Step::end(*end);
  if (final_error(st.error_code())) return Step::end(st);
  last_error_ = "decode " + address + ": " + st.error_message();
  if (st.error_code() == grpc::StatusCode::UNAVAILABLE) core_.decode().mark_failed(address);
  bad_decode_.push_back(address);
  core_.metrics().observe_retry("migration");
  if (++migrations_ > core_.limits().migrations)
    return Step::end(
        {grpc::StatusCode::UNAVAILABLE, "decode failed " + std::to_string(migrations_) + " times; " + last_error_});
  YOCO_LOG(LogLevel::kWarn, "moving request to another decode worker",
           LogFields()
               .kv("request_id", request_id_)
               .kv("from", address)
               .kv("generated", static_cast<int64_t>(generated_.size()))
               .kv("error", st.error_message()));
  YOCO_HOP("router.migrate", request_id_, .kv("from", address).kv("generated", generated_.size()));
  return Step::retry();
}

// A hung decode worker (silent for --stall-timeout-ms while failing health polls): its call was
// cancelled, so it frees the reservation's blocks when it runs again; the stream migrates.
GenerateCall::Step GenerateCall::decode_stalled(const std::string& address) {
  core_.metrics().observe_stall();
  return decode_failed(
      address, {grpc::StatusCode::UNAVAILABLE, "no event for " + std::to_string(core_.limits().stall_timeout_ms) +
                                                   " ms and failing health polls (hung worker)"});
}

// ---- finish: what the text decoder and the stop matcher still hold, then the final message ----

GenerateCall::Step GenerateCall::finish(const std::string& reason) {
  YOCO_HOP("router.finish", request_id_, .kv("reason", reason).kv("tokens", generated_.size()));
  v1::GenerateResponse resp;
  if (text_) {
    std::string rest = stops_->push(text_->flush());
    rest += stops_->flush();
    if (!rest.empty()) {
      resp.mutable_delta()->set_text(rest);
      client_.write(resp);
      resp.Clear();
    }
  }
  auto* fin = resp.mutable_final();
  fin->set_request_id(request_id_);
  const bool eos_hit = reason == "stop" && eos_ && !generated_.empty() && generated_.back() == *eos_;
  fin->set_finish_reason(reason == "length" ? v1::FINISH_REASON_LENGTH
                         : eos_hit          ? v1::FINISH_REASON_EOS
                                            : v1::FINISH_REASON_STOP);
  fin->mutable_usage()->set_prompt_tokens(static_cast<uint32_t>(prompt_.size()));
  fin->mutable_usage()->set_cached_tokens(static_cast<uint32_t>(cached_tokens_));
  fin->mutable_usage()->set_completion_tokens(static_cast<uint32_t>(generated_.size()));
  *fin->mutable_timings() = timings_;
  if (first_token_)
    fin->mutable_timings()->set_first_token_seconds(std::chrono::duration<double>(*first_token_ - t0_).count());
  fin->mutable_timings()->set_total_seconds(std::chrono::duration<double>(Clock::now() - t0_).count());
  client_.write(resp);
  return Step::end(grpc::Status::OK);
}

}  // namespace yoco
