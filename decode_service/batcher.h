// Continuous batching over the paged KV pool: the decode worker's engine loop, without RPC.
// Between steps it admits waiting sequences (reserving pool blocks, prefilling locally when no
// shipped state came with them), then runs one batched decode step over every running sequence
// whatever its length, samples, and streams each token through the request's callback.
// When the pool runs dry the newest sequence is preempted: its blocks are freed and it is
// re-queued to be recomputed from prompt + generated tokens, continuing the same stream.
// A score (forced tokens) runs as forward slices between the steps: prompt + forced rows with
// every row's logits, at most one prefill chunk of them per turn (docs/design.md §3.3).
// The model runs behind model/engine.h: the CPU engine over the host pool, or a CUDA engine
// (shipped states arrive in the host pool and move to the device when admitted).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "model/engine.h"
#include "model/kv_pool.h"
#include "model/model.h"
#include "model/sampler.h"
#include "structured/compiler.h"
#include "structured/token_mask.h"

namespace yoco {

using Clock = std::chrono::steady_clock;

struct FinishInfo {
  std::string reason;  // "length", "stop", "cancelled", "deadline", "error"
  Status status;       // OK unless reason is "error", "cancelled" or "deadline"
  int64_t prompt_tokens = 0, completion_tokens = 0;
  int preemptions = 0;
  double queue_seconds = 0;  // submit to first admission
};

// Log-probabilities of one sampled token under the model's raw next-token distribution
// (log-softmax of the logits, before penalties and temperature, as vLLM reports them).
struct TokenLogprobs {
  int32_t token = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // the `logprobs` most likely, best first
};

struct DecodeRequest {
  std::vector<int32_t> prompt;
  // Tokens already streamed by another worker (migration): the sequence consumes prompt +
  // generated_before before its first new token, the sampler replays them (penalties, seeded
  // draws), and max_tokens counts them. Only new tokens reach on_token.
  std::vector<int32_t> generated_before;
  // A state prefilled elsewhere (its K/V rows already in this pool's blocks, `pages` set) —
  // when absent the batcher prefills `prompt` itself.
  std::optional<SequenceState> state;
  SamplingParams sampling;
  int max_tokens = 16;
  int priority = 0;  // higher is admitted first among waiting requests (FCFS within a priority)
  std::vector<int32_t> stop_token_ids;
  Clock::time_point deadline = Clock::time_point::max();
  int logprobs = 0;  // > 0: on_logprobs gets each token's log-prob and the top-n, before on_token
  // Scoring (teacher forcing): instead of sampling, the sequence consumes these tokens after its
  // prompt; on_logprobs gets each one's log-prob under the model's raw next-token distribution
  // (and the top `logprobs`, which may be 0), then on_token. max_tokens must be their count;
  // stop tokens do not apply; generated_before must be empty. Empty: an ordinary sampled request.
  // The batcher computes them in forward slices of prompt + forced (Engine::forward: every row's
  // logits at once), between decode steps; BatcherLimits::score_per_token forces one per step.
  std::vector<int32_t> forced;
  // Structured output (docs/design.md §3.2c): every sampled step is masked to the tokens the
  // constraint allows, a stop token only once it is complete, and the sequence ends ("stop") when
  // it terminates. The mask is re-advanced over generated_before (migration), which must lie in it.
  std::shared_ptr<const CompiledConstraint> constraint;
  // n choices of one prompt share its prefill (docs/design.md §3.3, n choices): a request with
  // fork_siblings > 0, once admitted, leaves a fork source for its group (Engine::fork of its
  // prefilled state, and its first logits) that that many more requests of the group take; a
  // request of the group whose prompt equals the source's forks it instead of prefilling or
  // adopting (a shipped state it brought goes back to the pool). A request that finds no source
  // runs as any other. Its own sampling (seed) applies either way, so the stream is the one a
  // separately prefilled request gives. Empty group: no sharing.
  std::string fork_group;
  int fork_siblings = 0;
  std::function<void(const TokenLogprobs&)> on_logprobs;
  std::function<void(int32_t token)> on_token;       // called from the batcher thread
  std::function<void(const FinishInfo&)> on_finish;  // exactly once
};

// Small value type: how much the batcher takes on (docs/architecture.md, rule 8).
struct BatcherLimits {
  int max_running = 32;         // sequences per decode step
  int max_waiting = 256;        // queued requests; beyond: RESOURCE_EXHAUSTED
  int reserve_ahead_rows = 32;  // rows reserved past the current need, to grow less often
  // prefill.chunk_tokens is also the budget of scoring rows per turn of the loop (one forward
  // slice between two decode steps, so running streams keep their step time).
  PrefillOptions prefill;
  // The plain reference of scoring (docs/design.md §3.3): each forced token one decode step, as
  // a sampled sequence runs. Off: forward slices (Engine::forward).
  bool score_per_token = false;
  // How long a fork source waits for the rest of its group; it also goes when the pool runs short.
  int fork_source_ms = 30000;
};

class ContinuousBatcher {
 public:
  // `engine` null: a CPU engine over `pool`. Otherwise it must have been made with `pool` (shipped
  // states arrive there) and must outlive the batcher, which is its only caller.
  ContinuousBatcher(const Model& model, KvPool& pool, BatcherLimits limits, Engine* engine = nullptr);
  ~ContinuousBatcher();

  // Queues a request; RESOURCE_EXHAUSTED when the queue is full, INVALID_ARGUMENT for bad
  // fields (named). The request id is for cancel().
  // A refused request's shipped state (if any) has its blocks returned to the pool.
  Result<uint64_t> submit(DecodeRequest req);
  // The field checks of submit, for callers that must refuse before reserving anything.
  Status validate(const DecodeRequest& req) const;
  void cancel(uint64_t id);

  void start();
  // Stops admitting; with drain, finishes the running and waiting requests first; otherwise
  // they finish with "cancelled". Frees every block either way.
  void stop(bool drain);

  int running() const;
  int waiting() const;
  int64_t preemptions() const;
  // Requests admitted by forking a group's source instead of a prefill or a shipped state.
  int64_t forks() const;

 private:
  struct Seq {
    uint64_t id;
    DecodeRequest req;
    std::unique_ptr<Sampler> sampler;
    std::optional<TokenMask> mask;  // with a constraint
    std::vector<int32_t> generated;
    Engine::SeqId seq = -1;     // the engine's sequence while admitted (≥ 0)
    int32_t next_input = -1;    // the sampled token the next step consumes
    std::vector<float> logits;  // logits awaiting sampling (after prefill)
    bool cancelled = false;
    bool forward_score = false;  // forced tokens computed by forward slices, not decode steps
    int preemptions = 0;
    Clock::time_point submitted;
    std::optional<double> queue_seconds;  // set at first admission
  };
  using SeqPtr = std::unique_ptr<Seq>;

  // The batcher thread: each turn sweeps cancelled and expired requests, admits waiting ones,
  // makes room for one more row per running sequence (preempting the newest), and steps.
  void loop();
  enum class Sweep { kGoOn, kExit };
  Sweep sweep();
  void admit_waiting();
  std::vector<Seq*> make_room();
  void step(const std::vector<Seq*>& batch, std::vector<float>& logits);
  bool admit(Seq& s);  // false: the pool is short (stays waiting)
  bool admit_score(Seq& s);
  // One turn's forward slices of the running scores, oldest first, within the chunk budget.
  void score_slices(std::vector<float>& logits);
  void finish(SeqPtr s, std::string reason, Status status);
  void preempt_newest();
  bool sample_and_emit(Seq& s, const float* logits);  // true: the sequence is done
  static const char* finish_reason(const Seq& s);     // of a sequence done without error
  // Fork groups (DecodeRequest::fork_group), batcher thread only.
  bool admit_fork(Seq& s);         // true: forked from its group's source
  void leave_fork_source(Seq& s);  // after s's prefill: the source its siblings fork
  // Releases the sources past their time (all of them unless expired_only); true if any went.
  bool drop_fork_sources(bool expired_only);

  const Model& model_;
  KvPool& pool_;
  const BatcherLimits limits_;
  std::unique_ptr<Engine> own_engine_;  // the CPU engine when none was given
  Engine& engine_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<SeqPtr> waiting_;
  std::list<SeqPtr> running_;  // in admission order: preemption takes the back
  std::vector<uint64_t> cancel_requests_;
  uint64_t next_id_ = 1;
  bool stopping_ = false, drain_ = false;
  int64_t preemptions_ = 0;
  int64_t forks_ = 0;
  struct ForkSource {
    Engine::SeqId seq = -1;
    std::vector<int32_t> prompt;
    std::vector<float> logits;  // the next-token logits after the prompt
    int left = 0;               // siblings still to fork it
    Clock::time_point expires;
  };
  std::map<std::string, ForkSource> fork_sources_;  // batcher thread only
  std::thread thread_;
};

}  // namespace yoco
