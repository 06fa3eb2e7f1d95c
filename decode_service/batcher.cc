#include "decode_service/batcher.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "model/cpu_engine.h"

namespace yoco {

ContinuousBatcher::ContinuousBatcher(const Model& model, KvPool& pool, BatcherLimits limits, Engine* engine)
    : model_(model),
      pool_(pool),
      limits_(limits),
      own_engine_(engine ? nullptr : std::make_unique<CpuEngine>(model, &pool)),
      engine_(engine ? *engine : *own_engine_) {}

ContinuousBatcher::~ContinuousBatcher() { stop(/*drain=*/false); }

Status ContinuousBatcher::validate(const DecodeRequest& req) const {
  if (req.prompt.empty()) return invalid_argument("prompt: must contain at least one token");
  if (req.max_tokens < 1) return invalid_argument("max_tokens: must be >= 1");
  YOCO_RETURN_IF_ERROR(req.sampling.validate());
  YOCO_RETURN_IF_ERROR(model_.validate_tokens(req.prompt, 0, "prompt"));
  YOCO_RETURN_IF_ERROR(
      model_.validate_tokens(req.generated_before, static_cast<int64_t>(req.prompt.size()), "generated"));
  if (static_cast<int>(req.generated_before.size()) >= req.max_tokens)
    return invalid_argument("generated: already max_tokens tokens");
  if (req.logprobs < 0 || req.logprobs > 20) return invalid_argument("logprobs: must be in [0, 20]");
  // The prompt is to blame when it alone leaves no room for a token; max_tokens only otherwise.
  if (const int64_t n = static_cast<int64_t>(req.prompt.size()), max = model_.config().max_seq_len; n >= max)
    return invalid_argument("prompt: " + std::to_string(n) + " tokens " + (n > max ? "exceed" : "fill") +
                            " the model's max_seq_len " + std::to_string(max) + " (no room left for max_tokens)");
  if (static_cast<int64_t>(req.prompt.size()) + req.max_tokens > model_.config().max_seq_len)
    return invalid_argument("max_tokens: prompt + max_tokens exceeds max_seq_len " +
                            std::to_string(model_.config().max_seq_len));
  if (!req.forced.empty()) {
    if (req.max_tokens != static_cast<int>(req.forced.size()))
      return invalid_argument("max_tokens: must be the number of forced tokens when scoring");
    YOCO_RETURN_IF_ERROR(model_.validate_tokens(req.forced, static_cast<int64_t>(req.prompt.size()), "forced"));
    if (!req.generated_before.empty()) return invalid_argument("generated: a score takes no generated tokens");
    if (req.state) return invalid_argument("state: a score is computed here, never shipped");
  }
  if (req.constraint) {
    if (!req.forced.empty()) return invalid_argument("structured_output: not with forced tokens (scoring)");
    TokenMask mask(req.constraint, req.stop_token_ids);
    for (size_t i = 0; i < req.generated_before.size(); ++i)
      if (!mask.accept(req.generated_before[i]))
        return invalid_argument("generated[" + std::to_string(i) + "]: outside the structured output constraint");
    if (!req.generated_before.empty() && mask.terminated())
      return invalid_argument("generated: already completes the structured output constraint");
  }
  if (req.state && (!req.state->pages || !pool_.owns(*req.state->pages)))
    return invalid_argument("state: a shipped state must hold its K/V rows in this worker's pool");
  if (req.state && req.state->position != static_cast<int64_t>(req.prompt.size() + req.generated_before.size()))
    return invalid_argument("state: position " + std::to_string(req.state->position) + " != prompt + generated tokens");
  return Status::Ok();
}

Result<uint64_t> ContinuousBatcher::submit(DecodeRequest req) {
  if (Status v = validate(req); !v.ok()) {
    if (req.state && req.state->pages && pool_.owns(*req.state->pages)) pool_.release(*req.state->pages);
    return v;
  }
  auto s = std::make_unique<Seq>();
  s->sampler = std::make_unique<Sampler>(req.sampling, model_.config().vocab_size, req.prompt);
  s->sampler->replay(req.generated_before);
  s->forward_score = !req.forced.empty() && !limits_.score_per_token;
  if (req.constraint) {  // validate() saw every token of generated_before accepted
    s->mask.emplace(req.constraint, req.stop_token_ids);
    for (int32_t t : req.generated_before) (void)s->mask->accept(t);
  }
  s->submitted = Clock::now();
  s->req = std::move(req);
  std::lock_guard<std::mutex> lock(mu_);
  Status refused;
  if (stopping_) {
    refused = Status(StatusCode::kUnavailable, "decode worker is shutting down");
  } else if (static_cast<int>(waiting_.size()) >= limits_.max_waiting) {
    refused = Status(StatusCode::kResourceExhausted,
                     "decode queue full: " + std::to_string(waiting_.size()) + " requests waiting");
  }
  if (!refused.ok()) {  // a shipped state's blocks go back at once
    if (s->req.state && s->req.state->pages) pool_.release(*s->req.state->pages);
    return refused;
  }
  s->id = next_id_++;
  const uint64_t id = s->id;
  // Behind every waiting request of the same or a higher priority.
  const int prio = s->req.priority;
  auto at = std::find_if(waiting_.begin(), waiting_.end(), [&](const SeqPtr& w) { return w->req.priority < prio; });
  waiting_.insert(at, std::move(s));
  cv_.notify_all();
  return id;
}

void ContinuousBatcher::cancel(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  cancel_requests_.push_back(id);
  cv_.notify_all();
}

void ContinuousBatcher::start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] { loop(); });
}

void ContinuousBatcher::stop(bool drain) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!thread_.joinable()) return;
    stopping_ = true;
    drain_ = drain;
    cv_.notify_all();
  }
  thread_.join();
}

int ContinuousBatcher::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(running_.size());
}

int ContinuousBatcher::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(waiting_.size());
}

int64_t ContinuousBatcher::preemptions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return preemptions_;
}

int64_t ContinuousBatcher::forks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return forks_;
}

bool ContinuousBatcher::admit_fork(Seq& s) {
  if (s.req.fork_group.empty() || !s.generated.empty() || !s.req.generated_before.empty()) return false;
  auto it = fork_sources_.find(s.req.fork_group);
  if (it == fork_sources_.end() || it->second.prompt != s.req.prompt || Clock::now() >= it->second.expires)
    return false;
  auto id = engine_.fork(it->second.seq);
  if (!id.ok()) return false;  // no slot or block: prefilled as any other request
  s.seq = *id;
  s.logits = it->second.logits;
  if (s.req.state) {  // shipped anyway (the router did not know): its blocks go back
    if (s.req.state->pages) pool_.release(*s.req.state->pages);
    s.req.state.reset();
  }
  if (--it->second.left == 0) {
    (void)engine_.release(it->second.seq);
    fork_sources_.erase(it);
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++forks_;
  return true;
}

void ContinuousBatcher::leave_fork_source(Seq& s) {
  if (s.req.fork_group.empty() || s.req.fork_siblings <= 0 || s.cancelled || !s.generated.empty() ||
      !s.req.generated_before.empty() || fork_sources_.count(s.req.fork_group))
    return;
  auto id = engine_.fork(s.seq);
  if (!id.ok()) return;  // no room: the siblings prefill
  fork_sources_[s.req.fork_group] = ForkSource{*id, s.req.prompt, s.logits, s.req.fork_siblings,
                                               Clock::now() + std::chrono::milliseconds(limits_.fork_source_ms)};
}

bool ContinuousBatcher::drop_fork_sources(bool expired_only) {
  const auto now = Clock::now();
  bool any = false;
  for (auto it = fork_sources_.begin(); it != fork_sources_.end();) {
    if (expired_only && now < it->second.expires) {
      ++it;
      continue;
    }
    (void)engine_.release(it->second.seq);
    it = fork_sources_.erase(it);
    any = true;
  }
  return any;
}

void ContinuousBatcher::finish(SeqPtr s, std::string reason, Status status) {
  if (s->seq >= 0) (void)engine_.release(s->seq);  // ours and valid: cannot fail
  s->seq = -1;
  // A shipped state never admitted still holds its host blocks.
  if (s->req.state && s->req.state->pages) pool_.release(*s->req.state->pages);
  s->req.state.reset();
  FinishInfo info;
  info.reason = std::move(reason);
  info.status = std::move(status);
  info.prompt_tokens = static_cast<int64_t>(s->req.prompt.size());
  info.completion_tokens = static_cast<int64_t>(s->generated.size());
  info.preemptions = s->preemptions;
  info.queue_seconds = s->queue_seconds.value_or(std::chrono::duration<double>(Clock::now() - s->submitted).count());
  if (s->req.on_finish) s->req.on_finish(info);
}

namespace {

// log-softmax of the raw logits for the chosen token and the top n (ties: lower id first).
TokenLogprobs token_logprobs(const float* logits, int vocab, int32_t token, int n) {
  float mx = logits[0];
  for (int i = 1; i < vocab; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  const double lse = mx + std::log(sum);
  TokenLogprobs out;
  out.token = token;
  out.logprob = static_cast<float>(logits[token] - lse);
  if (n <= 0) return out;
  std::vector<int32_t> idx(vocab);
  std::iota(idx.begin(), idx.end(), 0);
  n = std::min(n, vocab);
  std::partial_sort(idx.begin(), idx.begin() + n, idx.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  for (int i = 0; i < n; ++i) out.top.emplace_back(idx[i], static_cast<float>(logits[idx[i]] - lse));
  return out;
}

}  // namespace

bool ContinuousBatcher::sample_and_emit(Seq& s, const float* logits) {
  const int V = model_.config().vocab_size;
  const bool forced = !s.req.forced.empty();
  int32_t tok;
  if (forced) {
    tok = s.req.forced[s.generated.size()];
  } else {
    std::vector<float> row(logits, logits + V);
    if (s.mask) s.mask->apply(row.data(), V);
    tok = s.sampler->sample(row.data());
  }
  // The mask allowed it, so the constraint takes it (a stop token too, once complete).
  const bool constraint_done = s.mask && (!s.mask->accept(tok) || s.mask->terminated());
  s.generated.push_back(tok);
  if ((forced || s.req.logprobs > 0) && s.req.on_logprobs)
    s.req.on_logprobs(token_logprobs(logits, V, tok, s.req.logprobs));
  if (s.req.on_token) s.req.on_token(tok);
  const auto& stops = s.req.stop_token_ids;
  if (!forced && std::find(stops.begin(), stops.end(), tok) != stops.end()) return true;
  if (constraint_done) return true;
  if (static_cast<int>(s.req.generated_before.size() + s.generated.size()) >= s.req.max_tokens) return true;
  s.next_input = tok;
  return false;
}

const char* ContinuousBatcher::finish_reason(const Seq& s) {
  const auto& stops = s.req.stop_token_ids;
  const bool stop_token = s.req.forced.empty() && !s.generated.empty() &&
                          std::find(stops.begin(), stops.end(), s.generated.back()) != stops.end();
  if (stop_token || (s.mask && s.mask->terminated())) return "stop";
  return "length";
}

bool ContinuousBatcher::admit(Seq& s) {
  const int V = model_.config().vocab_size;
  if (!s.queue_seconds) s.queue_seconds = std::chrono::duration<double>(Clock::now() - s.submitted).count();
  if (s.forward_score) return admit_score(s);
  if (admit_fork(s)) return true;
  s.logits.assign(V, 0.0f);
  if (s.req.state && s.generated.empty()) {
    // Shipped state: the prompt was prefilled elsewhere; its rows are already in our blocks
    // (a device engine copies them up and gives the host blocks back).
    auto id = engine_.adopt(*s.req.state);
    if (!id.ok()) {
      if (id.status().code() == StatusCode::kResourceExhausted) return false;  // waits for room
      s.logits.clear();
      s.cancelled = true;
      return true;
    }
    s.seq = *id;
    s.req.state.reset();
  } else {
    // Local prefill of everything consumed so far: the prompt, plus the generated tokens
    // when this is a recompute after preemption (the sampler keeps its state, so the stream
    // continues exactly).
    std::vector<int32_t> consumed = s.req.prompt;
    consumed.insert(consumed.end(), s.req.generated_before.begin(), s.req.generated_before.end());
    consumed.insert(consumed.end(), s.generated.begin(), s.generated.end());
    SequenceState fresh = model_.new_sequence();
    auto id = engine_.adopt(fresh);
    if (!id.ok()) return false;  // no free sequence slot: waits
    const int64_t rows = static_cast<int64_t>(consumed.size());
    if (!engine_.reserve(*id, rows + limits_.reserve_ahead_rows).ok() && !engine_.reserve(*id, rows).ok()) {
      (void)engine_.release(*id);
      return false;
    }
    Status ps = engine_.prefill(*id, consumed, limits_.prefill);
    if (!ps.ok()) {
      (void)engine_.release(*id);
      s.logits.clear();
      s.cancelled = true;  // reported as an error by the caller
      return true;
    }
    s.seq = *id;
  }
  const Engine::SeqId one[1] = {s.seq};
  Status ls = engine_.logits(one, s.logits.data());
  if (!ls.ok()) s.cancelled = true;
  leave_fork_source(s);
  return true;
}

namespace {

// Token i of prompt + forced.
int32_t score_token(const DecodeRequest& r, int64_t i) {
  const int64_t P = static_cast<int64_t>(r.prompt.size());
  return i < P ? r.prompt[i] : r.forced[i - P];
}

// The rows a score consumes: prompt + forced but the last (no logits are needed after it).
int64_t score_rows(const DecodeRequest& r) { return static_cast<int64_t>(r.prompt.size() + r.forced.size()) - 1; }

}  // namespace

bool ContinuousBatcher::admit_score(Seq& s) {
  // Every row the score will consume is reserved now, all or nothing, as a local prefill's are:
  // its forward slices then never wait for blocks.
  SequenceState fresh = model_.new_sequence();
  auto id = engine_.adopt(fresh);
  if (!id.ok()) return false;  // no free sequence slot: waits
  if (!engine_.reserve(*id, score_rows(s.req)).ok()) {
    (void)engine_.release(*id);
    return false;
  }
  // Rows whose logits nobody needs (again) are prefilled: the prompt but its last token, and the
  // forced tokens already emitted when this is a recompute after preemption.
  const int64_t known = static_cast<int64_t>(s.req.prompt.size() + s.generated.size()) - 1;
  std::vector<int32_t> consumed;
  for (int64_t i = 0; i < known; ++i) consumed.push_back(score_token(s.req, i));
  if (!consumed.empty() && !engine_.prefill(*id, consumed, limits_.prefill).ok()) {
    (void)engine_.release(*id);
    s.cancelled = true;  // reported as an error by the caller
    return true;
  }
  s.seq = *id;
  return true;
}

void ContinuousBatcher::score_slices(std::vector<float>& logits) {
  const int V = model_.config().vocab_size;
  // The host logits of one slice stay within 64 MiB whatever the vocabulary.
  const int max_rows = std::max(1, std::min(limits_.prefill.chunk_tokens, (1 << 24) / V));
  int budget = limits_.prefill.chunk_tokens;
  std::vector<int32_t> tokens;
  while (budget > 0) {
    Seq* s = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& r : running_)
        if (r->forward_score) {
          s = r.get();
          break;
        }
    }
    if (!s) return;
    const int64_t pos = engine_.position(s->seq);
    const int n = static_cast<int>(std::min<int64_t>({budget, max_rows, score_rows(s->req) - pos}));
    tokens.resize(n);
    for (int i = 0; i < n; ++i) tokens[i] = score_token(s->req, pos + i);
    logits.resize(static_cast<size_t>(n) * V);
    Status st = engine_.forward(s->seq, tokens, limits_.prefill, logits.data());
    budget -= n;
    bool done = false;
    const int64_t first_scored = static_cast<int64_t>(s->req.prompt.size()) - 1;  // row of forced[0]'s logits
    for (int i = 0; st.ok() && i < n && !done; ++i) {
      if (pos + i < first_scored) continue;
      YOCO_CHECK(pos + i - first_scored == static_cast<int64_t>(s->generated.size()));
      done = sample_and_emit(*s, logits.data() + static_cast<size_t>(i) * V);
    }
    if (st.ok() && !done) continue;
    SeqPtr owned;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = running_.begin(); it != running_.end(); ++it)
        if (it->get() == s) {
          owned = std::move(*it);
          running_.erase(it);
          break;
        }
    }
    if (st.ok()) finish(std::move(owned), "length", Status::Ok());
    else finish(std::move(owned), "error", st);
  }
}

void ContinuousBatcher::preempt_newest() {
  SeqPtr victim = std::move(running_.back());
  running_.pop_back();
  if (victim->seq >= 0) (void)engine_.release(victim->seq);
  victim->seq = -1;
  ++victim->preemptions;
  ++preemptions_;
  waiting_.push_front(std::move(victim));  // first in line to be recomputed
}

void ContinuousBatcher::loop() {
  std::vector<float> logits, score_logits;
  while (true) {
    const Sweep sw = sweep();
    if (sw == Sweep::kExit) break;
    drop_fork_sources(/*expired_only=*/true);
    admit_waiting();
    const std::vector<Seq*> batch = make_room();
    score_slices(score_logits);
    if (!batch.empty()) step(batch, logits);
  }
  // Drained or aborted: nothing may keep blocks.
  drop_fork_sources(/*expired_only=*/false);
  std::lock_guard<std::mutex> lock(mu_);
  YOCO_CHECK(running_.empty() || !drain_);
}

ContinuousBatcher::Sweep ContinuousBatcher::sweep() {
  std::vector<SeqPtr> done_cancelled, done_deadline;
  bool abort_all = false;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return stopping_ || !waiting_.empty() || !running_.empty() || !cancel_requests_.empty(); });
    if (stopping_ && !drain_) abort_all = true;
    if (stopping_ && drain_ && waiting_.empty() && running_.empty()) return Sweep::kExit;
    for (uint64_t id : cancel_requests_) {
      for (auto& s : waiting_)
        if (s->id == id) s->cancelled = true;
      for (auto& s : running_)
        if (s->id == id) s->cancelled = true;
    }
    cancel_requests_.clear();
    const auto now = Clock::now();
    auto expired = [&](const SeqPtr& s) { return abort_all || s->cancelled || now >= s->req.deadline; };
    auto take_expired = [&](auto& q) {
      for (auto it = q.begin(); it != q.end();) {
        if (expired(*it)) {
          ((*it)->cancelled || abort_all ? done_cancelled : done_deadline).push_back(std::move(*it));
          it = q.erase(it);
        } else {
          ++it;
        }
      }
    };
    take_expired(waiting_);
    take_expired(running_);
  }
  for (auto& s : done_cancelled) finish(std::move(s), "cancelled", Status(StatusCode::kCancelled, "cancelled"));
  for (auto& s : done_deadline)
    finish(std::move(s), "deadline", Status(StatusCode::kDeadlineExceeded, "deadline exceeded"));
  return abort_all ? Sweep::kExit : Sweep::kGoOn;
}

void ContinuousBatcher::admit_waiting() {
  // Admission between steps: oldest first, while there is room in the batch and the pool.
  std::vector<SeqPtr> finished_now;
  while (true) {
    SeqPtr s;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (waiting_.empty() || static_cast<int>(running_.size()) >= limits_.max_running) break;
      s = std::move(waiting_.front());
      waiting_.pop_front();
    }
    // Queued past its deadline (or cancelled) since the sweep: never admitted.
    if (s->cancelled || Clock::now() >= s->req.deadline) {
      if (s->cancelled) finish(std::move(s), "cancelled", Status(StatusCode::kCancelled, "cancelled"));
      else finish(std::move(s), "deadline", Status(StatusCode::kDeadlineExceeded, "deadline exceeded"));
      continue;
    }
    // Fork sources hold blocks and a slot nobody runs on: they go before a request waits.
    if (!admit(*s) && !(drop_fork_sources(/*expired_only=*/false) && admit(*s))) {
      std::lock_guard<std::mutex> lock(mu_);
      if (running_.empty()) {
        // Nothing will free blocks: this request can never fit.
        finished_now.push_back(std::move(s));
      } else {
        waiting_.push_front(std::move(s));
      }
      break;
    }
    if (s->cancelled) {  // prefill failed
      finish(std::move(s), "error", internal_error("prefill failed"));
      continue;
    }
    if (!s->forward_score && sample_and_emit(*s, s->logits.data())) {
      finish(std::move(s),
             s->req.generated_before.size() + s->generated.size() >= static_cast<size_t>(s->req.max_tokens) ? "length"
                                                                                                            : "stop",
             Status::Ok());
      continue;
    }
    std::lock_guard<std::mutex> lock(mu_);
    running_.push_back(std::move(s));
  }
  for (auto& s : finished_now)
    finish(std::move(s), "error", Status(StatusCode::kResourceExhausted, "the KV pool cannot hold this request"));
}

std::vector<ContinuousBatcher::Seq*> ContinuousBatcher::make_room() {
  // Every running sequence needs room for one more row; preempt from the newest if not.
  std::vector<Seq*> batch;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = running_.begin(); it != running_.end();) {
    Seq& s = **it;
    const int64_t pos = engine_.position(s.seq);
    bool ok = engine_.capacity(s.seq) > pos || engine_.reserve(s.seq, pos + 1 + limits_.reserve_ahead_rows).ok() ||
              engine_.reserve(s.seq, pos + 1).ok();
    // Fork sources go before any running sequence is preempted.
    if (!ok && drop_fork_sources(/*expired_only=*/false)) ok = engine_.reserve(s.seq, pos + 1).ok();
    while (!ok && running_.back().get() != &s) {
      preempt_newest();
      ok = engine_.reserve(s.seq, pos + 1).ok();
    }
    if (!ok) {  // this sequence is the newest left: it yields
      preempt_newest();
      break;
    }
    ++it;
  }
  for (auto& s : running_)
    if (!s->forward_score) batch.push_back(s.get());
  return batch;
}

void ContinuousBatcher::step(const std::vector<Seq*>& batch, std::vector<float>& logits) {
  std::vector<Engine::SeqId> ids;
  std::vector<int32_t> inputs;
  for (Seq* s : batch) {
    ids.push_back(s->seq);
    inputs.push_back(s->next_input);
  }
  logits.resize(batch.size() * static_cast<size_t>(model_.config().vocab_size));
  Status st = engine_.decode_step(ids, inputs, logits.data());
  std::vector<SeqPtr> finished;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < batch.size(); ++i) {
      const bool done = !st.ok() || sample_and_emit(*batch[i], logits.data() + i * model_.config().vocab_size);
      if (!done) continue;
      for (auto it = running_.begin(); it != running_.end(); ++it)
        if (it->get() == batch[i]) {
          finished.push_back(std::move(*it));
          running_.erase(it);
          break;
        }
    }
  }
  for (auto& s : finished) {
    if (!st.ok()) {
      finish(std::move(s), "error", st);
      continue;
    }
    const char* reason = finish_reason(*s);
    finish(std::move(s), reason, Status::Ok());
  }
}

}  // namespace yoco
