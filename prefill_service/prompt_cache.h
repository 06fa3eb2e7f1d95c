// The prefill worker's prompt cache: the KV store's cache (kv_store/cache.h: rows and state
// blobs) seen through the engine's SequenceState. Lives here, beside its one user, so the store
// never depends on the engine (docs/architecture.md).
#pragma once

#include <chrono>
#include <cstdint>
#include <span>

#include "kv_store/cache.h"
#include "model/config.h"
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

}  // namespace yoco
