#include "kv_store/memory_store.h"

namespace yoco {

MemoryStore::MemoryStore(int64_t max_bytes) : max_bytes_(max_bytes) {}

std::string MemoryStore::name() const { return "memory"; }

void MemoryStore::erase_locked(List::iterator it) {
  used_ -= charge(*it);
  index_.erase(std::string_view(it->key));
  lru_.erase(it);
}

KvGetResult MemoryStore::get(std::string_view key) {
  std::shared_ptr<const std::string> value;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      if (it->second->expiry <= Clock::now()) {
        erase_locked(it->second);
      } else {
        lru_.splice(lru_.begin(), lru_, it->second);
        value = it->second->value;
      }
    }
  }
  if (!value) {
    stats_.miss();
    return kv_miss();
  }
  stats_.hit(value->size());
  return KvValue(*value);
}

Status MemoryStore::put(std::string_view key, std::string_view value, std::chrono::seconds ttl) {
  Entry e{std::string(key), std::make_shared<const std::string>(value),
          ttl.count() > 0 ? Clock::now() + ttl : Clock::time_point::max()};
  const int64_t c = charge(e);
  if (c > max_bytes_) {
    stats_.error();
    return kv_resource_exhausted("memory store: value of " + std::to_string(value.size()) +
                                 " bytes exceeds the budget of " + std::to_string(max_bytes_));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = index_.find(key); it != index_.end()) erase_locked(it->second);
  // Least recently used first; expired entries are never touched, so they drift to the back.
  while (used_ + c > max_bytes_ && !lru_.empty()) erase_locked(std::prev(lru_.end()));
  lru_.push_front(std::move(e));
  index_.emplace(std::string_view(lru_.front().key), lru_.begin());
  used_ += c;
  stats_.written(value.size());
  return Status::Ok();
}

Status MemoryStore::del(std::string_view key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = index_.find(key); it != index_.end()) erase_locked(it->second);
  return Status::Ok();
}

Status MemoryStore::set_add(std::string_view set, std::string_view member) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sets_.find(set);
  if (it == sets_.end()) it = sets_.emplace(std::string(set), std::set<std::string>{}).first;
  it->second.emplace(member);
  return Status::Ok();
}

Status MemoryStore::set_remove(std::string_view set, std::string_view member) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = sets_.find(set); it != sets_.end()) {
    it->second.erase(std::string(member));
    if (it->second.empty()) sets_.erase(it);
  }
  return Status::Ok();
}

Result<std::vector<std::string>> MemoryStore::set_members(std::string_view set) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sets_.find(set);
  if (it == sets_.end()) return std::vector<std::string>{};
  return std::vector<std::string>(it->second.begin(), it->second.end());
}

int64_t MemoryStore::bytes_used() const {
  std::lock_guard<std::mutex> lock(mu_);
  return used_;
}

size_t MemoryStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

}  // namespace yoco
