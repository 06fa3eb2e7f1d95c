#include "model/kv_pool.h"

#include <memory>
#include <string>

namespace yoco {

Result<std::unique_ptr<KvPool>> KvPool::create(int n_blocks, int block_size, int kv_dim) {
  if (n_blocks <= 0) return invalid_argument("kv pool: n_blocks must be > 0");
  if (block_size <= 0 || block_size % kKvChunkRows != 0)
    return invalid_argument("kv pool: block_size must be a positive multiple of " + std::to_string(kKvChunkRows));
  if (kv_dim <= 0) return invalid_argument("kv pool: kv_dim must be > 0");
  return std::unique_ptr<KvPool>(new KvPool(n_blocks, block_size, kv_dim));
}

KvPool::KvPool(int n_blocks, int block_size, int kv_dim)
    : n_blocks_(n_blocks),
      block_size_(block_size),
      kv_dim_(kv_dim),
      k_(static_cast<size_t>(n_blocks) * block_size * kv_dim),
      v_(k_.size()) {
  free_.reserve(n_blocks);
  for (int b = n_blocks - 1; b >= 0; --b) free_.push_back(b);
}

int KvPool::free_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(free_.size());
}

Status KvPool::reserve(KvPages& pages, int64_t rows) {
  if (pages.k_pool != k_.data() || pages.block_size != block_size_)
    return invalid_argument("kv pool: pages belong to another pool");
  const int64_t need_blocks = (rows + block_size_ - 1) / block_size_ - static_cast<int64_t>(pages.blocks.size());
  if (need_blocks <= 0) return Status::Ok();
  std::lock_guard<std::mutex> lock(mu_);
  if (need_blocks > static_cast<int64_t>(free_.size()))
    return Status(StatusCode::kResourceExhausted, "kv pool: " + std::to_string(need_blocks) + " blocks needed, " +
                                                      std::to_string(free_.size()) + " free");
  for (int64_t i = 0; i < need_blocks; ++i) {
    pages.blocks.push_back(free_.back());
    free_.pop_back();
  }
  return Status::Ok();
}

void KvPool::release(KvPages& pages) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = pages.blocks.rbegin(); it != pages.blocks.rend(); ++it) free_.push_back(*it);
  pages.blocks.clear();
}

}  // namespace yoco
