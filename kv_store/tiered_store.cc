#include "kv_store/tiered_store.h"

#include <set>

namespace yoco {

TieredStore::TieredStore(std::vector<std::unique_ptr<KvStore>> tiers, TieredOptions opt)
    : tiers_(std::move(tiers)), opt_(opt) {
  YOCO_CHECK(!tiers_.empty());
  for (const auto& t : tiers_) YOCO_CHECK(t != nullptr);
}

std::string TieredStore::name() const {
  std::string n = "tiered(";
  for (size_t i = 0; i < tiers_.size(); ++i) {
    if (i) n += ',';
    n += tiers_[i]->name();
  }
  return n + ")";
}

std::vector<KvTierStats> TieredStore::tier_stats() const {
  std::vector<KvTierStats> out;
  for (const auto& t : tiers_)
    for (auto& s : t->tier_stats()) out.push_back(std::move(s));
  return out;
}

void TieredStore::fill_upper(size_t found_at, std::string_view key, const std::string& value) {
  for (size_t j = 0; j < found_at; ++j) (void)tiers_[j]->put(key, value, opt_.fill_ttl);  // best effort
}

KvGetResult TieredStore::get(std::string_view key) {
  Status first_error;
  size_t failed = 0;
  for (size_t i = 0; i < tiers_.size(); ++i) {
    KvGetResult r = tiers_[i]->get(key);
    if (!r.ok()) {
      if (first_error.ok()) first_error = r.status();
      ++failed;
      continue;
    }
    if (r->has_value()) {
      fill_upper(i, key, **r);
      stats_.hit((*r)->size());
      return r;
    }
  }
  if (!first_error.ok()) stats_.error();
  // Some tier answered "miss": a miss. Every tier failed: the failure.
  if (failed == tiers_.size()) return first_error;
  stats_.miss();
  return kv_miss();
}

std::vector<KvGetResult> TieredStore::get_many(std::span<const std::string> keys) {
  const size_t n = keys.size();
  std::vector<std::optional<KvGetResult>> out(n);
  std::vector<size_t> pending(n);
  std::vector<int> errors(n, 0);
  std::vector<Status> first_error(n);
  for (size_t i = 0; i < n; ++i) pending[i] = i;
  for (size_t t = 0; t < tiers_.size() && !pending.empty(); ++t) {
    std::vector<std::string> ask;
    ask.reserve(pending.size());
    for (size_t i : pending) ask.push_back(keys[i]);
    std::vector<KvGetResult> got = tiers_[t]->get_many(ask);
    std::vector<size_t> still;
    for (size_t j = 0; j < pending.size(); ++j) {
      const size_t i = pending[j];
      KvGetResult& r = got[j];
      if (r.ok() && r->has_value()) {
        fill_upper(t, keys[i], **r);
        stats_.hit((*r)->size());
        out[i].emplace(std::move(r));
        continue;
      }
      if (!r.ok()) {
        ++errors[i];
        if (first_error[i].ok()) first_error[i] = r.status();
      }
      still.push_back(i);
    }
    pending = std::move(still);
  }
  std::vector<KvGetResult> result;
  result.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (out[i]) {
      result.push_back(std::move(*out[i]));
      continue;
    }
    if (errors[i]) stats_.error();
    if (errors[i] == static_cast<int>(tiers_.size())) {
      result.push_back(first_error[i]);
    } else {
      stats_.miss();
      result.push_back(kv_miss());
    }
  }
  return result;
}

Status TieredStore::put(std::string_view key, std::string_view value, std::chrono::seconds ttl) {
  Status first_error;
  bool any = false;
  for (auto& t : tiers_) {
    Status st = t->put(key, value, ttl);
    if (st.ok()) any = true;
    else if (first_error.ok()) first_error = st;
  }
  if (any) {
    stats_.written(value.size());
    return Status::Ok();
  }
  stats_.error();
  return first_error;
}

Status TieredStore::del(std::string_view key) {
  Status first_error;
  for (auto& t : tiers_) {
    Status st = t->del(key);
    if (!st.ok() && first_error.ok()) first_error = st;
  }
  if (!first_error.ok()) stats_.error();
  return first_error;
}

Status TieredStore::set_add(std::string_view set, std::string_view member) {
  Status first_error;
  bool any = false;
  for (auto& t : tiers_) {
    Status st = t->set_add(set, member);
    if (st.ok()) any = true;
    else if (first_error.ok()) first_error = st;
  }
  return any ? Status::Ok() : first_error;
}

Status TieredStore::set_remove(std::string_view set, std::string_view member) {
  Status first_error;
  for (auto& t : tiers_) {
    Status st = t->set_remove(set, member);
    if (!st.ok() && first_error.ok()) first_error = st;
  }
  return first_error;
}

Result<std::vector<std::string>> TieredStore::set_members(std::string_view set) {
  std::set<std::string> all;
  Status first_error;
  bool any = false;
  for (auto& t : tiers_) {
    auto r = t->set_members(set);
    if (!r.ok()) {
      if (first_error.ok()) first_error = r.status();
      continue;
    }
    any = true;
    all.insert(r->begin(), r->end());
  }
  if (!any) return first_error;
  return std::vector<std::string>(all.begin(), all.end());
}

}  // namespace yoco
