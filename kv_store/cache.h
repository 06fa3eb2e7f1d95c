// A KV store seen as a cache (docs/design.md §5): K/V blocks under their hash-chain keys, self-decoder
// state snapshots (hand-off blobs, handoff/state_blob.h), and documents. Rows and blobs only:
// the engine's view (SequenceState in and out) is prefill_service/prompt_cache.h. Store
// failures never fail the caller's request: lookups degrade to "not cached" (counted), writes
// report a Status for the caller to log and count. An object that fails validation is deleted
// and counted as corrupt and as a miss: never a wrong answer.
//
// Resuming needs both parts of docs/design.md §2.5's state: the global K/V rows (blocks) and the
// self-decoder state at the same position. load_prefix finds the longest block prefix of a
// prompt that also has a state snapshot; load_document restores a saved document, whose state
// snapshot also carries the K/V rows of its trailing partial block.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kv_store/format.h"
#include "kv_store/stats.h"
#include "kv_store/store.h"

namespace yoco {

struct KvCacheOptions {
  uint64_t fingerprint = 0;
  int kv_dim = 0;        // floats per K (and V) row: the model's kv_dim
  int block_tokens = 0;  // B
  KvDType dtype = KvDType::kF32;
  int lookup_batch = 16;  // keys per get_many while walking a chain
};

// What a lookup restored: `blocks` full blocks of rows, and the state at `tokens`.
struct CachedPrefix {
  int64_t tokens = 0;  // positions covered; 0: nothing usable
  int64_t blocks = 0;
  std::vector<float> k, v;     // [blocks·B, kv_dim]
  std::vector<uint8_t> state;  // state blob at `tokens` (rows past the blocks inside)
};

struct KvRows {
  std::vector<float> k, v;  // [n·B, kv_dim]
};

// Row r of a sequence: its K and V rows (kv_dim floats each), wherever they are stored.
using KvRowFn = std::function<std::pair<const float*, const float*>(int64_t row)>;

struct LoadedDocument {
  DocumentRecord record;
  // nullopt: some block or the state is gone (evicted, expired, damaged); recompute from
  // record.tokens.
  std::optional<CachedPrefix> cached;
};

// Thread-safe (no state besides atomic counters) when the store is.
class KvCache {
 public:
  // `store` outlives the cache.
  KvCache(KvStore& store, KvCacheOptions opt);

  const KvCacheOptions& options() const { return opt_; }

  // ---- blocks ----
  // Encodes full blocks first_block .. first_block+n_blocks−1 of `tokens` under their chain
  // keys. k_rows / v_rows hold the sequence's rows from row 0 ([≥ (first_block+n_blocks)·B,
  // kv_dim]). Stops at the first failed put.
  Status write_blocks(std::span<const int32_t> tokens, const float* k_rows, const float* v_rows, int64_t first_block,
                      int64_t n_blocks, std::chrono::seconds ttl);
  // The same with rows gathered one at a time (paged storage).
  Status write_blocks(std::span<const int32_t> tokens, const KvRowFn& row, int64_t first_block, int64_t n_blocks,
                      std::chrono::seconds ttl);
  // Leading full blocks present and valid (max_blocks < 0: no limit).
  int64_t longest_cached_prefix(std::span<const int32_t> tokens, int64_t max_blocks = -1);
  // All of `keys`, decoded and validated: NOT_FOUND / DATA_LOSS naming the first block missing.
  Result<KvRows> read_blocks(std::span<const BlockKey> keys);

  // ---- state snapshots (hand-off blobs) ----
  Status put_state(const BlockKey& at, std::span<const uint8_t> blob, std::chrono::seconds ttl);
  Result<std::optional<std::vector<uint8_t>>> get_state(const BlockKey& at);

  // The longest prefix of whole blocks (at most max_blocks) with a state snapshot at its end.
  // Nothing cached, or the store down: tokens = 0. The first skip_blocks blocks are taken as
  // present and not read (their rows are zeros): the caller has them elsewhere (resident on
  // the decode worker, docs/design.md, resident prefixes).
  CachedPrefix load_prefix(std::span<const int32_t> tokens, int64_t max_blocks = -1, int64_t skip_blocks = 0);

  // ---- documents ----
  // A record for `tokens` (keys, id, created now); stored_bytes left 0.
  DocumentRecord make_document(std::span<const int32_t> tokens, std::chrono::seconds ttl,
                               const std::string& owner = {}) const;
  // Stores the record under its id and adds it to the document index.
  Status put_document(const DocumentRecord& record);
  Result<std::optional<DocumentRecord>> get_document(const std::string& id);
  // Ids in the index whose record still exists (entries whose record is gone are pruned).
  Result<std::vector<std::string>> list_documents();
  // Removes the record, its state snapshot and its index entry. Blocks stay: other prompts may
  // share them; TTLs and eviction reclaim them.
  Status delete_document(const std::string& id);
  // Everything in one go: the blocks not yet cached (rows from `row`), the state blob after all
  // tokens (it carries the rows of a trailing partial block, in options().dtype), the record.
  Result<DocumentRecord> save_document(std::span<const int32_t> tokens, const KvRowFn& row,
                                       std::span<const uint8_t> state_blob, std::chrono::seconds ttl,
                                       const std::string& owner = {});
  // nullopt: no such document (or its record is damaged). An error: the store failed.
  Result<std::optional<LoadedDocument>> load_document(const std::string& id);

  // Object-level counters (a block, a state, a record each count once).
  KvStoreStatsSnapshot stats() const { return stats_.snapshot(); }
  std::string index_set() const;  // "docs:" + fingerprint hex

 private:
  template <class RowFn>
  Status write_blocks_impl(std::span<const int32_t> tokens, RowFn&& row, int64_t first_block, int64_t n_blocks,
                           std::chrono::seconds ttl);
  // Walks keys in batches; appends decoded rows when out != nullptr. Returns blocks found.
  int64_t walk(std::span<const BlockKey> keys, KvRows* out, Status* first_error);
  // Decodes a fetched object; damaged ones are deleted and counted. nullopt: a miss.
  std::optional<Object> check(const KvGetResult& got, const std::string& key, ObjectKind kind);
  int64_t expiry_for(std::chrono::seconds ttl) const;

  KvStore& store_;
  const KvCacheOptions opt_;
  KvStoreStats stats_;
};

}  // namespace yoco
