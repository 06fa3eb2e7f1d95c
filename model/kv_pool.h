// The paged global-KV pool of a decode worker: one allocation (registered once for transfers),
// cut into blocks of block_size rows; sequences hold block tables (KvPages). YOCO needs one
// K/V pair per token for the whole model, so the same bytes hold ~n_layers× more tokens than
// a Transformer's pool.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "common/status.h"
#include "model/state.h"

namespace yoco {

class KvPool {
 public:
  // block_size must be a multiple of kKvChunkRows.
  static Result<std::unique_ptr<KvPool>> create(int n_blocks, int block_size, int kv_dim);

  int block_size() const { return block_size_; }
  int kv_dim() const { return kv_dim_; }
  int total_blocks() const { return n_blocks_; }
  int free_blocks() const;
  int64_t bytes() const { return static_cast<int64_t>(k_.size() + v_.size()) * 4; }
  float* k_data() { return k_.data(); }
  float* v_data() { return v_.data(); }

  // Empty pages bound to this pool.
  KvPages new_pages() { return KvPages{k_.data(), v_.data(), block_size_, kv_dim_, {}}; }
  // Grows `pages` so it holds at least `rows` rows. All or nothing: RESOURCE_EXHAUSTED leaves
  // the pages and the pool as they were.
  Status reserve(KvPages& pages, int64_t rows);
  // Returns every block of `pages` to the pool.
  void release(KvPages& pages);

 private:
  KvPool(int n_blocks, int block_size, int kv_dim);

  const int n_blocks_, block_size_, kv_dim_;
  std::vector<float> k_, v_;
  mutable std::mutex mu_;
  std::vector<int32_t> free_;  // a stack: recently freed blocks are reused first (warm in cache)
};

}  // namespace yoco
