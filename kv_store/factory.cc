#include "kv_store/factory.h"

#include <charconv>
#include <vector>

#include "kv_store/circuit_breaker.h"
#include "kv_store/dir_store.h"
#include "kv_store/memory_store.h"
#include "kv_store/redis_store.h"
#include "kv_store/tiered_store.h"
#include "kv_store/util.h"

namespace yoco {

namespace {

constexpr int64_t kDefaultMemoryBytes = int64_t{256} << 20;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

Result<std::unique_ptr<KvStore>> make_memory(std::string_view part) {
  int64_t bytes = kDefaultMemoryBytes;
  if (part.size() > 6) {  // "memory:SIZE"
    if (part[6] != ':') return invalid_argument("expected memory or memory:SIZE");
    YOCO_ASSIGN_OR_RETURN(bytes, kv::parse_byte_size(part.substr(7)));
  }
  if (bytes <= 0) return invalid_argument("memory size must be positive");
  return std::unique_ptr<KvStore>(new MemoryStore(bytes));
}

Result<std::unique_ptr<KvStore>> make_dir(std::string_view part) {
  std::string_view rest = part.substr(4);  // after "dir:"
  if (rest.rfind("//", 0) == 0) rest.remove_prefix(2);
  DirStoreOptions opt;
  std::string_view query;
  if (size_t q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  if (rest.empty()) return invalid_argument("dir: missing path");
  opt.root = std::string(rest);
  YOCO_ASSIGN_OR_RETURN(auto params, kv::parse_query(query));
  for (const auto& [key, value] : params) {
    if (key == "max_bytes") {
      YOCO_ASSIGN_OR_RETURN(opt.max_bytes, kv::parse_byte_size(value));
    } else if (key == "fsync") {
      YOCO_ASSIGN_OR_RETURN(opt.fsync, kv::parse_bool(value, "fsync"));
    } else if (key == "low_watermark") {
      double v = 0;
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
      if (ec != std::errc() || end != value.data() + value.size() || !(v > 0 && v <= 1))
        return invalid_argument("low_watermark '" + value + "' is not a fraction in (0, 1]");
      opt.low_watermark = v;
    } else {
      return invalid_argument("dir: unknown parameter '" + key + "' (max_bytes, fsync, low_watermark)");
    }
  }
  YOCO_ASSIGN_OR_RETURN(auto store, DirStore::open(std::move(opt)));
  return std::unique_ptr<KvStore>(std::move(store));
}

bool is_redis(std::string_view part) {
  for (std::string_view scheme : {"redis://", "rediss://", "redis-cluster://", "rediss-cluster://"})
    if (part.rfind(scheme, 0) == 0) return true;
  return false;
}

bool is_cluster(std::string_view part) {
  return part.rfind("redis-cluster://", 0) == 0 || part.rfind("rediss-cluster://", 0) == 0;
}

// The next tier of `rest` ends at a comma, except in a cluster URL, whose seed list
// (host:port,host:port) runs on until a part that starts a tier of its own.
size_t tier_end(std::string_view rest) {
  size_t comma = rest.find(',');
  if (!is_cluster(trim(rest.substr(0, comma)))) return comma;
  while (comma != std::string_view::npos) {
    const size_t next = rest.find(',', comma + 1);
    const std::string_view part =
        trim(rest.substr(comma + 1, next == std::string_view::npos ? next : next - comma - 1));
    if (part == "memory" || part.rfind("memory:", 0) == 0 || part.rfind("dir:", 0) == 0 || is_redis(part)) break;
    comma = next;
  }
  return comma;
}

Result<std::unique_ptr<KvStore>> make_redis(std::string_view part) {
  YOCO_ASSIGN_OR_RETURN(RedisOptions opt, parse_redis_url(part));
  YOCO_ASSIGN_OR_RETURN(auto store, make_redis_store(opt));
  // A cluster has a breaker per node inside (kv_store/redis_cluster.h): one node down must not
  // turn the other nodes' hits into misses.
  if (!opt.breaker || opt.cluster) return store;
  return std::unique_ptr<KvStore>(new CircuitBreaker(std::move(store), opt.breaker_options));
}

Result<std::unique_ptr<KvStore>> make_tier(std::string_view part) {
  if (part == "memory" || part.rfind("memory:", 0) == 0) return make_memory(part);
  if (part.rfind("dir:", 0) == 0) return make_dir(part);
  if (is_redis(part)) return make_redis(part);
  return invalid_argument(
      "unknown backend (use memory[:SIZE], dir:PATH, redis://HOST:PORT or redis-cluster://HOST:PORT,...)");
}

}  // namespace

Result<std::unique_ptr<KvStore>> make_kv_store(const std::string& spec) {
  std::vector<std::unique_ptr<KvStore>> tiers;
  std::string_view rest = spec;
  int index = 0;
  while (true) {
    const size_t comma = tier_end(rest);
    const std::string_view part = trim(rest.substr(0, comma));
    ++index;
    auto tier = part.empty() ? Result<std::unique_ptr<KvStore>>(invalid_argument("empty tier")) : make_tier(part);
    if (!tier.ok()) {
      // Never echo a password back: name the tier by its position and scheme.
      std::string shown(part.substr(0, part.find_first_of("@?")));
      if (part.find('@') != std::string_view::npos) shown = std::string(part.substr(0, part.find("://") + 3)) + "...";
      return Status(tier.status().code(),
                    "kv store spec, tier " + std::to_string(index) + " '" + shown + "': " + tier.status().message());
    }
    tiers.push_back(std::move(tier).value());
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  if (tiers.size() == 1) return std::move(tiers[0]);
  return std::unique_ptr<KvStore>(new TieredStore(std::move(tiers)));
}

}  // namespace yoco
