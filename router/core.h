// What every call of yoco-router shares: the worker groups, the served model's info, the limits,
// the metrics, and the few mutable parts behind one lock (admission, the prefill picker, seeds).
// RouterService's handlers and each GenerateCall (router/generate_call.h) work through it.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "router/api_keys.h"
#include "router/fork_groups.h"
#include "router/metrics.h"
#include "router/model_info.h"
#include "router/policy.h"
#include "router/worker_calls.h"
#include "router/workers.h"
#include "tokenizer/tokenizer.h"

namespace yoco {

struct RouterLimits {
  int max_in_flight = 256;              // admitted requests; beyond: RESOURCE_EXHAUSTED
  int64_t max_queued_tokens = 1 << 20;  // prompt tokens of admitted requests
  int prefill_attempts = 3;             // tries per request across prefill workers
  int migrations = 3;                   // decode workers a stream may move across
  uint32_t lease_ms = 30000;            // how long a reservation waits for its commit
  // A Decode stream silent this long while its worker fails health polls is migrated (a hung
  // worker, docs/design.md §3.3); well above a decode step and a poll's timeout.
  int64_t stall_timeout_ms = 3000;
  int max_stop_strings = 16;
  int max_logprobs = 20;
  // Prefix affinity for prefill choice (0: off): prompts whose first `affinity_tokens` tokens
  // match go to the same prefill worker unless its queue is longer than the balanced pick's by
  // more than `affinity_max_extra_tokens`.
  int affinity_tokens = 64;
  int64_t affinity_max_extra_tokens = 4096;
  // Decode choice (docs/design.md §3.3): KV-aware (the prompt's blocks a worker already holds,
  // traded against its load by `decode_cost`) or the most free blocks alone.
  bool kv_aware_decode = true;
  DecodeCost decode_cost;
};

class RouterCore {
 public:
  // `colocated`: no prefill workers are configured; decode workers prefill locally
  // (DecodeRequest.local_prefill) and the document RPCs are unavailable.
  // `calls` reaches the workers (GrpcWorkerCalls; an in-memory fake in the unit tests).
  RouterCore(const Tokenizer* tokenizer, WorkerGroup& prefill, WorkerGroup& decode, ModelInfoCache& model,
             WorkerCalls& calls, RouterLimits limits, RouterMetrics& metrics, bool colocated);

  const Tokenizer* tokenizer() const { return tok_; }
  WorkerGroup& prefill() { return prefill_; }
  WorkerGroup& decode() { return decode_; }
  WorkerCalls& calls() { return calls_; }
  const RouterLimits& limits() const { return limits_; }
  RouterMetrics& metrics() { return m_; }
  bool colocated() const { return colocated_; }
  // n choices of one prompt (router/fork_groups.h).
  ForkGroups& forks() { return forks_; }
  // The API keys (docs/design.md §9b); null: no authentication.
  ApiKeys* keys() const { return keys_; }
  void set_keys(ApiKeys* keys) { keys_ = keys; }
  // The served model; UNAVAILABLE until a decode worker has described it.
  Result<std::shared_ptr<const v1::ModelInfo>> model() const;

  // Decode workers of the served model (others show as unhealthy: never used).
  std::vector<WorkerSnapshot> decode_snapshot() const;
  // Any healthy decode worker of the served model (Score).
  std::optional<std::string> any_decode_worker() const;
  // A prefill worker among `workers`: by prefix affinity when `prefix_hash` is given (and
  // affinity is on), else the balanced pick; `exclude`d ones are skipped.
  std::optional<size_t> pick_prefill(const std::vector<WorkerSnapshot>& workers, std::optional<uint64_t> prefix_hash,
                                     const std::vector<std::string>& exclude = {});
  // The whole-block prefix-chain keys of `tokens` for each block size among `workers` (decode
  // residency, handoff/prefix_chain.h, under each worker's reported model fingerprint).
  static std::vector<PromptChain> decode_chains(std::span<const int32_t> tokens,
                                                const std::vector<WorkerSnapshot>& workers);
  // The affinity key of a prompt: a hash of its first `affinity_tokens` tokens.
  uint64_t prefix_hash(std::span<const int32_t> tokens) const;

  Status try_admit(int64_t prompt_tokens);
  void release(int64_t prompt_tokens);
  int in_flight() const;
  uint64_t next_seed();

  void set_serving(bool serving) { serving_ = serving; }
  bool serving() const { return serving_; }

 private:
  const Tokenizer* tok_;
  WorkerGroup& prefill_;
  WorkerGroup& decode_;
  ModelInfoCache& model_;
  WorkerCalls& calls_;
  const RouterLimits limits_;
  RouterMetrics& m_;
  const bool colocated_;
  ForkGroups forks_;
  ApiKeys* keys_ = nullptr;
  std::atomic<bool> serving_{true};
  mutable std::mutex mu_;
  Admission admission_;
  PrefillPicker picker_;
  std::mt19937_64 seeds_;
};

}  // namespace yoco
