#include "kv_store/store.h"

namespace yoco {

KvStoreStatsSnapshot& KvStoreStatsSnapshot::operator+=(const KvStoreStatsSnapshot& o) {
  hits += o.hits;
  misses += o.misses;
  errors += o.errors;
  corrupt += o.corrupt;
  bytes_read += o.bytes_read;
  bytes_written += o.bytes_written;
  dropped += o.dropped;
  breaker_trips += o.breaker_trips;
  breaker_open += o.breaker_open;
  return *this;
}

KvStoreStatsSnapshot KvStoreStats::snapshot() const {
  KvStoreStatsSnapshot s;
  s.hits = hits_.load(kRelaxed);
  s.misses = misses_.load(kRelaxed);
  s.errors = errors_.load(kRelaxed);
  s.corrupt = corrupt_.load(kRelaxed);
  s.bytes_read = bytes_read_.load(kRelaxed);
  s.bytes_written = bytes_written_.load(kRelaxed);
  s.dropped = dropped_.load(kRelaxed);
  s.breaker_trips = breaker_trips_.load(kRelaxed);
  s.breaker_open = breaker_open_.load(kRelaxed);
  return s;
}

std::vector<KvGetResult> KvStore::get_many(std::span<const std::string> keys) {
  std::vector<KvGetResult> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(get(k));
  return out;
}

}  // namespace yoco
