// The prefill worker's engine loop, without RPC (docs/design.md §3.3, 3.4): chunked prefill of many
// prompts at once, each chunk's K/V rows handed to the transfer engine as soon as it is
// computed, so they are on the wire while the next chunk computes (pipelining).
//
// One compute thread runs steps. A step spends at most `chunk_tokens` tokens across at most
// `max_active` prompts, first come first served, each getting a contiguous slice of what it has
// left; after each slice its rows go to KvSender::put_rows, which stages them and returns. A
// prompt whose last slice is done ships its state (no K/V rows) and waits for the decode
// worker's acknowledgement on a committer thread, so the compute thread never blocks on the
// network. Cancellation, deadlines and transfer failures end a job at any phase and abort its
// reservation, so the decode worker gets its blocks back at once instead of at the lease.
// The model runs behind model/engine.h (the CPU engine, or a CUDA engine whose sequences stay
// on the device); whatever the device, each slice's K/V rows are read into the job's host
// mirror (Engine::read_rows), which is what is shipped and stored.
//
// This class is the threads, the queues and a job's phases. What a step computes is plan()
// (plan.h, a pure function); what is looked up in and written to the KV store, and where slices
// stop for it, is the PromptCache's (prompt_cache.h).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "model/engine.h"
#include "model/model.h"
#include "prefill_service/limits.h"
#include "prefill_service/plan.h"
#include "prefill_service/prompt_cache.h"
#include "transfer/descriptor.h"
#include "transfer/transport.h"

namespace yoco {

struct PrefillJob {
  std::string request_id;  // must match the reservation's; empty: the reservation's
  std::vector<int32_t> tokens;
  ReservationDescriptor reservation;  // parsed (ReservationDescriptor::parse)
  TransferClock::time_point deadline = TransferClock::time_point::max();
  int priority = 0;  // higher starts first among waiting prompts (FCFS within a priority)
  // Prefix lengths whose state the KV store may hold (ends of prepended documents); with a
  // cache the longest one found is loaded instead of computed. Without candidates the
  // longest cached whole-block prefix is looked up (automatic prefix caching).
  std::vector<int64_t> cached_prefix_candidates = {};
  // A document to store (CacheDocument) instead of a prompt to ship: no reservation, computed
  // from scratch like any prompt, then saved whole in the KV store with this TTL
  // (KvCache::save_document). Needs a cache.
  bool document = false;
  std::chrono::seconds document_ttl{0};
  std::string document_owner;  // the API key name that caches it ("" without keys)
};

struct PrefillStats {
  int64_t rows = 0;              // K/V rows shipped (the prompt length)
  int64_t bytes = 0;             // K/V rows + state blob
  bool started = false;          // the first slice was computed (queue_seconds is meaningful)
  double queue_seconds = 0;      // submit to the first slice
  double prefill_seconds = 0;    // first slice start to last slice end
  double transfer_seconds = 0;   // last slice end to the acknowledged commit (the part not hidden)
  bool transfer_failed = false;  // the transfer failed (sender error, decode-side rejection, lease over),
                                 // as opposed to a cancellation, a deadline or bad input
  int64_t cached_tokens = 0;     // loaded from the KV store instead of computed
  int64_t resident_rows = 0;     // already on the decode worker: neither loaded nor shipped
  // The slices the prompt was computed in, in order: Model::prefill over the same slices (with
  // the same PrefillOptions) reproduces the shipped state bitwise.
  std::vector<int> chunks;
};

struct PrefillOutcome {
  Status status;  // OK: the decode worker admitted the sequence (a document: it is stored)
  PrefillStats stats;
  DocumentRecord document;  // a document job's stored record
};

using PrefillCallback = std::function<void(const PrefillOutcome&)>;

struct PrefillSchedulerLoad {
  int64_t queued_tokens = 0;  // uncomputed tokens of waiting and active jobs
  int waiting = 0;            // not yet computing
  int active = 0;             // computing
  int committing = 0;         // computed, waiting for the acknowledgement
};

class PrefillScheduler {
 public:
  // `model` (kPrefill weights suffice), `sender` and `cache` (optional: no KV store) must
  // outlive the scheduler. With a cache, prompts resume from the longest cached document end
  // among their candidates; with `write_prompts` (automatic prefix caching) also from their
  // longest cached whole-block prefix, and the blocks they compute, plus a state snapshot at
  // their last whole block, are written back. Bad limits: INVALID_ARGUMENT naming the field.
  // `engine` null: a CPU engine over `model`; otherwise it runs every slice (only the compute
  // thread calls it) and must outlive the scheduler.
  static Result<std::unique_ptr<PrefillScheduler>> create(const Model& model, KvSender& sender, PrefillLimits limits,
                                                          KvCache* cache = nullptr, bool write_prompts = true,
                                                          Engine* engine = nullptr);
  ~PrefillScheduler();  // stop() without draining
  PrefillScheduler(const PrefillScheduler&) = delete;
  PrefillScheduler& operator=(const PrefillScheduler&) = delete;

  void start();

  // Validates and queues a job (jobs queued before start() wait for it). Once accepted,
  // `on_done` is called exactly once, from a scheduler thread or from cancel()/stop(), never
  // from submit() and never under the scheduler's lock. Refusals never call it. Nothing was
  // sent for them, so the reservation is left to the caller (another worker may use it):
  // INVALID_ARGUMENT or FAILED_PRECONDITION naming the field, RESOURCE_EXHAUSTED over
  // max_queued_tokens, UNAVAILABLE once stopping. The one exception is a deadline that has
  // already passed: DEADLINE_EXCEEDED, and the reservation is aborted.
  Result<uint64_t> submit(PrefillJob job, PrefillCallback on_done);

  // Ends the job with CANCELLED at whatever phase it is in (unknown or finished ids: no-op).
  void cancel(uint64_t id);

  // Stops admitting (UNAVAILABLE), lets queued and in-flight jobs finish for up to `drain`,
  // then ends the rest with UNAVAILABLE and joins the threads.
  void stop(std::chrono::milliseconds drain = std::chrono::milliseconds(0));

  PrefillSchedulerLoad load() const;
  // Prompt tokens computed per second of compute over the last few seconds of work (kept when
  // idle, so a scrape between bursts shows the worker's speed, not zero).
  double tokens_per_second() const { return tokens_per_second_.load(std::memory_order_relaxed); }

 private:
  PrefillScheduler(const Model& model, KvSender& sender, PrefillLimits limits, KvCache* cache, bool write_prompts,
                   Engine* engine);

  struct Job;
  using JobPtr = std::shared_ptr<Job>;
  // The job as the prompt cache sees it.
  static PromptCacheRequest cache_request(const Job& j);
  // Ships rows [first, first + n) of the host mirror, less those resident on the decode worker.
  Status ship_rows(Job& j, int64_t first, int64_t n);
  // Rows [first, first + n) of the job's sequence into its host mirror (j.state.k/v, which then
  // holds first + n rows): what is shipped and written to the store.
  Status mirror_rows(Job& j, int64_t first, int64_t n);
  // Last slice of a document job: the state with its rows into the KV store.
  Status store_document(Job& j);
  // Compute thread: frees the job's engine sequence (if it has one).
  void drop_sequence(Job& j);
  struct Slice {
    JobPtr job;
    int tokens = 0;
    int64_t cached = 0;     // tokens loaded from the KV store by this slice
    Status status;          // of the compute and the puts
    bool computed = false;  // the model ran (counts for throughput)
    bool last = false;      // the job's last slice ran and its state is sent: on to the committers
  };
  struct Ended {
    JobPtr job;
    Status status;
  };

  Status check(const PrefillJob& job) const;
  void compute_loop();
  void commit_loop();
  // Removes cancelled, expired and lease-expired jobs from waiting_ and active_ (lock held).
  void sweep_locked(std::vector<Ended>& ended);
  std::vector<Slice> plan_locked();
  // One slice of a job: its first one starts it (cache, engine sequence), each computes and
  // ships its rows, the last one ships the state (or stores a document).
  void run_slice(Slice& s);
  bool start_job(Slice& s, TransferClock::time_point t0);  // false: s.status says why
  bool compute_slice(Slice& s, TransferClock::time_point t0);
  void finish_job(Slice& s);
  // Compute thread: the blocks of the prompt finish_job left pending go to the KV store.
  void write_back_pending();
  void settle_locked(std::vector<Slice>& plan, std::vector<Ended>& ended);
  void record_throughput(int64_t tokens, double busy_seconds);
  // Aborts the reservation (best effort) and completes the job: outside the lock.
  void end(const Ended& e);
  void complete(Job& j, Status st);

  const Model& model_;
  KvSender& sender_;
  const PrefillLimits limits_;
  std::unique_ptr<Engine> own_engine_;  // the CPU engine when none was given
  Engine& engine_;
  std::optional<PromptCache> prompt_cache_;  // with a KV store

  mutable std::mutex mu_;
  std::condition_variable cv_;                 // compute thread: work, cancellation, stop
  std::condition_variable commit_cv_;          // committers: work, stop
  std::condition_variable idle_cv_;            // stop(): everything finished
  std::unordered_map<uint64_t, JobPtr> jobs_;  // every live job, for cancel()
  std::deque<JobPtr> waiting_;
  std::vector<JobPtr> active_;  // in arrival order
  std::deque<JobPtr> to_commit_;
  int committing_ = 0;  // in to_commit_ or inside commit()
  int64_t queued_tokens_ = 0;
  uint64_t next_id_ = 1;
  bool started_ = false, stopping_ = false, commit_stop_ = false;
  std::thread compute_;
  std::vector<std::thread> committers_;

  // Compute thread only: (end of step, tokens, busy seconds) over the throughput window.
  struct StepSample {
    TransferClock::time_point end;
    int64_t tokens;
    double seconds;
  };
  std::deque<StepSample> window_;
  // Compute thread only: a finished prompt's host rows, kept from its last slice until its
  // commit has gone to the committers (write_back_pending).
  struct PendingWrite {
    JobPtr job;
    PromptCacheProgress cached;
    SequenceState rows;
  };
  std::optional<PendingWrite> pending_write_;
  std::atomic<double> tokens_per_second_{0.0};
};

}  // namespace yoco
