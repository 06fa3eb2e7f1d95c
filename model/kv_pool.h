// The paged global-KV pool of a decode worker: one allocation (registered once for transfers),
// cut into blocks of block_size rows; sequences hold block tables (KvPages). YOCO needs one
// K/V pair per token for the whole model, so the same bytes hold ~n_layers× more tokens than
// a Transformer's pool. The KV transfer receiver fills it through KvBlockPool (handoff/), blocks
// by id, without seeing the engine.
#pragma once

#include <cstdint>
#include <list>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "handoff/block_pool.h"
#include "handoff/prefix_chain.h"
#include "model/state.h"

namespace yoco {

// A `--kv-dtype` flag's value: "f32" (or "fp32") or "bf16"; INVALID_ARGUMENT naming `flag`.
Result<KvDType> parse_kv_dtype(const std::string& value, const std::string& flag = "--kv-dtype");

class KvPool final : public KvBlockPool {
 public:
  // block_size must be a multiple of kKvChunkRows. `dtype` is how the rows are kept: fp32, or
  // bf16 (16-bit K/V, docs/design.md: half the bytes for decode attention to read; rows are
  // rounded to nearest even as they are written).
  static Result<std::unique_ptr<KvPool>> create(int n_blocks, int block_size, int kv_dim,
                                                KvDType dtype = KvDType::kF32);

  int block_size() const override { return block_size_; }
  int row_floats() const override { return kv_dim_; }
  int kv_dim() const { return kv_dim_; }
  int total_blocks() const override { return n_blocks_; }
  int free_blocks() const;
  float* k_base() override { return k_.data(); }
  float* v_base() override { return v_.data(); }
  KvDType kv_dtype() const override { return dtype_; }
  uint8_t* k_bytes() override {
    return dtype_ == KvDType::kBF16 ? reinterpret_cast<uint8_t*>(k16_.data()) : reinterpret_cast<uint8_t*>(k_.data());
  }
  uint8_t* v_bytes() override {
    return dtype_ == KvDType::kBF16 ? reinterpret_cast<uint8_t*>(v16_.data()) : reinterpret_cast<uint8_t*>(v_.data());
  }
  // The fp32 arrays (null in a bf16 pool) and the bf16 ones (null in an fp32 pool).
  float* k_data() { return k_.data(); }
  float* v_data() { return v_.data(); }
  uint16_t* k16_data() { return k16_.data(); }
  uint16_t* v16_data() { return v16_.data(); }
  // Bytes per element (4 or 2).
  int elem_bytes() const { return dtype_ == KvDType::kBF16 ? 2 : 4; }

  // Empty pages bound to this pool, or pages over blocks this pool handed out (the caller's hold
  // moves into them).
  KvPages new_pages(std::vector<int32_t> blocks = {}) {
    KvPages p{k_.data(), v_.data(), block_size_, kv_dim_, std::move(blocks), k16_.data(), v16_.data(), this};
    if (dtype_ == KvDType::kBF16) p.k_pool = p.v_pool = nullptr;
    else p.k16_pool = p.v16_pool = nullptr;
    return p;
  }
  bool owns(const KvPages& pages) const { return pages.pool == this; }
  // Grows `pages` so it holds at least `rows` rows. All or nothing: RESOURCE_EXHAUSTED leaves
  // the pages and the pool as they were.
  Status reserve(KvPages& pages, int64_t rows);
  // Drops this sequence's hold on every block of `pages`; a block goes back to the pool when
  // no sequence holds it any more.
  void release(KvPages& pages);
  // KvBlockPool: the same by block id.
  Result<std::vector<int32_t>> allocate_blocks(int64_t rows) override;
  void release_blocks(std::span<const int32_t> blocks) override;
  // One more hold on each of `blocks` (held already): a forked sequence shares them
  // (Engine::fork); each holder lets go with release / release_blocks.
  void hold_blocks(std::span<const int32_t> blocks);

  // Prefix sharing: sequences whose prompts start alike hold the same pool blocks for their
  // common whole blocks instead of copies. `block_hashes[i]` names the content of block i of
  // `pages` (the prefix hash chain, handoff/prefix_chain.h, over the tokens up to its end and
  // the model: equal hashes mean equal prefixes). Each of those blocks whose hash is already held by another block with
  // bit-identical rows is swapped for that block (its own copy goes back to the pool);
  // otherwise it becomes the block others share. Only blocks that are complete and never
  // written again may be offered (a prompt's whole blocks). Returns the blocks now shared.
  int share_prefix(KvPages& pages, std::span<const BlockKey> block_hashes);
  // Blocks held by more than one sequence, counted once each (for metrics).
  int shared_blocks() const;

  // Resident prefixes (docs/design.md, resident prefixes): with `keep` on, an indexed block whose
  // last holder lets go keeps its rows and its hash, so a later prompt with the same prefix
  // maps it instead of receiving it again. Such blocks count as free: reserve and
  // allocate_blocks take truly free blocks first, then evict kept ones, least recently
  // released first. Off (the default): a released block leaves the index at once.
  void set_keep_released(bool keep);
  // The leading blocks whose hashes (block_hashes[0], [1], ...) the index holds, each with one
  // more hold for the caller (pinned: never evicted until released), stopping at the first
  // miss or at max_blocks. The caller returns them with release_blocks or moves them into pages.
  std::vector<int32_t> claim_prefix(std::span<const BlockKey> block_hashes, size_t max_blocks);
  // Indexed blocks that nobody holds (kept, evictable).
  int kept_blocks() const;
  // The pool's residency summary for KV-aware routing (docs/design.md §6, decode residency): the
  // index's keys folded to 64 bits, most recently used first and, within one use, a chain's first
  // blocks first (so a summary cut at `max` keeps leading runs); at most `max`.
  std::vector<uint64_t> resident_keys(size_t max) const;

 private:
  KvPool(int n_blocks, int block_size, int kv_dim, KvDType dtype);
  void drop_locked(int32_t block);
  // A free block for a new holder: a truly free one, else the oldest kept one (unindexed).
  int32_t take_locked();
  void hold_locked(int32_t block);                 // one more holder (a kept block stops being evictable)
  void touch_locked(int32_t block, size_t depth);  // used now, as block `depth` of a chain

  const int n_blocks_, block_size_, kv_dim_;
  const KvDType dtype_;
  std::vector<float> k_, v_;         // fp32 pools
  std::vector<uint16_t> k16_, v16_;  // bf16 pools
  mutable std::mutex mu_;
  std::vector<int32_t> free_;  // a stack: recently freed blocks are reused first (warm in cache)
  std::vector<int32_t> refs_;  // holders per block (0: free)
  // Prefix index: content hash → the block other sequences share, and back.
  // Full 128-bit keys: a claimed block is mapped without comparing bytes, so two prefixes must
  // never meet on a 64-bit fold.
  struct KeyHash {
    size_t operator()(const BlockKey& k) const { return static_cast<size_t>(k.fold64()); }
  };
  std::unordered_map<BlockKey, int32_t, KeyHash> by_hash_;
  std::unordered_map<int32_t, BlockKey> hash_of_;
  // Kept blocks (refs 0, still indexed), least recently released first; `kept_at_` finds one
  // in it. Only with keep_released_.
  bool keep_released_ = false;
  std::list<int32_t> kept_;
  std::unordered_map<int32_t, std::list<int32_t>::iterator> kept_at_;
  // Per block: its last use (a tick per claim, share or release call) and its index in its
  // chain then; they order the residency summary.
  uint64_t tick_ = 0;
  std::vector<uint64_t> used_at_;
  std::vector<int32_t> depth_;
};

}  // namespace yoco
