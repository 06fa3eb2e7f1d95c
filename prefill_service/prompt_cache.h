// The prefill worker's prompt cache: the KV store's cache (kv_store/cache.h: rows and state
// blobs) seen through the engine's SequenceState, and the policy the prefill scheduler follows
// with it (PromptCache: where a prompt resumes, where its slices stop, what is stored and when).
// Lives here, beside its one user, so the store never depends on the engine (docs/architecture.md).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string_view>

#include "kv_store/cache.h"
#include "model/config.h"
#include "model/model.h"
#include "model/state.h"

namespace yoco {

// Full blocks first_block .. first_block+n_blocks−1 of `tokens` from a state's rows (contiguous
// or paged); the blocks must lie below st.position.
Status write_state_blocks(KvCache& cache, std::span<const int32_t> tokens, const SequenceState& st, int64_t first_block,
                          int64_t n_blocks, std::chrono::seconds ttl);

// Rebuilds a contiguous SequenceState from a lookup: the blocks' rows, then the state blob
// (validated against the model; its K/V rows must continue the blocks up to its position).
Status restore_prefix(const KvCache& cache, const CachedPrefix& p, const ModelConfig& c, SequenceState& out);
// The same, taking the lookup's rows instead of copying them (their capacity is kept: a caller
// that reserved room for the whole prompt avoids a reallocation per slice).
Status restore_prefix(const KvCache& cache, CachedPrefix&& p, const ModelConfig& c, SequenceState& out);

// KvCache::save_document from a state: st.position must equal tokens.size().
Result<DocumentRecord> save_document(KvCache& cache, std::span<const int32_t> tokens, const SequenceState& st,
                                     const ModelConfig& c, std::chrono::seconds ttl, const std::string& owner = {});

// A prefill job as the prompt cache sees it (a view of the scheduler's PrefillJob).
struct PromptCacheRequest {
  std::span<const int32_t> tokens;
  std::span<const int64_t> document_ends;  // prepended documents' ends (PrefillJob::cached_prefix_candidates)
  bool document = false;                   // a document to store whole (CacheDocument), not a prompt to ship
  std::chrono::seconds document_ttl{0};
  std::string_view document_owner;
  int64_t resident_rows = 0;  // held by the decode worker already: never loaded
};

// What the cache did for one job so far (the scheduler keeps one per job).
struct PromptCacheProgress {
  int64_t cached_tokens = 0;  // loaded instead of computed
  // Rows [0, hole) of the job's host rows were never loaded (resident on the decode worker, so
  // neither shipped nor needed): they must not be stored.
  int64_t hole = 0;
  int64_t stored_prefix = 0;  // the longest document end whose state this job stored
};

// The prompt-cache policy of the prefill scheduler (docs/design.md §5, one prefix identity). A
// prompt resumes from its longest cached prefix; its slices stop where a state is worth storing
// (a prepended document's end, the last whole block); at those stops the state goes to the store,
// and at its end the whole blocks it computed. A document is computed like a prompt and stored
// whole, with a state at its last whole block so that a prompt extending it resumes there.
// Everything is best effort: a store that fails makes a prompt slower, never wrong.
class PromptCache {
 public:
  // `cache` and `model` must outlive it. write_prompts: automatic prefix caching (prompts' whole
  // blocks and a state at their last whole block are written, and looked up); without it only
  // document ends are.
  PromptCache(KvCache& cache, const Model& model, bool write_prompts);

  // A job's first slice: a prompt's longest cached prefix (prepended documents' ends first, exact
  // at any position, longest first; then whole blocks), restored as a contiguous state with room
  // for the whole prompt's rows; its rows below the resident blocks stay zero. Sets `p`. nullopt:
  // nothing cached (or a document: always computed).
  std::optional<SequenceState> resume(const PromptCacheRequest& r, PromptCacheProgress& p);

  // Where a slice starting at `computed` must stop so that a state can be stored there (a
  // prepended document's end, the last whole block); the job's end when nowhere.
  int64_t next_stop(const PromptCacheRequest& r, int64_t computed) const;

  // The engine's state of the job (without its K/V rows), taken only when one is stored.
  using Snapshot = std::function<Status(SequenceState&)>;
  // A slice ended at a stop `at` (next_stop): the state there goes to the store when it is one
  // worth keeping. `rows`: the job's host rows, [0, at) filled (lent, left as they were).
  void at_stop(const PromptCacheRequest& r, PromptCacheProgress& p, int64_t at, const Snapshot& snapshot,
               SequenceState& rows);

  // The job's last slice ran (rows: all its host rows): the whole blocks it computed go to the
  // store; without prompt caching only those under the document ends it stored.
  void write_back(const PromptCacheRequest& r, const PromptCacheProgress& p, const SequenceState& rows);

  // A document's last slice: its state with all its rows (`snap`) stored whole. Store failures are
  // UNAVAILABLE.
  Result<DocumentRecord> store_document(const PromptCacheRequest& r, const SequenceState& snap);

 private:
  bool writes_prompt(const PromptCacheRequest& r) const { return write_prompts_ && !r.document; }
  int64_t block_tokens() const { return cache_.options().block_tokens; }

  KvCache& cache_;
  const Model& model_;
  const bool write_prompts_;
};

}  // namespace yoco
