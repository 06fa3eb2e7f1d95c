#include "prefill_service/scheduler.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "common/checksum.h"
#include "common/log.h"
#include "model/cpu_engine.h"

namespace yoco {

namespace {

using Clock = TransferClock;

// The throughput gauge looks this far back: long enough to span a few steps, short enough to
// follow a change of load.
constexpr std::chrono::seconds kThroughputWindow{10};

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

struct PrefillScheduler::Job {
  enum class Phase { kWaiting, kActive, kCommitting };

  uint64_t id = 0;
  PrefillJob req;
  PrefillCallback on_done;
  Phase phase = Phase::kWaiting;  // under mu_
  int64_t settled = 0;            // tokens already taken off queued_tokens_ (under mu_)
  Status cancel_status;           // under mu_, written before cancel_requested is set
  std::atomic<bool> cancel_requested{false};
  std::atomic<bool> aborted{false};  // the abort went out (once is enough)
  // Compute thread while waiting/active, then the committer that took the job.
  Engine::SeqId seq = -1;  // the engine's sequence while computing
  // Before adoption: the fresh or cache-restored state. After: on a device engine, the host
  // mirror of the K/V rows (each slice's rows are copied here to be shipped and stored).
  SequenceState state;
  DocumentRecord document;  // a document job's record, once stored
  int64_t computed = 0;
  PromptCacheProgress cached;  // what the prompt cache loaded and stored for it
  Clock::time_point submitted, started, prefilled;
  PrefillStats stats;

  int64_t size() const { return static_cast<int64_t>(req.tokens.size()); }
};

Result<std::unique_ptr<PrefillScheduler>> PrefillScheduler::create(const Model& model, KvSender& sender,
                                                                   PrefillLimits limits, KvCache* cache,
                                                                   bool write_prompts, Engine* engine) {
  YOCO_RETURN_IF_ERROR(limits.validate());
  return std::unique_ptr<PrefillScheduler>(new PrefillScheduler(model, sender, limits, cache, write_prompts, engine));
}

PrefillScheduler::PrefillScheduler(const Model& model, KvSender& sender, PrefillLimits limits, KvCache* cache,
                                   bool write_prompts, Engine* engine)
    : model_(model),
      sender_(sender),
      limits_(limits),
      own_engine_(engine ? nullptr : std::make_unique<CpuEngine>(model)),
      engine_(engine ? *engine : *own_engine_) {
  if (cache) prompt_cache_.emplace(*cache, model, write_prompts);
}

PrefillScheduler::~PrefillScheduler() { stop(); }

void PrefillScheduler::start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (started_ || stopping_) return;
  started_ = true;
  compute_ = std::thread([this] { compute_loop(); });
  for (int i = 0; i < limits_.committers; ++i) committers_.emplace_back([this] { commit_loop(); });
}

// ---- admission ------------------------------------------------------------------------------

Status PrefillScheduler::check(const PrefillJob& job) const {
  if (job.document) {
    if (!prompt_cache_) return failed_precondition("document: this prefill worker has no KV store");
    if (job.tokens.empty()) return invalid_argument("content: empty document");
    return model_.validate_tokens(job.tokens, 0, "content.tokens");
  }
  const ReservationDescriptor& d = job.reservation;
  if (Status st = d.validate(); !st.ok()) return invalid_argument("reservation: " + st.message());
  if (d.fingerprint != model_.fingerprint())
    return failed_precondition("reservation.fingerprint: the reservation is for model " + hex64(d.fingerprint) +
                               ", this worker runs model " + hex64(model_.fingerprint()));
  if (d.kv_dim != model_.config().kv_dim())
    return failed_precondition("reservation.kv_dim: " + std::to_string(d.kv_dim) + ", this worker's model has " +
                               std::to_string(model_.config().kv_dim()));
  if (!job.request_id.empty() && job.request_id != d.request_id)
    return invalid_argument("request_id: \"" + job.request_id + "\", but the reservation is for request \"" +
                            d.request_id + "\"");
  if (job.tokens.empty()) return invalid_argument("tokens: empty");
  if (static_cast<int64_t>(job.tokens.size()) != d.rows)
    return invalid_argument("tokens: " + std::to_string(job.tokens.size()) + " tokens, but reservation.rows is " +
                            std::to_string(d.rows));
  return model_.validate_tokens(job.tokens, 0, "tokens");
}

Result<uint64_t> PrefillScheduler::submit(PrefillJob job, PrefillCallback on_done) {
  YOCO_RETURN_IF_ERROR(check(job));
  const int64_t n = static_cast<int64_t>(job.tokens.size());
  const auto now = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Status(StatusCode::kUnavailable, "this prefill worker is shutting down: not admitting");
    if (now < job.deadline) {
      if (queued_tokens_ + n > limits_.max_queued_tokens)
        return Status(StatusCode::kResourceExhausted,
                      "tokens: " + std::to_string(n) + " more tokens would put " + std::to_string(queued_tokens_ + n) +
                          " in the queue, over its bound of " + std::to_string(limits_.max_queued_tokens));
      auto j = std::make_shared<Job>();
      j->id = next_id_++;
      j->req = std::move(job);
      j->on_done = std::move(on_done);
      j->submitted = now;
      jobs_.emplace(j->id, j);
      // Behind every waiting prompt of the same or a higher priority.
      auto at = std::find_if(waiting_.begin(), waiting_.end(),
                             [&](const JobPtr& w) { return w->req.priority < j->req.priority; });
      waiting_.insert(at, j);
      queued_tokens_ += n;
      cv_.notify_all();
      return j->id;
    }
  }
  // The caller gave up already: free the decode worker's blocks now rather than at the lease.
  if (!job.document) sender_.abort(job.reservation, "deadline passed before the prefill was queued");
  return Status(StatusCode::kDeadlineExceeded, "request " + job.reservation.request_id + ": deadline already passed");
}

void PrefillScheduler::cancel(uint64_t id) {
  JobPtr j;
  bool end_now = false, committing = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end() || it->second->cancel_requested) return;
    j = it->second;
    j->cancel_status = Status(StatusCode::kCancelled, "request " + j->req.reservation.request_id + ": cancelled");
    j->cancel_requested = true;
    if (j->phase == Job::Phase::kWaiting) {
      waiting_.erase(std::find(waiting_.begin(), waiting_.end(), j));
      queued_tokens_ -= j->size() - j->settled;
      jobs_.erase(it);
      end_now = true;
      idle_cv_.notify_all();
    }
    committing = j->phase == Job::Phase::kCommitting;
    // Active jobs end between slices (the compute thread checks the flag).
    cv_.notify_all();
  }
  if (end_now) return end({j, j->cancel_status});
  // A committer is (or will be) blocked in commit(): the abort ends that wait.
  if (committing && !j->aborted.exchange(true)) sender_.abort(j->req.reservation, "cancelled");
}

void PrefillScheduler::stop(std::chrono::milliseconds drain) {
  std::vector<Ended> ended;
  std::vector<JobPtr> to_abort;
  {
    std::unique_lock<std::mutex> lock(mu_);
    stopping_ = true;
    cv_.notify_all();
    if (started_) idle_cv_.wait_for(lock, drain, [&] { return jobs_.empty(); });
    for (auto& [id, j] : jobs_) {
      if (j->cancel_requested) continue;
      j->cancel_status = Status(StatusCode::kUnavailable,
                                "request " + j->req.reservation.request_id + ": this prefill worker is shutting down");
      j->cancel_requested = true;
      if (j->phase == Job::Phase::kCommitting) to_abort.push_back(j);
    }
    // Waiting jobs end here: without a compute thread (never started) nobody else would.
    for (auto& j : waiting_) {
      queued_tokens_ -= j->size() - j->settled;
      jobs_.erase(j->id);
      ended.push_back({j, j->cancel_status});
    }
    waiting_.clear();
    cv_.notify_all();
  }
  for (auto& j : to_abort)
    if (!j->aborted.exchange(true)) sender_.abort(j->req.reservation, "prefill worker shutting down");
  for (auto& e : ended) end(e);
  if (compute_.joinable()) compute_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    commit_stop_ = true;
    commit_cv_.notify_all();
  }
  for (auto& t : committers_) t.join();
  committers_.clear();
}

PrefillSchedulerLoad PrefillScheduler::load() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {queued_tokens_, static_cast<int>(waiting_.size()), static_cast<int>(active_.size()), committing_};
}

// ---- compute thread -------------------------------------------------------------------------

void PrefillScheduler::compute_loop() {
  std::vector<Slice> plan;
  std::vector<Ended> ended;
  while (true) {
    bool exit = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      settle_locked(plan, ended);
      if (ended.empty()) cv_.wait(lock, [&] { return stopping_ || !waiting_.empty() || !active_.empty(); });
      sweep_locked(ended);
      plan = plan_locked();
      exit = plan.empty() && stopping_ && waiting_.empty() && active_.empty();
    }
    for (const Ended& e : std::exchange(ended, {})) {
      drop_sequence(*e.job);
      end(e);
    }
    if (exit) return;
    const auto t0 = Clock::now();
    int64_t tokens = 0;
    for (Slice& s : plan) {
      run_slice(s);
      if (s.computed) tokens += s.tokens;
      if (s.last) {
        // A finished prompt goes to the committers now: its commit, and so its first token, would
        // otherwise wait for the other prompts' slices of this step (bench/README.md, transfer share of TTFT).
        std::vector<Slice> done;
        done.push_back(std::move(s));  // leaves s.job null: settled
        std::lock_guard<std::mutex> lock(mu_);
        settle_locked(done, ended);
      }
      // Then its blocks go to the store, off its time to first token but before the next slice
      // runs, so a prompt started after it finds them (docs/design.md §5).
      write_back_pending();
    }
    if (tokens > 0) record_throughput(tokens, seconds_between(t0, Clock::now()));
  }
}

void PrefillScheduler::sweep_locked(std::vector<Ended>& ended) {
  const auto now = Clock::now();
  auto reason = [&](const Job& j) -> Status {
    if (j.cancel_requested) return j.cancel_status;
    if (now >= j.req.deadline)
      return Status(StatusCode::kDeadlineExceeded,
                    "request " + j.req.reservation.request_id + ": deadline passed before its prefill finished");
    // Computing for a reservation the decode worker has dropped is wasted work.
    if (!j.req.document && lease_over(j.req.reservation))
      return transfer_error(TransferError::kLeaseExpired, "reservation " +
                                                              std::to_string(j.req.reservation.reservation_id) +
                                                              ": lease over before the prefill finished");
    return Status::Ok();
  };
  auto drop = [&](auto& list) {
    for (auto it = list.begin(); it != list.end();) {
      Status st = reason(**it);
      if (st.ok()) {
        ++it;
        continue;
      }
      queued_tokens_ -= (*it)->size() - (*it)->settled;
      jobs_.erase((*it)->id);
      if (transfer_error_of(st) == TransferError::kLeaseExpired) (*it)->stats.transfer_failed = true;
      ended.push_back({*it, std::move(st)});
      it = list.erase(it);
    }
  };
  drop(waiting_);
  drop(active_);
  if (!ended.empty()) idle_cv_.notify_all();
}

std::vector<PrefillScheduler::Slice> PrefillScheduler::plan_locked() {
  auto remaining = [](const JobPtr& j) { return PlanJob{j->size() - j->computed}; };
  std::vector<PlanJob> waiting, active;
  // No more than max_active can start in one step: the rest of the queue need not be looked at.
  for (size_t i = 0; i < waiting_.size() && i < static_cast<size_t>(limits_.max_active); ++i)
    waiting.push_back(remaining(waiting_[i]));
  for (const JobPtr& j : active_) active.push_back(remaining(j));
  const StepPlan step = plan(waiting, active, limits_);
  for (size_t i = 0; i < step.admitted; ++i) {
    active_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    active_.back()->phase = Job::Phase::kActive;
    const Job& j = *active_.back();
    YOCO_HOP(
        "prefill.start", j.req.reservation.request_id,
        .kv("reservation", j.req.reservation.reservation_id).kv("tokens", j.size()).kv("document", j.req.document));
  }
  std::vector<Slice> slices;
  for (const PlannedSlice& p : step.slices)
    slices.push_back(Slice{active_[p.job], p.tokens, 0, Status::Ok(), false, false});
  return slices;
}

PromptCacheRequest PrefillScheduler::cache_request(const Job& j) {
  return {j.req.tokens,       j.req.cached_prefix_candidates, j.req.document,
          j.req.document_ttl, j.req.document_owner,           j.req.reservation.resident_rows};
}

void PrefillScheduler::run_slice(Slice& s) {
  Job& j = *s.job;
  if (j.cancel_requested) return;  // settle ends it
  const auto t0 = Clock::now();
  if (j.computed == 0 && !j.stats.started && !start_job(s, t0)) return;
  if (s.tokens > 0 && !compute_slice(s, t0)) return;
  if (j.computed < j.size()) return;
  finish_job(s);
}

bool PrefillScheduler::start_job(Slice& s, Clock::time_point t0) {
  Job& j = *s.job;
  j.state = model_.new_sequence();
  j.started = t0;
  j.stats.started = true;
  j.stats.queue_seconds = seconds_between(j.submitted, t0);
  if (prompt_cache_) {
    if (auto resumed = prompt_cache_->resume(cache_request(j), j.cached)) {
      j.state = std::move(*resumed);
      j.computed = j.stats.cached_tokens = j.cached.cached_tokens;
    }
  }
  auto seq = engine_.adopt(j.state);
  if (!seq.ok()) {
    s.status = seq.status();
    return false;
  }
  j.seq = *seq;
  // The host mirror grows slice by slice up to the prompt: one allocation, not one per slice.
  j.state.k.reserve(static_cast<size_t>(j.size()) * model_.config().kv_dim());
  j.state.v.reserve(j.state.k.capacity());
  if (j.computed > 0) {
    // The cached rows go out first, as one transfer of whole runs.
    s.cached = j.computed;
    s.status = mirror_rows(j, j.cached.hole, j.computed - j.cached.hole);
    if (!s.status.ok()) return false;
    s.status = ship_rows(j, 0, j.computed);
    if (!s.status.ok()) {
      j.stats.transfer_failed = true;
      return false;
    }
    s.tokens = static_cast<int>(std::min<int64_t>(s.tokens, j.size() - j.computed));
  }
  return true;
}

bool PrefillScheduler::compute_slice(Slice& s, Clock::time_point t0) {
  Job& j = *s.job;
  // A slice that would cross a stop (the last whole block, a prepended document's end) stops
  // there, so the state at it can be stored for later prompts sharing the prefix.
  const int64_t stop = prompt_cache_ ? prompt_cache_->next_stop(cache_request(j), j.computed) : j.size();
  if (j.computed + s.tokens > stop) s.tokens = static_cast<int>(stop - j.computed);
  const PrefillOptions opt{limits_.chunk_tokens, limits_.retention_chunk};
  s.status = engine_.prefill(j.seq, std::span<const int32_t>(j.req.tokens).subspan(j.computed, s.tokens), opt);
  if (!s.status.ok()) return false;
  s.status = mirror_rows(j, j.computed, s.tokens);
  if (!s.status.ok()) return false;
  if (limits_.inject_slice_delay.count() > 0) std::this_thread::sleep_until(t0 + limits_.inject_slice_delay);
  s.computed = true;
  // Staged by the sender: these rows travel while the next slice computes.
  if (!j.req.document) s.status = ship_rows(j, j.computed, s.tokens);
  if (!s.status.ok()) {
    j.stats.transfer_failed = true;
    return false;
  }
  j.stats.chunks.push_back(s.tokens);
  YOCO_HOP("prefill.slice", j.req.reservation.request_id,
           .kv("reservation", j.req.reservation.reservation_id).kv("from", j.computed).kv("tokens", s.tokens));
  j.computed += s.tokens;
  if (prompt_cache_ && j.computed == stop) {
    auto snapshot = [&](SequenceState& snap) { return engine_.snapshot(j.seq, snap); };
    prompt_cache_->at_stop(cache_request(j), j.cached, stop, snapshot, j.state);
  }
  return true;
}

Status PrefillScheduler::ship_rows(Job& j, int64_t first, int64_t n) {
  const int64_t begin = std::max(first, j.req.reservation.resident_rows), end = first + n;
  if (begin >= end) return Status::Ok();
  const int64_t kv_dim = model_.config().kv_dim();
  return sender_.put_rows(j.req.reservation, begin, static_cast<int>(end - begin), j.state.k.data() + begin * kv_dim,
                          j.state.v.data() + begin * kv_dim);
}

void PrefillScheduler::finish_job(Slice& s) {
  Job& j = *s.job;
  j.prefilled = Clock::now();
  j.stats.prefill_seconds = seconds_between(j.started, j.prefilled);
  if (j.req.document) {  // stored, not shipped: settle ends it without a commit
    if (prompt_cache_) prompt_cache_->write_back(cache_request(j), j.cached, j.state);
    s.status = store_document(j);
    drop_sequence(j);
    s.last = s.status.ok();
    return;
  }
  // The prompt's blocks go to the store once its commit is on its way (write_back_pending), not
  // before: the host rows wait here, the job's sequence is freed below.
  if (prompt_cache_) pending_write_ = PendingWrite{s.job, j.cached, std::move(j.state)};
  StateBlobOptions so;
  so.include_kv = false;  // the rows went ahead with put_rows
  SequenceState snap;
  s.status = engine_.snapshot(j.seq, snap);
  if (!s.status.ok()) return;
  const std::vector<uint8_t> blob = serialize_state(snap, model_.config(), model_.fingerprint(), so);
  j.stats.rows = j.size();
  j.stats.resident_rows = j.req.reservation.resident_rows;
  j.stats.bytes =
      (j.size() - j.stats.resident_rows) * kv_row_bytes(model_.config().kv_dim(), j.req.reservation.kv_dtype) +
      static_cast<int64_t>(blob.size());
  s.status = sender_.put_state(j.req.reservation, blob);
  // The rows are staged in the sender: a job waiting for its acknowledgement keeps nothing.
  // Dropped after the state is on its way (freeing the sequence takes a while).
  drop_sequence(j);
  if (!s.status.ok()) {
    j.stats.transfer_failed = true;
    return;
  }
  s.last = true;
}

void PrefillScheduler::write_back_pending() {
  if (!pending_write_) return;
  PendingWrite w = std::move(*pending_write_);
  pending_write_.reset();
  prompt_cache_->write_back(cache_request(*w.job), w.cached, w.rows);
}

Status PrefillScheduler::store_document(Job& j) {
  // The state without rows, plus the rows of the host mirror.
  SequenceState snap;
  YOCO_RETURN_IF_ERROR(engine_.snapshot(j.seq, snap));
  snap.k = std::move(j.state.k);
  snap.v = std::move(j.state.v);
  YOCO_ASSIGN_OR_RETURN(j.document, prompt_cache_->store_document(cache_request(j), snap));
  return Status::Ok();
}

Status PrefillScheduler::mirror_rows(Job& j, int64_t first, int64_t n) {
  const int64_t kv_dim = model_.config().kv_dim();
  j.state.k.resize(static_cast<size_t>(first + n) * kv_dim);
  j.state.v.resize(j.state.k.size());
  return engine_.read_rows(j.seq, first, n, j.state.k.data() + first * kv_dim, j.state.v.data() + first * kv_dim);
}

void PrefillScheduler::drop_sequence(Job& j) {
  if (j.seq >= 0) (void)engine_.release(j.seq);  // ours and valid: cannot fail
  j.seq = -1;
  j.state = SequenceState{};
}

void PrefillScheduler::settle_locked(std::vector<Slice>& plan, std::vector<Ended>& ended) {
  for (Slice& s : plan) {
    if (!s.job) continue;  // settled as soon as it finished (compute_loop)
    Job& j = *s.job;
    Status end_status = j.cancel_requested ? j.cancel_status : s.status;
    if (!end_status.ok()) {
      active_.erase(std::find(active_.begin(), active_.end(), s.job));
      queued_tokens_ -= j.size() - j.settled;
      jobs_.erase(j.id);
      ended.push_back({s.job, std::move(end_status)});
      idle_cv_.notify_all();
      continue;
    }
    queued_tokens_ -= s.tokens + s.cached;
    j.settled += s.tokens + s.cached;
    if (!s.last) continue;
    if (j.req.document) {  // stored: nothing to commit
      active_.erase(std::find(active_.begin(), active_.end(), s.job));
      jobs_.erase(j.id);
      ended.push_back({s.job, Status::Ok()});
      idle_cv_.notify_all();
      continue;
    }
    active_.erase(std::find(active_.begin(), active_.end(), s.job));
    j.phase = Job::Phase::kCommitting;
    to_commit_.push_back(s.job);
    ++committing_;
    commit_cv_.notify_one();
  }
  plan.clear();
}

void PrefillScheduler::record_throughput(int64_t tokens, double busy_seconds) {
  const auto now = Clock::now();
  window_.push_back({now, tokens, busy_seconds});
  while (!window_.empty() && now - window_.front().end > kThroughputWindow) window_.pop_front();
  int64_t sum_tokens = 0;
  double sum_seconds = 0;
  for (const StepSample& s : window_) {
    sum_tokens += s.tokens;
    sum_seconds += s.seconds;
  }
  if (sum_seconds > 0)
    tokens_per_second_.store(static_cast<double>(sum_tokens) / sum_seconds, std::memory_order_relaxed);
}

// ---- committers -----------------------------------------------------------------------------

void PrefillScheduler::commit_loop() {
  while (true) {
    JobPtr j;
    {
      std::unique_lock<std::mutex> lock(mu_);
      commit_cv_.wait(lock, [&] { return commit_stop_ || !to_commit_.empty(); });
      if (to_commit_.empty()) return;
      j = std::move(to_commit_.front());
      to_commit_.pop_front();
    }
    const ReservationDescriptor& d = j->req.reservation;
    Status st;
    if (!j->cancel_requested && limits_.inject_commit_delay.count() > 0)
      std::this_thread::sleep_for(limits_.inject_commit_delay);
    const bool skipped = j->cancel_requested;
    if (!skipped) {
      // Every wait has a deadline: the caller's, else the lease (plus slack for the ack).
      const Clock::time_point deadline = std::min(j->req.deadline, lease_deadline_steady(d) + limits_.commit_grace);
      st = sender_.commit(d, j->size(), deadline);
    }
    const auto now = Clock::now();
    YOCO_HOP("prefill.commit", d.request_id,
             .kv("reservation", d.reservation_id).kv("rows", j->size()).kv("ok", st.ok()).kv("skipped", skipped));
    j->stats.transfer_seconds = seconds_between(j->prefilled, now);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (skipped || (!st.ok() && j->cancel_requested)) {
        st = j->cancel_status;  // the abort of cancel()/stop() is what ended the commit
      } else if (!st.ok() && now >= j->req.deadline) {
        st = Status(StatusCode::kDeadlineExceeded,
                    "request " + d.request_id + ": deadline passed waiting for the decode worker's acknowledgement (" +
                        st.message() + ")");
      } else if (!st.ok()) {
        j->stats.transfer_failed = true;
      }
      --committing_;
      jobs_.erase(j->id);
      idle_cv_.notify_all();
    }
    if (st.ok()) complete(*j, Status::Ok());
    else end({j, st});
  }
}

// ---- completion -----------------------------------------------------------------------------

void PrefillScheduler::end(const Ended& e) {
  // Best effort; the receiver drops the reservation and its blocks go back to the pool now.
  if (!e.job->req.document && !e.job->aborted.exchange(true)) sender_.abort(e.job->req.reservation, e.status.message());
  complete(*e.job, e.status);
}

void PrefillScheduler::complete(Job& j, Status st) {
  PrefillCallback cb = std::move(j.on_done);
  j.on_done = nullptr;
  if (cb) cb(PrefillOutcome{std::move(st), j.stats, j.document});
}

}  // namespace yoco
