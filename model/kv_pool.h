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
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "handoff/block_pool.h"
#include "model/state.h"

namespace yoco {

class KvPool final : public KvBlockPool {
 public:
  // block_size must be a multiple of kKvChunkRows.
  static Result<std::unique_ptr<KvPool>> create(int n_blocks, int block_size, int kv_dim);

  int block_size() const override { return block_size_; }
  int row_floats() const override { return kv_dim_; }
  int kv_dim() const { return kv_dim_; }
  int total_blocks() const override { return n_blocks_; }
  int free_blocks() const;
  float* k_base() override { return k_.data(); }
  float* v_base() override { return v_.data(); }
  float* k_data() { return k_.data(); }
  float* v_data() { return v_.data(); }

  // Empty pages bound to this pool, or pages over blocks this pool handed out (the caller's hold
  // moves into them).
  KvPages new_pages(std::vector<int32_t> blocks = {}) {
    return KvPages{k_.data(), v_.data(), block_size_, kv_dim_, std::move(blocks)};
  }
  // Grows `pages` so it holds at least `rows` rows. All or nothing: RESOURCE_EXHAUSTED leaves
  // the pages and the pool as they were.
  Status reserve(KvPages& pages, int64_t rows);
  // Drops this sequence's hold on every block of `pages`; a block goes back to the pool when
  // no sequence holds it any more.
  void release(KvPages& pages);
  // KvBlockPool: the same by block id.
  Result<std::vector<int32_t>> allocate_blocks(int64_t rows) override;
  void release_blocks(std::span<const int32_t> blocks) override;

  // Prefix sharing: sequences whose prompts start alike hold the same pool blocks for their
  // common whole blocks instead of copies. `block_hashes[i]` names the content of block i of
  // `pages` (the prefix hash chain, handoff/prefix_chain.h, over the tokens up to its end and
  // the model: equal hashes mean equal prefixes). Each of those blocks whose hash is already held by another block with
  // bit-identical rows is swapped for that block (its own copy goes back to the pool);
  // otherwise it becomes the block others share. Only blocks that are complete and never
  // written again may be offered (a prompt's whole blocks). Returns the blocks now shared.
  int share_prefix(KvPages& pages, std::span<const uint64_t> block_hashes);
  // Blocks held by more than one sequence, counted once each (for metrics).
  int shared_blocks() const;

  // Retention (off by default; docs/design.md §3.3, decode residency): an indexed block whose last
  // holder lets go keeps its content and its place in the prefix index, evictable, so the next
  // sequence with the same prefix finds it. Evictable blocks count as free: a reservation takes
  // never-indexed blocks first, then evicts the least recently released, a chain's last block
  // before its first (so what stays is a leading run). Turning it off frees every evictable block.
  void set_retention(bool on);
  // The pool's residency summary: the index's block hashes, most recently used first, within one
  // use a chain's first blocks first (so a summary cut at `max` keeps leading runs); at most `max`.
  std::vector<uint64_t> resident_keys(size_t max) const;
  // How many leading hashes of `block_hashes` the index holds now (running or retained blocks).
  int resident_prefix(std::span<const uint64_t> block_hashes) const;
  // Indexed blocks no sequence holds (retained, evictable).
  int evictable_blocks() const;

 private:
  KvPool(int n_blocks, int block_size, int kv_dim);
  void drop_locked(int32_t block);
  int32_t take_locked();  // a free block, else the least recently released evictable one
  void unindex_locked(int32_t block);

  const int n_blocks_, block_size_, kv_dim_;
  std::vector<float> k_, v_;
  mutable std::mutex mu_;
  std::vector<int32_t> free_;  // a stack: recently freed blocks are reused first (warm in cache)
  std::vector<int32_t> refs_;  // holders per block (0: free)
  // Prefix index: content hash → the block other sequences share, and back.
  std::unordered_map<uint64_t, int32_t> by_hash_;
  std::unordered_map<int32_t, uint64_t> hash_of_;
  // Retention: evictable blocks, most recently released first, with each one's place in the list.
  bool retain_ = false;
  std::list<int32_t> evictable_;
  std::unordered_map<int32_t, std::list<int32_t>::iterator> evictable_at_;
  // Per block: the last use (a tick per share_prefix or release call) and its index in its chain.
  uint64_t tick_ = 0;
  std::vector<uint64_t> used_at_;
  std::vector<int32_t> depth_;
};

}  // namespace yoco
