// A read-through stack of backends, fastest first (memory → dir → redis). A get tries the tiers
// in order and copies a lower-tier hit into the tiers above it; a put writes every tier and
// succeeds when any tier took the value (a dead remote tier does not fail it); a delete and
// set changes go to every tier. set_members is the union over the tiers that answered.
#pragma once

#include <memory>
#include <vector>

#include "kv_store/store.h"

namespace yoco {

struct TieredOptions {
  // TTL of the copies a lower-tier hit leaves in the upper tiers. Objects carry their own expiry
  // (format.h), so a copy outliving its source is still read as expired.
  std::chrono::seconds fill_ttl{0};
};

class TieredStore final : public KvStore {
 public:
  TieredStore(std::vector<std::unique_ptr<KvStore>> tiers, TieredOptions opt = {});

  KvGetResult get(std::string_view key) override;
  std::vector<KvGetResult> get_many(std::span<const std::string> keys) override;
  Status put(std::string_view key, std::string_view value, std::chrono::seconds ttl) override;
  Status del(std::string_view key) override;
  Status set_add(std::string_view set, std::string_view member) override;
  Status set_remove(std::string_view set, std::string_view member) override;
  Result<std::vector<std::string>> set_members(std::string_view set) override;
  std::string name() const override;
  std::vector<KvTierStats> tier_stats() const override;

  size_t tier_count() const { return tiers_.size(); }
  KvStore& tier(size_t i) { return *tiers_[i]; }

 private:
  void fill_upper(size_t found_at, std::string_view key, const std::string& value);

  std::vector<std::unique_ptr<KvStore>> tiers_;
  const TieredOptions opt_;
};

}  // namespace yoco
