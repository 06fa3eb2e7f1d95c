// Routing and admission policies of yoco-router: small value types, unit-tested alone
// (docs/architecture.md, rule 8). They see worker snapshots, never RPC stubs.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "common/status.h"

namespace yoco {

struct WorkerSnapshot {
  std::string address;  // host:port
  bool healthy = false;
  int64_t queued_tokens = 0;    // prefill: prompt tokens waiting or in flight
  int64_t free_kv_blocks = 0;   // decode: blocks free in its pool
  int64_t kv_block_rows = 0;    // decode: rows per block
  int running = 0;              // decode: sequences in the running batch
  std::string fingerprint;      // the model it reported ("" before its first successful poll)
  int64_t total_kv_blocks = 0;  // decode: blocks in its pool
  int64_t kept_kv_blocks = 0;   // decode: of the free blocks, those still holding a cached prefix
  // decode: the prefix-chain keys of the blocks its pool held at the last poll (DecodeLoad
  // resident_blocks), plus those of requests sent to it since; null: none. Never older than
  // the last poll, so a dropped prefix is forgotten at the next report.
  std::shared_ptr<const std::unordered_set<uint64_t>> resident;
};

// Prefill choice: power of two choices on queued tokens — two random healthy workers, the
// lighter one wins. Load spreads like least-loaded without every router herding onto the
// same worker between load reports. Workers in `exclude` (already failed for this request)
// are skipped.
class PrefillPicker {
 public:
  explicit PrefillPicker(uint64_t seed) : state_(seed | 1) {}
  std::optional<size_t> pick(const std::vector<WorkerSnapshot>& workers, const std::vector<std::string>& exclude = {});
  // Prefix affinity: prompts that start alike go to the same worker, whose memory tier of the
  // KV store then has their first blocks warm. The preferred worker for `prefix_hash` is chosen
  // by rendezvous hashing over the healthy workers (stable as workers come and go); it wins
  // unless its queue exceeds the power-of-two pick's by more than `max_extra_tokens`, so
  // affinity never piles load onto one worker.
  std::optional<size_t> pick_affine(const std::vector<WorkerSnapshot>& workers, uint64_t prefix_hash,
                                    int64_t max_extra_tokens, const std::vector<std::string>& exclude = {});

 private:
  uint64_t next();
  uint64_t state_;
};

// Decode choice: the healthy worker with the most free KV blocks that can hold the whole
// sequence (prompt + max_tokens rows); ties go to the fewer running sequences.
std::optional<size_t> pick_decode(const std::vector<WorkerSnapshot>& workers, int64_t rows_needed,
                                  const std::vector<std::string>& exclude = {});

// KV-aware decode choice (docs/design.md §3.3, KV-aware decode routing): among the healthy
// workers with room for the blocks the sequence adds beyond the resident ones, the lowest
//   cost = ship_weight · ship + load_weight · load
//   ship = the prompt's whole blocks the worker does not hold as a leading run (to prefill + send)
//   load = the blocks its sequences hold (total − free) + the blocks this one adds there
//          (added = its blocks − the resident ones, which it shares) + the kept prefix blocks
//          those evict (added beyond the blocks that hold nothing: free − kept)
// ties to more blocks that hold nothing, then fewer running. All terms are in blocks, so with
// the default weights (1, 1) the holder of a prefix keeps getting it until it carries about twice
// the prefix's blocks more load than the others; a prefix held nowhere goes where it evicts the
// fewest cached prefixes (so they spread over the workers instead of pushing each other out); with
// nothing resident and nothing kept anywhere the choice is the least used.
struct DecodeCost {
  double ship_weight = 1.0;
  double load_weight = 1.0;
  double cost(int64_t ship_blocks, int64_t load_blocks) const {
    return ship_weight * static_cast<double>(ship_blocks) + load_weight * static_cast<double>(load_blocks);
  }
};
// The prompt's whole-block chain keys (BlockKey::fold64) for one block size.
struct PromptChain {
  int64_t block_rows = 0;
  std::vector<uint64_t> keys;
};
struct DecodeChoice {
  size_t index = 0;
  int64_t prompt_blocks = 0;    // whole blocks of the prompt at the chosen worker's block size
  int64_t resident_blocks = 0;  // of them, the leading run its last report (or our sends) listed
};
// How many leading `keys` `resident` holds (0 when null).
int64_t resident_prefix(std::span<const uint64_t> keys, const std::unordered_set<uint64_t>* resident);
// The worker's prompt blocks and leading resident run, by its block size (zeros when no chain fits).
DecodeChoice residency(const WorkerSnapshot& w, size_t index, const std::vector<PromptChain>& chains);
std::optional<DecodeChoice> pick_decode_kv(const std::vector<WorkerSnapshot>& workers, int64_t rows_needed,
                                           const std::vector<PromptChain>& chains, const DecodeCost& cost,
                                           const std::vector<std::string>& exclude = {});

// Admission: bounded in-flight requests and queued prompt tokens; beyond either limit a
// request gets RESOURCE_EXHAUSTED at once instead of waiting without bound.
class Admission {
 public:
  Admission(int max_in_flight, int64_t max_queued_tokens)
      : max_in_flight_(max_in_flight), max_queued_tokens_(max_queued_tokens) {}
  Status try_admit(int64_t prompt_tokens);
  void release(int64_t prompt_tokens);
  int in_flight() const { return in_flight_; }
  int64_t queued_tokens() const { return queued_tokens_; }

 private:
  int max_in_flight_;
  int64_t max_queued_tokens_;
  int in_flight_ = 0;
  int64_t queued_tokens_ = 0;
};

}  // namespace yoco
