#include "model/kv_pool.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

namespace yoco {

Result<KvDType> parse_kv_dtype(const std::string& value, const std::string& flag) {
  if (value == "f32" || value == "fp32") return KvDType::kF32;
  if (value == "bf16") return KvDType::kBF16;
  return invalid_argument(flag + ": '" + value + "' is not f32 or bf16");
}

Result<std::unique_ptr<KvPool>> KvPool::create(int n_blocks, int block_size, int kv_dim, KvDType dtype) {
  if (n_blocks <= 0) return invalid_argument("kv pool: n_blocks must be > 0");
  if (block_size <= 0 || block_size % kKvChunkRows != 0)
    return invalid_argument("kv pool: block_size must be a positive multiple of " + std::to_string(kKvChunkRows));
  if (kv_dim <= 0) return invalid_argument("kv pool: kv_dim must be > 0");
  return std::unique_ptr<KvPool>(new KvPool(n_blocks, block_size, kv_dim, dtype));
}

KvPool::KvPool(int n_blocks, int block_size, int kv_dim, KvDType dtype)
    : n_blocks_(n_blocks),
      block_size_(block_size),
      kv_dim_(kv_dim),
      dtype_(dtype),
      k_(dtype == KvDType::kF32 ? static_cast<size_t>(n_blocks) * block_size * kv_dim : 0),
      v_(k_.size()),
      k16_(dtype == KvDType::kBF16 ? static_cast<size_t>(n_blocks) * block_size * kv_dim : 0),
      v16_(k16_.size()),
      refs_(n_blocks, 0),
      used_at_(n_blocks, 0),
      depth_(n_blocks, 0) {
  free_.reserve(n_blocks);
  for (int b = n_blocks - 1; b >= 0; --b) free_.push_back(b);
}

int KvPool::free_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(free_.size() + kept_.size());
}

int KvPool::kept_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(kept_.size());
}

void KvPool::set_keep_released(bool keep) {
  std::lock_guard<std::mutex> lock(mu_);
  keep_released_ = keep;
  while (!keep && !kept_.empty()) {  // what was kept is plain free now
    const int32_t b = kept_.front();
    kept_.pop_front();
    kept_at_.erase(b);
    by_hash_.erase(hash_of_.at(b));
    hash_of_.erase(b);
    free_.push_back(b);
  }
}

int32_t KvPool::take_locked() {
  int32_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else {  // evict the least recently released kept block: its rows are overwritten
    b = kept_.front();
    kept_.pop_front();
    kept_at_.erase(b);
    by_hash_.erase(hash_of_.at(b));
    hash_of_.erase(b);
  }
  refs_[b] = 1;
  return b;
}

void KvPool::hold_locked(int32_t block) {
  if (refs_[block]++ > 0) return;
  auto it = kept_at_.find(block);
  YOCO_CHECK(it != kept_at_.end());  // refs 0 and indexed: kept
  kept_.erase(it->second);
  kept_at_.erase(it);
}

void KvPool::touch_locked(int32_t block, size_t depth) {
  used_at_[block] = tick_;
  depth_[block] = static_cast<int32_t>(depth);
}

std::vector<uint64_t> KvPool::resident_keys(size_t max) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int32_t> blocks;
  blocks.reserve(hash_of_.size());
  for (const auto& [block, key] : hash_of_) blocks.push_back(block);
  const auto newer = [&](int32_t x, int32_t y) {
    if (used_at_[x] != used_at_[y]) return used_at_[x] > used_at_[y];
    if (depth_[x] != depth_[y]) return depth_[x] < depth_[y];
    return x < y;
  };
  const size_t n = std::min(max, blocks.size());
  std::partial_sort(blocks.begin(), blocks.begin() + static_cast<std::ptrdiff_t>(n), blocks.end(), newer);
  std::vector<uint64_t> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.push_back(hash_of_.at(blocks[i]).fold64());
  return out;
}

std::vector<int32_t> KvPool::claim_prefix(std::span<const BlockKey> block_hashes, size_t max_blocks) {
  std::lock_guard<std::mutex> lock(mu_);
  ++tick_;
  std::vector<int32_t> out;
  for (size_t i = 0; i < block_hashes.size() && i < max_blocks; ++i) {
    auto it = by_hash_.find(block_hashes[i]);
    if (it == by_hash_.end()) break;
    hold_locked(it->second);
    touch_locked(it->second, i);
    out.push_back(it->second);
  }
  return out;
}

Status KvPool::reserve(KvPages& pages, int64_t rows) {
  if (!owns(pages) || pages.block_size != block_size_) return invalid_argument("kv pool: pages belong to another pool");
  const int64_t need_blocks = (rows + block_size_ - 1) / block_size_ - static_cast<int64_t>(pages.blocks.size());
  if (need_blocks <= 0) return Status::Ok();
  std::lock_guard<std::mutex> lock(mu_);
  const size_t available = free_.size() + kept_.size();
  if (need_blocks > static_cast<int64_t>(available))
    return Status(StatusCode::kResourceExhausted,
                  "kv pool: " + std::to_string(need_blocks) + " blocks needed, " + std::to_string(available) + " free");
  for (int64_t i = 0; i < need_blocks; ++i) pages.blocks.push_back(take_locked());
  return Status::Ok();
}

void KvPool::drop_locked(int32_t block) {
  if (--refs_[block] > 0) return;
  if (keep_released_ && hash_of_.count(block)) {  // rows and hash stay until evicted
    kept_.push_back(block);
    kept_at_[block] = std::prev(kept_.end());
    return;
  }
  if (auto h = hash_of_.find(block); h != hash_of_.end()) {
    by_hash_.erase(h->second);
    hash_of_.erase(h);
  }
  free_.push_back(block);
}

void KvPool::release(KvPages& pages) {
  std::lock_guard<std::mutex> lock(mu_);
  ++tick_;
  for (auto it = pages.blocks.rbegin(); it != pages.blocks.rend(); ++it) drop_locked(*it);
  pages.blocks.clear();
}

Result<std::vector<int32_t>> KvPool::allocate_blocks(int64_t rows) {
  KvPages pages = new_pages();
  YOCO_RETURN_IF_ERROR(reserve(pages, rows));
  return std::move(pages.blocks);
}

void KvPool::release_blocks(std::span<const int32_t> blocks) {
  std::lock_guard<std::mutex> lock(mu_);
  ++tick_;
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) drop_locked(*it);
}

void KvPool::hold_blocks(std::span<const int32_t> blocks) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int32_t b : blocks) {
    YOCO_CHECK(b >= 0 && b < n_blocks_ && refs_[b] > 0);  // only blocks someone holds
    ++refs_[b];
  }
}

int KvPool::share_prefix(KvPages& pages, std::span<const BlockKey> block_hashes) {
  if (!owns(pages)) return 0;
  const size_t block_bytes = static_cast<size_t>(block_size_) * kv_dim_ * elem_bytes();
  const auto* k_bytes = dtype_ == KvDType::kBF16 ? reinterpret_cast<const uint8_t*>(k16_.data())
                                                 : reinterpret_cast<const uint8_t*>(k_.data());
  const auto* v_bytes = dtype_ == KvDType::kBF16 ? reinterpret_cast<const uint8_t*>(v16_.data())
                                                 : reinterpret_cast<const uint8_t*>(v_.data());
  std::lock_guard<std::mutex> lock(mu_);
  ++tick_;
  int shared = 0;
  for (size_t i = 0; i < block_hashes.size() && i < pages.blocks.size(); ++i) {
    const int32_t mine = pages.blocks[i];
    auto it = by_hash_.find(block_hashes[i]);
    if (it == by_hash_.end()) {
      if (!hash_of_.count(mine)) {  // the first holder of this content: others share it
        by_hash_[block_hashes[i]] = mine;
        hash_of_[mine] = block_hashes[i];
        touch_locked(mine, i);
      }
      continue;
    }
    const int32_t theirs = it->second;
    touch_locked(theirs, i);
    if (theirs == mine) continue;
    // Equal hashes, but only equal bytes are shared: the output never depends on sharing.
    const size_t off = static_cast<size_t>(theirs) * block_bytes, own = static_cast<size_t>(mine) * block_bytes;
    if (std::memcmp(k_bytes + off, k_bytes + own, block_bytes) != 0 ||
        std::memcmp(v_bytes + off, v_bytes + own, block_bytes) != 0)
      continue;
    hold_locked(theirs);
    pages.blocks[i] = theirs;
    drop_locked(mine);
    ++shared;
  }
  return shared;
}

int KvPool::shared_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (int32_t r : refs_) n += r > 1;
  return n;
}

}  // namespace yoco
