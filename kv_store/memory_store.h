// In-process backend: LRU under a byte budget, TTLs honoured. Values are shared immutable
// buffers, so a get copies outside the lock.
#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>

#include "kv_store/store.h"

namespace yoco {

class MemoryStore final : public KvStore {
 public:
  explicit MemoryStore(int64_t max_bytes);

  KvGetResult get(std::string_view key) override;
  Status put(std::string_view key, std::string_view value, std::chrono::seconds ttl) override;
  Status del(std::string_view key) override;
  Status set_add(std::string_view set, std::string_view member) override;
  Status set_remove(std::string_view set, std::string_view member) override;
  Result<std::vector<std::string>> set_members(std::string_view set) override;
  std::string name() const override;

  int64_t bytes_used() const;
  int64_t max_bytes() const { return max_bytes_; }
  size_t size() const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Entry {
    std::string key;
    std::shared_ptr<const std::string> value;
    Clock::time_point expiry;  // max(): none
  };
  using List = std::list<Entry>;  // front = most recently used

  static int64_t charge(const Entry& e) { return static_cast<int64_t>(e.key.size() + e.value->size()) + 64; }
  void erase_locked(List::iterator it);

  const int64_t max_bytes_;
  mutable std::mutex mu_;
  List lru_;
  std::unordered_map<std::string_view, List::iterator> index_;  // views into Entry::key
  int64_t used_ = 0;
  std::map<std::string, std::set<std::string>, std::less<>> sets_;
};

}  // namespace yoco
